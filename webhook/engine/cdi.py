"""What CDI devices a pod will need on a node, and whether its candidate nodes have them.

This is the check the project exists for: HAMi hands a container ``GPU-<uuid>`` in
``NVIDIA_VISIBLE_DEVICES``; on a node whose NVIDIA runtime runs in CDI mode that becomes the
CDI device ``<default-kind>=GPU-<uuid>``, which must be defined by some spec on the node or
container creation fails long after admission. Pure functions: node inventories come from
the cluster view.

Doubt never denies: a node without inventory, an unknown runtime mode or unknown GPU UUIDs
count as "unknown", which the policy turns into a warning by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from webhook.api.inventory import DEFAULT_KIND
from webhook.engine import candidates as cand
from webhook.engine import hami, objects
from webhook.engine.cluster import ClusterView, NodeInfo
from webhook.engine.decision import Decision, NodeFinding, Reason, allow, deny
from webhook.engine.policy import Policy, Pool

OK, MISSING, UNKNOWN = "ok", "missing", "unknown"
_SHOW_NODES = 3
#: Nodes listed in a decision (and so in its audit record); messages give the totals.
MAX_FINDINGS = 20
_SHOW_DEVICES = 3


@dataclass(frozen=True)
class _Summary:
    total: int
    ok: int
    missing: list[NodeAssessment]
    unknown: list[NodeAssessment]
    findings: list[NodeFinding]

    @cached_property
    def failing_text(self) -> str:
        """The nodes that may fail, as messages quote them; memoised with the summary, since
        every pod of one shape repeats it."""
        return _summary(self.missing + self.unknown)


@dataclass(frozen=True)
class NodeAssessment:
    node: str
    state: str  # ok | missing | unknown
    missing: tuple[str, ...] = ()
    note: str = ""
    kind: str = ""
    mode: str | None = None


def _pod_uuids(meta: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    ann = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    return (hami.uuid_list(ann.get(hami.USE_UUID_ANNOTATION)),
            hami.uuid_list(ann.get(hami.NOUSE_UUID_ANNOTATION)))


def assess_node(node: NodeInfo, pool: Pool, runtime_class: str | None,
                use: tuple[str, ...], nouse: tuple[str, ...]) -> NodeAssessment:
    req = pool.cdi
    inv = node.inventory
    if req.require == "none":
        return NodeAssessment(node.name, OK)
    if inv is None:
        note = node.inventory_error or "no CDI inventory published (is gpupool's agent running?)"
        return NodeAssessment(node.name, UNKNOWN, note=note)
    mode = inv.runtime.effective_mode(runtime_class)
    if req.when == "runtimeUsesCDI":
        if mode is None:
            return NodeAssessment(node.name, UNKNOWN, note="runtime mode unknown", mode=mode)
        if mode != "cdi":
            return NodeAssessment(node.name, OK, note=f"runtime mode {mode}", mode=mode)
    kind = (inv.runtime.default_kind or DEFAULT_KIND) if req.kind == "runtimeDefault" else req.kind
    have = inv.kinds.get(kind, frozenset())
    if req.require == "anyDevice":
        if have:
            return NodeAssessment(node.name, OK, kind=kind, mode=mode)
        return NodeAssessment(node.name, MISSING, missing=(f"{kind}=<any device>",),
                              kind=kind, mode=mode, note=f"no device of kind {kind}")
    uuids = [u for u in node.gpu_uuids() if u not in nouse]
    if use:
        uuids = [u for u in uuids if u in use]
    if not uuids:
        note = ("none of the GPUs named in nvidia.com/use-gpuuuid is on this node" if use
                else "no GPU UUIDs known (no hami.io/node-nvidia-register annotation)")
        return NodeAssessment(node.name, MISSING if use else UNKNOWN, note=note, kind=kind,
                              mode=mode)
    missing = tuple(f"{kind}={u}" for u in uuids if u not in have)
    if missing:
        return NodeAssessment(node.name, MISSING, missing=missing, kind=kind, mode=mode)
    return NodeAssessment(node.name, OK, kind=kind, mode=mode)


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
    legacy = policy.non_cdi_runtime_classes[0] if policy.non_cdi_runtime_classes else ""
    alt = f"run the pod with runtimeClassName {legacy}" if legacy else ""
    if pool.cdi.require == "perGPU":
        vendor, _, cls = kind.partition("/")
        parts = [f"define a CDI device per GPU UUID for kind {kind} on those nodes (e.g. "
                 f"nvidia-ctk cdi generate --vendor={vendor} --class={cls} "
                 f"--device-name-strategy=uuid --output=/var/run/cdi/{vendor}-{cls}-uuid.yaml)"]
        if alt:
            parts.append(alt)
        parts.append(f"or turn off the GPU Operator's CDI mode on pool {pool.name}'s nodes")
        return "; ".join(parts)
    return (f"make the device plugin on those nodes write its {kind} CDI spec "
            f"(DEVICE_LIST_STRATEGY cdi-annotations/cdi-cri){'; or ' + alt if alt else ''}")


def pod_decision(pod: Mapping[str, Any], who: str, pool_name: str, view: ClusterView,
                 policy: Policy) -> Decision | None:
    """None: nothing to say. Otherwise a Decision carrying a denial or warnings and nodes."""
    pool = policy.by_name[pool_name]
    if pool.cdi.require == "none" or len(view) == 0:
        return None
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    meta = objects.meta_of(pod)
    runtime_class = spec.get("runtimeClassName") if isinstance(spec.get("runtimeClassName"),
                                                               str) else None
    if runtime_class in policy.non_cdi_runtime_classes:
        return None
    use, nouse = _pod_uuids(meta)

    def compute() -> _Summary:
        checks = [assess_node(n, pool, runtime_class, use, nouse)
                  for n in cand.candidates(spec, pool_name, view, policy)]
        return _Summary(
            total=len(checks), ok=sum(1 for c in checks if c.state == OK),
            missing=[c for c in checks if c.state == MISSING],
            unknown=[c for c in checks if c.state == UNKNOWN],
            findings=[NodeFinding(c.node, c.missing, c.note) for c in checks
                      if c.state != OK][:MAX_FINDINGS])

    # Memoised per pod shape and cluster version: the pods of one workload pay for the scan
    # of their candidates once, not once per admission request.
    key = ("cdi", policy.cache_key, pool_name, cand.shape_key(spec, (runtime_class, use, nouse)))
    summary = view.memo(key, compute)
    findings = list(summary.findings)
    checks_total, ok = summary.total, summary.ok
    missing, unknown = summary.missing, summary.unknown
    if not checks_total:
        msg = (f"{who}: no node of pool {pool_name} matches its nodeName, nodeSelector, "
               f"affinity and tolerations; its CDI devices were not checked")
        if policy.on_no_candidates == "deny":
            return deny(Reason.NO_CANDIDATE_NODES, msg, gpu=True, pool=pool_name)
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, message=msg)
        d.warn(f"gpupool: no candidate node in pool {pool_name} yet; CDI devices not checked")
        return d
    if ok:
        if not missing and not unknown:
            return None
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, nodes=findings,
                  message=f"{who}: {len(missing) + len(unknown)} of {checks_total} candidate "
                          f"nodes may fail it: {summary.failing_text}")
        d.warn(f"gpupool: {len(missing) + len(unknown)} of {checks_total} candidate nodes lack "
               f"CDI devices this pod needs; see gpupool doctor")
        return d
    if use and not unknown and all(not c.missing for c in missing):
        return deny(Reason.GPU_UUID_UNAVAILABLE,
                    f"{who} asks for GPUs {', '.join(use)} (nvidia.com/use-gpuuuid) but no "
                    f"candidate node in pool {pool_name} has any of them: "
                    f"{_summary(missing)}", gpu=True, pool=pool_name, nodes=findings)
    if unknown and (policy.on_missing_inventory == "warn" or not missing):
        if policy.on_missing_inventory == "deny":
            return deny(Reason.INVENTORY_MISSING,
                        f"{who}: CDI inventory unknown on every candidate node of pool "
                        f"{pool_name}: {_summary(unknown)}", gpu=True, pool=pool_name,
                        nodes=findings)
        d = allow(Reason.ROUTED, gpu=True, pool=pool_name, nodes=findings,
                  message=f"{who}: CDI devices not verified: {_summary(missing + unknown)}")
        d.warn(f"gpupool: CDI inventory unknown on {len(unknown)} candidate node(s); "
               "devices not verified")
        return d
    kind = next((c.kind for c in missing if c.kind), "")
    mode = next((c.mode for c in missing if c.mode), None)
    why = (f"the node runtime (mode {mode}, default kind {kind}) resolves HAMi's "
           f"NVIDIA_VISIBLE_DEVICES=GPU-<uuid> as CDI devices {kind}=GPU-<uuid>"
           if pool.cdi.require == "perGPU" else f"pods of pool {pool_name} need a {kind} device")
    return deny(Reason.CDI_DEVICE_MISSING,
                f"{who} would fail on its node with 'unresolvable CDI devices': no candidate "
                f"node of pool {pool_name} defines the CDI devices it needs: "
                f"{_summary(missing + unknown)}. {why[0].upper() + why[1:]}. "
                f"Fix: {fix_text(pool, missing, policy)}",
                gpu=True, pool=pool_name, nodes=findings)
