"""The answer for one object under admission: route and steer a pod, run the checks, and
carry a workload's pod template through the same path (``admit`` is the one entry).

May import: webhook.api, core, stacks, view, pod, placement, checks, access, wording.
"""
