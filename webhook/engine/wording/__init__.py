"""How a finding is said: every ``Said`` the engine's rules answer with, worded in one place
(``words``), so the rules write no text.

May import: webhook.api, core, stacks, pod.
"""
