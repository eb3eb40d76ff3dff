"""Whether a pod's GPUs will reach its containers on its pool's candidate nodes: the check
the project exists for.

Every candidate node is asked ``nodechecks``' questions (the device plugin's GPUs resolved as
its runtime would, the pod's own NVIDIA_VISIBLE_DEVICES, its NRI annotations); the answers
are kept per pod shape as nodes change (``verdicts``), and summed up into one finding the
policy turns into a denial, a warning or nothing (``OUTCOMES``). The decision, steering and
``doctor`` share those verdicts.

Doubt never denies: a node without inventory, an unknown runtime mode or unknown GPU UUIDs
count as "unknown", which the policy turns into a warning by default.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.api import delivery
from webhook.engine.checks import nodechecks
from webhook.engine.checks.assessment import (
    Ask,
    NodeAssessment,
    NodeCheck,
    NodeState,
)
from webhook.engine.core.decision import (
    MAX_FINDINGS,
    SHOW_DEVICES,
    SHOW_NODES,
    Decision,
    NodeFinding,
    Reason,
    allow,
    deny,
)
from webhook.engine.core.policy import OnFinding, Policy, Pool
from webhook.engine.placement import candidates as cand
from webhook.engine.pod import podclaims
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import nri
from webhook.engine.view.caches import NodeChange, NodeFold
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo

#: Why no CDI check ran when the view holds no node at all.
NO_NODES = "gpupool knows no nodes"
#: Why no CDI check ran while the server's node watch has not listed nodes and namespaces.
NOT_SYNCED = "gpupool's node view has not synced yet"


@dataclass(frozen=True)
class Verdicts:
    """The pool's candidate nodes for one pod, judged."""

    total: int  # nodes the pod's placement allows
    unfit: list[tuple[str, str]]  # of those, nodes its GPU demand rules out, and why
    ok: int
    missing: list[NodeAssessment]
    unknown: list[NodeAssessment]
    findings: list[NodeFinding]
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
    #: the nodes that may fail, as messages quote them
    failing_text: str = ""

    @property
    def checked(self) -> int:
        """Judged nodes: those that have the pod's GPUs (and are reachable, if any are)."""
        return self.ok + len(self.missing) + len(self.unknown)


def _summary(checks: list[NodeAssessment]) -> str:
    parts = []
    for c in checks[:SHOW_NODES]:
        if c.missing and not c.missing[0].endswith("<any device>"):
            devs = ", ".join(c.missing[:SHOW_DEVICES])
            more = len(c.missing) - SHOW_DEVICES
            parts.append(f"{c.node} lacks {devs}{f' (+{more} more)' if more > 0 else ''}")
        else:
            parts.append(f"{c.node}: {c.note}")
    if len(checks) > SHOW_NODES:
        parts.append(f"and {len(checks) - SHOW_NODES} more node(s)")
    return "; ".join(parts)


def fix_text(pool: Pool, checks: list[NodeAssessment], policy: Policy,
             view: ClusterView) -> str:
    """The fix to name for these failing nodes: one fix where they share it, else each
    fix with the nodes it is for. Every part names what is there: a RuntimeClass only where
    the cluster has it (when gpupool knows the cluster's classes: the GPU Operator deletes
    its own with NRI injection) and every such node's containerd runs its handler without
    CDI; a CDI kind only where one is known."""
    fixes: dict[str, list[str]] = {}
    for c in checks:
        fixes.setdefault(_fix_for(pool, c, policy, view), []).append(c.node)
    if len(fixes) == 1:
        return next(iter(fixes))
    parts = []
    for fix, nodes in fixes.items():
        more = f" and {len(nodes) - SHOW_NODES} more" if len(nodes) > SHOW_NODES else ""
        parts.append(f"on {', '.join(nodes[:SHOW_NODES])}{more}: {fix}")
    return "; ".join(parts)


def _fix_for(pool: Pool, c: NodeAssessment, policy: Policy, view: ClusterView) -> str:
    """The fix for one failing node."""
    if c.fix:
        return c.fix
    # HAMi's chart sets its plugin's strategy from devicePlugin.deviceListStrategy.
    strategy = ("HAMi's chart value devicePlugin.deviceListStrategy=cdi-annotations"
                if policy.is_hami_pool(pool.name) else
                f"pool {pool.name}'s device plugin to DEVICE_LIST_STRATEGY=cdi-annotations")
    if c.note == delivery.UNPRIVILEGED_ENVVAR_IGNORED:
        return ("set accept-nvidia-visible-devices-envvar-when-unprivileged = true in the "
                f"NVIDIA runtime's config.toml on those nodes, or set {strategy} (a CDI "
                "strategy, whose devices containerd delivers to any container)")
    if c.undelivered:
        return ("make the NVIDIA runtime containerd's default runtime on those nodes, or set "
                f"{strategy} (a CDI strategy, which containerd and the GPU Operator's NRI "
                "plugin deliver under any handler)")
    kind = c.kind
    if (c.way or delivery.VISIBLE_DEVICES) == delivery.VISIBLE_DEVICES:
        vendor, _, cls = kind.partition("/")
        parts = []
        if vendor and cls:
            parts.append(f"define a CDI device per GPU UUID for kind {kind} on those nodes "
                         f"(e.g. nvidia-ctk cdi generate --vendor={vendor} --class={cls} "
                         f"--device-name-strategy=uuid "
                         f"--output=/var/run/cdi/{vendor}-{cls}-uuid.yaml)")
        legacy = _legacy_class(c.node, policy, view)
        if legacy:
            parts.append(f"run the pod with runtimeClassName {legacy}")
        parts.append(f"turn off the GPU Operator's CDI mode on pool {pool.name}'s nodes")
        return "; ".join([*parts[:-1], ("or " if len(parts) > 1 else "") + parts[-1]])
    spec = f"its {kind} CDI spec" if kind else "its CDI spec"
    return (f"make the device plugin on those nodes write {spec} for every GPU the node "
            f"has (DEVICE_LIST_STRATEGY cdi-annotations/cdi-cri; restart it after a GPU is "
            f"replaced)")


def _legacy_class(node_name: str, policy: Policy, view: ClusterView) -> str:
    """A RuntimeClass of the policy's non-CDI ones that this node can run: the cluster has
    it (where gpupool knows the cluster's classes) and the node's containerd runs its
    handler with the NVIDIA runtime in a mode that uses no CDI; "" where none."""
    classes = view.runtime_classes()
    node = view.node(node_name)
    handlers = node.inventory.runtime.handlers if node is not None and \
        node.inventory is not None else None
    for rc in policy.non_cdi_runtime_classes:
        if classes is not None and rc not in classes:
            continue
        handler = classes[rc] if classes is not None else rc
        if handlers is None or handlers.get(handler) in delivery.NON_CDI_MODES:
            return rc
    return ""


#: (why the pod's GPU demand rules the node out, whether its node affinity as it stands
#: reaches the node, the assessment when not OK)
_NodeVerdict = tuple[str | None, bool, NodeAssessment | None]
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
        findings=[NodeFinding(c.node, c.missing, c.note) for c in failing][:MAX_FINDINGS],
        reachable=bool(placed) or not fit,
        every_failing=tuple(every_failing),
        can_fail=tuple(sorted(c.node for c in every_failing
                              if c.state is NodeState.MISSING or c.may_fail)),
        every_failing_node=tuple(sorted(c.node for c in every_failing)),
        failing_text=_summary(missing + unknown))


def _why(pool: Pool, missing: list[NodeAssessment]) -> str:
    """Why the CDI names are needed, from the nodes that lack some ("" where none names
    one: their own notes say what goes wrong)."""
    named = [c for c in missing if c.missing and (c.kind or c.way == nri.WAY)]
    if not named:
        return ""
    kind, mode, way = named[0].kind, named[0].mode, named[0].way or delivery.VISIBLE_DEVICES
    if way == nri.WAY:
        return (f"The GPU Operator's NRI plugin has containerd inject the CDI devices its "
                f"{nri.DOMAIN} annotations name, which containerd resolves from the node's "
                f"CDI specs")
    if way == delivery.CDI_DEVICES:
        return (f"Its device plugin hands containers CDI devices {kind}=GPU-<uuid>, which "
                f"containerd resolves from the node's CDI specs whatever the runtime's mode")
    if not mode:
        return ""
    return (f"The node runtime (mode {mode}, default kind {kind}) resolves "
            f"NVIDIA_VISIBLE_DEVICES=GPU-<uuid> as CDI devices {kind}=GPU-<uuid>")


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
        why = cand.unfit_reason(n, demand_of())
        if why:
            return (why, False, None)
        check = known
        if check is None:
            if not active:
                active.append(nodechecks.prepared(ask))
            # (judged once for the folds of every pod shape that reads the same of it)
            check = change.shared(judged_key, lambda: nodechecks.judge(n, ask, active[0])) \
                if change is not None else nodechecks.judge(n, ask, active[0])
        if check.state is NodeState.OK:
            return _FIT_OK_REACHABLE if matches else _FIT_OK_UNREACHABLE
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
        if n.taints == old.taints and all(n.labels.get(k) == old.labels.get(k)
                                          for k in label_reads[0]):
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


def _texts(finding: Finding, s: Verdicts, pool: Pool, policy: Policy,
           view: ClusterView) -> tuple[str, str]:
    """The decision's message (it follows the pod's name), and the warning an allowed pod
    gets."""
    name, failing = pool.name, len(s.missing) + len(s.unknown)
    unfit = "; ".join(f"{n}: {why}" for n, why in s.unfit[:SHOW_NODES])
    match finding:
        case Finding.NO_CANDIDATES:
            return (f": no node of pool {name} matches its nodeName, nodeSelector, "
                    f"affinity and tolerations; its CDI devices were not checked",
                    f"gpupool: no candidate node in pool {name} yet; CDI devices not checked")
        case Finding.NO_ALLOWED_GPU:
            return (f" asks for GPUs its HAMi annotations allow, but no candidate node in "
                    f"pool {name} has them: {unfit}", "")
        case Finding.NO_GPU_FIT:
            return (f": no node of pool {name} has the GPUs it asks for: {unfit}",
                    f"gpupool: no node in pool {name} has the GPUs this pod asks for yet")
        case Finding.STEERED_OUT:
            return (f": its node affinity leaves it no node of pool {name}: the nodes "
                    f"where its GPUs resolve are excluded, and {failing} are steered off "
                    f"because they would fail it: {s.failing_text}",
                    f"gpupool: no node of pool {name} is left to this pod; it stays pending")
        case Finding.SOME_FAIL:
            return (f": {failing} of {s.checked} candidate nodes may fail it: "
                    f"{s.failing_text}",
                    f"gpupool: {failing} of {s.checked} candidate nodes lack CDI devices this "
                    f"pod needs; see gpupool doctor")
        case Finding.UNKNOWN:
            if OUTCOMES[finding].denies(policy):
                return (f": CDI inventory unknown on every candidate node of pool "
                        f"{name}: {_summary(s.unknown)}", "")
            names = ", ".join(c.node for c in s.unknown[:2]) + \
                (", ..." if len(s.unknown) > 2 else "")
            return (f": CDI devices not verified: {s.failing_text}",
                    f"gpupool: devices not verified on {len(s.unknown)} candidate node(s) "
                    f"({names}); see gpupool doctor")
        case Finding.NOT_DELIVERED if all(c.way == nri.WAY for c in s.missing):
            # Only what its annotations name is lost: its device plugin's GPUs still arrive
            # (a plugin finding that says more would have won on the node).
            return (f": on every candidate node of pool {name}, the devices its "
                    f"{nri.DOMAIN} annotations name would not reach its containers (the "
                    f"GPUs its device plugin hands would): {s.failing_text}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.NOT_DELIVERED if not all(c.undelivered for c in s.missing):
            return (f" would not get the GPUs its device plugin accounted for on any "
                    f"candidate node of pool {name}: {s.failing_text}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.NOT_DELIVERED:
            return (f" would start without its GPUs on every candidate node of pool "
                    f"{name}: {s.failing_text}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.NOT_ACCOUNTED:
            return (f" would get a GPU, but not the one its device plugin accounted for, "
                    f"on every candidate node of pool {name}: {s.failing_text}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.UNKNOWN_DEVICE:
            device = next((m for c in s.missing for m in c.missing), "")
            return (f" would fail on its node with '{device}: unknown device': the "
                    "legacy hook hands the names in its own NVIDIA_VISIBLE_DEVICES to "
                    "nvidia-container-cli, which knows no such GPU or MIG device there "
                    f"(UUID or index): {s.failing_text}. Fix: name the node's GPUs by UUID "
                    "or index, or remove NVIDIA_VISIBLE_DEVICES from the pod's GPU "
                    "containers so the device plugin's GPUs are used", "")
        case Finding.MISSING:
            why = _why(pool, s.missing)
            return (f" would fail on its node with 'unresolvable CDI devices': no "
                    f"candidate node of pool {name} defines the CDI devices it needs: "
                    f"{s.failing_text}. {why + '. ' if why else ''}"
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")


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
                 ) -> Decision | None:
    """None: nothing to say. Otherwise a Decision carrying a denial or warnings and nodes."""
    pool = policy.by_name[pool_name]
    if not pool.cdi.checked or not facts.is_gpu_pod:
        return None  # nothing to check, or only DRA claims (``allocation`` judges those)
    if len(view) == 0 or not view.synced:
        # No node view (serve --no-cluster, a watch that has not synced yet): say so on
        # every GPU pod rather than let an unchecked pod read as a checked one, or deny it
        # when the policy asks (``onNoNodeView``).
        why = NO_NODES if view.synced else NOT_SYNCED
        unchecked = "no-nodes" if view.synced else "not-synced"
        if policy.on_no_node_view is OnFinding.DENY:
            return deny(Reason.NODE_VIEW_MISSING,
                        f": CDI devices cannot be checked: {why} (onNoNodeView: deny); retry "
                        "in a moment, or see the webhook's /readyz?verbose", of_subject=True,
                        gpu=True, pool=pool_name)._replace(unchecked=unchecked)
        return allow(Reason.ROUTED, gpu=True, pool=pool_name,
                     message=f": CDI devices not checked: {why}", of_subject=True,
                     warnings=(f"gpupool: CDI devices not checked: {why}",),
                     unchecked=unchecked)
    s = verdicts(facts, pool_name, view, policy)
    if not s.total and facts.claims.extended:
        return None  # DRA serves it on every node it could reach: ``allocation`` judges
    finding = _finding(s, facts, policy.is_hami_pool(pool_name), policy)
    if finding is None:
        return None
    outcome = OUTCOMES[finding]
    message, warning = _texts(finding, s, pool, policy, view)
    if outcome.denies(policy):
        return deny(outcome.reason, message, of_subject=True, gpu=True, pool=pool_name,
                    nodes=s.findings)
    return allow(Reason.ROUTED, gpu=True, pool=pool_name, nodes=s.findings, message=message,
                 of_subject=True, warnings=(warning,))


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
