"""HAMi's device plugin as its DaemonSet configures it (``webhook.engine.stacks.hamiplugin``), and
the node ``delivery: detect`` misreads without it: a plugin set to a CDI strategy that has
not written its spec looks, on disk, like one in envvar."""

from __future__ import annotations

import copy

import pytest
import yaml

from harness.kit import UPSTREAM, gpu_pod
from tests.unit.engine.test_steering import agent_node, decide, hami_pod, terms
from webhook.api.delivery import CDI_DEVICES, VISIBLE_DEVICES
from webhook.engine.core.decision import Reason
from webhook.engine.stacks.hamiplugin import HamiPlugin, hami_plugin_from, way_on

CHART_VALUES = yaml.safe_load((UPSTREAM / "hami-chart/values.yaml").read_text())


def daemonset(strategy: str | None = None, *, args: list[str] | None = None,
              selector: dict | None = None, component: str = "hami-device-plugin") -> dict:
    """HAMi's device-plugin DaemonSet as its chart renders it
    (templates/device-plugin/daemonsetnvidia.yaml: the component label, the
    device-plugin container's command and env, the nodeSelector from
    devicePlugin.nvidiaNodeSelector), for one deviceListStrategy value."""
    plugin = CHART_VALUES["devicePlugin"]
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"}]
    if strategy is not False:
        env.append({"name": "DEVICE_LIST_STRATEGY",
                    "value": strategy or plugin["deviceListStrategy"]})
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "hami-device-plugin", "namespace": "kube-system",
                         "labels": {"app.kubernetes.io/component": component}},
            "spec": {"template": {"spec": {
                "containers": [{"name": "device-plugin",
                                "command": ["nvidia-device-plugin",
                                            "--config-file=/device-config.yaml",
                                            *(args or [])],
                                "env": env}],
                "nodeSelector": selector if selector is not None
                else copy.deepcopy(plugin["nvidiaNodeSelector"])}}}}


def test_the_charts_default_is_envvar_on_the_nodes_it_selects():
    assert CHART_VALUES["devicePlugin"]["deviceListStrategy"] == "envvar"
    p = hami_plugin_from(daemonset())
    assert p == HamiPlugin(tuple(CHART_VALUES["devicePlugin"]["nvidiaNodeSelector"].items()),
                       VISIBLE_DEVICES)


@pytest.mark.parametrize("obj, way", [
    (daemonset("cdi-annotations"), CDI_DEVICES),
    (daemonset("cdi-annotations,cdi-cri"), CDI_DEVICES),
    (daemonset("envvar", args=["--device-list-strategy=cdi-cri"]), CDI_DEVICES),  # flag wins
    (daemonset("envvar", args=["--device-list-strategy", "cdi-cri"]), CDI_DEVICES),
    (daemonset(False), VISIBLE_DEVICES),  # unset: the plugin's own default
    (daemonset("volume-mounts"), None),  # not modelled
])
def test_the_way_as_the_daemonset_sets_it(obj, way):
    p = hami_plugin_from(obj)
    assert p is not None and p.way == way


def test_other_daemonsets_and_junk_are_not_hamis_plugin():
    assert hami_plugin_from(daemonset(component="nvidia-device-plugin")) is None
    assert hami_plugin_from({"metadata": {"labels": "junk"}}) is None
    junk = daemonset()
    junk["spec"] = {"template": {"spec": {"containers": "x", "nodeSelector": []}}}
    assert hami_plugin_from(junk) == HamiPlugin((), VISIBLE_DEVICES)


def test_a_node_takes_the_way_of_the_daemonsets_that_run_there_when_they_agree():
    on = HamiPlugin((("gpu", "on"),), CDI_DEVICES)
    assert way_on([on], {"gpu": "on"}) == CDI_DEVICES
    assert way_on([on], {"gpu": "off"}) is None
    assert way_on([on, HamiPlugin((), VISIBLE_DEVICES)], {"gpu": "on"}) is None


def test_a_cdi_strategy_plugin_without_its_spec_is_caught(tmp_path):
    """A HAMi node whose plugin was set to cdi-annotations through HAMi's chart and has not
    written its spec: on disk it looks like envvar, where its per-UUID spec resolves every
    GPU; the DaemonSet says CDI names, which containerd cannot resolve without the spec."""
    node = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    node["metadata"]["labels"]["gpu"] = "on"
    rv, _, _ = decide([node], hami_pod())
    assert rv.final.allowed  # what detect alone concludes
    rv, view, _ = decide([node, daemonset("cdi-annotations")], hami_pod())
    assert view.hami_way({"gpu": "on"}) == CDI_DEVICES
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "k8s.device-plugin.nvidia.com/gpu=GPU-" in rv.final.message
    # its chart's default (envvar) agrees with the disk: admitted, and steered node by node
    pod = hami_pod()
    rv, _, _ = decide([node, daemonset()], pod)
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    assert not any(e["key"].startswith("resolve.gpupool.io/")
                   for t in terms(pod, rv.mutation.patch) for e in t["matchExpressions"])
    # a node the DaemonSet does not select is read from disk
    node["metadata"]["labels"]["gpu"] = "off"
    rv, _, _ = decide([node, daemonset("cdi-annotations")], hami_pod())
    assert rv.final.allowed


def test_the_daemonsets_way_holds_on_every_node_it_schedules_to_whatever_the_pool(tmp_path):
    """HAMi's DaemonSet selects nodes by its own nodeSelector, not by gpupool's pools: where
    it also lands on a node of the operator's pool, HAMi's plugin hands that node's GPUs,
    and a CDI strategy without its spec fails a plain GPU pod there too."""
    node = agent_node(tmp_path, "op-1", None, "operator-management", per_uuid=True,
                      register=False)
    node["metadata"]["labels"]["gpu"] = "on"  # HAMi's chart's selector
    pod = gpu_pod("g", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([node], pod)
    assert rv.final.allowed and rv.final.pool == "operator"  # what the disk alone says
    rv, _, _ = decide([node, daemonset("cdi-annotations")], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "k8s.device-plugin.nvidia.com/gpu=GPU-" in rv.final.message
    node["metadata"]["labels"]["gpu"] = "off"  # not scheduled there: the disk decides
    rv, _, _ = decide([node, daemonset("cdi-annotations")], pod)
    assert rv.final.allowed
