"""The GPU Operator's own device plugin, learned from its pod (issue 46, items 1 and 3).

The operator starts the plugin as ``/bin/sh -c /bin/entrypoint.sh``, a script from its
``nvidia-device-plugin-entrypoint`` ConfigMap; the pods here are its real DaemonSet template
and ConfigMap (tests/fixtures/upstream/gpu-operator) with its controller's changes
(``tests.plugincases.operator_pod``). ``tests/integration/test_plugin_judge.py`` holds the
strategies to the plugin's own code; these are the corners around it."""

from __future__ import annotations

import copy
import random

import pytest

from harness.kit import gpu_pod
from tests.plugincases import OPERATOR_NS, OPERATOR_RELEASES, operator_learned, operator_pod
from tests.unit.engine.test_steering import agent_node, decide
from webhook.api.pluginconfig import Settled, settle_pods
from webhook.engine.core.decision import Reason


def _settle(case, config_maps=None) -> tuple[Settled, ...]:
    cms = case.config_maps if config_maps is None else config_maps
    return settle_pods([case.pod], case.labels, lambda ns, name: cms.get((ns, name)))


@pytest.mark.parametrize("release", OPERATOR_RELEASES)
@pytest.mark.parametrize("strategy", ["envvar", "cdi-annotations,cdi-cri"])
def test_the_operators_plugin_is_recognised_whatever_its_command(release, strategy):
    case = operator_pod(random.Random(1), "gpu-1", strategy, "single", release)
    main = next(c for c in case.pod["spec"]["containers"]
                if c["name"] == "nvidia-device-plugin")
    assert main["command"][1:] == ["-c"] and main["args"] == ["/bin/entrypoint.sh"]
    (s,) = _settle(case)  # the config-manager sidecar, if any, is not a plugin
    assert s.container == "nvidia-device-plugin" and s.deployed_by == "the GPU Operator"
    assert s.strategies == tuple(strategy.split(",")) and s.mig_strategy == "single"
    assert "deployed by the GPU Operator" in s.describe()
    assert Settled.from_json(s.to_json()) == s


def test_an_entrypoint_that_cannot_be_read_is_a_plugin_of_unknown_strategy():
    case = operator_pod(random.Random(2), "gpu-1", "envvar", None, "v26.3.0")
    (s,) = _settle(case, {})
    assert s.strategies is None
    assert f"ConfigMap {OPERATOR_NS}/nvidia-device-plugin-entrypoint" in s.unknown
    assert s.deployed_by == "the GPU Operator"


@pytest.mark.parametrize("script, why", [
    ("#!/bin/sh\n. /etc/plugin.env\nexec nvidia-device-plugin\n", "sources /etc/plugin.env"),
    ("#!/bin/sh\nexport DEVICE_LIST_STRATEGY=cdi-cri\nexec nvidia-device-plugin\n",
     "sets its strategy"),
    ("#!/bin/sh\nexec nvidia-device-plugin --device-list-strategy=$S\n", "shell expansion"),
])
def test_a_script_that_may_change_the_strategy_is_doubt_with_the_reason(script, why):
    case = operator_pod(random.Random(3), "gpu-1", "envvar", None, "v26.7.0")
    cms = copy.deepcopy(case.config_maps)
    cms[(OPERATOR_NS, "nvidia-device-plugin-entrypoint")] = {"entrypoint.sh": script}
    (s,) = _settle(case, cms)
    assert s.strategies is None and why in s.unknown, s


def test_flags_on_the_scripts_exec_line_are_read():
    case = operator_pod(random.Random(4), "gpu-1", "envvar", None, "v26.3.0")
    cms = copy.deepcopy(case.config_maps)
    cms[(OPERATOR_NS, "nvidia-device-plugin-entrypoint")] = {
        "entrypoint.sh": "#!/bin/sh\nset -e\nexec nvidia-device-plugin "
                         "--device-list-strategy=cdi-cri --mig-strategy mixed\n"}
    (s,) = _settle(case, cms)
    assert s.strategies == ("cdi-cri",) and s.mig_strategy == "mixed"
    assert s.source == "flag --device-list-strategy"


def test_the_operators_other_entrypoint_containers_are_not_plugins():
    """GFD, the MPS daemon and the MIG manager use the same image or the same
    ``sh -c /bin/entrypoint.sh`` form; only a script that execs the plugin counts."""
    case = operator_pod(random.Random(5), "gpu-1", "envvar", None, "v26.3.0")
    pod = copy.deepcopy(case.pod)
    mig_manager = {"name": "nvidia-mig-manager", "image": "nvcr.io/nvidia/cloud-native/"
                   "k8s-mig-manager:v0.13.0", "command": ["/bin/sh", "-c"],
                   "args": ["/bin/entrypoint.sh"],
                   "volumeMounts": [{"name": "mm-entry", "mountPath": "/bin/entrypoint.sh",
                                     "subPath": "entrypoint.sh"}]}
    gfd = {"name": "gpu-feature-discovery", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
           "command": ["gpu-feature-discovery"]}
    pod["spec"]["containers"] = [mig_manager, gfd]
    pod["spec"]["volumes"].append({"name": "mm-entry", "configMap": {"name": "mm-entry"}})
    cms = {**case.config_maps,
           (OPERATOR_NS, "mm-entry"): {"entrypoint.sh": "#!/bin/sh\nexec nvidia-mig-manager\n"}}
    assert settle_pods([pod], {}, lambda ns, name: cms.get((ns, name))) == ()


def test_where_the_ways_disagree_and_the_pod_did_not_say_the_node_is_doubt(tmp_path):
    """Item 3: a CDI strategy whose spec was never written (no spec on disk, UUIDs resolve)
    and an envvar plugin beside a leftover CDI spec (the spec resolves, UUIDs do not): not
    learned from the plugin's pod, each is doubt with the reason, never fine; learned, the
    plugin's pod decides."""
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    # no device-plugin spec; UUIDs resolve through the per-UUID management spec
    never_written = agent_node(tmp_path / "a", "op-1", None, "operator-management",
                               per_uuid=True, register=False, plugins=None)
    rv, _, _ = decide([never_written], pod)
    assert rv.final.allowed and rv.final.warnings, rv.final.to_json()
    (f,) = rv.final.nodes
    assert "only inferred from no k8s.device-plugin.nvidia.com/gpu spec" in f.note
    assert "the agent did not look at the node's device-plugin pods" in f.note
    # the agent looked and found no plugin pod
    leftover = agent_node(tmp_path / "b", "op-2", None, "device-plugin", register=False,
                          plugins=())
    rv, _, _ = decide([leftover], pod)
    assert rv.final.allowed and rv.final.warnings, rv.final.to_json()
    (f,) = rv.final.nodes
    assert "handed as UUIDs (envvar) they do not" in f.note
    assert "found no device-plugin pod" in f.note
    # learned from the operator's pod: decided, no doubt
    for strategy, reason in (("envvar", Reason.CDI_DEVICE_MISSING), ("cdi-cri", None)):
        node = agent_node(tmp_path / strategy, "op-3", None, "device-plugin",
                          register=False, plugins=operator_learned(strategy, "op-3"))
        rv, _, _ = decide([node], pod)
        assert (None if rv.final.allowed else rv.final.reason) == reason, rv.final.to_json()
        assert not rv.final.warnings
