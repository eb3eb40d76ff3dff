"""Whether a pod's GPUs will reach its containers on its pool's candidate nodes: the check
the project exists for.

Every candidate node is asked ``nodechecks``' questions (the device plugin's GPUs resolved as
its runtime would, the pod's own NVIDIA_VISIBLE_DEVICES, its NRI annotations); the answers
are kept per pod shape as nodes change (``verdicts``), and summed up into one finding the
policy turns into a denial, a warning or nothing (``OUTCOMES``; ``render`` words it). The
decision, steering and ``doctor`` share those verdicts.

Doubt never denies: a node without inventory, an unknown runtime mode or unknown GPU UUIDs
count as "unknown", which the policy turns into a warning by default.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.api import delivery
from webhook.api.said import Said
from webhook.engine.checks import nodechecks
from webhook.engine.checks.assessment import (
    Ask,
    NodeAssessment,
    NodeCheck,
    NodeState,
)
from webhook.engine.checks.findings import PodFinding, found
from webhook.engine.core.decision import (
    MAX_FINDINGS,
    Reason,
)
from webhook.engine.core.policy import OnFinding, Policy
from webhook.engine.placement import candidates as cand
from webhook.engine.pod import podclaims
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.caches import NodeChange, NodeFold
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.labels import same_at
from webhook.engine.view.nodes import NodeInfo

#: what the check finds with no node view to judge (``unchecked`` says which)
NO_VIEW = "cdi.noNodeView"


@dataclass(frozen=True)
class Verdicts:
    """The pool's candidate nodes for one pod, judged."""

    total: int  # nodes the pod's placement allows
    unfit: list[tuple[str, Said]]  # of those, nodes its GPU demand rules out, and why
    ok: int
    missing: list[NodeAssessment]
    unknown: list[NodeAssessment]
    #: the failing nodes the reply lists, first by name (``MAX_FINDINGS`` at most)
    shown: tuple[NodeAssessment, ...]
    #: True when these are the nodes the pod can reach with its node affinity as it stands;
    #: False when that leaves none and they are the nodes gpupool's steering kept it off
    reachable: bool = True
    #: Every candidate that has the pod's GPUs but would fail it, reachable or not
    every_failing: tuple[NodeAssessment, ...] = ()

    #: the nodes steering keeps the pod off, doubt or not: a missing device, or a GPU a
    #: cordon names that HAMi's scheduler may still hand out (``requireInventory`` adds
    #: every other failing node)
    can_fail: tuple[str, ...] = ()
    every_failing_node: tuple[str, ...] = ()

    @property
    def checked(self) -> int:
        """Judged nodes: those that have the pod's GPUs (and are reachable, if any are)."""
        return self.ok + len(self.missing) + len(self.unknown)


#: (why the pod's GPU demand rules the node out, whether its node affinity as it stands
#: reaches the node, the assessment when not OK)
_NodeVerdict = tuple[Said | None, bool, NodeAssessment | None]
_FIT_OK_REACHABLE: _NodeVerdict = (None, True, None)
_FIT_OK_UNREACHABLE: _NodeVerdict = (None, False, None)


def _summarise(verdicts: dict[str, _NodeVerdict]) -> Verdicts:
    """Judged on the nodes the pod can reach as it stands. When gpupool's own steering left it
    none, on the nodes it was kept off: a pool whose every node is broken is denied, not left
    pending."""
    unfit = sorted((name, why) for name, (why, _, _) in verdicts.items() if why)
    fit = [v for v in verdicts.values() if not v[0]]
    placed = [v for v in fit if v[1]]
    judged = placed or fit
    failing = sorted((c for _, _, c in judged if c is not None), key=lambda c: c.node)
    every_failing = failing if len(judged) == len(fit) else sorted(
        (c for _, _, c in fit if c is not None), key=lambda c: c.node)
    missing = [c for c in failing if c.state == NodeState.MISSING]
    unknown = [c for c in failing if c.state == NodeState.UNKNOWN]
    return Verdicts(
        total=len(verdicts), unfit=unfit, ok=len(judged) - len(failing),
        missing=missing, unknown=unknown,
        shown=tuple(failing[:MAX_FINDINGS]),
        reachable=bool(placed) or not fit,
        every_failing=tuple(every_failing),
        can_fail=tuple(sorted(c.node for c in every_failing
                              if c.state is NodeState.MISSING or c.may_fail)),
        every_failing_node=tuple(sorted(c.node for c in every_failing)))


@dataclass(frozen=True)
class _Outcome:
    """What a finding turns into: its reason code, and whether the policy makes it a denial
    (otherwise the pod is allowed with a warning)."""

    reason: Reason
    denies: Callable[[Policy], bool]


class Finding(StrEnum):
    """What the candidate nodes' verdicts say about a pod as a whole."""

    NO_CANDIDATES = "noCandidates"  # no node of the pool matches its placement
    NO_GPU_FIT = "noGPUFit"  # candidates exist, none has the GPUs it asks for
    NO_ALLOWED_GPU = "noAllowedGPU"  # ... and it narrowed them with HAMi's annotations
    STEERED_OUT = "steeredOut"  # the working nodes are outside its own node affinity
    SOME_FAIL = "someFail"  # some candidates work, others would fail it
    UNKNOWN = "unknown"  # none known to work; doubt is not proof
    MISSING = "missing"  # every candidate lacks its devices
    NOT_DELIVERED = "notDelivered"  # on every candidate its containers start without GPUs
    NOT_ACCOUNTED = "notAccounted"  # on every candidate a GPU arrives, not the one accounted
    UNKNOWN_DEVICE = "unknownDevice"  # on every candidate the legacy hook names no such GPU
    NOT_BOUND = "notBoundByHAMi"  # on every candidate HAMi's plugin refuses its allocation


def _on_no_candidates(p: Policy) -> bool:
    return p.on_no_candidates is OnFinding.DENY


#: The policy table: one row per finding.
OUTCOMES: dict[Finding, _Outcome] = {
    Finding.NO_CANDIDATES: _Outcome(Reason.NO_CANDIDATE_NODES, _on_no_candidates),
    Finding.NO_GPU_FIT: _Outcome(Reason.NO_CANDIDATE_NODES, _on_no_candidates),
    Finding.NO_ALLOWED_GPU: _Outcome(Reason.GPU_UUID_UNAVAILABLE, lambda p: True),
    Finding.STEERED_OUT: _Outcome(Reason.NO_CANDIDATE_NODES, _on_no_candidates),
    Finding.SOME_FAIL: _Outcome(Reason.ROUTED, lambda p: False),
    Finding.UNKNOWN: _Outcome(Reason.INVENTORY_MISSING, lambda p: p.on_missing_inventory
                              is OnFinding.DENY or p.require_inventory),
    Finding.MISSING: _Outcome(Reason.CDI_DEVICE_MISSING, lambda p: True),
    Finding.NOT_DELIVERED: _Outcome(Reason.GPU_NOT_DELIVERED, lambda p: True),
    Finding.NOT_ACCOUNTED: _Outcome(Reason.GPU_NOT_ACCOUNTED, lambda p: True),
    Finding.UNKNOWN_DEVICE: _Outcome(Reason.UNKNOWN_DEVICE, lambda p: True),
    Finding.NOT_BOUND: _Outcome(Reason.NOT_BOUND_BY_HAMI, lambda p: True),
}


def verdicts(facts: PodFacts, pool_name: str, view: ClusterView, policy: Policy) -> Verdicts:
    """Which nodes of the pool would fail this pod, and why: the one answer the admission
    decision, steering, ``cdi.repair`` and ``doctor`` share. Kept per pod shape as nodes
    change (``ClusterView.fold``): the pods of one workload pay for the scan of their
    candidates once, and a node change costs that node alone; asked again of the same pod
    (steering, then repair), the fold answers."""
    shape = nodechecks.shape_key(facts, view)
    key = ("cdi", policy.cache_key, pool_name, shape)
    # (a kept fold, nearly always: what judging a node takes is built only without one)
    fold = view.kept_fold(key) or _fold(facts, pool_name, view, policy, key, shape)
    summary: Verdicts = fold.derive(_summarise)
    return summary


def _fold(facts: PodFacts, pool_name: str, view: ClusterView, policy: Policy,
          key: tuple[Hashable, ...], shape: tuple[Hashable, ...]) -> NodeFold[_NodeVerdict]:
    """The verdicts' fold for this pod shape, made (or found, if another review made it
    meanwhile)."""
    hami_pool = policy.is_hami_pool(pool_name)
    demand: list[cand.GPUDemand] = []  # worked out on the first node that needs it

    def demand_of() -> cand.GPUDemand:
        if not demand:
            demand.append(cand.demand_of(facts, hami_pool))
        return demand[0]

    ask = Ask(facts, policy.by_name[pool_name], view, policy, hami_pool, demand_of)
    active: list[tuple[tuple[NodeCheck, Ask, Any], ...]] = []  # prepared on the first node judged
    placement, unsteered = facts.placement, facts.unsteered
    extended = facts.claims.extended

    def per_node(n: NodeInfo, known: NodeAssessment | None = None,
                 change: NodeChange | None = None) -> _NodeVerdict | None:
        """This node's part in the verdicts (None: not a candidate at all, or one where DRA,
        not a device plugin, serves every GPU resource the pod asks for). ``known``: what
        the node checks found, when it is known to hold still."""
        if extended and all(podclaims.dra_served(n, r, extended) for r in facts.gpus):
            return None
        if not unsteered.reaches(n, pool_name, policy):
            return None
        # (nearly every pod is not steered: its placement is matched once)
        matches = unsteered is placement or placement.matches(n.labels, n.name)
        check = known
        if check is None:
            if not active:
                active.append(nodechecks.prepared(ask))
            # (judged once for the folds of every pod shape that reads the same of it)
            check = change.shared(judged_key, lambda: nodechecks.judge(n, ask, active[0])) \
                if change is not None else nodechecks.judge(n, ask, active[0])
        if check.state is NodeState.OK:
            return _FIT_OK_REACHABLE if matches else _FIT_OK_UNREACHABLE
        if check.state is NodeState.UNFIT:
            return (check.note, False, None)  # (``gpufit``: not a candidate)
        return (None, matches, check)

    label_reads: list[frozenset[str]] = []  # worked out on the first node stored again

    # what the node checks' answer depends on besides the node: not the placement
    judged_key = ("cdi", policy.cache_key, pool_name, shape[1:])

    def again(change: NodeChange, was: _NodeVerdict) -> _NodeVerdict | None:
        """A node stored again: where nothing the node checks read changed, their finding
        stands; where its pool, reach and fit read nothing that changed either (its taints,
        the labels the pool and the placements read; its devices are in the checks' key),
        its value stands whole. A node DRA may serve is asked again in full."""
        n, old = change.node, change.old
        if extended or not change.shared(_SAME, lambda: _same_to_checks(n, old, view)):
            return per_node(n, None, change)
        if not label_reads:
            label_reads.append(placement.label_keys() | unsteered.label_keys()
                               | NodeInfo.pool_reads(policy))
        if n.taints == old.taints and same_at(n.labels, old.labels, label_reads[0]):
            return was
        known = _OK if was in (_FIT_OK_REACHABLE, _FIT_OK_UNREACHABLE) else was[2]
        return per_node(n, known, change)

    return view.fold(key, per_node,
                     lambda: cand.candidates(unsteered, pool_name, view, policy),
                     again=again)


#: stands for an OK finding the fold did not keep (it keeps only that it was OK)
_OK = NodeAssessment("", NodeState.OK)
#: whether the node checks see a node stored again as before (``NodeChange.shared``)
_SAME = ("node checks see the node as before",)


def _same_to_checks(node: NodeInfo, old: NodeInfo, view: ClusterView) -> bool:
    """Whether the node checks see ``node`` as they saw ``old``: every node fact they
    declare is as it was (``nodechecks.node_key``)."""
    new_key = nodechecks.node_key(node, view)
    return new_key is not None and new_key == nodechecks.node_key(old, view)


def _finding(s: Verdicts, facts: PodFacts, hami_pool: bool, policy: Policy) -> Finding | None:
    if not s.total:
        return Finding.NO_CANDIDATES
    if not s.checked:
        return Finding.NO_ALLOWED_GPU if cand.narrows(facts, hami_pool) else Finding.NO_GPU_FIT
    if s.ok:
        if not s.reachable:
            return Finding.STEERED_OUT
        return Finding.SOME_FAIL if s.missing or s.unknown else None
    if s.unknown and (policy.on_missing_inventory is OnFinding.WARN or not s.missing):
        return Finding.UNKNOWN
    if s.missing and not s.unknown and all(c.reason == Reason.NOT_BOUND_BY_HAMI
                                           for c in s.missing):
        return Finding.NOT_BOUND
    if all(c.undelivered for c in s.missing + s.unknown):
        return Finding.NOT_DELIVERED
    if s.missing and not s.unknown and all(c.misaccounted for c in s.missing):
        return Finding.NOT_ACCOUNTED
    if s.missing and not s.unknown and all(c.undelivered or c.misaccounted
                                           for c in s.missing):
        # no node lacks a CDI device: on each the accounted GPU never arrives, with no GPU
        # at all or with another one
        return Finding.NOT_DELIVERED
    if s.missing and all(c.mode in delivery.NON_CDI_MODES for c in s.missing):
        return Finding.UNKNOWN_DEVICE
    return Finding.MISSING


def repair_class(facts: PodFacts, pool_name: str, view: ClusterView, policy: Policy
                 ) -> str | None:
    """The RuntimeClass that provably makes this pod run on every candidate node, where
    without it the pod would fail on every one (``cdi.repair``), or None.

    Only what is known counts as proof: the pod names no class and hands its GPUs through
    ``NVIDIA_VISIBLE_DEVICES``; every candidate lacks only CDI devices (none is doubtful,
    none ignores the variable); the class is one of the policy's non-CDI classes, the
    cluster defines it (gpupool lists the cluster's RuntimeClasses), and every candidate's
    containerd has its handler running the NVIDIA runtime without CDI. Then the runtime
    uses no CDI device at all, and none can be missing."""
    pool = policy.by_name[pool_name]
    classes = view.runtime_classes()
    if not pool.cdi.repair or facts.runtime_class is not None or not facts.is_gpu_pod \
            or classes is None:
        return None
    s = verdicts(facts, pool_name, view, policy)
    if s.ok or s.unknown or not s.missing or \
            _finding(s, facts, policy.is_hami_pool(pool_name), policy) is not Finding.MISSING:
        return None
    if any(c.way != delivery.VISIBLE_DEVICES or c.undelivered for c in s.missing):
        return None
    nodes = [view.node(c.node) for c in s.missing]
    for rc in policy.non_cdi_runtime_classes:
        handler = classes.get(rc)
        if handler is not None and all(
                n is not None and n.inventory is not None
                and n.inventory.runtime.handlers.get(handler) in delivery.NON_CDI_MODES
                for n in nodes):
            return rc
    return None


def cdi_decision(facts: PodFacts, pool_name: str, view: ClusterView, policy: Policy
                 ) -> PodFinding | None:
    """None: nothing to say. Otherwise what the verdicts say of the pod as a whole, and
    whether the policy denies it (``OUTCOMES``)."""
    pool = policy.by_name[pool_name]
    if not pool.cdi.checked or not facts.is_gpu_pod:
        return None  # nothing to check, or only DRA claims (``allocation`` judges those)
    if len(view) == 0 or not view.synced:
        # No node view (serve --no-cluster, a watch that has not synced yet): say so on
        # every GPU pod rather than let an unchecked pod read as a checked one, or deny it
        # when the policy asks (``onNoNodeView``).
        return found(NO_VIEW, pool_name, denies=policy.on_no_node_view is OnFinding.DENY,
                     reason=Reason.NODE_VIEW_MISSING,
                     unchecked="no-nodes" if view.synced else "not-synced")
    s = verdicts(facts, pool_name, view, policy)
    if not s.total and facts.claims.extended:
        return None  # DRA serves it on every node it could reach: ``allocation`` judges
    finding = _finding(s, facts, policy.is_hami_pool(pool_name), policy)
    if finding is None:
        return None
    outcome = OUTCOMES[finding]
    return found(f"cdi.{finding.value}", pool_name, denies=outcome.denies(policy),
                 reason=outcome.reason, finding=finding, verdicts=s)


def node_verdict(node: NodeInfo, view: ClusterView, policy: Policy,
                 resource: str | None = None) -> NodeAssessment:
    """How a pod of the node's pool that asks for nothing in particular (or for one of
    ``resource``) fares on the node: ``doctor``'s row, from the same verdicts admission and
    steering use."""
    pool_name = node.pool(policy)
    spec: dict[str, object] = {"nodeName": node.name}
    if resource is not None:
        spec["containers"] = [{"name": "probe", "resources": {"limits": {resource: 1}}}]
    probe = PodFacts.parse({"spec": spec}, None, policy, view)
    s = verdicts(probe, pool_name, view, policy)
    failing = s.missing + s.unknown
    return failing[0] if failing else NodeAssessment(node.name, NodeState.OK)
