"""Where a pod can go: which pool it belongs to (routing) and which of the pool's nodes it
can reach and whose GPUs can serve it (candidates).

May import: webhook.api, core, stacks, view, pod, wording.
"""
