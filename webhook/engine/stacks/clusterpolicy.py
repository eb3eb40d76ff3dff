"""The GPU Operator's ClusterPolicy: how its device plugin hands GPUs to containers.

``delivery: detect`` judges each node by whether the device plugin's CDI spec is there, and
cannot see a plugin in a CDI strategy that wrote no spec (the very node that would fail). The
operator's ClusterPolicy says which strategy its plugin runs with, for every node the
operator deploys its plugin to (label ``nvidia.com/gpu.deploy.device-plugin=true``; HAMi's
nodes carry ``false``). As the operator sets it (gpu-operator controllers/object_controls.go,
``TransformDevicePlugin``): ``DEVICE_LIST_STRATEGY`` from ``spec.devicePlugin.env`` when set
there (applied last, so it wins), else ``cdi-annotations,cdi-cri`` when ``spec.cdi.enabled``
(true when unset), else the plugin's own default, ``envvar``. It also says whether the
operator runs NVIDIA's NRI plugin, and for which namespaces (``webhook.engine.stacks.nri``).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.api.delivery import CDI_DEVICES, VISIBLE_DEVICES, Way, strategy_way
from webhook.engine.core.objects import as_mapping, env_entry, literal_value
from webhook.engine.stacks import nri

KIND = "ClusterPolicy"
#: The operator's node label for where it runs its device plugin.
DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"


def plugin_way(obj: Mapping[str, Any]) -> Way | None:
    """The delivery way of the operator's device plugin, or None when the policy does not
    run one or names a strategy gpupool does not model (``volume-mounts``)."""
    spec = as_mapping(obj.get("spec"))
    plugin = as_mapping(spec.get("devicePlugin"))
    if plugin.get("enabled") is False:
        return None
    strategy = env_entry(plugin.get("env"), "DEVICE_LIST_STRATEGY")
    if strategy is None:
        enabled = as_mapping(spec.get("cdi")).get("enabled")
        return CDI_DEVICES if enabled is not False else VISIBLE_DEVICES
    return strategy_way(literal_value(strategy) or "")


def nri_plugin(obj: Mapping[str, Any]) -> nri.NRIPlugin | None:
    """The NRI plugin the operator runs (gpu-operator ``controllers/object_controls.go``,
    ``transformToolkitCtrForCDI``: ``ENABLE_NRI_PLUGIN`` when ``cdi.nriPluginEnabled``; the
    toolkit's ``NRI_NAMESPACE`` is its own namespace), or None when it runs none."""
    spec = as_mapping(obj.get("spec"))
    cdi, toolkit = as_mapping(spec.get("cdi")), as_mapping(spec.get("toolkit"))
    if cdi.get("nriPluginEnabled") is not True or cdi.get("enabled") is False \
            or toolkit.get("enabled") is False:
        return None
    namespace = as_mapping(obj.get("status")).get("namespace")
    entry = env_entry(toolkit.get("env"), nri.NAMESPACES_ENV)
    extra = (literal_value(entry) if entry is not None else None) or ""
    return nri.NRIPlugin(namespace if isinstance(namespace, str) and namespace else None,
                      frozenset(n.strip() for n in extra.split(",") if n.strip()))


@dataclass(frozen=True)
class Operator:
    """What the cluster's ClusterPolicy says of the nodes the operator manages."""

    way: Way | None  # how its device plugin hands GPUs (None: no plugin, or not modelled)
    nri: nri.NRIPlugin | None  # its NRI plugin (None: it runs none)


def cluster_operator(policies: Iterable[Mapping[str, Any]]) -> Operator | None:
    """The operator as the cluster's ClusterPolicy sets it up (the operator acts on one; with
    several, or none, gpupool does not guess)."""
    found = list(policies)
    if len(found) != 1:
        return None
    return Operator(plugin_way(found[0]), nri_plugin(found[0]))


def runs_operator_plugin(labels: Mapping[str, str]) -> bool:
    return labels.get(DEPLOY_LABEL) == "true"
