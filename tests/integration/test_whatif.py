"""Before a change: ``gpupool check --running`` over the pods running now against a planned
cluster state, each planned object made by the tool that makes it: HAMi's chart values
rendered by the real helm from HAMi's own chart, a ClusterPolicy edited as the operator's CRD
spells it, a node's inventory as the agent publishes it."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonpatch
import yaml

from harness import hami
from harness.kit import hold
from harness.layouts import UUIDS
from tests.unit.engine.test_steering import agent_node, hami_pod
from webhook.engine import Stage, Subject, decide, view_from_objects
from webhook.files.policyfile import default_policy


def _running(tmp_path, nodes: list[dict], *planned: dict) -> list[dict]:
    """A running HAMi pod on each node, holding the node's first GPU as HAMi's plugin
    hands it (envvar): the nodes, and the planned ones of the same name, publish it."""
    policy = default_policy()
    view = view_from_objects(nodes, policy)
    out = []
    for i, node in enumerate(nodes):
        pod = hami_pod()
        pod["metadata"].update(name=f"train-{i}", namespace="ml", uid=f"u{i}")
        m = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace="ml"), view,
                   policy)
        pod = jsonpatch.apply_patch(pod, m.patch)
        pod["spec"]["nodeName"] = node["metadata"]["name"]
        pod["status"] = {"phase": "Running"}
        out.append(pod)
        for n in (node, *planned):
            if n["metadata"]["name"] == node["metadata"]["name"]:
                hold(n, f"u{i}", [UUIDS[0]], container="c", visible=UUIDS[0])
    return out


def _check(tmp_path, pods: list[dict], planned: list[dict]) -> tuple[int, dict]:
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                                        "items": pods}))
    (tmp_path / "planned.yaml").write_text(yaml.safe_dump_all(planned))
    r = subprocess.run([sys.executable, "-m", "webhook", "check", "--running", "-f",
                        str(tmp_path / "pods.yaml"), "--cluster", str(tmp_path / "planned.yaml"),
                        "-o", "json"], capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def test_hami_chart_values_switching_the_plugin_to_cdi_break_no_running_pod(tmp_path, helm):
    """HAMi's plugin moved to cdi-annotations on nodes whose specs have no device-plugin
    kind: a new pod there would fail, but a running one restarts with the answer the kubelet
    cached when it started (UUIDs in NVIDIA_VISIBLE_DEVICES), which still resolves, so no
    running pod is at risk; a running pod whose cached answer is not known is doubt, never
    judged by the plugin's new strategy."""
    # (published by an agent that does not read the plugin's pod: the plan's DaemonSet then
    # says what the plugin will run with)
    nodes = [agent_node(tmp_path / "n", "hami-1", "hami", "operator-management",
                        per_uuid=True, plugins=None)]
    nodes[0]["metadata"]["labels"]["gpu"] = "on"  # the chart's nvidiaNodeSelector
    pods = _running(tmp_path, nodes)
    today = hami.render(helm, tmp_path / "r1", "device-plugin/daemonsetnvidia.yaml")
    planned = hami.render(helm, tmp_path / "r2", "device-plugin/daemonsetnvidia.yaml",
                          "devicePlugin.deviceListStrategy=cdi-annotations")
    assert today["kind"] == planned["kind"] == "DaemonSet"
    code, doc = _check(tmp_path, pods, [*nodes, today])
    assert code == 0 and doc["atRisk"] == 0
    code, doc = _check(tmp_path, pods, [*nodes, planned])
    [p] = doc["pods"]
    assert code == 0 and p["outcome"] == "Fine", p
    assert "as the kubelet cached it" in p["message"]
    # no record of what it holds: doubt with the reason, whatever the plan
    unknown = json.loads(json.dumps(nodes))
    del unknown[0]["metadata"]["annotations"]["gpupool.io/held-devices"]
    code, doc = _check(tmp_path, pods, [*unknown, planned])
    [p] = doc["pods"]
    assert code == 0 and p["outcome"] == "MayFailOnRestart", p
    assert "held-devices" in p["message"]


def test_a_node_inventory_edited_by_hand_names_the_pods_the_upgrade_breaks(tmp_path):
    """The seed's clash before it happens: the planned inventory drops the per-UUID spec on
    one of two nodes; only the pod on that node is listed."""
    nodes = [agent_node(tmp_path / f"n{i}", f"hami-{i}", "hami", "operator-management",
                        per_uuid=True) for i in (1, 2)]
    planned = [agent_node(tmp_path / "p1", "hami-1", "hami", "operator-management"),
               nodes[1]]
    pods = _running(tmp_path, nodes, planned[0])
    code, doc = _check(tmp_path, pods, planned)
    risky = [(p["name"], p["node"], p["outcome"]) for p in doc["pods"] if p["outcome"] != "Fine"]
    assert code == 1 and risky == [("train-0", "hami-1", "FailsOnRestart")]


def test_a_planned_toolkit_config_moving_the_runtime_to_cdi_breaks_hami_pods(tmp_path):
    """The seed's clash, before the upgrade: the planned nvidia-container-toolkit config
    switches the runtime from legacy to cdi mode (the GPU Operator's CDI default) on a node
    whose specs define only management.nvidia.com/gpu=all. The agent's own reading of the
    planned config and spec directories gives the planned inventory."""
    today = agent_node(tmp_path / "now", "hami-1", "hami", "operator-management",
                       mode="legacy")
    planned = agent_node(tmp_path / "plan", "hami-1", "hami", "operator-management")
    pods = _running(tmp_path, [today], planned)
    assert '"mode":"cdi"' in planned["metadata"]["annotations"][
        "gpupool.io/cdi-inventory"].replace(" ", "")
    code, doc = _check(tmp_path, pods, [today])
    assert code == 0 and doc["atRisk"] == 0
    code, doc = _check(tmp_path, pods, [planned])
    [p] = doc["pods"]
    assert code == 1 and (p["node"], p["outcome"], p["reason"]) == (
        "hami-1", "FailsOnRestart", "CDIDeviceMissing")
