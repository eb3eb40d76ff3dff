"""GPU pods in their own user namespace, which the NVIDIA Container Toolkit's hooks cannot
serve."""

from __future__ import annotations

from webhook.engine.checks.findings import PodFinding, found
from webhook.engine.core.decision import Reason
from webhook.engine.core.policy import OnFinding, Policy
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView

#: the finding (``render`` words it)
HOST_USERS = "userNamespace.hostUsersFalse"


def decide(facts: PodFacts, pool: str, view: ClusterView | None, policy: Policy
           ) -> PodFinding | None:
    """A GPU pod in its own user namespace (``hostUsers: false``, GA in Kubernetes 1.36).
    The NVIDIA Container Toolkit's createContainer hooks (``nvidia-cdi-hook``, which every
    NVIDIA CDI spec and the legacy hook carry) run as the remapped user and cannot do their
    work: the container does not start on any GPU node (NVIDIA/nvidia-container-toolkit#648;
    the GPU Operator's 26.3 release notes). ``onUserNamespace: warn`` admits it, for a
    toolkit that has lifted this."""
    if facts.spec.get("hostUsers") is not False:
        return None
    return found(HOST_USERS, pool, denies=policy.on_user_namespace is OnFinding.DENY,
                 reason=Reason.USER_NAMESPACE_UNSUPPORTED)
