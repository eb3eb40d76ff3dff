"""GPU containers that set NVIDIA_VISIBLE_DEVICES themselves: the NVIDIA runtime resolves
their value instead of the device plugin's.
"""

from __future__ import annotations

from typing import Any

from webhook.api import delivery
from webhook.api.said import said
from webhook.engine.checks.assessment import (
    Ask,
    Combine,
    NodeAssessment,
    NodeCheck,
    NodeState,
    worse,
)
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.nodes import NodeInfo


def assess_own_devices(node: NodeInfo, facts: PodFacts, handler: str | None,
                       check: NodeAssessment) -> NodeAssessment:
    """GPU containers that set NVIDIA_VISIBLE_DEVICES themselves: the NVIDIA runtime
    resolves their value instead of the device plugin's (``delivery.resolve_own``).
    ``check`` is the node judged by the plugin's devices; where every GPU container sets its
    own value and the plugin hands UUIDs that way, the plugin's UUIDs reach none of them."""
    inv = node.inventory
    if inv is None:
        return check
    # Where the plugin's CDI names reach nobody (containerd's CDI off: cdi-cri names
    # dropped, annotations not passed or ignored, ``delivery.cdi_names_path``), the
    # container starts with its variables alone and the runtime resolves its own value.
    dropped = check.way == delivery.CDI_DEVICES and check.undelivered \
        and inv.runtime.containerd_cdi is False
    if check.way == delivery.CDI_DEVICES and not dropped:
        # A plugin that hands CDI names (cdi-annotations, cdi-cri) that reach a resolver:
        # containerd injects its devices, and its spec's common edits set
        # NVIDIA_VISIBLE_DEVICES=void (toolkit v1.20.2 pkg/nvcdi/wrapper.go,
        # GetCommonEdits), which replaces the container's own value (the CDI library applies
        # env edits through runtime-tools' AddMultipleProcessEnv, which replaces a variable
        # of the same name); the runtime resolving the annotations itself reads them before
        # any variable (internal/config/image/cuda_image.go, VisibleDevices). The
        # container's own value decides nothing there.
        return check
    if facts.own_visible_unknown and check.state is NodeState.MISSING:
        # A value from valueFrom replaces the plugin's UUIDs in that container: whether what
        # it names resolves cannot be known here. Doubt, never a denial; steered off where
        # other nodes can take the pod, since the plugin's own value fails there.
        return NodeAssessment(
            node.name, NodeState.UNKNOWN, kind=check.kind, mode=check.mode, way=check.way,
            may_fail=True, note=said("own.valueFrom", plugin=check.note, missing=check.missing))
    own = [delivery.resolve_own(inv, v, handler, node.gpu_uuids(), facts.privileged_gpus)
           for v in facts.own_visible_devices]
    for r in own:
        if r is None or r.ok is True:
            continue
        state = NodeState.UNKNOWN if r.ok is None else NodeState.MISSING
        found = NodeAssessment(
            node.name, state, missing=r.missing, note=r.note, kind=r.kind, mode=r.mode,
            way=delivery.VISIBLE_DEVICES, undelivered=r.undelivered,
            fix=said("own.fixCdiOff") if dropped else said("own.fix"))
        # where the plugin's names reach nobody and every GPU container sets its own value,
        # that value is all there is to judge
        return found if dropped and facts.only_own_visible_devices else worse(check, found)
    if check.state is not NodeState.OK and facts.only_own_visible_devices \
            and (dropped or (check.way == delivery.VISIBLE_DEVICES and not check.undelivered)) \
            and all(r is not None and r.ok for r in own):
        return NodeAssessment(node.name, NodeState.OK, way=delivery.VISIBLE_DEVICES,
                              note=said("own.allResolve"))
    return check


def _prepare(ask: Ask) -> Any:
    # only where its pool's devices are checked at all
    return True if (ask.facts.own_visible_devices or ask.facts.own_visible_unknown) \
        and ask.pool.cdi.checked else None


def _assess(node: NodeInfo, ask: Ask, prepared: Any, so_far: NodeAssessment | None
            ) -> NodeAssessment | None:
    assert so_far is not None  # it refines the device plugin's finding
    return assess_own_devices(node, ask.facts, ask.handler, so_far)


CHECK = NodeCheck("own NVIDIA_VISIBLE_DEVICES",
                  reads=("own NVIDIA_VISIBLE_DEVICES", "runtime class",
                         "privileged GPU containers"),
                  node_reads=("devices",), combine=Combine.REFINE, assess=_assess,
                  prepare=_prepare)
