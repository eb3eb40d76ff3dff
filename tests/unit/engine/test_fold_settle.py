"""A fold is judged when a decision reads it, not when the watch stores a node: storing a
node marks it in every fold (a dictionary write under the view's lock), and the first
reader judges the marked nodes outside the lock and swaps their values in. A second reader
waits for the first rather than decide from values about to change; a node changed twice
between reads is judged once, against what its value was judged for; a node deleted while
it is judged stays deleted."""

from __future__ import annotations

import threading

from harness.kit import gpu_pod
from tests.unit.engine.test_steering import agent_node, decide
from webhook.engine.admission import admit
from webhook.engine.checks import nodechecks
from webhook.engine.view.caches import NodeChange, NodeFold
from webhook.engine.view.nodes import NodeInfo


def _node(name: str, **labels: str) -> NodeInfo:
    return NodeInfo.from_object({"metadata": {"name": name, "labels": labels}})


def test_storing_a_node_judges_nothing_the_next_read_judges_it_once():
    calls: list[str] = []

    def fn(n: NodeInfo) -> str:
        calls.append(n.name)
        return n.labels.get("v", "")

    fold = NodeFold(fn, [_node("a", v="1"), _node("b", v="1")])
    calls.clear()
    fold.update(_node("a", v="2"))
    fold.update(_node("a", v="3"))
    assert calls == []  # the writer judged nothing
    assert fold.derive(dict) == {"a": "3", "b": "1"}
    assert calls == ["a"]  # one node, once, with its latest state
    assert fold.derive(dict) == {"a": "3", "b": "1"} and calls == ["a"]


def test_a_node_changed_twice_is_judged_against_what_its_value_was_judged_for():
    seen: list[tuple[str, str]] = []

    def again(change: NodeChange, was: str) -> str:
        seen.append((change.old.labels["v"], was))
        return change.node.labels["v"]

    first = _node("a", v="1")
    fold = NodeFold(lambda n: n.labels["v"], [first], again=again)
    second, third = _node("a", v="2"), _node("a", v="3")
    fold.update(second, NodeChange(second, first))
    fold.update(third, NodeChange(third, second))
    assert fold.derive(dict) == {"a": "3"}
    assert seen == [("1", "1")]  # the value held was judged for the first node


def test_a_node_deleted_while_it_is_judged_stays_deleted():
    fold: NodeFold[str]

    def fn(n: NodeInfo) -> str:
        if n.labels.get("v") == "2":
            fold.remove("a")  # the watch deletes it meanwhile
        return n.labels.get("v", "")

    fold = NodeFold(fn, [_node("a", v="1")])
    fold.update(_node("a", v="2"))
    assert fold.derive(dict) == {}


def test_a_second_reader_waits_for_the_first_rather_than_read_stale_values():
    started, release = threading.Event(), threading.Event()

    def fn(n: NodeInfo) -> str:
        if n.labels.get("v") == "2":
            started.set()
            assert release.wait(10)
        return n.labels.get("v", "")

    fold = NodeFold(fn, [_node("a", v="1")])
    fold.update(_node("a", v="2"))
    first = threading.Thread(target=fold.derive, args=(dict,))
    first.start()
    assert started.wait(10)
    got: list[dict[str, str]] = []
    second = threading.Thread(target=lambda: got.append(fold.derive(dict)))
    second.start()
    second.join(0.3)
    assert second.is_alive() and not got  # waiting, not deciding from "1"
    fold.update(_node("b", v="1"))  # the watch is not held up meanwhile
    release.set()
    first.join(10)
    second.join(10)
    assert got == [{"a": "2", "b": "1"}]


def test_the_watch_storing_a_node_runs_no_node_check(tmp_path, monkeypatch):
    node = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    _, view, policy = decide([node], pod)
    asked: list[str] = []
    real = nodechecks.judge
    monkeypatch.setattr(nodechecks, "judge", lambda n, *a: asked.append(n.name) or real(n, *a))
    node["metadata"]["annotations"].pop("gpupool.io/cdi-inventory")
    view.upsert_node(NodeInfo.from_object(node))
    assert asked == []
    decided = admit.review_pod(pod, "default", view, policy)
    assert asked and decided.to_json() == decide([node], pod)[0].final.to_json()
