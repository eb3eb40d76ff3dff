"""HAMi's device plugin allocates only for a pod HAMi's scheduler bound.

Its ``Allocate`` first asks which pod the call is for (HAMi v2.10.0
``pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go`` -> ``util.GetPendingPod``,
``pkg/util/util.go``): the pod its node lock names, else a Pending pod on the node carrying
``hami.io/bind-time``, ``hami.io/bind-phase`` (allocating or success) and
``hami.io/vgpu-node`` naming the node, which HAMi's scheduler extender writes as it filters
and binds (``pkg/scheduler/scheduler.go``, ``Bind``). Any other pod's container gets the
error "no binding pod found on node" and the kubelet rejects the pod: a pod of another pool,
bound by the default scheduler onto a node where HAMi's plugin serves the GPUs (its
DaemonSet's selector reaches it, or the agent found its pod there), fails there whatever its
devices. Judged by HAMi's own function (tests/hamiallocate).

HAMi's own pool is not asked: gpupool sends its pods to HAMi's scheduler, and HAMi's own
webhook refuses one that names its node itself (docs/hami-coexistence.md).
"""

from __future__ import annotations

from typing import Any

from webhook.api.inventory import PLUGIN_RESOURCE
from webhook.api.said import said
from webhook.engine.checks.assessment import (
    Ask,
    Combine,
    NodeAssessment,
    NodeCheck,
    NodeState,
    node_fact,
)
from webhook.engine.core.decision import Reason
from webhook.engine.view.nodes import NodeInfo


def _prepare(ask: Ask) -> Any:
    # (the resource HAMi's plugin registers; a pod asking only for another plugin's, such
    # as NVIDIA's MIG resources, never calls it)
    if ask.hami_pool or not any(name == PLUGIN_RESOURCE for name, _ in ask.demand().requests):
        return None
    return True


def _assess(node: NodeInfo, ask: Ask, prepared: Any, so_far: NodeAssessment | None
            ) -> NodeAssessment | None:
    if not node_fact(node, "HAMi's device plugin", ask.view):
        return None
    return NodeAssessment(node.name, NodeState.MISSING, reason=Reason.NOT_BOUND_BY_HAMI,
                          note=said("hami.notBound"), fix=said("hami.notBoundFix"))


CHECK = NodeCheck("HAMi's plugin allocates what HAMi's scheduler bound",
                  reads=("GPU demand",), node_reads=("HAMi's device plugin",),
                  combine=Combine.WORSE, assess=_assess, prepare=_prepare)
