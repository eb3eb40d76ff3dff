"""The canary that proves a compiled routing policy on the API server before it routes pods.

A MutatingAdmissionPolicy runs inside the API server: a bug there (kubernetes#142181 made
1.36 before v1.36.5 panic on the patches an earlier compiler wrote, and drop the request
whatever ``failurePolicy`` said) stops pod creation in the whole cluster, including while
every gpupool replica is down. So the policy is first bound to canary pods alone: pods in
gpupool's own namespace carrying ``CANARY_LABEL``, which no webhook of gpupool's sees and
no workload makes. gpupool sends them as server-side dry-run creates (nothing is stored), one
per pool the policy claims and per shape of patch it writes, and compares what the API server
would store with what the webhook itself writes (``admit.decide``) on the same pod. Only when
every canary agrees does the keeper bind the policy to real pods
(``webhook.cluster.routingpolicy``).

Pure: the pods and the comparison; sending them is the keeper's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.admission.admit import Stage, Subject, decide
from webhook.engine.core import patch
from webhook.engine.core.policy import (
    HAMI_IGNORE_LABEL,
    POOL_ANNOTATION,
    POOL_LABEL,
    Policy,
)
from webhook.engine.native.routing import ROUTING_NAME, RoutingFacts, claimable_pools
from webhook.engine.pod.nodereach import REQUIRED
from webhook.engine.pod.podfacts import DEFAULT_SCHEDULER
from webhook.engine.view.cluster import ClusterView

#: The label that makes a pod a canary, and the binding that binds the policy to them alone.
CANARY_LABEL = "gpupool.io/routing-canary"
CANARY_BINDING = f"{ROUTING_NAME}-canary"
#: A pod that never runs (dry-run), from the registry every cluster pulls its pause image from.
CANARY_IMAGE = "registry.k8s.io/pause:3.10"


def canary_binding(namespace: str, name: str = ROUTING_NAME) -> dict[str, Any]:
    """The binding that applies policy ``name`` to canary pods in ``namespace`` alone."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": f"{name}-canary", "labels": {  # (CANARY_BINDING by default)
            "app.kubernetes.io/name": "gpupool",
            "app.kubernetes.io/component": "routing-canary"}},
        "spec": {"policyName": name, "matchResources": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchLabels": {CANARY_LABEL: "true"}}}},
    }


def _resource(policy: Policy) -> str | None:
    """A GPU resource every claimed pod may ask for: the device plugin's own, where the policy
    names it."""
    exact = sorted(policy.exact_gpu_resources)
    if "nvidia.com/gpu" in exact:
        return "nvidia.com/gpu"
    return exact[0] if exact else None


def canary_pods(policy: Policy, facts: RoutingFacts, namespace: str
                ) -> list[tuple[str, dict[str, Any]]]:
    """(what it tries, the pod) for each pool the policy claims: routed by the pool label,
    with no affinity (the patch writes the whole of it) and with two required terms (one
    patch op per term); and the default pool's pod without any routing evidence. Each pod
    meets the ``restricted`` Pod Security Standard, so a namespace that enforces it takes it.
    Empty where the policy claims nothing, or names no exact GPU resource to ask for."""
    resource = _resource(policy)
    if resource is None:
        return []
    out = []
    for pool in claimable_pools(policy, facts):
        out.append((f"pool {pool}, by its label, no affinity",
                    _pod(namespace, resource, {POOL_LABEL: pool})))
        terms = [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In",
                                        "values": ["linux"]}]},
                 {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "Exists"}]}]
        out.append((f"pool {pool}, by its label, two required terms",
                    _pod(namespace, resource, {POOL_LABEL: pool}, {"affinity": {
                        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}})))
        if pool == policy.default_pool:
            out.append((f"pool {pool}, no routing evidence", _pod(namespace, resource, {})))
    return out


def _pod(namespace: str, resource: str, labels: Mapping[str, str],
         spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "gpupool-routing-canary-", "namespace": namespace,
                     "labels": {CANARY_LABEL: "true", **labels}},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65535,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "canary", "image": CANARY_IMAGE,
                "resources": {"limits": {resource: "1"}},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}}}],
            **(spec or {})},
    }


def as_webhook_routes(pod: Mapping[str, Any], view: ClusterView | None, policy: Policy
                      ) -> dict[str, Any]:
    """The pod as gpupool's mutating webhook leaves it: the same one entry as every
    review (``admit.decide``), its patch applied."""
    meta = pod.get("metadata") or {}
    d = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace=meta.get("namespace")),
               view, policy)
    return patch.apply(pod, d.patch)


def routing_of(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What routing writes on a pod: its scheduler (the API server's default where none),
    the pool annotation, HAMi's opt-out label and the required node affinity."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(REQUIRED)
    return {"schedulerName": spec.get("schedulerName") or DEFAULT_SCHEDULER,
            "pool": (meta.get("annotations") or {}).get(POOL_ANNOTATION),
            "hamiWebhook": (meta.get("labels") or {}).get(HAMI_IGNORE_LABEL),
            "requiredAffinity": affinity}


def disagreement(stored: Mapping[str, Any], webhook: Mapping[str, Any]) -> str | None:
    """Where the pod the API server would store is routed otherwise than the webhook routes
    it, in words (None: they agree)."""
    got, want = routing_of(stored), routing_of(webhook)
    if want["pool"] is None:
        return "the webhook routes no pool for it (not a canary the policy can claim)"
    if got["pool"] is None:
        return "the policy left it unrouted"
    differ = [k for k in want if got[k] != want[k]]
    if not differ:
        return None
    return "; ".join(f"{k}: the policy wrote {got[k]!r}, the webhook writes {want[k]!r}"
                     for k in differ)
