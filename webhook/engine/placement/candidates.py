"""The nodes a pod could be scheduled to: its pool, nodeName, nodeSelector, required node
affinity, and the NoSchedule/NoExecute taints it does not tolerate; then, per node, whether
its GPUs can serve the pod (``GPUDemand``): the count one container asks for, allocatable GPU
resources, and HAMi's ``use-``/``nouse-gpuuuid`` and ``-gputype`` annotations.

Computed from the pool index when a fold of a pod shape's verdicts starts
(``ClusterView.fold``), which keeps them current node by node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.api.said import Said, said
from webhook.engine.core.objects import json_key
from webhook.engine.core.policy import Policy
from webhook.engine.core.resources import most_per_container, pod_requests
from webhook.engine.pod import affinity
from webhook.engine.pod.nodereach import Placement, expression_values, expressions
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import hami
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


def shape_key(placement: Placement, extra: Any = None) -> str:
    """A cache key made of exactly the fields that decide candidacy, and ``extra``."""
    return f"{placement.key}|{json_key(extra)}"


def candidates(placement: Placement, pool: str, view: ClusterView, policy: Policy
               ) -> tuple[NodeInfo, ...]:
    """The nodes of ``pool`` the pod can reach, from the view's label index where its
    placement narrows them: what a fold of its verdicts starts from (``ClusterView.fold``),
    which then keeps them current node by node."""
    if placement.node_name is not None:
        node = view.node(placement.node_name)
        return (node,) if node is not None and placement.reaches(node) else ()
    narrowed = _indexed_names(placement, view)
    if narrowed is None:  # the pool's nodes: members already
        return tuple(n for n in view.pool_nodes(policy, pool) if placement.reaches(n))
    found = (view.node(n) for n in sorted(narrowed))
    return tuple(n for n in found if n is not None and placement.reaches(n, pool, policy))


def _indexed_names(placement: Placement, view: ClusterView) -> frozenset[str] | None:
    """Nodes the pod's nodeSelector and ``In`` affinity expressions allow, from the label
    index; None when nothing narrows (then the pool's node list is filtered instead). A
    superset is fine: every node found is still checked in full by ``Placement.reaches``."""
    names: frozenset[str] | None = None
    for key, value in affinity.selector_label_pairs(placement):
        found = view.names_with_label(key, value)
        names = found if names is None else names & found
    terms = placement.terms
    if terms:
        union: set[str] = set()
        for term in terms:
            term_names: frozenset[str] | None = None
            for expr in expressions(term):
                values = expression_values(expr)
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


@dataclass(frozen=True)
class GPUDemand:
    """What a pod asks of one node's GPUs, as its scheduler and device plugin see it."""

    hami: bool = False  # HAMi's scheduler counts physical GPUs and reads the annotations
    per_container: int = 0
    requests: tuple[tuple[str, int], ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()

    @property
    def narrows(self) -> bool:
        """Does the pod pick among a node's GPUs (so a node is judged by some of them)?"""
        return bool(self.use_uuids or self.nouse_uuids or self.use_types or self.nouse_types)


def narrows(facts: PodFacts, hami_pool: bool) -> bool:
    """``demand_of(...).narrows`` without working out the rest of the demand."""
    # (nearly every pod sets none of HAMi's picking annotations)
    return hami_pool and facts.narrowing != _NO_NARROWING and any(
        hami.uuid_list(v) for v in facts.narrowing)


_NO_NARROWING = (None, None, None, None)


def demand_of(facts: PodFacts, hami_pool: bool) -> GPUDemand:
    requests = tuple(sorted(pod_requests(facts.spec, facts.gpus).items()))
    if not hami_pool:
        return GPUDemand(requests=requests)
    use_uuids, nouse_uuids, use_types, nouse_types = (hami.uuid_list(v)
                                                      for v in facts.narrowing)
    return GPUDemand(
        hami=True, requests=requests,
        per_container=most_per_container(facts.spec, hami.COUNT_RESOURCE,
                                         set(hami.IMPLIES_ONE_GPU)),
        use_uuids=use_uuids, nouse_uuids=nouse_uuids, use_types=use_types,
        nouse_types=nouse_types)


def eligible_gpus(node: NodeInfo, demand: GPUDemand) -> tuple[str, ...]:
    """The GPUs the device plugin could hand this pod on this node: all the node has, or, for
    HAMi, those its annotations allow (a model HAMi did not register is not filtered out).
    GPUs HAMi's device cordon names still count: see ``webhook.engine.checks.cdi.assess_node``."""
    gpus = node.gpu_uuids()
    if not demand.narrows:
        return gpus
    types = node.gpu_types() if (demand.use_types or demand.nouse_types) else {}
    return tuple(u for u in gpus
                 if u not in demand.nouse_uuids
                 and (not demand.use_uuids or u in demand.use_uuids)
                 and (u not in types
                      or hami.type_allowed(types[u], demand.use_types, demand.nouse_types)))


def unfit_reason(node: NodeInfo, demand: GPUDemand) -> Said | None:
    """Why the pod's scheduler would not place the pod on this node's GPUs (None: it could).

    Only what the node itself reports is held against it: a node whose GPUs or allocatable
    are unknown stays a candidate."""
    if demand.hami:
        known = node.gpu_uuids()
        if known:
            eligible = eligible_gpus(node, demand)
            if not eligible and demand.narrows:
                return said("fit.noneAllowed", gpus=known, use_uuids=demand.use_uuids,
                            nouse_uuids=demand.nouse_uuids, use_types=demand.use_types,
                            nouse_types=demand.nouse_types)
            if demand.per_container > len(eligible):
                return said("fit.tooFewGPUs", asks=demand.per_container, has=len(eligible))
        return None
    if node.allocatable is not None:
        for name, n in demand.requests:
            have = node.allocatable.get(name, 0)
            if have < n:
                return said("fit.tooFewAllocatable", asks=n, resource=name, has=have)
    return None
