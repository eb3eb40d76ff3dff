"""CDI devices a pod names in its own ``nvidia.cdi.k8s.io`` annotations, on nodes where the
GPU Operator's NRI plugin injects them.
"""

from __future__ import annotations

from typing import Any

from webhook.engine.checks.assessment import Ask, Combine, NodeAssessment, NodeCheck, NodeState
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import nri
from webhook.engine.view.nodes import NodeInfo


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


def _prepare(ask: Ask) -> Any:
    if not ask.facts.nri_requests or not ask.pool.cdi.checked:
        return None
    return ask.view.operator_nri()


def _assess(node: NodeInfo, ask: Ask, plugin: Any, so_far: NodeAssessment | None
            ) -> NodeAssessment | None:
    return assess_annotations(node, ask.facts, plugin)


CHECK = NodeCheck("NRI annotations", reads=("NRI annotations",),
                  node_reads=("inventory", "labels", "the cluster's ClusterPolicy"),
                  combine=Combine.WORSE, prepare=_prepare, assess=_assess)
