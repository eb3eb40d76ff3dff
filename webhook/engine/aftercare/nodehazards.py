"""Nodes whose GPUs are handed out twice: two allocators each believe they own a GPU, so two
pods can be given the same card. Not a question of one pod, so admission never asks it;
``gpupool scan`` and ``doctor`` both read it here.

Two ways it happens:

- HAMi's device plugin beside the GPU Operator's on one node (HAMi #2076): both register
  ``nvidia.com/gpu`` with the kubelet for the same GPUs. HAMi's plugin runs where HAMi
  registered the node's GPUs (``hami.io/node-nvidia-register``) or where one of its
  DaemonSets schedules; the operator's where its deploy label is ``true`` (the operator's
  own label, state-device-plugin's nodeSelector; docs/hami-coexistence.md says to set it
  ``false`` on HAMi's nodes).
- A device plugin beside DRA for the same GPUs (``checks.allocation.mixed_resources``): a
  DeviceClass's ``extendedResourceName`` names the plugin's resource and matches devices in
  the node's slices; the scheduler counts the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.api.said import said
from webhook.engine.checks.allocation import mixed_resources
from webhook.engine.core.decision import Reason
from webhook.engine.stacks.clusterpolicy import runs_operator_plugin
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo
from webhook.engine.wording.words import words

HAMI_PLUGIN = "HAMi's device plugin"
OPERATOR_PLUGIN = "the GPU Operator's device plugin"


@dataclass(frozen=True)
class NodeHazard:
    node: str
    #: who hands the GPUs out, two or more
    by: tuple[str, ...]
    #: the node's GPUs as gpupool knows them (empty: unknown)
    gpus: tuple[str, ...]
    message: str
    reason: str = Reason.GPUS_ADVERTISED_TWICE.value

    @property
    def key(self) -> tuple[str, str]:
        return self.reason, self.message

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "reason": self.reason, "by": list(self.by),
                "gpus": list(self.gpus), "message": self.message}


def advertised_twice(node: NodeInfo, view: ClusterView) -> list[NodeHazard]:
    gpus = node.gpu_uuids()
    out = []
    hami = bool(node.gpus) or view.hami_plugin_runs(node.labels)
    if hami and runs_operator_plugin(node.labels):
        out.append(NodeHazard(
            node.name, (HAMI_PLUGIN, OPERATOR_PLUGIN), gpus,
            words(said("hazard.twoPlugins", node=node.name, gpus=gpus,
                       by=(HAMI_PLUGIN, OPERATOR_PLUGIN)))))
    for resource, cls in mixed_resources(node, view.device_classes(),
                                         view.slices_for(node.name)):
        out.append(NodeHazard(
            node.name, ("a device plugin", f"DeviceClass {cls} (DRA)"), gpus,
            words(said("hazard.pluginAndClass", resource=resource, device_class=cls))))
    return out
