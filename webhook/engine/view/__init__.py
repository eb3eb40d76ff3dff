"""What the cluster holds, as the engine decides against it: nodes indexed by pool and label,
the stacks' objects, namespaces, and per-shape answers folded over the nodes.

May import: webhook.api, core, stacks.
"""
