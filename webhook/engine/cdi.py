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

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from webhook.api import delivery
from webhook.engine import affinity
from webhook.engine import candidates as cand
from webhook.engine.cluster import ClusterView, NodeInfo
from webhook.engine.decision import Decision, NodeFinding, Reason, allow, deny
from webhook.engine.policy import Policy, Pool

OK, MISSING, UNKNOWN = "ok", "missing", "unknown"
_SHOW_NODES = 3
#: Nodes listed in a decision (and so in its audit record); messages give the totals.
MAX_FINDINGS = 20
_SHOW_DEVICES = 3
#: Why no CDI check ran when the view holds no node at all.
NO_NODES = "gpupool knows no nodes"


@dataclass(frozen=True)
class NodeAssessment:
    node: str
    state: str  # ok | missing | unknown
    missing: tuple[str, ...] = ()
    note: str = ""
    kind: str = ""
    mode: str | None = None
    way: str = ""


@dataclass(frozen=True)
class _Summary:
    total: int  # nodes the pod's placement allows
    unfit: list[tuple[str, str]]  # of those, nodes its GPU demand rules out, and why
    ok: int
    missing: list[NodeAssessment]
    unknown: list[NodeAssessment]
    findings: list[NodeFinding]
    #: True when these are the nodes the pod can reach with its node affinity as it stands;
    #: False when that leaves none and they are the nodes gpupool's steering kept it off
    reachable: bool = True

    @cached_property
    def failing_text(self) -> str:
        """The nodes that may fail, as messages quote them; memoised with the summary, since
        every pod of one shape repeats it."""
        return _summary(self.missing + self.unknown)


def assess_node(node: NodeInfo, pool: Pool, runtime_class: str | None,
                demand: cand.Demand, policy: Policy) -> NodeAssessment:
    """Will every GPU the device plugin could hand this pod resolve on this node?"""
    req = pool.cdi
    if not req.checked:
        return NodeAssessment(node.name, OK)
    inv = node.inventory
    if inv is None:
        note = node.inventory_error or "no CDI inventory published (is gpupool's agent running?)"
        return NodeAssessment(node.name, UNKNOWN, note=note)
    way = req.delivery
    if way == delivery.DETECT:
        way = delivery.detected_way(inv, req.device_kind)
    if way == delivery.VISIBLE_DEVICES and runtime_class in policy.non_cdi_runtime_classes:
        return NodeAssessment(node.name, OK, note=f"RuntimeClass {runtime_class} uses no CDI",
                              way=way)
    gpus = cand.eligible_gpus(node, demand)
    if not gpus:
        return NodeAssessment(node.name, UNKNOWN, way=way,
                              note="no GPU UUIDs known (no driver list in the inventory, no "
                                   "hami.io/node-nvidia-register annotation)")
    r = delivery.resolve(inv, way, gpus, runtime_class, req.device_kind)
    if r.ok is None:
        return NodeAssessment(node.name, UNKNOWN, note=r.note, mode=r.mode, way=way)
    return NodeAssessment(node.name, OK if r.ok else MISSING, missing=r.missing, note=r.note,
                          kind=r.kind, mode=r.mode, way=way)


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


def fix_text(pool: Pool, checks: list[NodeAssessment], policy: Policy) -> str:
    kind = next((c.kind for c in checks if c.kind), "")
    way = next((c.way for c in checks if c.way), delivery.VISIBLE_DEVICES)
    legacy = policy.non_cdi_runtime_classes[0] if policy.non_cdi_runtime_classes else ""
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


def _summarise(verdicts: dict[str, _NodeVerdict]) -> _Summary:
    """Judged on the nodes the pod can reach as it stands. When gpupool's own steering left it
    none, on the nodes it was kept off: a pool whose every node is broken is denied, not left
    pending."""
    unfit = sorted((name, why) for name, (why, _, _) in verdicts.items() if why)
    fit = [v for v in verdicts.values() if not v[0]]
    placed = [v for v in fit if v[1]]
    judged = placed or fit
    failing = sorted((c for _, _, c in judged if c is not None), key=lambda c: c.node)
    return _Summary(
        total=len(verdicts), unfit=unfit, ok=len(judged) - len(failing),
        missing=[c for c in failing if c.state == MISSING],
        unknown=[c for c in failing if c.state == UNKNOWN],
        findings=[NodeFinding(c.node, c.missing, c.note) for c in failing][:MAX_FINDINGS],
        reachable=bool(placed) or not fit)


def _why(pool: Pool, missing: list[NodeAssessment]) -> str:
    kind = next((c.kind for c in missing if c.kind), "")
    mode = next((c.mode for c in missing if c.mode), None)
    way = next((c.way for c in missing if c.way), delivery.VISIBLE_DEVICES)
    if way == delivery.CDI_DEVICES:
        return (f"Its device plugin hands containers CDI devices {kind}=GPU-<uuid>, which "
                f"containerd resolves from the node's CDI specs whatever the runtime's mode")
    return (f"The node runtime (mode {mode}, default kind {kind}) resolves "
            f"NVIDIA_VISIBLE_DEVICES=GPU-<uuid> as CDI devices {kind}=GPU-<uuid>")


class _PodFacts:
    """What only a fold miss or a node change needs, worked out at most once per review
    (most reviews hit a kept fold and need neither)."""

    def __init__(self, pod: Mapping[str, Any], spec: Mapping[str, Any], policy: Policy,
                 hami_pool: bool) -> None:
        self._pod, self._spec, self._policy, self._hami_pool = pod, spec, policy, hami_pool

    @cached_property
    def demand(self) -> cand.Demand:
        return cand.demand_of(self._pod, self._policy, self._hami_pool)

    @cached_property
    def unsteered(self) -> Mapping[str, Any]:
        return affinity.without_steering(self._spec)


def pod_decision(pod: Mapping[str, Any], who: str, pool_name: str, view: ClusterView,
                 policy: Policy) -> Decision | None:
    """None: nothing to say. Otherwise a Decision carrying a denial or warnings and nodes."""
    pool = policy.by_name[pool_name]
    if not pool.cdi.checked:
        return None
    if len(view) == 0:
        # No node source (serve --no-cluster, check without --cluster): say so on every GPU
        # pod rather than let an unchecked pod read as a checked one.
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name,
                  message=f"{who}: CDI devices not checked: {NO_NODES}")
        d.warn(f"gpupool: CDI devices not checked: {NO_NODES}")
        return d
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    runtime_class = spec.get("runtimeClassName") if isinstance(spec.get("runtimeClassName"),
                                                               str) else None
    hami_pool = policy.is_hami_pool(pool_name)

    facts = _PodFacts(pod, spec, policy, hami_pool)
    node_name = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None

    def per_node(n: NodeInfo) -> _NodeVerdict | None:
        """This node's part in the decision (None: not a candidate at all)."""
        if node_name:
            if n.name != node_name or not affinity.node_matches(facts.unsteered, n.labels, n.name):
                return None
        elif not (n.is_gpu_node(policy) and policy.pool_for_label_value(
                n.labels.get(policy.pool_label)) == pool_name
                and cand.schedulable(facts.unsteered, n)):
            return None
        why = cand.unfit_reason(n, facts.demand)
        if why:
            return (why, False, None)
        matches = affinity.node_matches(spec, n.labels, n.name)
        check = assess_node(n, pool, runtime_class, facts.demand, policy)
        if check.state == OK:
            return _FIT_OK_REACHABLE if matches else _FIT_OK_UNREACHABLE
        return (None, matches, check)

    # Kept per pod shape as nodes change (ClusterView.fold): the pods of one workload pay for
    # the scan of their candidates once, and a node change costs that node alone.
    key = ("cdi", policy.cache_key, pool_name,
           cand.shape_key(spec, (runtime_class, cand.demand_key(pod))))
    fold = view.fold(key, per_node,
                     lambda: cand.candidates(facts.unsteered, pool_name, view, policy))
    summary: _Summary = fold.derive(_summarise)
    findings = list(summary.findings)
    missing, unknown = summary.missing, summary.unknown
    if not summary.total:
        msg = (f"{who}: no node of pool {pool_name} matches its nodeName, nodeSelector, "
               f"affinity and tolerations; its CDI devices were not checked")
        if policy.on_no_candidates == "deny":
            return deny(Reason.NO_CANDIDATE_NODES, msg, gpu=True, pool=pool_name)
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, message=msg)
        d.warn(f"gpupool: no candidate node in pool {pool_name} yet; CDI devices not checked")
        return d
    checked = summary.ok + len(missing) + len(unknown)
    if not checked:
        shown = "; ".join(f"{n}: {why}" for n, why in summary.unfit[:_SHOW_NODES])
        if facts.demand.narrows:
            return deny(Reason.GPU_UUID_UNAVAILABLE,
                        f"{who} asks for GPUs its HAMi annotations allow, but no candidate "
                        f"node in pool {pool_name} has them: {shown}", gpu=True,
                        pool=pool_name)
        msg = f"{who}: no node of pool {pool_name} has the GPUs it asks for: {shown}"
        if policy.on_no_candidates == "deny":
            return deny(Reason.NO_CANDIDATE_NODES, msg, gpu=True, pool=pool_name)
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, message=msg)
        d.warn(f"gpupool: no node in pool {pool_name} has the GPUs this pod asks for yet")
        return d
    if summary.ok and not summary.reachable:
        msg = (f"{who}: its node affinity leaves it no node of pool {pool_name}: the nodes "
               f"where its GPUs resolve are excluded, and {len(missing) + len(unknown)} are "
               f"steered off because they would fail it: {summary.failing_text}")
        if policy.on_no_candidates == "deny":
            return deny(Reason.NO_CANDIDATE_NODES, msg, gpu=True, pool=pool_name,
                        nodes=findings)
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, nodes=findings, message=msg)
        d.warn(f"gpupool: no node of pool {pool_name} is left to this pod; it stays pending")
        return d
    if summary.ok:
        if not missing and not unknown:
            return None
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, nodes=findings,
                  message=f"{who}: {len(missing) + len(unknown)} of {checked} candidate "
                          f"nodes may fail it: {summary.failing_text}")
        d.warn(f"gpupool: {len(missing) + len(unknown)} of {checked} candidate nodes lack "
               f"CDI devices this pod needs; see gpupool doctor")
        return d
    if unknown and (policy.on_missing_inventory == "warn" or not missing):
        if policy.on_missing_inventory == "deny" or policy.require_inventory:
            return deny(Reason.INVENTORY_MISSING,
                        f"{who}: CDI inventory unknown on every candidate node of pool "
                        f"{pool_name}: {_summary(unknown)}", gpu=True, pool=pool_name,
                        nodes=findings)
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, nodes=findings,
                  message=f"{who}: CDI devices not verified: {summary.failing_text}")
        d.warn(f"gpupool: CDI inventory unknown on {len(unknown)} candidate node(s); "
               "devices not verified")
        return d
    return deny(Reason.CDI_DEVICE_MISSING,
                f"{who} would fail on its node with 'unresolvable CDI devices': no candidate "
                f"node of pool {pool_name} defines the CDI devices it needs: "
                f"{summary.failing_text}. {_why(pool, missing)}. "
                f"Fix: {fix_text(pool, missing, policy)}",
                gpu=True, pool=pool_name, nodes=findings)
