"""What CDI devices a pod will need on a node, and whether its candidate nodes have them.

This is the check the project exists for. How a GPU reaches a container is the pool's device
plugin's choice (``webhook.api.delivery``): UUIDs in ``NVIDIA_VISIBLE_DEVICES``, which a runtime
in CDI mode turns into ``<default-kind>=GPU-<uuid>``, or the plugin's own CDI names, which
containerd resolves whatever the runtime's mode. Either way some spec on the node must define
every GPU the plugin could hand the pod, or container creation fails long after admission.
Pure functions: node inventories come from the cluster view.

Doubt never denies: a node without inventory, an unknown runtime mode or unknown GPU UUIDs
count as "unknown", which the policy turns into a warning by default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from webhook.api import delivery
from webhook.api.inventory import MIG_RESOURCE_PREFIX, Inventory
from webhook.engine.core.decision import MAX_FINDINGS, Decision, NodeFinding, Reason, allow, deny
from webhook.engine.core.policy import OnFinding, Policy, Pool
from webhook.engine.placement import candidates as cand
from webhook.engine.pod import podclaims
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import clusterpolicy, hami, nri
from webhook.engine.view.cluster import ClusterView, NodeInfo


class NodeState(StrEnum):
    """Whether every GPU the device plugin could hand a pod resolves on a node."""

    OK = "ok"
    MISSING = "missing"  # some spec lacks a device the pod would get
    UNKNOWN = "unknown"  # gpupool cannot tell (no inventory, unknown mode or GPUs)

_SHOW_NODES = 3
#: Nodes listed in a decision (and so in its audit record); messages give the totals.
_SHOW_DEVICES = 3
#: Why no CDI check ran when the view holds no node at all.
NO_NODES = "gpupool knows no nodes"
#: Why no CDI check ran while the server's node watch has not listed nodes and namespaces.
NOT_SYNCED = "gpupool's node view has not synced yet"


@dataclass(frozen=True)
class NodeAssessment:
    node: str
    state: NodeState
    missing: tuple[str, ...] = ()
    note: str = ""
    kind: str = ""
    mode: str | None = None
    way: str = ""
    #: the GPUs would not reach the container at all (see ``delivery.Resolution``)
    undelivered: bool = False
    #: the fix, where the finding itself knows it (``fix_text`` works out the others)
    fix: str = ""


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

    @cached_property
    def failing_by_state(self) -> dict[NodeState, tuple[str, ...]]:
        """The nodes steering keeps the pod off, by state (so ``requireInventory`` can add
        the unknown ones); worked out only for the pods steering judges by name."""
        return {state: tuple(c.node for c in self.every_failing if c.state is state)
                for state in (NodeState.MISSING, NodeState.UNKNOWN)}

    @property
    def checked(self) -> int:
        """Judged nodes: those that have the pod's GPUs (and are reachable, if any are)."""
        return self.ok + len(self.missing) + len(self.unknown)

    @cached_property
    def failing_text(self) -> str:
        """The nodes that may fail, as messages quote them; memoised with the summary, since
        every pod of one shape repeats it."""
        return _summary(self.missing + self.unknown)


def assess_node(node: NodeInfo, pool: Pool, runtime_class: str | None, handler: str | None,
                demand: cand.GPUDemand, policy: Policy, privileged: bool = False,
                declared_way: delivery.Way | None = None) -> NodeAssessment:
    """Will every GPU the device plugin could hand this pod resolve on this node?
    ``handler``: the containerd handler the pod's RuntimeClass names
    (``ClusterView.handler_of``); ``privileged``: every GPU container is privileged;
    ``declared_way``: how the node's device plugin hands GPUs as the cluster's own
    configuration says (``declared_way``)."""
    req = pool.cdi
    if not req.checked:
        return NodeAssessment(node.name, NodeState.OK)
    inv = node.inventory
    if inv is None:
        note = node.inventory_error or "no CDI inventory published (is gpupool's agent running?)"
        return NodeAssessment(node.name, NodeState.UNKNOWN, note=note)
    way = req.delivery
    if way is delivery.Way.DETECT:
        # The plugin's configuration beats what it left on disk (a plugin in a CDI
        # strategy that wrote no spec looks like an envvar one).
        way = declared_way if declared_way is not None \
            else delivery.Way(delivery.detected_way(inv, req.device_kind))
    if way == delivery.VISIBLE_DEVICES and runtime_class in policy.non_cdi_runtime_classes \
            and not delivery.envvar_ignored(inv, privileged):
        return NodeAssessment(node.name, NodeState.OK, way=way,
                              note=f"RuntimeClass {runtime_class} uses no CDI")
    mig = [name for name, _ in demand.requests if name.startswith(MIG_RESOURCE_PREFIX)]
    if mig:
        return _assess_mig(node, inv, mig, way, handler, req.device_kind, privileged)
    gpus = cand.eligible_gpus(node, demand)
    if not gpus:
        return NodeAssessment(node.name, NodeState.UNKNOWN, way=way,
                              note="no GPU UUIDs known (no driver list in the inventory, no "
                                   "hami.io/node-nvidia-register annotation)")
    r = delivery.resolve(inv, way, gpus, handler, req.device_kind, privileged)
    if r.ok is None:
        return NodeAssessment(node.name, NodeState.UNKNOWN, note=r.note, mode=r.mode,
                              way=way)
    created = sorted(node.hami_mig_gpus().intersection(gpus)) if demand.hami else []
    if created and r.kind and r.kind != delivery.JIT_KIND:
        return _hami_mig_failure(node, r, created, way)
    if r.ok is False and demand.hami and node.cordoned:
        # HAMi's scheduler reads hami.io/device-cordon from the Node it stored when it last
        # registered the node's GPUs (HAMi v2.10 pkg/scheduler/scheduler.go, register: only
        # when the register annotation or the GPU count changes), not when the annotation
        # changes: a GPU cordoned since may still be handed out. Failing only through such
        # GPUs is doubt, not proof.
        rest = tuple(u for u in gpus if u not in node.cordoned)
        if not rest or delivery.resolve(inv, way, rest, handler, req.device_kind,
                                        privileged).ok:
            shown = ", ".join(sorted(set(gpus) - set(rest))[:_SHOW_DEVICES])
            return NodeAssessment(
                node.name, NodeState.UNKNOWN, kind=r.kind, mode=r.mode, way=way,
                note=f"only GPUs cordoned by {hami.CORDON_ANNOTATION} lack their CDI devices "
                     f"({shown}); HAMi's scheduler may still hand them out until it next "
                     "re-registers the node's GPUs")
    return NodeAssessment(node.name, NodeState.OK if r.ok else NodeState.MISSING,
                          missing=r.missing, note=r.note, kind=r.kind, mode=r.mode, way=way,
                          undelivered=r.undelivered)


def declared_way(node: NodeInfo, view: ClusterView, hami_pool: bool) -> delivery.Way | None:
    """How the node's device plugin hands GPUs, as the cluster's own configuration says: the
    GPU Operator's ClusterPolicy on the nodes it runs its plugin on, HAMi's device-plugin
    DaemonSet on HAMi's pool (``hamiplugin``). None: it does not say."""
    operator = view.operator_way()
    if operator is not None and clusterpolicy.runs_operator_plugin(node.labels):
        return operator
    return view.hami_way(node.labels) if hami_pool else None


def _assess_mig(node: NodeInfo, inv: Inventory, resources: list[str], way: delivery.Way,
                handler: str | None, device_kind: str, privileged: bool) -> NodeAssessment:
    """A pod asking for MIG devices: the device plugin hands it ids of the MIG devices it
    registered for those resources (``MIG-<uuid>``), which the driver's GPU list does not
    name. They are judged like GPUs where the agent read them from the kubelet
    (``Inventory.mig``); otherwise only where no name can be missing."""
    devices = sorted({d for r in resources for d in (inv.mig or {}).get(r, ())})
    r = delivery.resolve(inv, way, devices, handler, device_kind, privileged)
    if r.ok is False and (r.undelivered or devices):  # a name is missing, or none arrive
        return NodeAssessment(node.name, NodeState.MISSING, missing=r.missing, note=r.note,
                              kind=r.kind, mode=r.mode, way=way, undelivered=r.undelivered)
    if r.ok is True and (devices or not r.kind or r.kind == delivery.JIT_KIND):
        return NodeAssessment(node.name, NodeState.OK, note=r.note, mode=r.mode, way=way)
    if r.ok is True and not any(_mig_name(d) for d in inv.kinds.get(r.kind, ())):
        # The plugin's id for a MIG device is its MIG-<uuid> (or <gpu>:<mig> with the index
        # strategy): a kind that defines neither resolves none, whichever it hands out.
        return NodeAssessment(node.name, NodeState.MISSING, kind=r.kind, mode=r.mode, way=way,
                              note=f"no CDI spec there defines any MIG device of kind "
                                   f"{r.kind} (MIG-<uuid> or <gpu>:<mig>)")
    why = ("gpupool's agent does not read the kubelet's device checkpoint there"
           if inv.mig is None else f"the kubelet lists no {', '.join(resources)} device there")
    return NodeAssessment(node.name, NodeState.UNKNOWN, mode=r.mode, way=way, kind=r.kind,
                          note=f"the pod asks for MIG devices, whose CDI names cannot be "
                               f"checked: {why}")


def _hami_mig_failure(node: NodeInfo, r: delivery.Resolution, created: list[str],
                      way: delivery.Way) -> NodeAssessment:
    """HAMi's MIG mode: its device plugin creates a MIG instance when it allocates a GPU and
    hands the container that instance's UUID (HAMi v2.10 ``GetContainerDeviceStrArray`` ->
    ``migMgr.EnsureAllocation``), while its CDI spec is written once, when the plugin
    starts (``plugin-manager.go``: ``CreateSpecFile``). No spec can name such a device in
    advance: wherever names are looked up in spec files, the container fails."""
    shown = ", ".join(created[:_SHOW_DEVICES])
    fix = (f"run HAMi's GPUs on {node.name} in hami-core mode, or hand GPUs through "
           f"NVIDIA_VISIBLE_DEVICES to a runtime that generates MIG devices just in time "
           f"(mode auto, or default kind {delivery.JIT_KIND})")
    return NodeAssessment(node.name, NodeState.MISSING, missing=r.missing, kind=r.kind,
                          mode=r.mode, way=way, fix=fix,
                          note=f"HAMi runs GPU(s) {shown} in MIG mode: it creates a MIG device "
                               f"when it allocates one, which no {r.kind} CDI spec on the node "
                               "can define")


def _mig_name(device: str) -> bool:
    return device.startswith("MIG-") or ":" in device


def assess_own_devices(node: NodeInfo, facts: PodFacts, handler: str | None,
                       check: NodeAssessment) -> NodeAssessment:
    """GPU containers that set NVIDIA_VISIBLE_DEVICES themselves: the NVIDIA runtime
    resolves their value instead of the device plugin's (``delivery.resolve_own``).
    ``check`` is the node judged by the plugin's devices; where every GPU container sets its
    own value and the plugin hands UUIDs that way, the plugin's UUIDs reach none of them."""
    inv = node.inventory
    if inv is None:
        return check
    own = [delivery.resolve_own(inv, v, handler, node.gpu_uuids(), facts.privileged_gpus)
           for v in facts.own_visible_devices]
    for r in own:
        if r is None or r.ok is True or (r.undelivered and check.way == delivery.CDI_DEVICES):
            continue  # (containerd still injects a CDI strategy's devices)
        state = NodeState.UNKNOWN if r.ok is None else NodeState.MISSING
        return worse(check, NodeAssessment(
            node.name, state, missing=r.missing, note=r.note, kind=r.kind, mode=r.mode,
            way=delivery.VISIBLE_DEVICES, undelivered=r.undelivered,
            fix="remove NVIDIA_VISIBLE_DEVICES from the pod's GPU containers: the device "
                "plugin sets it"))
    if check.state is not NodeState.OK and facts.only_own_visible_devices \
            and check.way == delivery.VISIBLE_DEVICES and not check.undelivered \
            and all(r is not None and r.ok for r in own):
        return NodeAssessment(node.name, NodeState.OK, way=delivery.VISIBLE_DEVICES,
                              note="every GPU container's own NVIDIA_VISIBLE_DEVICES resolves")
    return check


_SEVERITY = {NodeState.OK: 0, NodeState.UNKNOWN: 1, NodeState.MISSING: 2}


def worse(a: NodeAssessment, b: NodeAssessment | None) -> NodeAssessment:
    """Of two findings on one node, the one that says more: a missing device beats doubt,
    doubt beats fine (``a`` on a tie)."""
    return b if b is not None and _SEVERITY[b.state] > _SEVERITY[a.state] else a


def assess_annotations(node: NodeInfo, facts: PodFacts, plugin: nri.NRIPlugin
                       ) -> NodeAssessment | None:
    """The CDI devices the pod's own ``nvidia.cdi.k8s.io`` annotations name, on a node where
    the GPU Operator's NRI plugin injects them (``webhook.engine.stacks.nri``); None: nothing
    wrong, or nothing the plugin reads there."""
    inv = node.inventory
    if inv is None or not facts.nri_requests or not nri.runs_on(node.labels):
        return None
    s = nri.judge(facts.nri_requests, facts.namespace, plugin, inv.kinds,
                  inv.runtime.containerd_nri)
    if s is None:
        return None
    return NodeAssessment(node.name, NodeState.UNKNOWN if s.unknown else NodeState.MISSING,
                          missing=s.missing, note=s.note, way=nri.WAY,
                          undelivered=s.undelivered, fix=s.fix)


def _summary(checks: list[NodeAssessment]) -> str:
    parts = []
    for c in checks[:_SHOW_NODES]:
        if c.missing and not c.missing[0].endswith("<any device>"):
            devs = ", ".join(c.missing[:_SHOW_DEVICES])
            more = len(c.missing) - _SHOW_DEVICES
            parts.append(f"{c.node} lacks {devs}{f' (+{more} more)' if more > 0 else ''}")
        else:
            parts.append(f"{c.node}: {c.note}")
    if len(checks) > _SHOW_NODES:
        parts.append(f"and {len(checks) - _SHOW_NODES} more node(s)")
    return "; ".join(parts)


def fix_text(pool: Pool, checks: list[NodeAssessment], policy: Policy,
             runtime_classes: Mapping[str, str] | None = None) -> str:
    """The fix to name. A RuntimeClass is suggested only if the cluster has it (when gpupool
    knows the cluster's classes): the GPU Operator deletes its own with NRI injection."""
    if checks and all(c.fix for c in checks):
        return "; or ".join(dict.fromkeys(c.fix for c in checks))
    # HAMi's chart sets its plugin's strategy from devicePlugin.deviceListStrategy.
    strategy = ("HAMi's chart value devicePlugin.deviceListStrategy=cdi-annotations"
                if policy.is_hami_pool(pool.name) else
                f"pool {pool.name}'s device plugin to DEVICE_LIST_STRATEGY=cdi-annotations")
    if checks and all(c.note == delivery.UNPRIVILEGED_ENVVAR_IGNORED for c in checks):
        return ("set accept-nvidia-visible-devices-envvar-when-unprivileged = true in the "
                f"NVIDIA runtime's config.toml on those nodes, or set {strategy} (a CDI "
                "strategy, whose devices containerd delivers to any container)")
    if checks and all(c.undelivered for c in checks):
        return ("make the NVIDIA runtime containerd's default runtime on those nodes, or set "
                f"{strategy} (a CDI strategy, which containerd and the GPU Operator's NRI "
                "plugin deliver under any handler)")
    kind = next((c.kind for c in checks if c.kind), "")
    way = next((c.way for c in checks if c.way), delivery.VISIBLE_DEVICES)
    legacy = next((rc for rc in policy.non_cdi_runtime_classes
                   if runtime_classes is None or rc in runtime_classes), "")
    alt = f"run the pod with runtimeClassName {legacy}" if legacy else ""
    if way == delivery.VISIBLE_DEVICES:
        vendor, _, cls = kind.partition("/")
        parts = [f"define a CDI device per GPU UUID for kind {kind} on those nodes (e.g. "
                 f"nvidia-ctk cdi generate --vendor={vendor} --class={cls} "
                 f"--device-name-strategy=uuid --output=/var/run/cdi/{vendor}-{cls}-uuid.yaml)"]
        if alt:
            parts.append(alt)
        parts.append(f"or turn off the GPU Operator's CDI mode on pool {pool.name}'s nodes")
        return "; ".join(parts)
    return (f"make the device plugin on those nodes write its {kind} CDI spec for every GPU "
            f"the node has (DEVICE_LIST_STRATEGY cdi-annotations/cdi-cri; restart it after a "
            f"GPU is replaced)")


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
    return Verdicts(
        total=len(verdicts), unfit=unfit, ok=len(judged) - len(failing),
        missing=[c for c in failing if c.state == NodeState.MISSING],
        unknown=[c for c in failing if c.state == NodeState.UNKNOWN],
        findings=[NodeFinding(c.node, c.missing, c.note) for c in failing][:MAX_FINDINGS],
        reachable=bool(placed) or not fit,
        every_failing=tuple(every_failing))


def _why(pool: Pool, missing: list[NodeAssessment]) -> str:
    kind = next((c.kind for c in missing if c.kind), "")
    mode = next((c.mode for c in missing if c.mode), None)
    way = next((c.way for c in missing if c.way), delivery.VISIBLE_DEVICES)
    if way == nri.WAY:
        return (f"The GPU Operator's NRI plugin has containerd inject the CDI devices its "
                f"{nri.DOMAIN} annotations name, which containerd resolves from the node's "
                f"CDI specs")
    if way == delivery.CDI_DEVICES:
        return (f"Its device plugin hands containers CDI devices {kind}=GPU-<uuid>, which "
                f"containerd resolves from the node's CDI specs whatever the runtime's mode")
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
}


def verdicts(facts: PodFacts, pool_name: str, view: ClusterView, policy: Policy) -> Verdicts:
    """Which nodes of the pool would fail this pod, and why: the one answer the admission
    decision, steering and ``doctor`` share. Kept per pod shape as nodes change
    (``ClusterView.fold``): the pods of one workload pay for the scan of their candidates
    once, and a node change costs that node alone."""
    pool = policy.by_name[pool_name]
    node_name = facts.node_name
    hami_pool = policy.is_hami_pool(pool_name)
    handler = view.handler_of(facts.runtime_class)
    demand: list[cand.GPUDemand] = []  # worked out on the first node that needs it

    def demand_of() -> cand.GPUDemand:
        if not demand:
            demand.append(cand.demand_of(facts, hami_pool))
        return demand[0]

    extended = podclaims.demand(facts, view).extended
    # The devices a pod names itself (only where its pool's devices are checked at all).
    own = bool(facts.own_visible_devices) and pool.cdi.checked
    nri_plugin = view.operator_nri() if facts.nri_requests and pool.cdi.checked else None

    def per_node(n: NodeInfo) -> _NodeVerdict | None:
        """This node's part in the verdicts (None: not a candidate at all, or one where DRA,
        not a device plugin, serves every GPU resource the pod asks for)."""
        if extended and all(podclaims.dra_served(n, r, extended) for r in facts.gpus):
            return None
        if not facts.unsteered.reaches(n) or not (node_name or cand.in_pool(n, pool_name, policy)):
            return None
        why = cand.unfit_reason(n, demand_of())
        if why:
            return (why, False, None)
        matches = facts.placement.matches(n.labels, n.name)
        check = assess_node(n, pool, facts.runtime_class, handler, demand_of(), policy,
                            facts.privileged_gpus, declared_way(n, view, hami_pool))
        if own:
            check = assess_own_devices(n, facts, handler, check)
        if nri_plugin is not None:
            check = worse(check, assess_annotations(n, facts, nri_plugin))
        if check.state is NodeState.OK:
            return _FIT_OK_REACHABLE if matches else _FIT_OK_UNREACHABLE
        return (None, matches, check)

    key = ("cdi", policy.cache_key, pool_name,
           cand.shape_key(facts.placement, (facts.runtime_class, facts.demand_key, extended,
                                       facts.privileged_gpus, facts.nri_requests,
                                       facts.namespace if facts.nri_requests else None,
                                       facts.own_visible_devices)))
    fold = view.fold(key, per_node,
                     lambda: cand.candidates(facts.unsteered, pool_name, view, policy))
    summary: Verdicts = fold.derive(_summarise)
    return summary


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
    return Finding.MISSING


def _texts(finding: Finding, s: Verdicts, who: str, pool: Pool, policy: Policy,
           runtime_classes: Mapping[str, str] | None) -> tuple[str, str]:
    """The decision's message, and the warning an allowed pod gets."""
    name, failing = pool.name, len(s.missing) + len(s.unknown)
    unfit = "; ".join(f"{n}: {why}" for n, why in s.unfit[:_SHOW_NODES])
    match finding:
        case Finding.NO_CANDIDATES:
            return (f"{who}: no node of pool {name} matches its nodeName, nodeSelector, "
                    f"affinity and tolerations; its CDI devices were not checked",
                    f"gpupool: no candidate node in pool {name} yet; CDI devices not checked")
        case Finding.NO_ALLOWED_GPU:
            return (f"{who} asks for GPUs its HAMi annotations allow, but no candidate node in "
                    f"pool {name} has them: {unfit}", "")
        case Finding.NO_GPU_FIT:
            return (f"{who}: no node of pool {name} has the GPUs it asks for: {unfit}",
                    f"gpupool: no node in pool {name} has the GPUs this pod asks for yet")
        case Finding.STEERED_OUT:
            return (f"{who}: its node affinity leaves it no node of pool {name}: the nodes "
                    f"where its GPUs resolve are excluded, and {failing} are steered off "
                    f"because they would fail it: {s.failing_text}",
                    f"gpupool: no node of pool {name} is left to this pod; it stays pending")
        case Finding.SOME_FAIL:
            return (f"{who}: {failing} of {s.checked} candidate nodes may fail it: "
                    f"{s.failing_text}",
                    f"gpupool: {failing} of {s.checked} candidate nodes lack CDI devices this "
                    f"pod needs; see gpupool doctor")
        case Finding.UNKNOWN:
            if OUTCOMES[finding].denies(policy):
                return (f"{who}: CDI inventory unknown on every candidate node of pool "
                        f"{name}: {_summary(s.unknown)}", "")
            return (f"{who}: CDI devices not verified: {s.failing_text}",
                    f"gpupool: CDI inventory unknown on {len(s.unknown)} candidate node(s); "
                    "devices not verified")
        case Finding.NOT_DELIVERED:
            return (f"{who} would start without its GPUs on every candidate node of pool "
                    f"{name}: {s.failing_text}. "
                    f"Fix: {fix_text(pool, s.missing, policy, runtime_classes)}", "")
        case Finding.MISSING:
            return (f"{who} would fail on its node with 'unresolvable CDI devices': no "
                    f"candidate node of pool {name} defines the CDI devices it needs: "
                    f"{s.failing_text}. {_why(pool, s.missing)}. "
                    f"Fix: {fix_text(pool, s.missing, policy, runtime_classes)}", "")


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


def pod_decision(facts: PodFacts, pool_name: str, view: ClusterView, policy: Policy
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
        if policy.on_no_node_view is OnFinding.DENY:
            d = deny(Reason.NODE_VIEW_MISSING,
                     f"{facts.who}: CDI devices cannot be checked: {why} (onNoNodeView: "
                     "deny); retry in a moment, or see the webhook's /readyz?verbose",
                     gpu=True, pool=pool_name)
        else:
            d = allow(Reason.ROUTED, gpu=True, pool=pool_name,
                      message=f"{facts.who}: CDI devices not checked: {why}")
            d.warn(f"gpupool: CDI devices not checked: {why}")
        d.unchecked = "no-nodes" if view.synced else "not-synced"
        return d
    s = verdicts(facts, pool_name, view, policy)
    if not s.total and podclaims.demand(facts, view).extended:
        return None  # DRA serves it on every node it could reach: ``allocation`` judges
    finding = _finding(s, facts, policy.is_hami_pool(pool_name), policy)
    if finding is None:
        return None
    outcome = OUTCOMES[finding]
    message, warning = _texts(finding, s, facts.who, pool, policy, view.runtime_classes())
    if outcome.denies(policy):
        return deny(outcome.reason, message, gpu=True, pool=pool_name, nodes=s.findings)
    d = allow(Reason.ROUTED, gpu=True, pool=pool_name, nodes=s.findings, message=message)
    d.warn(warning)
    return d


def node_verdict(node: NodeInfo, view: ClusterView, policy: Policy,
                 resource: str | None = None) -> NodeAssessment:
    """How a pod of the node's pool that asks for nothing in particular (or for one of
    ``resource``) fares on the node: ``doctor``'s row, from the same verdicts admission and
    steering use."""
    pool_name = policy.pool_for_label_value(node.labels.get(policy.pool_label))
    spec: dict[str, object] = {"nodeName": node.name}
    if resource is not None:
        spec["containers"] = [{"name": "probe", "resources": {"limits": {resource: 1}}}]
    probe = PodFacts.parse({"spec": spec}, None, policy)
    s = verdicts(probe, pool_name, view, policy)
    failing = s.missing + s.unknown
    return failing[0] if failing else NodeAssessment(node.name, NodeState.OK)
