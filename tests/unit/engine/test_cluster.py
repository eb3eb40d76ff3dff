"""The cluster view: what it keeps, and what takes it away, tested here rather than
described. A pool's nodes and the folds follow every node change; reading never writes;
labels, runtimes and slice columns that nodes share are held once and let go with their
last holder."""

from __future__ import annotations

import dataclasses
import gc
import weakref

from harness.kit import gpu_pod
from webhook.engine.admission.admit import review_pod
from webhook.engine.view.cluster import ClusterView, view_from_objects
from webhook.engine.view.nodes import NodeInfo
from webhook.files.policyfile import default_policy


def node(name: str, pool: str | None, **labels: str) -> dict:
    lab = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": name, **labels}
    if pool:
        lab["gpupool.io/pool"] = pool
    return {"kind": "Node", "metadata": {"name": name, "labels": lab}, "spec": {}}


def names(view: ClusterView, pool: str) -> list[str]:
    return [n.name for n in view.pool_nodes(default_policy(), pool)]


def test_pool_nodes_follow_every_node_change():
    policy = default_policy()
    view = view_from_objects([node("h1", "hami"), node("o1", None)], policy)
    assert names(view, "hami") == ["h1"] and names(view, "operator") == ["o1"]
    view.upsert_node(NodeInfo.from_object(node("h2", "hami")))
    assert names(view, "hami") == ["h1", "h2"]
    view.upsert_node(NodeInfo.from_object(node("h1", None)))  # relabelled to the default
    assert names(view, "hami") == ["h2"] and names(view, "operator") == ["h1", "o1"]
    view.delete_node("h2")
    assert names(view, "hami") == []


def test_reading_with_another_pool_label_answers_by_it_and_writes_nothing():
    policy = default_policy()
    view = view_from_objects([node("a", None, team="hami"), node("b", "hami")], policy)
    version = view.version
    other = dataclasses.replace(policy, pool_label="team")
    assert [n.name for n in view.pool_nodes(other, "hami")] == ["a"]
    assert [n.name for n in view.pool_nodes(policy, "hami")] == ["b"]  # index untouched
    assert view.version == version


def test_kept_decisions_are_dropped_when_the_pool_label_changes():
    policy = default_policy()
    nodes = [node("a", None, team="hami"), node("b", "hami")]
    view = view_from_objects(nodes, policy)
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1}, nodeName="a")
    before = review_pod(pod, "default", view, policy)
    assert before.pool == "operator"
    relabelled = dataclasses.replace(policy, pool_label="team")
    view.set_pool_label("team")
    after = review_pod(pod, "default", view, relabelled)
    fresh = review_pod(pod, "default", view_from_objects(nodes, relabelled), relabelled)
    assert after.pool == fresh.pool == "hami"
    assert after.to_json() == fresh.to_json()


def test_nodes_in_the_view_share_their_common_labels_and_let_go_of_them():
    """Nodes of one group hold one dict of the labels they share, in the view; a set of
    labels no node holds any more is not held either (labels that churn do not grow it)."""
    policy = default_policy()
    view = view_from_objects([node("a", "hami", zone="z1"), node("b", "hami", zone="z1")],
                             policy)
    a, b = view.node("a"), view.node("b")
    assert a.labels.shared is b.labels.shared and a.labels.get("zone") == "z1"
    for i in range(50):  # labels that churn, on one node
        view.upsert_node(NodeInfo.from_object(node("b", "hami", zone=f"z{i + 2}")))
    assert view.node("b").labels.get("zone") == "z51"
    assert len({id(n.labels.shared) for n in view.nodes()}) == 2
    view.upsert_node(NodeInfo.from_object(node("b", "hami", zone="z1")))
    assert view.node("b").labels.shared is view.node("a").labels.shared
    assert view.names_with_label("zone", "z1") == {"a", "b"}
    assert not view.names_with_label("zone", "z51")


def test_nodes_of_one_kind_share_their_runtime_and_let_go_of_it():
    """Issue 48: an inventory's runtime section is parsed per node, and the view keeps one
    per kind of node (as it keeps shared labels): equal runtimes become one object, a
    different one stays apart, and one no node holds any more is not held."""
    from webhook.api.inventory import Inventory, RuntimeInfo

    def agent(name: str, mode: str) -> dict:
        obj = node(name, "hami")
        inv = Inventory(kinds={}, runtime=RuntimeInfo(mode=mode, handlers={"nvidia": mode}))
        obj["metadata"]["annotations"] = {"gpupool.io/cdi-inventory": inv.dumps()}
        return obj

    policy = default_policy()
    view = view_from_objects([agent("a", "cdi"), agent("b", "cdi"), agent("c", "legacy")],
                             policy)

    def runtime(name: str) -> RuntimeInfo:
        n = view.node(name)
        assert n is not None and n.inventory is not None
        return n.inventory.runtime

    assert runtime("a") is runtime("b") and runtime("a") is not runtime("c")
    assert runtime("c").handlers == {"nvidia": "legacy"} and runtime("a").mode == "cdi"
    legacy, cdi = weakref.ref(runtime("c")), weakref.ref(runtime("a"))
    view.upsert_node(NodeInfo.from_object(agent("c", "cdi")))
    assert runtime("c") is runtime("a")
    gc.collect()
    assert legacy() is None, "a runtime no node holds is still held"
    for name in "abc":
        view.delete_node(name)
    gc.collect()
    assert cdi() is None


def test_kept_decisions_follow_runtime_class_changes(tmp_path):
    """Node verdicts depend on the handler a pod's class names: a class added, changed or
    deleted drops what was kept, and the next decision equals a fresh view's."""
    from tests.unit.engine.test_steering import agent_node, hami_pod

    policy = default_policy()
    nodes = [agent_node(tmp_path, "hami-broken", "hami", "operator-management")]
    view = view_from_objects(nodes, policy)
    pod = hami_pod(runtimeClassName="gpu-legacy")
    for classes in ({"gpu-legacy": "nvidia-legacy"}, {"gpu-legacy": "nvidia"}, {}, None):
        if classes is None:
            view.replace_runtime_classes(None)
        elif classes:
            view.set_runtime_class("gpu-legacy", classes["gpu-legacy"])
        else:
            view.set_runtime_class("gpu-legacy", None)
        kept = review_pod(pod, "default", view, policy)
        fresh = review_pod(pod, "default", view_from_objects(nodes, policy,
                                                             runtime_classes=classes), policy)
        assert kept.to_json() == fresh.to_json(), classes
    assert review_pod(pod, "default", view_from_objects(
        nodes, policy, runtime_classes={"gpu-legacy": "nvidia-legacy"}), policy).allowed


def test_every_kind_of_change_says_what_it_takes_away():
    """Invalidation is decided from the kind of change, in one table: a new kind of change
    without an entry fails here, not as a stale verdict in production."""
    from webhook.engine.view.caches import EFFECTS, Change

    assert set(EFFECTS) == set(Change)
    assert {e.folds for e in EFFECTS.values()} <= {"update", "remove", "clear", "slices", "keep"}


def test_two_nodes_labels_compared_at_some_keys():
    """What a fold asks of a node stored again: do the labels it reads read the same,
    wherever each node holds them (its own labels or its group's), absent counting."""
    from webhook.engine.view.labels import NodeLabels, same_at

    a = NodeLabels.build({"kubernetes.io/hostname": "a", "zone": "z1", "pool": "hami"}, "a")
    b = NodeLabels.build({"kubernetes.io/hostname": "a", "zone": "z1", "pool": "hami",
                          "extra": "x"}, "a")
    assert same_at(a, b, ("zone", "pool", "kubernetes.io/hostname", "missing"))
    assert not same_at(a, b, ("extra",)) and not same_at(b, a, ("extra",))
    c = NodeLabels.build({"kubernetes.io/hostname": "c", "zone": "z1", "pool": "hami"}, "c")
    assert not same_at(a, c, ("kubernetes.io/hostname",)) and same_at(a, c, ("zone",))
    plain = {"kubernetes.io/hostname": "a", "zone": "z1", "pool": "hami"}
    assert same_at(plain, a, ("zone", "pool")) and same_at(a, plain, ("zone", "pool"))
    assert not same_at(a, {**plain, "pool": "op"}, ("pool",))


def test_slices_of_one_model_share_their_columns_and_let_go_of_them():
    """ResourceSlices of one GPU model repeat their device names and shared fields node
    after node: the view holds them once, and a slice stored again or deleted releases its
    copy, so the next equal slice takes the copy a remaining slice holds (none left: its
    own)."""
    import copy

    from webhook.engine.stacks import dra

    def a100(node: str, uuid_tail: str) -> dra.Slice:
        s = dra.Slice.from_object(copy.deepcopy({
            "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                         "uuid": {"string": f"GPU-{uuid_tail}-{i}"}}} for i in range(2)]}}))
        assert s is not None
        return s

    view = ClusterView()
    view.replace_slices([a100("n1", "a"), a100("n2", "b")])

    def own(node: str) -> dra.Slice:
        (s,) = view.slices_for(node, own=True)
        return s

    assert own("n1").names is own("n2").names and own("n1").shared is own("n2").shared
    assert own("n1").varying != own("n2").varying  # (UUIDs are each node's own)
    kept = own("n1").names
    view.set_slice("n1-gpu.nvidia.com", None)
    view.set_slice("n3-gpu.nvidia.com", a100("n3", "c"))
    assert own("n3").names is kept  # n2 still holds it
    view.set_slice("n2-gpu.nvidia.com", None)
    view.set_slice("n3-gpu.nvidia.com", None)
    fresh = a100("n4", "d")
    view.set_slice("n4-gpu.nvidia.com", fresh)
    assert own("n4").names is fresh.names and own("n4").names is not kept
