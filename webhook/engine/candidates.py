"""The nodes a pod could be scheduled to: its pool, nodeName, nodeSelector, required node
affinity, and the NoSchedule/NoExecute taints it does not tolerate.

Computed from the pool index and memoised per pod shape on the cluster view, so the pods of
one workload cost one scan per cluster change, not one per admission request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from webhook.engine import affinity
from webhook.engine.cluster import ClusterView, NodeInfo
from webhook.engine.policy import Policy

_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations: list[Any], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
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
    """A cache key made of exactly the fields that decide candidacy.

    It is built on every review, so orjson (several times faster); the stdlib takes over for
    what orjson refuses (integers past 64 bits in a hand-written spec)."""
    fields = [spec.get("nodeName"), spec.get("nodeSelector"), spec.get("affinity"),
              spec.get("tolerations"), extra]
    try:
        return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except TypeError:
        return json.dumps(fields, sort_keys=True, default=str)


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
        narrowed = _indexed_names(spec, view)
        if narrowed is None:
            nodes: Any = view.pool_nodes(policy, pool)
        else:
            found = (view.node(n) for n in sorted(narrowed))
            nodes = (n for n in found if n is not None and n.is_gpu_node(policy)
                     and policy.pool_for_label_value(n.labels.get(policy.pool_label)) == pool)
        return tuple(n for n in nodes if schedulable(spec, n))
    return view.memo(("candidates", policy.cache_key, pool, shape_key(spec)), compute)


def _indexed_names(spec: Mapping[str, Any], view: ClusterView) -> frozenset[str] | None:
    """Nodes the pod's nodeSelector and ``In`` affinity expressions allow, from the label
    index; None when nothing narrows (then the pool's node list is filtered instead). A
    superset is fine: every node found is still checked in full by ``schedulable``."""
    names: frozenset[str] | None = None
    for key, value in affinity.selector_label_pairs(spec):
        found = view.names_with_label(key, value)
        names = found if names is None else names & found
    terms = affinity.required_terms(spec)
    if terms:
        union: set[str] = set()
        for term in terms:
            term_names: frozenset[str] | None = None
            for expr in affinity.expressions(term):
                values = affinity.expression_values(expr)
                if expr.get("operator") != "In" or not isinstance(expr.get("key"), str):
                    continue
                found = frozenset().union(*(view.names_with_label(expr["key"], v)
                                            for v in values))
                term_names = found if term_names is None else term_names & found
            if term_names is None:
                return names  # this term does not narrow, so the union cannot either
            union |= term_names
        names = frozenset(union) if names is None else names & union
    return names
