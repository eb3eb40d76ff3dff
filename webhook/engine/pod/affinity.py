"""Which pools a pod's placement admits, and the patch that pins it to one pool (and the
steering terms gpupool adds, and takes away again when it judges a pod as it was sent).

Required node-selector terms are ORed and the expressions inside a term ANDed, so a pool
constraint must be added to *every* term: added to one, the others would still let the pod
land anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.api.delivery import LABEL_PREFIX
from webhook.api.said import Said, said
from webhook.engine.core import patch
from webhook.engine.core.patch import Op
from webhook.engine.core.policy import Policy
from webhook.engine.pod.nodereach import (
    AFFINITY_PATH,
    NAME_FIELD,
    REQUIRED,
    Placement,
    expression_values,
    expressions,
    required_terms,
)

# ------------------------------------------------------------------ pools admitted


def _pools_for_expression(expr: Mapping[str, Any], policy: Policy,
                          everything: frozenset[str]) -> frozenset[str]:
    """Pools whose nodes can satisfy one expression on the pool label."""
    op = expr.get("operator")
    values = expression_values(expr)
    default = policy.default_pool
    if op == "In":
        pool_of = policy.pool_by_label_value.get  # (``pool_for_label_value``, inlined)
        return frozenset([pool_of(v, default) for v in values])
    if op == "NotIn":
        excluded = set(values)
        keep = {p.name for p in policy.pools
                if p.name != default and set(p.label_values) - excluded}
        # An unlabelled GPU node belongs to the default pool and always satisfies NotIn.
        return frozenset(keep | {default})
    if op == "DoesNotExist":
        return frozenset({default})
    return everything  # Exists, Gt, Lt, or anything unknown: no narrowing we can prove.


def pools_admitted(placement: Placement, policy: Policy) -> frozenset[str]:
    """The pools whose nodes the pod's nodeSelector and required node affinity allow.

    Only constraints on the pool label count; everything else may or may not match a node of
    any pool, so it narrows nothing. All pools back means "not pinned".
    """
    everything = policy.pool_set
    admitted = everything
    selector = placement.selector
    if selector is not None and isinstance(selector.get(policy.pool_label), str):
        admitted = frozenset({policy.pool_for_label_value(selector[policy.pool_label])})
    terms = placement.terms
    if terms:
        label = policy.pool_label
        union: frozenset[str] = frozenset()
        for term in terms:
            term_pools = everything
            exprs = term.get("matchExpressions") if isinstance(term, dict) else None
            for expr in exprs if isinstance(exprs, list) else ():
                if isinstance(expr, dict) and expr.get("key") == label:
                    term_pools = term_pools & _pools_for_expression(expr, policy, everything)
            union = union | term_pools if union else term_pools
        admitted = admitted & union
    return admitted


def pinned_node_names(placement: Placement) -> list[str]:
    """Node names the pod is limited to when every required term names nodes through
    ``matchFields metadata.name In`` (how the DaemonSet controller pins its pods); else []."""
    terms = placement.terms
    if not terms:
        return []
    names: list[str] = []
    for term in terms:
        if not isinstance(term, dict) or not term.get("matchFields"):
            return []  # (every term of nearly every pod: gpupool's own is matchExpressions)
        fields = [f for f in expressions(term, "matchFields")
                  if f.get("key") == "metadata.name" and f.get("operator") == "In"]
        if not fields:
            return []
        names.extend(v for v in expression_values(fields[0]) if v not in names)
    return names


def pool_constraint_source(placement: Placement, policy: Policy) -> Said:
    """Where a pod's pool constraint comes from: its nodeSelector, else its required node
    affinity (as routing's evidence, and in its denials)."""
    selector = placement.selector
    if selector is not None and policy.pool_label in selector:
        return said("evidence.nodeSelector", key=policy.pool_label,
                    value=selector[policy.pool_label])
    return policy.affinity_evidence


# ------------------------------------------------------------------ the pinning expression


def pool_expression(policy: Policy, pool: str) -> dict[str, Any] | None:
    """The expression that keeps a pod on ``pool``'s nodes, or None when nothing is needed.

    A named pool is ``In`` its label values. The default pool also owns every node whose label
    is absent or unknown, so it is expressed as ``NotIn`` every other pool's values.
    """
    if pool != policy.default_pool:
        return {"key": policy.pool_label, "operator": "In",
                "values": list(policy.by_name[pool].label_values)}
    others = [v for p in policy.pools if p.name != pool for v in p.label_values]
    if not others:
        return None
    return {"key": policy.pool_label, "operator": "NotIn", "values": others}


def _same_expression(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (a.get("key") == b.get("key") and a.get("operator") == b.get("operator")
            and sorted(expression_values(a)) == sorted(expression_values(b))
            and isinstance(a.get("values"), list))


def term_has(term: Any, expr: Mapping[str, Any], field: str = "matchExpressions") -> bool:
    return any(_same_expression(e, expr) for e in expressions(term, field))


#: the pointer to each level of ``AFFINITY_PATH`` below ``spec``: where a missing level is
#: added (constants: every mutation of a pod without a required affinity adds one)
_AFFINITY_POINTERS = tuple(patch.pointer(*AFFINITY_PATH[:depth + 2])
                           for depth in range(len(AFFINITY_PATH) - 1))

#: A requirement to add to every required term: the term field and the requirement itself.
Requirement = tuple[str, Mapping[str, Any]]


def affinity_patch(pod: Mapping[str, Any], expr: Mapping[str, Any] | None = None,
                   extra: Sequence[Requirement] = ()) -> list[Op]:
    """Ops adding ``expr`` (a label expression) and ``extra`` requirements to every required
    nodeSelectorTerm, creating what is missing.

    Preferred terms are never touched. Requirements a term already holds are left as they
    are, which is what makes a second pass produce no operations.
    """
    reqs: list[Requirement] = ([("matchExpressions", expr)] if expr is not None else [])
    reqs += list(extra)
    if not reqs:
        return []
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    new_term: dict[str, list[Any]] = {}
    for fieldname, req in reqs:
        new_term.setdefault(fieldname, []).append(dict(req))
    levels = AFFINITY_PATH[1:]
    cur: Any = spec
    for depth, token in enumerate(levels):
        nxt = cur.get(token) if isinstance(cur, dict) else None
        is_last = depth == len(levels) - 1
        if not isinstance(nxt, list if is_last else dict):
            nested: Any = [new_term]
            for t in reversed(levels[depth + 1:]):
                nested = {t: nested}
            return [patch.add(_AFFINITY_POINTERS[depth], nested)]
        cur = nxt
    terms = cur
    base = _AFFINITY_POINTERS[-1]
    if not terms:
        return [patch.replace(base, [new_term])]
    ops: list[Op] = []
    for i, term in enumerate(terms):
        if not isinstance(term, dict):
            ops.append(patch.replace(f"{base}/{i}", new_term))
            continue
        for fieldname, req in reqs:
            if term_has(term, req, fieldname):
                continue
            if isinstance(term.get(fieldname), list):
                ops.append(patch.add(f"{base}/{i}/{fieldname}/-", dict(req)))
            else:
                ops.append(patch.add(f"{base}/{i}/{fieldname}", [dict(req)]))
                # Later requirements of the same field now append to the list just made.
                term = {**term, fieldname: []}
    return ops


# ------------------------------------------------------------------ steering


def is_steering(fieldname: str, req: Mapping[str, Any]) -> bool:
    key = req.get("key")
    if fieldname == "matchFields":
        return key == NAME_FIELD and req.get("operator") == "NotIn"
    return isinstance(key, str) and key.startswith(LABEL_PREFIX)


def without_steering(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The spec as it was before gpupool steered it: where the pod could go at all."""
    terms = required_terms(spec)
    if not terms:
        return spec
    kept = []
    changed = emptied = False
    for term in terms:
        if not isinstance(term, dict):
            kept.append(term)
            continue
        new = dict(term)
        removed = False
        for fieldname in ("matchExpressions", "matchFields"):
            reqs = term.get(fieldname)
            if isinstance(reqs, list):
                left = [r for r in reqs if not (isinstance(r, dict)
                                                and is_steering(fieldname, r))]
                if len(left) != len(reqs):
                    changed = removed = True
                    new[fieldname] = left
        # A term that held only steering stood for "anywhere" before it was added (an empty
        # term matches no node, so it cannot stay); terms are ORed, so the pod could go
        # anywhere its other fields allow.
        emptied = emptied or (removed and not any(new.get(f) for f in ("matchExpressions",
                                                                         "matchFields")))
        kept.append(new)
    if not changed:
        return spec
    aff = dict(spec.get("affinity") or {})
    node_aff = dict(aff.get("nodeAffinity") or {})
    if emptied:
        node_aff.pop(REQUIRED, None)
        aff["nodeAffinity"] = node_aff
        return {**spec, "affinity": aff}
    node_aff[REQUIRED] = {**node_aff[REQUIRED], "nodeSelectorTerms": kept}
    aff["nodeAffinity"] = node_aff
    return {**spec, "affinity": aff}


def selector_label_pairs(placement: Placement) -> Iterable[tuple[str, str]]:
    """(key, value) pairs every matching node must carry: used to narrow by label index."""
    if placement.selector is not None:
        for k, v in placement.selector.items():
            if isinstance(k, str) and isinstance(v, str):
                yield k, v
