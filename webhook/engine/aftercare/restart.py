"""A running pod's next container start, as the kubelet will make it.

The kubelet allocates a container's devices once, when it admits the pod, and hands a
restarted container that same answer again, never a new one: Kubernetes v1.35
``pkg/kubelet/cm/devicemanager/manager.go`` ``devicesToAllocate`` returns nothing to
allocate for a container that already holds its devices, and ``GetDeviceRunContainerOptions``
builds the container's options from ``podDevices.deviceRunContainerOptions``, the cached
``ContainerAllocateResponse`` (the same device ids, environment, annotations and CDI names).
Everything else is the node as it is now: the runtime's mode and default kind, the CDI specs,
containerd's handlers (a container is created with its pod sandbox's handler, looked up in
containerd's config each time: containerd v2 ``internal/cri/server/container_create.go``,
``GetSandboxRuntime``) and the NRI plugin, which reads the pod's annotations again.

So a started pod is judged by what it holds: the agent's ``gpupool.io/held-devices``
(``webhook.api.held``, read from the kubelet's checkpoint), else, for HAMi's pods, the GPUs
its scheduler recorded in ``hami.io/vgpu-devices-allocated``, judged both ways HAMi's plugin
can hand them (which one it used is recorded nowhere else), deciding only where both agree;
the answer says which one decided. A pod none of whose containers has started and that the
kubelet holds nothing for gets a fresh allocation: its admission answer stands. A started
pod whose cached answer cannot be read is doubt, with the reason.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.api import delivery
from webhook.api.held import Held, HeldError, parse_held
from webhook.api.inventory import Inventory
from webhook.api.said import Said, said
from webhook.engine.checks import nodechecks, nriannotations, owndevices
from webhook.engine.checks.assessment import (
    Ask,
    Combine,
    NodeAssessment,
    NodeCheck,
    NodeState,
    no_inventory,
)
from webhook.engine.core.decision import Reason
from webhook.engine.core.objects import as_mapping, meta_of
from webhook.engine.core.policy import Policy
from webhook.engine.placement import candidates as cand
from webhook.engine.pod import podclaims
from webhook.engine.pod.podfacts import PodFacts, who_of
from webhook.engine.stacks import hami
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


class Basis(StrEnum):
    """Where what a pod holds was read: said in every restart answer."""

    CHECKPOINT = "checkpoint"  # the kubelet's, published by gpupool's agent
    HAMI = "hami"  # HAMi's scheduler's record (``hami.ALLOCATED_ANNOTATION``)


@dataclass(frozen=True)
class Cached:
    entries: tuple[Held, ...]
    basis: Basis
    #: the same devices handed the other way (HAMi's record does not say which way its
    #: plugin used): the answer decides only where both ways agree
    otherwise: tuple[Held, ...] | None = None


@dataclass(frozen=True)
class RestartAnswer:
    """What the pod's next container start on its node finds."""

    state: NodeState
    reason: str
    #: what it finds, as data (``wording.words`` words it)
    said: Said
    missing: tuple[str, ...] = ()
    basis: Basis | None = None


def started(pod: Mapping[str, Any]) -> bool:
    """Has a container of the pod been created (running, exited, or restarted)? The kubelet
    allocated its devices before that."""
    status = as_mapping(pod.get("status"))
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or ():
            if not isinstance(cs, Mapping):
                continue
            state, last = as_mapping(cs.get("state")), as_mapping(cs.get("lastState"))
            if cs.get("containerID") or "running" in state or "terminated" in state \
                    or "terminated" in last or (isinstance(cs.get("restartCount"), int)
                                                and cs["restartCount"] > 0):
                return True
    return status.get("phase") == "Running"


def cached_answer(pod: Mapping[str, Any], node: NodeInfo) -> Cached | Said | None:
    """What the pod holds on its node (``Cached``); why it cannot be known for a started
    pod (``Said``); None: nothing held and nothing started, so its first start allocates
    afresh."""
    meta = meta_of(pod)
    raw_uid = meta.get("uid")
    uid = raw_uid if isinstance(raw_uid, str) else ""
    why: Said | None = None
    if node.held is None:
        why = said("held.notPublished", node=node.name)
    else:
        try:
            held = parse_held(node.held)
        except HeldError as exc:
            held, why = None, said("held.unreadable", node=node.name, error=str(exc))
        if held is not None:
            if held.error:
                why = said("held.checkpointUnreadable", node=node.name, error=held.error)
            elif uid in held.pods:
                return Cached(held.pods[uid], Basis.CHECKPOINT)
            elif uid in held.left_out:
                why = said("held.leftOut", node=node.name)
            else:
                why = said("held.nothing", node=node.name, when=held.observed_at)
    from_hami = _hami_allocated(pod)
    if from_hami is not None:
        return from_hami
    return why if started(pod) else None


def _hami_allocated(pod: Mapping[str, Any]) -> Cached | None:
    """The GPUs HAMi's scheduler recorded for the pod's containers, handed both ways HAMi's
    device plugin can hand them (how it handed them when the pod started is not recorded
    anywhere but the kubelet's checkpoint); None: no such record."""
    ann = as_mapping(meta_of(pod).get("annotations"))
    per_container = hami.allocated(ann.get(hami.ALLOCATED_ANNOTATION))
    if per_container is None:
        return None
    names = [c.get("name") for c in as_mapping(pod.get("spec")).get("containers") or ()
             if isinstance(c, Mapping)]
    as_uuids, as_cdi = [], []
    for name, uuids in zip(names, per_container, strict=False):
        if not uuids or not isinstance(name, str):
            continue
        as_uuids.append(Held(name, hami.COUNT_RESOURCE, uuids, ",".join(uuids)))
        as_cdi.append(Held(name, hami.COUNT_RESOURCE, uuids, cdi_devices=tuple(
            f"{delivery.DEVICE_PLUGIN_KIND}={u}" for u in uuids)))
    return Cached(tuple(as_uuids), Basis.HAMI, tuple(as_cdi))


def judge_held(node: NodeInfo, entries: tuple[Held, ...], runtime_class: str | None,
               handler: str | None, privileged: bool, own_only: bool = False
               ) -> NodeAssessment:
    """Would every container's cached answer resolve on the node as it is now?
    ``own_only``: every GPU container sets NVIDIA_VISIBLE_DEVICES itself, which replaces the
    plugin's variable (``checks.owndevices`` judges that value after this)."""
    inv = node.inventory
    if inv is None:
        return NodeAssessment(node.name, NodeState.UNKNOWN, note=no_inventory(node))
    rt = inv.runtime
    if runtime_class and handler and rt.runtime_handlers is not None \
            and handler not in rt.runtime_handlers:
        return NodeAssessment(
            node.name, NodeState.MISSING, missing=(f"runtime handler {handler}",),
            reason=Reason.RUNTIME_HANDLER_MISSING,
            note=said("restart.handlerGone", handler=handler, runtime_class=runtime_class),
            fix=said("restart.handlerGoneFix", handler=handler, node=node.name))
    rc_handler = handler if runtime_class else None
    resolved = [(h, _resolved_names(inv, h, rc_handler)) for h in entries]
    gone = _gone(node, tuple(h for h, names in resolved if _reaches(h, names, own_only)))
    if gone:
        return NodeAssessment(node.name, NodeState.MISSING, missing=gone,
                              reason=Reason.UNKNOWN_DEVICE,
                              note=said("restart.deviceGone", missing=gone))
    gpus = (*node.gpu_uuids(), *(m for ids in (inv.mig or {}).values() for m in ids))
    doubt: NodeAssessment | None = None
    ways: set[str] = set()
    for h, names in resolved:
        found = _judge_one(node, h, names, rc_handler, gpus, privileged)
        if found.state is NodeState.MISSING:
            return found
        if found.state is NodeState.UNKNOWN and doubt is None:
            doubt = found
        ways.add(found.way)
    # The way the answers came: where every one was CDI names something resolves, the
    # container's own variable decides nothing (``checks.owndevices``).
    way = delivery.CDI_DEVICES if ways == {delivery.CDI_DEVICES} else \
        delivery.VISIBLE_DEVICES if ways else ""
    return doubt or NodeAssessment(node.name, NodeState.OK, way=way)


#: The cached CDI names something resolves at the restart, and, where containerd resolves
#: none of them, who would have and why not (``_resolved_names``).
Resolved = tuple[tuple[str, ...], tuple[delivery.NamesPath, Said] | None]


def _reaches(h: Held, resolved: Resolved, own_only: bool) -> bool:
    """Do the devices this answer holds reach the restarted container? Not where its CDI
    names reach no resolver and nothing else names them, nor where the plugin's variable is
    all that names them and the container's own replaces it."""
    names, lost = resolved
    if names:
        return True
    if h.visible_devices is not None:
        return not own_only
    return lost is None


def _gone(node: NodeInfo, entries: tuple[Held, ...]) -> tuple[str, ...]:
    """The held GPUs and MIG devices the node no longer has: a GPU its driver does not list
    now (replaced, or fallen off the bus), a MIG device on such a GPU, or one the device
    plugin no longer registers (the kubelet's list, where the agent read it). A spec left
    from before may still name them, but what it names is gone: the restarted container
    cannot get it. A MIG device HAMi created is judged by its GPU (the kubelet never lists
    HAMi's; HAMi's device ids carry the GPU's UUID: HAMi v2.10 ``GetDevices``, ``<uuid>-<n>``)."""
    inv = node.inventory
    if inv is None or not inv.gpus:
        return ()
    listed = set(inv.gpus)
    registered = None if inv.mig is None or node.runs_hami_mig() else {
        m for ids in inv.mig.values() for m in ids}
    gone: list[str] = []
    for h in entries:
        named = (*h.ids, *(h.visible_devices or "").split(","),
                 *(_split(n)[1] for n in h.cdi_names))
        for name in (n.strip().split("::", 1)[0] for n in named):
            uuid = _GPU_PREFIX.match(name)
            if uuid is not None and uuid.group(0) not in listed:
                gone.append(uuid.group(0))
            elif name.startswith("MIG-") and registered is not None \
                    and name not in registered:
                gone.append(name)
    return tuple(dict.fromkeys(gone))


#: A GPU's UUID at the start of a device name (HAMi's ids add ``-<n>`` after it).
_GPU_PREFIX = re.compile(r"GPU-[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}")


def _judge_one(node: NodeInfo, h: Held, resolved: Resolved, handler: str | None,
               gpus: tuple[str, ...], privileged: bool) -> NodeAssessment:
    inv = node.inventory
    assert inv is not None
    names, lost = resolved
    if names:
        # containerd (or, with its CDI off, the NVIDIA runtime) resolves these with the CDI
        # library; the just-in-time kind is generated by the NVIDIA runtime from
        # NVIDIA_VISIBLE_DEVICES alone, never for a CDI name (webhook.api.delivery), so
        # every name must be in a spec file
        by_containerd = delivery.containerd_resolves(inv)
        kinds = delivery.names_resolved(inv, delivery.NamesPath.CONTAINERD if by_containerd
                                        else delivery.NamesPath.RUNTIME)
        missing = tuple(n for n in names if _split(n)[1] not in kinds.get(_split(n)[0], ()))
        if missing:
            kind = _split(missing[0])[0]
            unreadable = by_containerd and delivery.unreadable_note(
                inv, kind, [_split(n)[1] for n in missing if _split(n)[0] == kind])
            why, fix = unreadable or (said("restart.cdiMissing", container=h.container,
                                           missing=missing), None)
            return NodeAssessment(node.name, NodeState.MISSING, missing=missing,
                                  way=delivery.CDI_DEVICES, kind=kind, note=why, fix=fix)
    elif lost is not None:
        if lost[0] is delivery.NamesPath.UNKNOWN:
            return NodeAssessment(node.name, NodeState.UNKNOWN, note=lost[1],
                                  way=delivery.CDI_DEVICES)
        if h.visible_devices is None:
            # Nothing else in the answer: the pod's own variable may still reach the runtime
            # (checks.owndevices, which refines this)
            return NodeAssessment(node.name, NodeState.MISSING, undelivered=True,
                                  way=delivery.CDI_DEVICES, note=lost[1])
    if h.visible_devices is not None and not (names and h.visible_devices in
                                              delivery.NO_DEVICES):
        handed = {"container": h.container, "value": h.visible_devices}
        r = delivery.resolve_own(inv, h.visible_devices, handler, gpus, privileged,
                                 h.container)
        if r is None:
            return NodeAssessment(node.name, NodeState.MISSING, undelivered=True,
                                  way=delivery.VISIBLE_DEVICES,
                                  note=said("restart.notRead", **handed,
                                            ignored=delivery.envvar_ignored(inv, privileged)))
        if r.ok is None:
            return NodeAssessment(node.name, NodeState.UNKNOWN, note=r.note, mode=r.mode,
                                  way=delivery.VISIBLE_DEVICES)
        if r.ok is False and r.kind == delivery.JIT_KIND and (
                inv.mig is None or node.runs_hami_mig()) and all(
                m.partition("=")[2].startswith("MIG-") for m in r.missing):
            # Generated just in time from the driver: a MIG device exists if the driver has
            # it now, and the node's MIG devices are not all known here (the kubelet's list
            # was not read, or HAMi creates its own, which the kubelet never lists).
            return NodeAssessment(
                node.name, NodeState.UNKNOWN, mode=r.mode, way=delivery.VISIBLE_DEVICES,
                note=said("restart.migJustInTime", **handed, missing=r.missing))
        if r.ok is False:
            note = r.note
            if r.missing and r.mode == "cdi":
                note = said("restart.specMissing", **handed, missing=r.missing)
            elif r.missing and r.mode not in delivery.NON_CDI_MODES:
                note = said("restart.noSuchDevice", **handed, missing=r.missing)
            return NodeAssessment(node.name, NodeState.MISSING, missing=r.missing, note=note,
                                  mode=r.mode, kind=r.kind, way=delivery.VISIBLE_DEVICES,
                                  undelivered=r.undelivered)
        return NodeAssessment(node.name, NodeState.OK, way=delivery.VISIBLE_DEVICES,
                              mode=r.mode)
    if h.other and not names:
        return NodeAssessment(node.name, NodeState.UNKNOWN,
                              note=said("restart.mountsOnly", container=h.container))
    return NodeAssessment(node.name, NodeState.OK, way=delivery.CDI_DEVICES if names else "")


def _resolved_names(inv: Inventory, h: Held, handler: str | None) -> Resolved:
    """The cached CDI names something resolves at the restart, and, where some are not
    resolved by anyone (containerd's CDI off), who would have and why not
    (``delivery.cdi_names_path``): ``cdi-cri`` names are then lost, annotations reach the
    NVIDIA runtime only through the handler and mode that read them."""
    names = h.cdi_names
    if not names or delivery.containerd_resolves(inv):
        return names, None
    keys = h.annotation_keys
    if keys:
        path, why = delivery.cdi_names_path(inv, handler, True, keys[0])
        if path is delivery.NamesPath.RUNTIME:
            return h.annotation_names, None
        return (), (path, why)
    path, why = delivery.cdi_names_path(inv, handler, False)
    return (), (path, why)


def _split(name: str) -> tuple[str, str]:
    kind, _, device = name.partition("=")
    return kind, device


def restart_answer(pod: Mapping[str, Any], facts: PodFacts, pool: str, node: NodeInfo,
                   view: ClusterView, policy: Policy) -> RestartAnswer | None:
    """The pod's next container start on its node, judged by what it holds; None where that
    is its first start (nothing held yet) or where no device plugin hands it GPUs (its pool
    checks no devices, DRA serves them, or it asks for none)."""
    if not policy.by_name[pool].cdi.checked or not facts.gpus:
        return None
    extended = facts.claims.extended
    if extended and all(podclaims.dra_served(node, r, extended) for r in facts.gpus):
        return None
    cached = cached_answer(pod, node)
    if cached is None:
        return None
    at: dict[str, Any] = {"who": who_of(facts.obj, facts.namespace), "node": node.name}
    if isinstance(cached, Said):
        return RestartAnswer(NodeState.UNKNOWN, Reason.DEVICES_UNVERIFIED,
                             said("restart.unreadable", **at, error=cached))
    found = _with_pod_checks(node, cached.entries, facts, pool, view, policy)
    if cached.otherwise is not None:
        other = _with_pod_checks(node, cached.otherwise, facts, pool, view, policy)
        if other.state is not found.state:
            bad = other if found.state is NodeState.OK else found
            found = NodeAssessment(
                node.name, NodeState.UNKNOWN,
                note=said("restart.eitherWay", uuids_resolve=found.state is NodeState.OK,
                          failing=bad.note))
    at["held"] = tuple(sorted({i.split("::", 1)[0] for h in cached.entries for i in h.ids}))
    at["basis"] = cached.basis
    if found.state is NodeState.OK:
        return RestartAnswer(NodeState.OK, Reason.ROUTED, said("restart.runs", **at),
                             basis=cached.basis)
    if found.state is NodeState.UNKNOWN:
        return RestartAnswer(NodeState.UNKNOWN, Reason.DEVICES_UNVERIFIED,
                             said("restart.mayFail", **at, note=found.note),
                             basis=cached.basis)
    reason = found.reason or (
        Reason.GPU_NOT_DELIVERED if found.undelivered else
        Reason.GPU_NOT_ACCOUNTED if found.misaccounted else
        Reason.UNKNOWN_DEVICE if found.mode in delivery.NON_CDI_MODES and found.missing else
        Reason.CDI_DEVICE_MISSING)
    return RestartAnswer(NodeState.MISSING, reason,
                         said("restart.fails", **at, note=found.note, fix=found.fix,
                              missing=found.missing),
                         missing=found.missing, basis=cached.basis)


def _with_pod_checks(node: NodeInfo, entries: tuple[Held, ...], facts: PodFacts, pool: str,
                     view: ClusterView, policy: Policy) -> NodeAssessment:
    """The cached answer in place of the device plugin's, refined by what the pod itself
    asks of the node as admission would (its own NVIDIA_VISIBLE_DEVICES, its NRI
    annotations): both are read again from the pod at every start."""
    def assess(n: NodeInfo, ask: Ask, prepared: Any, so_far: NodeAssessment | None
               ) -> NodeAssessment:
        return judge_held(n, entries, ask.facts.runtime_class, ask.handler,
                          ask.facts.privileged_gpus, ask.facts.only_own_visible_devices)

    check = NodeCheck("held devices", reads=("runtime class", "privileged GPU containers",
                                             "own NVIDIA_VISIBLE_DEVICES"),
                      node_reads=("devices",), combine=Combine.FIRST, assess=assess)
    hami_pool = policy.is_hami_pool(pool)
    ask = Ask(facts, policy.by_name[pool], view, policy, hami_pool,
              lambda: cand.demand_of(facts, hami_pool))
    checks = (check, owndevices.CHECK, nriannotations.CHECK)
    return nodechecks.judge(node, ask, nodechecks.prepared(ask, checks))
