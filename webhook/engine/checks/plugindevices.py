"""The GPUs a device plugin could hand a pod, resolved on a node as its runtime would.

How a GPU reaches a container is the pool's device plugin's choice (``webhook.api.delivery``):
UUIDs in ``NVIDIA_VISIBLE_DEVICES``, which a runtime in CDI mode turns into
``<default-kind>=GPU-<uuid>``, or the plugin's own CDI names, which containerd resolves
whatever the runtime's mode. Either way some spec on the node must define every GPU the
plugin could hand the pod. MIG devices and HAMi's device cordon are judged here too.
"""

from __future__ import annotations

from typing import Any

from webhook.api import delivery
from webhook.api.inventory import MIG_RESOURCE_PREFIX, PLUGIN_RESOURCE, Inventory
from webhook.api.said import said
from webhook.engine.checks.assessment import (
    Ask,
    Combine,
    NodeAssessment,
    NodeCheck,
    NodeState,
    no_inventory,
    node_fact,
)
from webhook.engine.core.policy import Policy, Pool
from webhook.engine.placement import candidates as cand
from webhook.engine.stacks import gfd
from webhook.engine.view.nodes import NodeInfo


def assess_node(node: NodeInfo, pool: Pool, runtime_class: str | None, handler: str | None,
                demand: cand.GPUDemand, policy: Policy, privileged: bool = False,
                declared_way: delivery.Way | None = None,
                mig_mode: gfd.MigMode = gfd.MigMode.UNKNOWN) -> NodeAssessment:
    """Will every GPU the device plugin could hand this pod resolve on this node?
    ``handler``: the containerd handler the pod's RuntimeClass names
    (``ClusterView.handler_of``); ``privileged``: every GPU container is privileged;
    ``declared_way``: how the node's device plugin hands GPUs as the cluster's own
    configuration says (``declared_way``); ``mig_mode``: whether its GPUs have MIG enabled,
    as its labels say (``gfd.mig_mode``)."""
    req = pool.cdi
    if not req.checked:
        return NodeAssessment(node.name, NodeState.OK)
    inv = node.inventory
    if inv is None:
        return NodeAssessment(node.name, NodeState.UNKNOWN, note=no_inventory(node))
    way = req.delivery
    inferred = False
    if way is delivery.Way.DETECT:
        # The plugin's configuration beats what it left on disk (a plugin in a CDI
        # strategy that wrote no spec looks like an envvar one).
        way = declared_way if declared_way is not None \
            else delivery.Way(delivery.detected_way(inv, req.device_kind))
        inferred = declared_way is None
    if way == delivery.VISIBLE_DEVICES and runtime_class in policy.non_cdi_runtime_classes \
            and not delivery.envvar_ignored(inv, privileged):
        return NodeAssessment(node.name, NodeState.OK, way=way,
                              note=said("plugin.nonCdiClass", runtime_class=runtime_class))
    # Under the single MIG strategy nvidia.com/gpu is MIG devices where the GPUs have MIG
    # enabled, whole GPUs where not (k8s-device-plugin internal/lm/mig-strategy.go): the
    # kubelet's list says which; without it, the node's labels say the mode, and where they
    # do not, the plugin's strategy alone is doubt, never a denial.
    plain = any(name == PLUGIN_RESOURCE for name, _ in demand.requests) and not demand.hami
    single = plain and inv.mig is None and delivery.learned_single_mig(inv)
    if single and mig_mode is gfd.MigMode.UNKNOWN:
        return NodeAssessment(node.name, NodeState.UNKNOWN, way=way,
                              note=said("mig.modeUnknown"))
    mig = [name for name, _ in demand.requests if name.startswith(MIG_RESOURCE_PREFIX)
           or (name == PLUGIN_RESOURCE and not demand.hami
               and (PLUGIN_RESOURCE in (inv.mig or {})
                    or (single and mig_mode is gfd.MigMode.ENABLED)))]
    if mig:
        return _assess_mig(node, inv, mig, way, handler, req.device_kind, privileged)
    gpus = cand.eligible_gpus(node, demand)
    if not gpus:
        return NodeAssessment(node.name, NodeState.UNKNOWN, way=way,
                              note=said("plugin.gpusUnknown"))
    r = delivery.resolve(inv, way, gpus, handler, req.device_kind, privileged)
    if r.ok is None:
        return NodeAssessment(node.name, NodeState.UNKNOWN, note=r.note, mode=r.mode,
                              way=way)
    if inferred:
        doubt = _inferred_doubt(node, inv, gpus, handler, req.device_kind, privileged,
                                guessed=way, guessed_fails=r.ok is False)
        if doubt is not None:
            return doubt
    # The node's plugin decides what is handed, not the pod's scheduler: a pod the default
    # scheduler placed on a GPU HAMi runs in MIG mode gets a created MIG device as well.
    created = sorted(node.hami_mig_gpus().intersection(gpus)) if node.runs_hami_mig() else []
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
            return NodeAssessment(
                node.name, NodeState.UNKNOWN, kind=r.kind, mode=r.mode, way=way, may_fail=True,
                note=said("plugin.onlyCordoned", gpus=tuple(sorted(set(gpus) - set(rest)))))
    return NodeAssessment(node.name, NodeState.OK if r.ok else NodeState.MISSING,
                          missing=r.missing, note=r.note, kind=r.kind, mode=r.mode, way=way,
                          undelivered=r.undelivered, fix=r.fix)


def _inferred_doubt(node: NodeInfo, inv: Inventory, gpus: tuple[str, ...],
                    handler: str | None, device_kind: str, privileged: bool,
                    guessed: delivery.Way, guessed_fails: bool) -> NodeAssessment | None:
    """How the device plugin hands GPUs only inferred from the disk (its pod does not say,
    and nothing in the cluster does): a spec of its kind may be left over from an earlier
    setup, or be NVIDIA's plugin's beside HAMi's, which hands UUIDs; a plugin in a CDI
    strategy may not have written its spec yet, or ever. The disk is only a guess: where the
    two ways agree it decides nothing; where they disagree, the node is doubt with the
    reason the plugin's pod did not tell, a warning that names the node, not a denial and
    never "fine" (issue 46, item 3); steered off only where the guess itself fails. The
    real runtime shows both sides: HAMi's UUIDs refused under a CDI-mode runtime beside a
    device-plugin spec (tests/integration/test_scan_restart.py), a CDI strategy's names
    unresolvable where no spec defines them (tests/integration/test_corpus.py)."""
    as_cdi = delivery.resolve(inv, delivery.CDI_DEVICES, gpus, handler, device_kind,
                              privileged)
    as_uuids = delivery.resolve(inv, delivery.VISIBLE_DEVICES, gpus, handler,
                                device_kind, privileged)
    if as_uuids.ok is None or as_uuids.ok == as_cdi.ok:
        return None
    missing = as_uuids.missing if as_cdi.ok else as_cdi.missing
    # Doubt, not a denial. Steering follows the disk's guess, as the agent's label does: where
    # the guessed way fails, pods are kept off the node as off one that fails (``may_fail``),
    # where other nodes can take them; where it resolves, the node stays open to them.
    failing = as_uuids if as_cdi.ok else as_cdi
    return NodeAssessment(
        node.name, NodeState.UNKNOWN, kind=failing.kind, mode=failing.mode,
        may_fail=guessed_fails, way=guessed,
        note=said("plugin.inferred", kind=device_kind, has_spec=bool(inv.kinds.get(device_kind)),
                  cdi_resolves=bool(as_cdi.ok), missing=missing,
                  why=delivery.learned_way(inv).why))


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
                              fix=r.fix,
                              kind=r.kind, mode=r.mode, way=way, undelivered=r.undelivered)
    if r.ok is True and (devices or not r.kind or r.kind == delivery.JIT_KIND):
        return NodeAssessment(node.name, NodeState.OK, note=r.note, mode=r.mode, way=way)
    if r.ok is True and not any(_mig_name(d) for d in inv.kinds.get(r.kind, ())):
        # The plugin's id for a MIG device is its MIG-<uuid> (or <gpu>:<mig> with the index
        # strategy): a kind that defines neither resolves none, whichever it hands out.
        return NodeAssessment(node.name, NodeState.MISSING, kind=r.kind, mode=r.mode, way=way,
                              note=said("mig.noMigKind", kind=r.kind))
    return NodeAssessment(node.name, NodeState.UNKNOWN, mode=r.mode, way=way, kind=r.kind,
                          note=said("mig.unchecked", resources=tuple(resources),
                                    checkpoint_read=inv.mig is not None))


def _hami_mig_failure(node: NodeInfo, r: delivery.Resolution, created: list[str],
                      way: delivery.Way) -> NodeAssessment:
    """HAMi's MIG mode: its device plugin creates a MIG instance when it allocates a GPU and
    hands the container that instance's UUID (HAMi v2.10 ``GetContainerDeviceStrArray`` ->
    ``migMgr.EnsureAllocation``), while its CDI spec is written once, when the plugin
    starts (``plugin-manager.go``: ``CreateSpecFile``). No spec can name such a device in
    advance: wherever names are looked up in spec files, the container fails."""
    return NodeAssessment(node.name, NodeState.MISSING, missing=r.missing, kind=r.kind,
                          mode=r.mode, way=way, fix=said("hamiMig.fix", node=node.name),
                          note=said("hamiMig.created", gpus=tuple(created), kind=r.kind))


def _mig_name(device: str) -> bool:
    return device.startswith("MIG-") or ":" in device


def _assess(node: NodeInfo, ask: Ask, prepared: Any, so_far: NodeAssessment | None
            ) -> NodeAssessment:
    return assess_node(node, ask.pool, ask.facts.runtime_class, ask.handler, ask.demand(),
                       ask.policy, ask.facts.privileged_gpus,
                       node_fact(node, "device plugin's way", ask.view),
                       node_fact(node, "MIG mode", ask.view))


CHECK = NodeCheck("device plugin's GPUs",
                  reads=("GPU demand", "runtime class", "privileged GPU containers"),
                  node_reads=("devices", "device plugin's way", "MIG mode"),
                  combine=Combine.FIRST, assess=_assess)
