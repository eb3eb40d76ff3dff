"""What a pod asks for: its GPUs, its placement (node name, selectors, affinity, tolerations),
its own devices and annotations, and its DRA claims as the view knows them. Read once per
review (``PodFacts``), so every rule sees the same pod.

May import: webhook.api, core, stacks, view.
"""
