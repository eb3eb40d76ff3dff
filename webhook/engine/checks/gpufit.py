"""Whether the node's GPUs can serve the pod at all, as the pod's scheduler sees them.

A node its scheduler would never place the pod on is not a candidate: too few GPUs for a
container (HAMi's ``nvidia.com/gpu`` per container against the GPUs it registered), none of
them allowed by the pod's HAMi annotations, or less of a resource allocatable than the pod
requests (the default scheduler's fit). It is asked first and ends the node's judgment
(``Combine.GATE``): the other checks judge only nodes the pod can be placed on, and a pod
no node fits is told so (``cdi.Finding.NO_GPU_FIT``) rather than of devices it would never
reach. Only what the node itself reports is held against it (``candidates.unfit_reason``).
"""

from __future__ import annotations

from typing import Any

from webhook.engine.checks.assessment import (
    Ask,
    Combine,
    NodeAssessment,
    NodeCheck,
    NodeState,
)
from webhook.engine.placement import candidates as cand
from webhook.engine.view.nodes import NodeInfo


def _assess(node: NodeInfo, ask: Ask, prepared: Any, so_far: NodeAssessment | None
            ) -> NodeAssessment | None:
    why = cand.unfit_reason(node, ask.demand())
    return None if why is None else NodeAssessment(node.name, NodeState.UNFIT, note=why)


CHECK = NodeCheck("the node's GPUs can serve the pod", reads=("GPU demand",),
                  node_reads=("devices",), combine=Combine.GATE, assess=_assess)
