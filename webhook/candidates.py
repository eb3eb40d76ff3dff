"""The nodes a pod could be scheduled to: its pool, nodeName, nodeSelector, required node
affinity, and the NoSchedule/NoExecute taints it does not tolerate.

Computed from the pool index and memoised per pod shape on the cluster view, so the pods of
one workload cost one scan per cluster change, not one per admission request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import affinity
from .cluster import ClusterView, NodeInfo
from .policy import Policy

_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations: list[Any], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if not isinstance(t, Mapping):
            continue
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        op = t.get("operator") or "Equal"
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def schedulable(spec: Mapping[str, Any], node: NodeInfo) -> bool:
    """Would the scheduler's node-affinity and taint filters let the pod onto this node?"""
    if not affinity.node_matches(spec, node.labels, node.name):
        return False
    tolerations = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
    for taint in node.taints:
        if taint.get("effect") in _HARD_EFFECTS and not tolerates(tolerations, taint):
            return False
    return True


def shape_key(spec: Mapping[str, Any], extra: Any = None) -> str:
    """A cache key made of exactly the fields that decide candidacy."""
    return json.dumps([spec.get("nodeName"), spec.get("nodeSelector"), spec.get("affinity"),
                       spec.get("tolerations"), extra], sort_keys=True, default=str)


def candidates(spec: Mapping[str, Any], pool: str, view: ClusterView, policy: Policy
               ) -> tuple[NodeInfo, ...]:
    def compute() -> tuple[NodeInfo, ...]:
        node_name = spec.get("nodeName")
        if isinstance(node_name, str) and node_name:
            # Bound directly: the scheduler's taint filter never runs, only the kubelet's
            # node-affinity check does.
            node = view.node(node_name)
            if node is None or not affinity.node_matches(spec, node.labels, node.name):
                return ()
            return (node,)
        return tuple(n for n in view.pool_nodes(policy, pool) if schedulable(spec, n))
    return view.memo(("candidates", policy.cache_key, pool, shape_key(spec)), compute)
