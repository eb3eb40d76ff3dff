"""The GPU Operator's ClusterPolicy as the operator applies it to its device plugin, and the
node ``delivery: detect`` misreads without it: a plugin in a CDI strategy that wrote no
spec looks, on disk, like one in envvar."""

from __future__ import annotations

import pytest

from harness.kit import gpu_pod
from tests.unit.engine.test_steering import decide
from webhook.api.delivery import CDI_DEVICES, VISIBLE_DEVICES
from webhook.engine.core.decision import Reason
from webhook.engine.stacks.clusterpolicy import DEPLOY_LABEL, cluster_operator, plugin_way


def agent_node(*args, **kwargs):
    """A node whose agent did not look at the device-plugin pods (unless told what it
    learned): how the plugin hands GPUs comes from the cluster's objects, or the disk."""
    from tests.unit.engine import test_steering

    return test_steering.agent_node(*args, **{"plugins": None, **kwargs})


def policy(**spec) -> dict:
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"}, "spec": spec}


def env(value: str) -> dict:
    return {"devicePlugin": {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": value}]}}


@pytest.mark.parametrize("spec, way", [
    ({}, CDI_DEVICES),  # cdi.enabled defaults to true
    ({"cdi": {"enabled": True}}, CDI_DEVICES),
    ({"cdi": {"enabled": False}}, VISIBLE_DEVICES),  # the plugin's own default, envvar
    ({"cdi": {"enabled": True}, **env("envvar")}, VISIBLE_DEVICES),  # the user's env wins
    ({"cdi": {"enabled": False}, **env("cdi-cri")}, CDI_DEVICES),
    ({**env("cdi-annotations,cdi-cri")}, CDI_DEVICES),
    ({**env("volume-mounts")}, None),  # not modelled: detect as before
    ({"devicePlugin": {"enabled": False}}, None),
])
def test_the_plugin_way_as_the_operator_sets_it(spec, way):
    assert plugin_way(policy(**spec)) == way


def test_one_policy_or_no_guess():
    assert cluster_operator([policy()]).way == CDI_DEVICES
    assert cluster_operator([]) is None
    assert cluster_operator([policy(), policy(cdi={"enabled": False})]) is None


def test_a_cdi_strategy_plugin_without_its_spec_is_caught(tmp_path):
    """An operator node in auto mode whose plugin (CDI strategy, the operator's default)
    has not written its spec: detect reads the node as envvar, where auto mode resolves
    anything; the ClusterPolicy says CDI names, which containerd cannot resolve without the
    spec."""
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False,
                      mode="auto")
    node["metadata"]["labels"][DEPLOY_LABEL] = "true"
    pod = gpu_pod("g", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([node], pod)
    assert rv.final.allowed  # what detect alone concludes
    rv, view, _ = decide([node, policy()], pod)
    assert view.operator_way() == CDI_DEVICES
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "k8s.device-plugin.nvidia.com/gpu=GPU-" in rv.final.message
    # a node the operator does not run its plugin on (HAMi's) is still read from disk
    node["metadata"]["labels"][DEPLOY_LABEL] = "false"
    rv, _, _ = decide([node, policy()], pod)
    assert rv.final.allowed


def test_where_every_agent_learned_the_way_the_label_steers_and_the_api_server_can_route(
        tmp_path):
    """A ClusterPolicy declares the plugin's way. A node whose agent read the plugin's pod
    already carries that way in its steering label (``delivery.detected_way``), so a
    ``detect`` pool of such nodes is steered by the label and its plain pods are the routing
    policy's; one node whose agent could not read the plugin's pod (its label speaks of the
    disk alone) makes the pool's pods judged node by node again."""
    from tests.unit.engine import test_steering
    from webhook.engine import routing_facts, view_from_objects
    from webhook.files.policyfile import default_policy

    def op_node(name: str, learned: bool) -> dict:
        node = test_steering.agent_node(
            tmp_path / name, name, None, "device-plugin", register=False,
            **({} if learned else {"plugins": None}))
        node["metadata"]["labels"][DEPLOY_LABEL] = "true"
        return node

    pol = default_policy()
    learned = [op_node("op-1", True), op_node("op-2", True)]
    view = view_from_objects(learned, pol, resources=[policy()])
    assert view.operator_way() == CDI_DEVICES
    assert routing_facts(view, pol).by_name == frozenset()
    pod = gpu_pod("g", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([*learned, policy()], pod)
    assert rv.final.allowed, rv.final.to_json()
    steered = test_steering.terms(pod, rv.mutation.patch)
    assert not any(t.get("matchFields") for t in steered)  # by the label, not by name
    assert any(e["key"] == "resolve.gpupool.io/detected" for t in steered
               for e in t["matchExpressions"])
    guessed = [*learned, op_node("op-3", False)]
    view = view_from_objects(guessed, pol, resources=[policy()])
    assert routing_facts(view, pol).by_name == frozenset({"operator"})
