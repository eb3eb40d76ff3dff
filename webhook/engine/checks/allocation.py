"""Whether a pod's DRA demand can be allocated in its pool, as far as admission can know.

What is known at admission: the pod's claims and templates (if they exist yet), the
DeviceClasses, the ResourceSlices each node publishes, the namespace's admin-access label,
and each node's containerd CDI setting (the agent's inventory). What is not: which devices
other claims will hold when the pod is scheduled, and the CDI spec a DRA driver writes for
the claim when the kubelet prepares it (docs/dra.md). So a pool where no node could ever
allocate the pod is a finding the policy's ``onNoCandidates`` turns into a warning or a
denial; a pod whose devices would not reach its containers on every such node is denied;
anything gpupool cannot evaluate is a warning.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from webhook.api.said import Said, said
from webhook.engine.checks.findings import PodFinding, found, note
from webhook.engine.core.decision import (
    MAX_FINDINGS,
    Reason,
)
from webhook.engine.core.policy import OnFinding, Policy
from webhook.engine.core.resources import pod_requests
from webhook.engine.placement import candidates as cand
from webhook.engine.pod import podclaims
from webhook.engine.pod.nodereach import OTHER_POOL, OWN_FIELDS, claim_reaches, term_matches
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import allocator, dra
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


class _NodeCheck(NamedTuple):
    node: str
    ok: bool
    why: Said | None = None
    doubt: Said | None = None
    undelivered: bool = False
    device_plugin: bool = False
    fatal: str = ""  # a selector's runtime failure here (``dra.RuntimeFailure``)
    #: the allocated claim whose node selector keeps the pod off this node
    pinned: str = ""


def _extended_claims(d: dra.ClaimDemand, spec: Mapping[str, Any]
                     ) -> dict[str, dra.PodClaim]:
    """For each extended resource a DeviceClass serves, the claim the scheduler makes for it
    where DRA serves it: as many devices as the pod's containers ask for, as the scheduler
    counts them."""
    counts = pod_requests(spec, [r for r, _ in d.extended])
    return {r: dra.PodClaim(r, f"extended resource {r}", dra.ClaimSpec(((dra.DeviceRequest(
        r, cls, (), max(counts.get(r, 1), 1), False, ()),),))) for r, cls in d.extended}


def _pinned_off(node: NodeInfo, source: str) -> _NodeCheck:
    """A node the pod's placement reaches but an allocated claim it uses does not
    (``Placement.kept_off``)."""
    return _NodeCheck(node.name, False, said("dra.pinnedOff", source=source), pinned=source)


def _check_node(node: NodeInfo, d: dra.ClaimDemand, extra: Mapping[str, dra.PodClaim],
                view: ClusterView, verdicts: dra.Verdicts) -> _NodeCheck:
    """The pod's claims on a node it reaches, theirs included (``Placement.kept_off``): its
    own, plus the extended resources the node gets through DRA (``extra``); where device
    plugins serve all it asks, their count."""
    # an allocated claim asks the allocator for nothing more
    claims = tuple(c for c in d.claims if c.spec.allocated is None) + tuple(
        c for r, c in extra.items() if podclaims.dra_served(node, r, d.extended))
    if not claims and any(c.spec.allocated is not None for c in d.claims):
        return _NodeCheck(node.name, True)
    if not claims:
        # a device plugin serves all it asks here (its CDI devices: the CDI check's business)
        short = cand.unfit_reason(node, cand.GPUDemand(requests=tuple(sorted(
            (r, c.spec.requests[0][0].amount) for r, c in extra.items()))))
        return _NodeCheck(node.name, short is None, short, device_plugin=short is None)
    release = view.release()
    if not release.supported:
        why = said("dra.releaseUnsupported", release=release)
        return _NodeCheck(node.name, False, why, why)
    # Once every held device is free: whether the node can ever take the pod.
    slices = view.slices_for(node.name)
    classes = view.device_classes() or {}
    # each request judged alone, by counting: worked out at most once
    alone = dra.judge_node(claims, slices, classes, verdicts) \
        if _one_plain_request(claims, slices) \
        else None
    if alone is not None and not alone.fatal and not alone.doubt:
        # One request of whole devices on plain slices: counting its devices is the
        # allocator's answer, and far cheaper (identical devices are judged once).
        return _accept(node, alone.ok, alone.why)
    result = allocator.allocate([c.spec for c in claims], node.name, node.labels, slices,
                                classes, None, term_matches, view.release(), compiled=verdicts)
    if result.ok is None:
        return _NodeCheck(node.name, False, result.why, result.why)
    if not result.ok:
        if result.fatal:
            return _NodeCheck(node.name, False, result.why, fatal=result.fatal)
        # Name the request no device here serves even alone, where there is one; else the
        # requests fail only together (constraints, capacity, counters, one device each).
        if alone is None:
            alone = dra.judge_node(claims, slices, classes, verdicts)
        return _NodeCheck(node.name, False, alone.why or result.why)
    return _accept(node, True, None)


def _accept(node: NodeInfo, ok: bool, why: Said | None) -> _NodeCheck:
    if not ok:
        return _NodeCheck(node.name, False, why)
    runtime = node.inventory.runtime if node.inventory is not None else None
    if runtime is not None and runtime.containerd_cdi is False:
        return _NodeCheck(node.name, False, said("dra.cdiDisabled"), undelivered=True)
    return _NodeCheck(node.name, True)


def _one_plain_request(claims: Iterable[dra.PodClaim], slices: Iterable[dra.Slice]) -> bool:
    """One request in all (alternatives allowed), no constraint, no capacity asked, and
    slices without partitionable, shared or node-selected devices, each a whole pool:
    nothing that makes devices depend on each other."""
    claims = tuple(claims)
    requests = [alts for c in claims for alts in c.spec.requests]
    return len(requests) == 1 and not any(c.spec.constraints for c in claims) \
        and not any(r.capacity for r in requests[0]) \
        and all(s.extras is None and not s.counters and s.selector is None
                and s.pool[2] == 1 for s in slices)


#: nodes tried for "can it be allocated now, with the held devices in use" per review
NOW_TRIES = 16


def _waits(facts: PodFacts, d: dra.ClaimDemand, able: Iterable[str],
           view: ClusterView) -> int | None:
    """Of the nodes that could ever allocate the pod, how many cannot now, the devices
    allocated claims hold being in use: 0 when one can; None when not known (more nodes
    than ``NOW_TRIES``, or doubt)."""
    held = view.held_devices()
    if not held:
        return 0
    in_use = allocator.InUse.of(held)
    extra = _extended_claims(d, facts.spec)
    tried = 0
    compiled: dra.Verdicts = {}  # (the selectors, compiled once for the nodes tried)
    for name in able:
        node = view.node(name)
        if node is None:
            continue
        tried += 1
        if tried > NOW_TRIES:
            return None
        claims = tuple(c.spec for c in d.claims if c.spec.allocated is None) + tuple(
            c.spec for r, c in extra.items() if podclaims.dra_served(node, r, d.extended))
        now = allocator.allocate(claims, node.name, node.labels, view.slices_for(node.name),
                                 view.device_classes() or {}, in_use, term_matches,
                                 view.release(), compiled=compiled)
        if now.ok is not False:
            return 0
    return tried


class _Summary(NamedTuple):
    """A pod's DRA demand judged on every candidate node of its pool (node lists capped at
    ``MAX_FINDINGS``, first by name; the counts are whole)."""

    able: int  # nodes that could allocate its claims through DRA
    able_first: tuple[str, ...]
    served: int  # nodes where device plugins serve all it asks
    failing: int
    failing_first: tuple[_NodeCheck, ...]
    all_undelivered: bool  # every failing node fails it only for want of CDI
    doubt: Said | None
    mixed: tuple[str, str, str] | None  # (node, resource, class): served both ways there
    fatal: tuple[str, str] | None  # (node, failure): a selector fails at run time there

    @property
    def total(self) -> int:
        return self.able + self.served + self.failing


def _summarise(values: dict[str, tuple[_NodeCheck, tuple[str, str] | None]]) -> _Summary:
    """One pass, no full sort: after a slice changes, this runs over every candidate."""
    able: list[str] = []
    failing: list[_NodeCheck] = []
    served = 0
    undelivered = True
    doubt: tuple[str, Said] | None = None
    mixed: tuple[str, str, str] | None = None
    fatal: tuple[str, str] | None = None
    for name, (c, hit) in values.items():
        if c.fatal and (fatal is None or name < fatal[0]):
            fatal = (name, c.fatal)
        if c.ok:
            if c.device_plugin:
                served += 1
            else:
                able.append(name)
        else:
            failing.append(c)
            undelivered = undelivered and c.undelivered
        if c.doubt and (doubt is None or name < doubt[0]):
            doubt = (name, c.doubt)
        if hit and (mixed is None or name < mixed[0]):
            mixed = (name, *hit)
    return _Summary(len(able), tuple(heapq.nsmallest(MAX_FINDINGS, able)),
                    served, len(failing),
                    tuple(heapq.nsmallest(MAX_FINDINGS, failing, key=lambda c: c.node)),
                    undelivered, doubt[1] if doubt else None, mixed, fatal)


def _summary(facts: PodFacts, d: dra.ClaimDemand, pool: str, view: ClusterView, policy: Policy
             ) -> _Summary:
    """Every candidate node judged: the pool's nodes (its GPU nodes, and any that publish
    ResourceSlices: a DRA node need not carry a GPU label) that the pod's placement allows.
    Kept per pod shape as nodes and slices change (``ClusterView.fold``), as the CDI
    verdicts are: the pods of a workload pay for the scan once."""
    asked = {r for r, _ in d.extended}
    extra = _extended_claims(d, facts.spec)
    # selector verdicts per device fields, kept with the fold (``dra.match_slice``)
    verdicts: dra.Verdicts = {}

    def per_node(n: NodeInfo) -> tuple[_NodeCheck, tuple[str, str] | None] | None:
        off = facts.placement.kept_off(n, pool, policy,
                                       devices=bool(view.slices_for(n.name, own=True)),
                                       claims=d.claims)
        if off in (OWN_FIELDS, OTHER_POOL):
            return None
        hits = [(r, c) for r, c in mixed_resources(n, view.device_classes(),
                                                    view.slices_for(n.name), verdicts)
                if r in asked]
        mixed = hits[0] if hits else None
        return (_check_node(n, d, extra, view, verdicts) if off is None
                else _pinned_off(n, off)), mixed

    def initial() -> Iterable[NodeInfo]:
        if facts.node_name:
            node = view.node(facts.node_name)
            return (node,) if node is not None else ()
        names = {n.name for n in view.pool_nodes(policy, pool)} | view.nodes_with_slices()
        return (n for name in sorted(names) if (n := view.node(name)) is not None)

    key = ("dra", policy.cache_key, pool, cand.shape_key(facts.placement, (facts.demand_key, d)))
    summary: _Summary = view.fold(key, per_node, initial, reads_slices=True).derive(_summarise)
    return summary


def allocation_on_nodes(claims: Iterable[Mapping[str, Any]], view: ClusterView,
                        in_use: bool) -> dict[str, str]:
    """For these ResourceClaims (objects), every node that publishes ResourceSlices:
    "ok", "no", "doubt" or "error: ..." (fatal), as gpupool's allocator says; ``in_use``:
    with the devices allocated claims hold in use (else all free). For comparing with
    Kubernetes' own allocator."""
    specs = [dra.claim_spec("ResourceClaim", c) for c in claims]
    held = allocator.InUse.of(view.held_devices()) if in_use else None
    out = {}
    compiled: dra.Verdicts = {}  # (the selectors, compiled once for every node)
    for name in sorted(view.nodes_with_slices()):
        node = view.node(name)
        labels = node.labels if node is not None else {}
        r = allocator.allocate(specs, name, labels, view.slices_for(name),
                               view.device_classes() or {}, held, term_matches,
                               view.release(), compiled=compiled)
        out[name] = "doubt" if r.ok is None else "ok" if r.ok else \
            f"error: {r.fatal}" if r.fatal else "no"
    return out


def can_allocate(facts: PodFacts, pool: str, view: ClusterView, policy: Policy) -> bool:
    """Can some candidate node of the pool allocate the pod's claims (once every held
    device is free), or serve it by device plugin?"""
    d = facts.claims
    if not d.any or view.device_classes() is None:
        return False
    s = _summary(facts, d, pool, view, policy)
    return bool(s.able or s.served) and s.fatal is None


def _admin_access(facts: PodFacts, d: dra.ClaimDemand, view: ClusterView) -> str | None:
    """The request that asks for admin access in a namespace not allowed to, if any."""
    labels = view.namespace_labels(facts.namespace or "")
    if labels is None or labels.get(dra.ADMIN_ACCESS_LABEL) == "true":
        return None
    for claim in d.claims:
        for alternatives in claim.spec.requests:
            for r in alternatives:
                if r.admin_access:
                    return f"{claim.source} request {r.name}"
    return None


def dra_decision(facts: PodFacts, pool_name: str, view: ClusterView, policy: Policy
                 ) -> PodFinding | None:
    """None when the pod asks nothing of DRA or all is well; else what keeps its claims from
    being allocated, or what is in doubt, and the nodes that decided."""
    d = facts.claims
    if not d.any:
        return None
    notes = [note(UNRESOLVED, ref=ref) for ref in d.unresolved]
    # A pod no node can take yet is pending, not a late failure: ``onNoCandidates``.
    pending = policy.on_no_candidates is OnFinding.DENY

    forbidden = _admin_access(facts, d, view)
    if forbidden is not None:
        return found("dra.adminAccessForbidden", pool_name, denies=True,
                     reason=Reason.DRA_ADMIN_ACCESS_FORBIDDEN, request=forbidden,
                     namespace=facts.namespace)
    classes = view.device_classes()
    if classes is None:
        if d.claims:
            return found("dra.classesUnknown", pool_name,
                         notes=[*notes, note(CLASSES_UNKNOWN)])
        return None
    # The allocator looks up the class of every request, and of every firstAvailable
    # alternative before it tries any (k8s.io/dynamic-resource-allocation v0.35.4,
    # structured/internal/stable/allocator_stable.go, Allocate -> validateDeviceRequest):
    # one missing class and the claim is never allocated, whichever alternative would fit.
    missing = sorted(c for c in d.classes if c not in classes)
    if missing:
        return found("dra.classMissing", pool_name, denies=pending,
                     reason=Reason.DEVICE_CLASS_MISSING, missing=tuple(missing),
                     known=tuple(sorted(classes)[:5]))
    s = _summary(facts, d, pool_name, view, policy)
    if s.mixed is not None:
        node, resource, cls = s.mixed
        notes.append(note(MIXED, node=node, resource=resource, device_class=cls))
    if s.fatal is not None:
        node, failure = s.fatal
        return found("dra.selectorFails", pool_name, denies=pending,
                     reason=Reason.NO_MATCHING_DEVICES, node=node, failure=failure)
    if not s.total:
        return found("dra.noDevicesInPool", pool_name, denies=pending,
                     reason=Reason.NO_MATCHING_DEVICES)
    if s.able or s.served:
        waits = _waits(facts, d, s.able_first, view) if s.able and not s.served and \
            s.able <= len(s.able_first) else 0
        if waits:
            notes.append(note(WAITS, nodes=waits, pool=pool_name))
        if not notes and not s.able_first:
            return None
        return found("dra.allocatable", pool_name, able=s.able, total=s.total, waits=waits,
                     able_first=s.able_first, notes=notes)
    failing = tuple((c.node, c.why) for c in s.failing_first)
    if s.doubt:
        release = view.release()
        notes.append(note(DOUBT, supported=release.supported, release=str(release)))
        return found("dra.doubt", pool_name, doubt=s.doubt, failing=failing,
                     count=s.failing, notes=notes)
    pinned = _pinned_elsewhere(d, s, view)
    if pinned is not None:
        source, where = pinned
        return found("dra.pinnedElsewhere", pool_name, denies=pending,
                     reason=Reason.NO_MATCHING_DEVICES, source=source, where=where,
                     failing=failing, count=s.failing)
    if s.all_undelivered:
        return found("dra.notDelivered", pool_name, denies=True,
                     reason=Reason.GPU_NOT_DELIVERED, failing=failing, count=s.failing)
    return found("dra.noDevices", pool_name, denies=pending, reason=Reason.NO_MATCHING_DEVICES,
                 failing=failing, count=s.failing)


#: what the DRA check says beside its finding
UNRESOLVED, CLASSES_UNKNOWN, MIXED, WAITS, DOUBT = (
    "dra.unresolved", "dra.classesUnknown", "dra.mixed", "dra.waits", "dra.doubt")


def _pinned_elsewhere(d: dra.ClaimDemand, s: _Summary, view: ClusterView
                      ) -> tuple[str, tuple[str, ...]] | None:
    """Where every candidate fails only because an allocated claim the pod uses holds
    devices it cannot reach: that claim, and the nodes its devices are on. The scheduler
    filters nodes by an allocated claim's ``status.allocation.nodeSelector`` (Kubernetes
    1.35 ``pkg/scheduler/framework/plugins/dynamicresources``, Filter: an allocated claim's
    node selector must match the node), and the claim is not allocated again while it is
    reserved: the pod is never schedulable while that allocation stands, whatever devices
    are freed meanwhile."""
    if not s.failing or len(s.failing_first) < s.failing \
            or not all(c.pinned for c in s.failing_first):
        return None
    source = s.failing_first[0].pinned
    claim = next((c for c in d.claims if c.source == source), None)
    if claim is None or claim.spec.allocated is None:
        return None
    return source, tuple(sorted(n.name for n in view.nodes()
                                if claim_reaches(claim.spec.allocated, n)))


def mixed_resources(node: NodeInfo, classes: Mapping[str, dra.DeviceClass] | None,
                    slices: Iterable[dra.Slice], verdicts: dra.Verdicts | None = None
                    ) -> list[tuple[str, str]]:
    """(resource, DeviceClass) pairs a device plugin and a DRA class both serve on this node
    (``slices``: the ResourceSlices it reaches): the device plugin advertises the resource,
    and the class that names it as its ``extendedResourceName`` matches a device here. The
    scheduler then counts the device plugin's GPUs and DRA's apart, and never sees the GPUs
    in use through the other. A class that matches no device on the node serves nothing."""
    if not classes or not node.allocatable:
        return []
    slices = tuple(slices)
    return [(c.extended_resource, c.name) for c in classes.values()
            if c.extended_resource and node.allocatable.get(c.extended_resource)
            and dra.class_has_devices(slices, c, verdicts)]
