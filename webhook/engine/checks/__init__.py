"""Whether a pod's devices will reach its containers on the nodes it can reach: delivery by
device plugins, CDI, NRI and MIG (``cdi``), and allocation through DRA (``allocation``).

May import: webhook.api, core, stacks, view, pod, placement, wording.
"""
