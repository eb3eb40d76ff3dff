"""What becomes of GPU pods after admission, as the cluster changes under them: a running
pod its node now fails, a pod that bypassed the webhook, a pod waiting for a scheduler that
is not running or for a node that can never take it, and nodes whose GPUs are advertised
twice. Every pod answer is the admission decision of the pod as it stands (``admit``), so a
re-check and an admission cannot disagree; for a pod that has started, the devices part of it
is what the pod holds, as the kubelet will hand it back (``restart``), not what the device
plugin would hand a new pod.

May import: webhook.api, core, stacks, view, pod, placement, checks, admission, wording.
"""
