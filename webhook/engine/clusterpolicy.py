"""The GPU Operator's ClusterPolicy: how its device plugin hands GPUs to containers.

``delivery: detect`` judges each node by whether the device plugin's CDI spec is there, and
cannot see a plugin in a CDI strategy that wrote no spec (the very node that would fail). The
operator's ClusterPolicy says which strategy its plugin runs with, for every node the
operator deploys its plugin to (label ``nvidia.com/gpu.deploy.device-plugin=true``; HAMi's
nodes carry ``false``). As the operator sets it (gpu-operator controllers/object_controls.go,
``TransformDevicePlugin``): ``DEVICE_LIST_STRATEGY`` from ``spec.devicePlugin.env`` when set
there (applied last, so it wins), else ``cdi-annotations,cdi-cri`` when ``spec.cdi.enabled``
(true when unset), else the plugin's own default, ``envvar``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.api.delivery import CDI_DEVICES, VISIBLE_DEVICES, Way
from webhook.engine.objects import as_mapping

KIND = "ClusterPolicy"
#: The operator's node label for where it runs its device plugin.
DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
_CDI_STRATEGIES = {"cdi-annotations", "cdi-cri"}


def plugin_way(obj: Mapping[str, Any]) -> Way | None:
    """The delivery way of the operator's device plugin, or None when the policy does not
    run one or names a strategy gpupool does not model (``volume-mounts``)."""
    spec = as_mapping(obj.get("spec"))
    plugin = as_mapping(spec.get("devicePlugin"))
    if plugin.get("enabled") is False:
        return None
    strategy = None
    env = plugin.get("env")
    for e in env if isinstance(env, list) else ():
        if isinstance(e, Mapping) and e.get("name") == "DEVICE_LIST_STRATEGY":
            value = e.get("value")
            strategy = value if isinstance(value, str) else ""
    if strategy is None:
        enabled = as_mapping(spec.get("cdi")).get("enabled")
        return CDI_DEVICES if enabled is not False else VISIBLE_DEVICES
    names = {s.strip() for s in strategy.split(",") if s.strip()}
    if names and names <= _CDI_STRATEGIES:
        return CDI_DEVICES
    if names == {"envvar"}:
        return VISIBLE_DEVICES
    return None


def cluster_way(policies: Iterable[Mapping[str, Any]]) -> Way | None:
    """The way of the cluster's ClusterPolicy (the operator acts on one; with several, or
    none, gpupool does not guess)."""
    found = list(policies)
    return plugin_way(found[0]) if len(found) == 1 else None


def runs_operator_plugin(labels: Mapping[str, str]) -> bool:
    return labels.get(DEPLOY_LABEL) == "true"
