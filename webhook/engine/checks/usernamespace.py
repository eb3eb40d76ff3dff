"""GPU pods in their own user namespace, which the NVIDIA Container Toolkit's hooks cannot
serve."""

from __future__ import annotations

from webhook.engine.core.decision import Decision, Reason, allow, deny
from webhook.engine.core.policy import OnFinding, Policy
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView


def decide(facts: PodFacts, pool: str, view: ClusterView | None, policy: Policy
           ) -> Decision | None:
    """A GPU pod in its own user namespace (``hostUsers: false``, GA in Kubernetes 1.36).
    The NVIDIA Container Toolkit's createContainer hooks (``nvidia-cdi-hook``, which every
    NVIDIA CDI spec and the legacy hook carry) run as the remapped user and cannot do their
    work: the container does not start on any GPU node (NVIDIA/nvidia-container-toolkit#648;
    the GPU Operator's 26.3 release notes). ``onUserNamespace: warn`` admits it, for a
    toolkit that has lifted this."""
    if facts.spec.get("hostUsers") is not False:
        return None
    message = (" sets hostUsers: false (a user namespace): the NVIDIA Container "
               "Toolkit's hooks (nvidia-cdi-hook) run as the remapped user and fail, so its "
               "containers would not start on any GPU node (NVIDIA/nvidia-container-toolkit#648). "
               "Fix: drop hostUsers: false from GPU pods; set the policy's onUserNamespace: warn "
               "once your toolkit supports user namespaces")
    if policy.on_user_namespace is OnFinding.DENY:
        return deny(Reason.USER_NAMESPACE_UNSUPPORTED, message, of_subject=True, gpu=True,
                    pool=pool)
    # (a warning only: the pod's own finding stays its statement)
    return allow(Reason.ROUTED, gpu=True, pool=pool,
                 warnings=("gpupool: hostUsers: false GPU pods fail under the NVIDIA "
                           "toolkit's hooks (#648)",))
