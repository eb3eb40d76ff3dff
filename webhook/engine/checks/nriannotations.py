"""CDI devices a pod names in its own ``nvidia.cdi.k8s.io`` annotations, on nodes where the
GPU Operator's NRI plugin injects them.
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
    node_fact,
    worse,
)
from webhook.engine.placement import candidates as cand
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import nri
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


def assess_annotations(node: NodeInfo, facts: PodFacts, plugin: nri.NRIPlugin,
                       view: ClusterView) -> NodeAssessment | None:
    """The CDI devices the pod's own ``nvidia.cdi.k8s.io`` annotations name, on a node where
    the GPU Operator's NRI plugin injects them (``webhook.engine.stacks.nri``); None: nothing
    wrong, or nothing the plugin reads there."""
    inv = node.inventory
    if inv is None or not facts.nri_requests or not node_fact(node, "NRI plugin", view):
        return None
    s = nri.judge(facts.nri_requests, facts.namespace, plugin, inv.kinds,
                  inv.runtime.containerd_nri)
    if s is None:
        return None
    return NodeAssessment(node.name, NodeState.UNKNOWN if s.unknown else NodeState.MISSING,
                          missing=s.missing, note=s.note, way=nri.WAY,
                          undelivered=s.undelivered, fix=s.fix)


def _prepare(ask: Ask) -> Any:
    if not ask.facts.nri_requests or not ask.pool.cdi.checked:
        return None
    return ask.view.operator_nri()


def _assess(node: NodeInfo, ask: Ask, plugin: Any, so_far: NodeAssessment | None
            ) -> NodeAssessment | None:
    """The annotations' own finding, the worse of it and the finding so far; and where the
    device plugin's GPUs never arrive (``NVIDIA_VISIBLE_DEVICES`` under a default runtime
    that is not NVIDIA's) while the annotations do inject a device, neither "fine" nor
    "starts without its GPUs" is true: a GPU arrives, not the one accounted for."""
    own = assess_annotations(node, ask.facts, plugin, ask.view)
    if own is not None:
        if so_far is not None and so_far.undelivered and own.missing:
            # containerd fails the container's creation on names it cannot resolve before
            # anything runs: that, not starting without the plugin's GPUs, is what happens
            return own
        return worse(so_far, own) if so_far is not None else own
    if so_far is None or so_far.state is not NodeState.MISSING or not so_far.undelivered \
            or so_far.way != delivery.VISIBLE_DEVICES \
            or not node_fact(node, "NRI plugin", ask.view):
        return None
    named = sorted({n for _, value in ask.facts.nri_requests for n in value.split(",")})
    covered = _covers_accounted(node, ask)
    if covered:
        return NodeAssessment(
            node.name, NodeState.OK, way=nri.WAY, note=said("nri.covers", covered=covered))
    return NodeAssessment(
        node.name, NodeState.MISSING, way=so_far.way,
        kind=so_far.kind, mode=so_far.mode, misaccounted=True,
        note=said("nri.misaccounted", named=tuple(named)), fix=said("nri.misaccountedFix"))


def _covers_accounted(node: NodeInfo, ask: Ask) -> str:
    """What the annotations inject that holds every GPU the device plugin could account
    for this pod on the node ("" where they do not): in every GPU container, a device named
    ``all`` of a kind the node's specs define (the GPU Operator's management spec and
    ``nvidia-ctk cdi generate`` give ``all`` every GPU's device nodes: toolkit v1.20.2
    ``pkg/nvcdi`` ``newAllDevice``), or each such GPU by UUID. Where the plugin hands a MIG
    device (asked for, or a GPU HAMi runs in MIG mode) no GPU name holds it."""
    inv = node.inventory
    facts = ask.facts
    if inv is None or facts.asks_mig:
        return ""
    demand = ask.demand()
    gpus = cand.eligible_gpus(node, demand)
    if not gpus or (node.runs_hami_mig() and node.hami_mig_gpus().intersection(gpus)):
        return ""
    values = dict(facts.nri_requests)
    found: list[str] = []
    for c in facts.gpu_containers:
        named = [n.partition("=") for n in values.get(str(c.get("name")), "").split(",")]
        defined = [(k, d) for k, sep, d in named if sep and inv.has(k, d)]
        every = next((f"{k}={d}" for k, d in defined if d == "all"), "")
        if not every and not set(gpus) <= {d for _, d in defined}:
            return ""
        found.append(every or ", ".join(f"{k}={d}" for k, d in defined if d in gpus))
    return "; ".join(dict.fromkeys(found))


CHECK = NodeCheck("NRI annotations", reads=("NRI annotations", "GPU demand"),
                  node_reads=("devices", "NRI plugin"), combine=Combine.REFINE,
                  assess=_assess, prepare=_prepare)
