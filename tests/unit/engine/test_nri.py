"""Devices a pod names in its own ``nvidia.cdi.k8s.io`` annotations, where the GPU Operator
runs NVIDIA's NRI plugin (``webhook.engine.stacks.nri``). What the plugin does with them is checked
against the plugin itself in tests/integration/test_nri_plugin.py; here, what gpupool decides
and says."""

from __future__ import annotations

import pytest

from harness.kit import gpu_pod
from tests.unit.engine.test_steering import agent_node, decide, terms
from webhook.engine.core.decision import Reason
from webhook.engine.stacks.clusterpolicy import DEPLOY_LABEL, cluster_operator, nri_plugin
from webhook.engine.stacks.nri import (
    DOMAIN,
    MANAGEMENT,
    NAMESPACES_ENV,
    TOOLKIT_LABEL,
    NRIPlugin,
    annotation_requests,
)

ALL = f"{MANAGEMENT}=all"


def cluster_policy(nri: bool = True, namespace: str | None = "gpu-operator",
                   extra: str | None = None, **cdi) -> dict:
    toolkit = {"env": [{"name": NAMESPACES_ENV, "value": extra}]} if extra is not None else {}
    out = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
           "metadata": {"name": "cluster-policy"},
           "spec": {"cdi": {"enabled": True, "nriPluginEnabled": nri, **cdi},
                    "toolkit": toolkit}}
    if namespace:
        out["status"] = {"namespace": namespace, "state": "ready"}
    return out


def operator_node(tmp_path, name: str = "op-1", toolkit: bool = True) -> dict:
    """An operator node whose device plugin writes its spec (a plain GPU pod runs there),
    with the operator's management spec (it defines ``management.nvidia.com/gpu=all``)."""
    node = agent_node(tmp_path, name, None, "device-plugin", register=False)
    node["metadata"]["labels"][DEPLOY_LABEL] = "true"
    node["metadata"]["labels"][TOOLKIT_LABEL] = str(toolkit).lower()
    return node


def annotated(value: str, key: str = f"{DOMAIN}/container.c", **spec) -> dict:
    pod = gpu_pod("mon", limits={"nvidia.com/gpu": 1}, **spec)
    pod["metadata"]["annotations"] = {key: value}
    return pod


# ------------------------------------------------------------------ what the plugin reads


def test_the_effective_annotation_per_container_as_nri_reads_it():
    ann = {f"{DOMAIN}/container.a": "x/y=1", f"{DOMAIN}/pod": "x/y=2", DOMAIN: "x/y=3"}
    assert annotation_requests(ann, ["a", "b"]) == (("a", "x/y=1"), ("b", "x/y=2"))
    assert annotation_requests({DOMAIN: "x/y=3"}, ["a"]) == (("a", "x/y=3"),)
    # the device plugin's annotation, not NRI's
    assert annotation_requests({"cdi.k8s.io/x": "x/y=1"}, ["a"]) == ()
    assert annotation_requests({f"{DOMAIN}/container.a": 7}, ["a"]) == ()  # not a string: no value
    assert annotation_requests({}, ["a"]) == ()


@pytest.mark.parametrize("obj, expected", [
    (cluster_policy(), NRIPlugin("gpu-operator")),
    (cluster_policy(extra="ml, monitoring,"), NRIPlugin("gpu-operator",
                                                     frozenset({"ml", "monitoring"}))),
    (cluster_policy(namespace=None), NRIPlugin(None)),
    (cluster_policy(nri=False), None),
    (cluster_policy(enabled=False), None),  # the operator refuses NRI without CDI
    ({"spec": {"cdi": {"nriPluginEnabled": True}, "toolkit": {"enabled": False}}}, None),
    ({"spec": "junk"}, None),
])
def test_the_nri_plugin_as_the_cluster_policy_sets_it_up(obj, expected):
    assert nri_plugin(obj) == expected


def test_the_operator_view_carries_the_plugin():
    assert cluster_operator([cluster_policy()]).nri == NRIPlugin("gpu-operator")


# ------------------------------------------------------------------ decisions


def test_management_devices_outside_the_allowed_namespaces_never_arrive(tmp_path):
    """The plugin drops them with one log line and no error: the container starts without
    them. gpupool denies, naming the namespace, the node and the fix."""
    node = operator_node(tmp_path)
    rv, _, _ = decide([node, cluster_policy()], annotated(ALL))
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    msg = rv.final.message
    assert "op-1" in msg and "namespace default" in msg and "allowed: gpu-operator" in msg
    assert f"add namespace default to {NAMESPACES_ENV}" in msg
    # its device plugin's GPU still arrives: the message says what is lost, not "its GPUs"
    assert "would not reach its containers (the GPUs its device plugin hands would)" in msg
    assert "start without its GPUs" not in msg
    # the fix applied: the namespace allowed through the ClusterPolicy's toolkit env
    rv, _, _ = decide([node, cluster_policy(extra="default")], annotated(ALL))
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()


def test_a_name_no_spec_defines_fails_like_any_unresolvable_device(tmp_path):
    node = operator_node(tmp_path)
    bad = f"{MANAGEMENT}=GPU-00000000-0000-0000-0000-000000000000"
    rv, _, _ = decide([node, cluster_policy(extra="default")],
                      annotated(f"{ALL},{bad}", key=f"{DOMAIN}/pod"))
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert f"op-1 lacks {bad}" in rv.final.message
    assert "NRI plugin" in rv.final.message and f"correct the pod's {DOMAIN}" in rv.final.message
    # the device plugin's own names resolve from its spec, in any namespace
    rv, _, _ = decide([node, cluster_policy()],
                      annotated("k8s.device-plugin.nvidia.com/gpu=" + _first_gpu(node)))
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()


def test_annotations_for_another_container_or_where_no_plugin_reads_them_count_for_nothing(
        tmp_path):
    node = operator_node(tmp_path)
    other = annotated(ALL, key=f"{DOMAIN}/container.sidecar")
    assert decide([node, cluster_policy()], other)[0].final.allowed
    # no NRI plugin in the ClusterPolicy, no ClusterPolicy, or a node without the toolkit
    assert decide([node, cluster_policy(nri=False)], annotated(ALL))[0].final.allowed
    assert decide([node], annotated(ALL))[0].final.allowed
    bare = operator_node(tmp_path / "b", "op-2", toolkit=False)
    rv, _, _ = decide([bare, cluster_policy()], annotated(ALL))
    assert rv.final.allowed and not rv.final.warnings


def test_an_unknown_operator_namespace_is_doubt_not_a_denial(tmp_path):
    rv, _, _ = decide([operator_node(tmp_path), cluster_policy(namespace=None)], annotated(ALL))
    assert rv.final.allowed and rv.final.warnings
    assert any("status.namespace" in n.note for n in rv.final.nodes), rv.final.to_json()


def test_unpinned_pods_are_steered_off_the_nodes_that_would_drop_their_devices(tmp_path):
    """One node without the toolkit (the plugin never reads the annotation there: the pod
    runs with its device-plugin GPU) and one that drops the management device: the pod is
    kept off the second by name."""
    bad, fine = operator_node(tmp_path, "op-bad"), operator_node(tmp_path / "f", "op-fine",
                                                                 toolkit=False)
    pod = annotated(ALL)
    rv, _, _ = decide([bad, fine, cluster_policy()], pod)
    assert rv.final.allowed, rv.final.to_json()
    fields = [e for t in terms(pod, rv.mutation.patch) for e in t.get("matchFields", [])]
    assert fields == [{"key": "metadata.name", "operator": "NotIn", "values": ["op-bad"]}]


def _first_gpu(node: dict) -> str:
    import json
    inv = json.loads(node["metadata"]["annotations"]["gpupool.io/cdi-inventory"])
    return inv["kinds"]["k8s.device-plugin.nvidia.com/gpu"][0]


def test_a_node_whose_containerd_hosts_no_nri_plugin_never_injects_them(tmp_path):
    """containerd with NRI disabled adjusts nothing (containerd v2.2 internal/cri/nri): the
    annotated devices never arrive, in any namespace."""
    import json

    node = operator_node(tmp_path)
    ann = node["metadata"]["annotations"]
    inv = json.loads(ann["gpupool.io/cdi-inventory"])
    inv["runtime"]["containerdNRI"] = False
    ann["gpupool.io/cdi-inventory"] = json.dumps(inv)
    rv, _, _ = decide([node, cluster_policy(extra="default")], annotated(ALL))
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    assert "containerd's NRI is disabled" in rv.final.message
    assert 'plugins."io.containerd.nri.v1.nri" disable = false' in rv.final.message
    # a pod naming nothing for the plugin is not concerned
    assert decide([node, cluster_policy()], gpu_pod("plain"))[0].final.allowed


def test_a_gpu_that_arrives_but_not_the_one_accounted_for_has_its_own_reason(tmp_path):
    """Issue 34, item 3: HAMi's envvar pod on a node of the GPU Operator's NRI setup
    (containerd's default runtime is runc, so NVIDIA_VISIBLE_DEVICES reaches nothing), whose
    own annotation makes the NRI plugin inject one GPU by UUID: a GPU does arrive, so
    "starts without its GPUs" is false; it is not (surely) the one HAMi accounted for.
    Issue 46, item 4: where what it injects holds every GPU HAMi could account for
    (management.nvidia.com/gpu=all), the accounted GPU arrives with the rest: it starts as
    accounted, not denied (tests/integration/test_nri_plugin.py has the real plugin's
    word)."""
    from harness.layouts import UUIDS
    from tests.unit.engine.test_steering import hami_pod

    node = agent_node(tmp_path, "hami-nri", "hami", "operator-management",
                      default_runtime="runc", per_uuid=True)
    node["metadata"]["labels"][TOOLKIT_LABEL] = "true"
    plain = hami_pod()
    rv, _, _ = decide([node, cluster_policy(extra="default")], plain)
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    one = f"{MANAGEMENT}={UUIDS[0]}"
    pod = hami_pod()
    pod["metadata"]["annotations"] = {f"{DOMAIN}/pod": one}
    rv, _, _ = decide([node, cluster_policy(extra="default")], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_ACCOUNTED
    msg = rv.final.message
    assert "would get a GPU, but not the one its device plugin accounted for" in msg
    assert "hami-nri" in msg and one in msg and "share a GPU" in msg
    assert "start without" not in msg
    assert "devicePlugin.deviceListStrategy=cdi-annotations" in msg
    # every GPU named by UUID, or all of them at once: the accounted one arrives
    for value in (f"{one},{MANAGEMENT}={UUIDS[1]}", ALL):
        pod["metadata"]["annotations"] = {f"{DOMAIN}/pod": value}
        rv, _, _ = decide([node, cluster_policy(extra="default")], pod)
        assert rv.final.allowed and not rv.final.warnings, (value, rv.final.to_json())
    # HAMi narrowed to the GPU the name holds: the one it may account is the one injected
    narrowed = hami_pod()
    narrowed["metadata"]["annotations"] = {f"{DOMAIN}/pod": one,
                                           "nvidia.com/use-gpuuuid": UUIDS[0]}
    rv, _, _ = decide([node, cluster_policy(extra="default")], narrowed)
    assert rv.final.allowed, rv.final.to_json()
    # where the plugin drops the annotation (namespace not allowed), nothing arrives at all
    rv, _, _ = decide([node, cluster_policy()], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED


def test_a_mix_of_nodes_that_fail_in_different_ways_says_each_and_leaves_nothing_empty(
        tmp_path):
    """Issue 46, item 5: one candidate never delivers the GPU (runc, no NRI plugin there),
    another delivers a different one (the NRI plugin injects one GPU by name), a third fails
    the container's creation on a name no spec defines (``nvidia.com/gpu=0``). No part of
    the message is empty (no 'mode None', no 'default kind )', no '--vendor= --class='),
    no RuntimeClass is named that the nodes cannot run, and each node's note says what the
    real stack does there."""
    from harness.layouts import UUIDS
    from tests.messages import empty_parts, named_runtime_classes
    from tests.unit.engine.test_steering import hami_pod

    def runc_node(name: str, nri_runs: bool) -> dict:
        node = agent_node(tmp_path / name, name, "hami", "operator-management",
                          default_runtime="runc", per_uuid=True)
        node["metadata"]["labels"][TOOLKIT_LABEL] = str(nri_runs).lower()
        return node

    nodes = [runc_node("hami-plain", False), runc_node("hami-nri", True)]
    pod = hami_pod()
    pod["metadata"]["annotations"] = {f"{DOMAIN}/pod": f"{MANAGEMENT}={UUIDS[0]}"}
    rv, _, _ = decide([*nodes, cluster_policy(extra="default")], pod)
    final = rv.final
    assert not final.allowed and final.reason == Reason.GPU_NOT_DELIVERED, final.to_json()
    for text in (final.message, *(f.note for f in final.nodes)):
        assert not empty_parts(text), (empty_parts(text), text)
    assert "would not get the GPUs its device plugin accounted for" in final.message
    assert "on hami-plain: " in final.message and "on hami-nri: " in final.message
    assert not named_runtime_classes(final.message)  # runc nodes: no class to suggest
    notes = {f.node: f.note for f in final.nodes}
    assert "start without" in notes["hami-plain"] or "not the NVIDIA runtime" in \
        notes["hami-plain"]
    assert "accounted for" in notes["hami-nri"]
    # a name no spec defines fails the container's creation: that is what is said
    pod["metadata"]["annotations"] = {f"{DOMAIN}/pod": "nvidia.com/gpu=0"}
    rv, _, _ = decide([nodes[1], cluster_policy(extra="default")], pod)
    final = rv.final
    assert not final.allowed and final.reason == Reason.CDI_DEVICE_MISSING, final.to_json()
    assert "hami-nri lacks nvidia.com/gpu=0" in final.message
    assert "start without" not in final.message
    assert not empty_parts(final.message), final.message
