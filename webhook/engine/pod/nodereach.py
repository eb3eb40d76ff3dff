"""A pod's placement (nodeName, nodeSelector, required node affinity, tolerations), parsed
once, and the one answer to "can this pod reach this node" (``Placement.kept_off``, and
``reaches`` on it): its own fields, the pool, and the claims it uses that are allocated
already; read by the candidates, the CDI check, the DRA check and the grant check alike.
Node-selector terms are matched as the scheduler matches them.

Required node-selector terms are ORed and the expressions inside a term ANDed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.engine.core import objects, taints
from webhook.engine.core.policy import Policy
from webhook.engine.stacks import dra
from webhook.engine.view.nodes import NodeInfo

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
NAME_FIELD = "metadata.name"
AFFINITY_PATH = ("spec", "affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms")
#: what keeps a pod off a node (``Placement.kept_off``) besides an allocated claim
OWN_FIELDS = "its nodeName, nodeSelector, required node affinity or tolerations"
OTHER_POOL = "the node is of another pool"


def required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    """The pod's required nodeSelectorTerms, or None when it has none (or they are malformed)."""
    aff = spec.get("affinity")
    node_aff = aff.get("nodeAffinity") if isinstance(aff, dict) else None
    req = node_aff.get(REQUIRED) if isinstance(node_aff, dict) else None
    terms = req.get("nodeSelectorTerms") if isinstance(req, dict) else None
    return terms if isinstance(terms, list) else None


class Placement:
    """The fields that decide where a pod may run, as the scheduler and kubelet read them.
    Built for every pod reviewed, so a plain class with slots and its cache key worked out
    only when asked for."""

    __slots__ = ("_compiled", "_key", "_spec", "node_name", "selector", "terms", "tolerations")

    def __init__(self, spec: Mapping[str, Any]) -> None:
        node_name, selector = spec.get("nodeName"), spec.get("nodeSelector")
        #: a non-empty string, or None
        self.node_name: str | None = node_name if isinstance(node_name, str) and node_name \
            else None
        #: nodeSelector, when a mapping
        self.selector: Mapping[str, Any] | None = selector if isinstance(selector, dict) \
            else None
        #: required nodeSelectorTerms, when a list
        self.terms: list[Any] | None = required_terms(spec)
        tolerations = spec.get("tolerations")
        self.tolerations = tuple(tolerations) if isinstance(tolerations, list) else ()
        self._spec = spec
        self._key: str | None = None
        self._compiled: tuple[_Term, ...] | None = None

    @property
    def key(self) -> str:
        """Exactly these fields as sent: a cache key for whatever they decide."""
        if self._key is None:
            self._key = _key(self._spec)
        return self._key

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        """Do its nodeName, nodeSelector and required node affinity allow this node?"""
        if self.node_name is not None and self.node_name != name:
            return False
        if self.selector is not None:
            for k, v in self.selector.items():
                if labels.get(k) != v:
                    return False
        if self.terms:
            return any(_term_holds(t, labels, name) for t in self._read_terms())
        return True

    def _read_terms(self) -> tuple[_Term, ...]:
        """The required terms, read once (matched against every node of a pool, and again
        on each node change), not once per node."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = tuple(
                c for t in self.terms or () if (c := _compile_term(t)) is not None)
        return compiled

    def label_keys(self) -> frozenset[str]:
        """Every node label ``matches`` reads: two nodes of one name that agree on these
        are matched alike."""
        keys = {k for k in self.selector or () if isinstance(k, str)}
        keys.update(k for exprs, _ in self._read_terms() for k, _, _ in exprs if k is not None)
        return frozenset(keys)

    def reaches(self, node: NodeInfo, pool: str | None = None, policy: Policy | None = None,
                devices: bool = False, claims: Iterable[dra.PodClaim] = ()) -> bool:
        """Could the pod run on this node? (``kept_off`` finds nothing in the way.)"""
        return self.kept_off(node, pool, policy, devices, claims) is None

    def kept_off(self, node: NodeInfo, pool: str | None = None, policy: Policy | None = None,
                 devices: bool = False, claims: Iterable[dra.PodClaim] = ()) -> str | None:
        """What keeps the pod off this node, the first found, or None when nothing does: the
        one answer to "can this pod reach this node", which candidates, checks, steering
        and the grant check all ask.

        ``OWN_FIELDS``: the scheduler's node-affinity and taint filters (a pod bound by
        nodeName skips the scheduler, and only the kubelet's node-affinity check applies;
        its taint filter never runs). ``OTHER_POOL``: with ``pool``, and unless the pod
        names its node, a node not of that pool (``NodeInfo.in_pool``: with ``devices``, a
        node that publishes DRA devices counts without looking like a GPU node). Else the
        ``source`` of the first of ``claims`` allocated already to devices the node cannot
        reach: the scheduler places the pod only where its allocated claims' node selectors
        match (Kubernetes 1.35 ``pkg/scheduler/framework/plugins/dynamicresources``,
        Filter)."""
        if not (self.matches(node.labels, node.name) and self.tolerated_on(node)):
            return OWN_FIELDS
        if pool is not None and self.node_name is None:
            assert policy is not None, "a pool is read through its policy"
            if not node.in_pool(pool, policy, devices):
                return OTHER_POOL
        for c in claims:
            if c.spec.allocated is not None and not claim_reaches(c.spec.allocated, node):
                return c.source
        return None

    def tolerated_on(self, node: NodeInfo) -> bool:
        """Do the node's taints let the pod on? (Never asked of a pod bound by nodeName.)"""
        return self.node_name is not None or not taints.keeps_off(node.taints, self.tolerations)


def claim_reaches(allocated: str, node: NodeInfo) -> bool:
    """Are the devices of a claim allocated already on ``node``'s reach: does its
    allocation's node selector (``dra.ClaimSpec.allocated``: its ORed terms as JSON; none,
    every node) match the node? The scheduler places a pod that uses the claim only there."""
    terms = json.loads(allocated)
    return not terms or any(term_matches(t, node.labels, node.name) for t in terms)


def _key(spec: Mapping[str, Any]) -> str:
    return objects.json_key([spec.get("nodeName"), spec.get("nodeSelector"),
                             spec.get("affinity"), spec.get("tolerations")])


def expressions(term: Any, field: str = "matchExpressions") -> list[Mapping[str, Any]]:
    if not isinstance(term, dict):
        return []
    exprs = term.get(field)
    if not isinstance(exprs, list):
        return []
    return [e for e in exprs if isinstance(e, dict)]


def expression_values(expr: Mapping[str, Any]) -> list[str]:
    vals = expr.get("values")
    return [v for v in vals if isinstance(v, str)] if isinstance(vals, list) else []


# ------------------------------------------------------------------ node matching


#: one expression, read: (its key when a string, its operator as sent, its string values)
_Expr = tuple[str | None, object, tuple[str, ...]]
#: one term, read: (matchExpressions, matchFields)
_Term = tuple[tuple[_Expr, ...], tuple[_Expr, ...]]


def _compile_exprs(term: Any, field: str) -> tuple[_Expr, ...]:
    return tuple((k if isinstance(k := e.get("key"), str) else None, e.get("operator"),
                  tuple(expression_values(e))) for e in expressions(term, field))


def _compile_term(term: Any) -> _Term | None:
    """None for a term that matches no node (an empty one)."""
    exprs, fields = _compile_exprs(term, "matchExpressions"), _compile_exprs(term, "matchFields")
    return (exprs, fields) if exprs or fields else None


def _all_hold(exprs: tuple[_Expr, ...], get: Any) -> bool:
    for key, op, values in exprs:
        if not _holds(op, values, get(key) if key is not None else None):
            return False
    return True


def _holds(op: object, values: Sequence[str], value: str | None) -> bool:
    """The scheduler's node-selector operators (``k8s.io/component-helpers``
    ``nodeaffinity``), on the label's value (None: the node has no such label)."""
    present = value is not None
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Any, labels: Mapping[str, str], name: str) -> bool:
    """A nodeSelectorTerm matches when all its expressions and fields do; empty matches none."""
    compiled = _compile_term(term)
    return compiled is not None and _term_holds(compiled, labels, name)


def _term_holds(term: _Term, labels: Mapping[str, str], name: str) -> bool:
    exprs, fields = term
    return _all_hold(exprs, labels.get) and (
        not fields or _all_hold(fields, {NAME_FIELD: name}.get))
