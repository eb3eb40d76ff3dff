"""HAMi's device plugin, as its DaemonSet configures it: how it hands GPUs, and where.

``delivery: detect`` judges each node by whether the plugin's CDI spec is on disk, and cannot
see a plugin set to a CDI strategy that has not written one. HAMi's chart says which
strategy its plugin runs with: the DaemonSet labelled
``app.kubernetes.io/component=hami-device-plugin`` sets ``DEVICE_LIST_STRATEGY`` from
``devicePlugin.deviceListStrategy`` on its ``device-plugin`` container, and runs on the
nodes its ``nodeSelector`` picks (``devicePlugin.nvidiaNodeSelector``, ``gpu: "on"`` by
default) (HAMi v2.10 chart, ``templates/device-plugin/daemonsetnvidia.yaml``). A
``--device-list-strategy`` argument, which the plugin's flag parsing prefers to the
variable, wins: read as ``webhook.api.pluginconfig`` reads a running plugin's. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.api import pluginconfig
from webhook.api.delivery import Way, strategy_way
from webhook.engine.core.objects import as_list, as_mapping, meta_of

KIND = "DaemonSet"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "hami-device-plugin"
#: The label selector that lists HAMi's device-plugin DaemonSets.
HAMI_PLUGIN_SELECTOR = f"{COMPONENT_LABEL}={COMPONENT}"


@dataclass(frozen=True)
class HamiPlugin:
    """One HAMi device-plugin DaemonSet: the nodes it runs on, and its way."""

    node_selector: tuple[tuple[str, str], ...]
    way: Way | None  # None: a strategy gpupool does not model


def runs_here(plugins: Iterable[pluginconfig.Settled] | None, declared: bool) -> bool:
    """Does HAMi's device plugin run on a node: its agent found HAMi's plugin pod there, or
    one of HAMi's device-plugin DaemonSets selects the node (``declared``)? (The GPUs HAMi's
    plugin registers on the Node outlive the plugin: not evidence that it runs now.)"""
    return declared or any(p.deployed_by == pluginconfig.HAMI_CHART for p in plugins or ())


def hami_plugin_from(obj: Mapping[str, Any]) -> HamiPlugin | None:
    """The plugin a DaemonSet runs, or None when it is not HAMi's device plugin."""
    labels = as_mapping(meta_of(obj).get("labels"))
    if labels.get(COMPONENT_LABEL) != COMPONENT:
        return None
    pod = as_mapping(as_mapping(as_mapping(obj.get("spec")).get("template")).get("spec"))
    # the plugin's own default, envvar, when nothing sets it (HAMi's config file is its
    # device-config.yaml, which sets no strategy)
    strategy = "envvar"
    for c in as_list(pod.get("containers")):
        if not isinstance(c, Mapping):
            continue
        try:
            given = pluginconfig.given_strategy(c)
        except pluginconfig.Unknown:  # from valueFrom: not a way gpupool can tell
            strategy = ""
            break
        if given is not None:
            strategy = ",".join(given[0])
            break
    selector = as_mapping(pod.get("nodeSelector"))
    return HamiPlugin(tuple(sorted((str(k), str(v)) for k, v in selector.items())),
                      strategy_way(strategy))


def runs_on(plugins: Iterable[HamiPlugin], labels: Mapping[str, str]) -> bool:
    """Whether one of HAMi's device-plugin DaemonSets schedules a pod on a node with these
    labels."""
    return any(all(labels.get(k) == v for k, v in p.node_selector) for p in plugins)


def way_on(plugins: Iterable[HamiPlugin], labels: Mapping[str, str]) -> Way | None:
    """The way HAMi's plugin hands GPUs on a node with these labels: that of the DaemonSets
    that run there, when they agree (None: none runs there, or they disagree)."""
    ways = {p.way for p in plugins if runs_on((p,), labels)}
    return ways.pop() if len(ways) == 1 else None
