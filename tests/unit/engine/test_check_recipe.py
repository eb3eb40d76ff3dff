"""docs/checks.md's recipe is the only way a node check comes in, and it is enough: a check
written in a module of its own, its node fact declared, its words in the wording room and
one line in the registry, changes admission's decisions, steering and the message, is
re-judged exactly when what it declares it reads changes, and fails the moment it reads
something it did not declare. (The checks the product ships, GPU fit included, are
registered the same way: ``checks/nodechecks.py``.)"""

from __future__ import annotations

import copy
import importlib.util
import sys

import pytest

from harness.kit import gpu_pod
from tests.unit.engine.test_steering import agent_node, decide
from webhook.engine.admission import admit
from webhook.engine.checks import assessment, nodechecks
from webhook.engine.checks.assessment import Fact, UndeclaredRead
from webhook.engine.core.decision import Reason
from webhook.engine.view.nodes import NodeInfo
from webhook.engine.wording import words

MODULE = '''
from webhook.api.said import said
from webhook.engine.checks.assessment import (
    Combine, NodeAssessment, NodeCheck, NodeState, node_fact)
from webhook.engine.core.decision import Reason


def _assess(node, ask, prepared, so_far):
    if node_fact(node, "quarantined", ask.view) != "true":
        return None
    return NodeAssessment(node.name, NodeState.MISSING, reason=Reason.CDI_DEVICE_MISSING,
                          note=said("example.quarantined"), fix=said("example.release"))


CHECK = NodeCheck("the node is not quarantined", reads=(), node_reads=("quarantined",),
                  combine=Combine.WORSE, assess=_assess)
'''
LABEL = "example.com/quarantined"


def _register(tmp_path, monkeypatch, source: str = MODULE):
    """The recipe: the check's module, its node fact, its words, one registry line."""
    path = tmp_path / "quarantine.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("quarantine_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "quarantine_check", module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(assessment.NODE_FACTS, "quarantined", Fact(
        frozenset({"labels"}), lambda n, v: n.labels.get(LABEL)))
    monkeypatch.setitem(words.WORDS, "example.quarantined",
                        lambda s: "the node is quarantined by its team")
    monkeypatch.setitem(words.WORDS, "example.release",
                        lambda s: f"remove the {LABEL} label from those nodes")
    monkeypatch.setattr(nodechecks, "NODE_CHECKS",
                        nodechecks.Checks((*nodechecks.NODE_CHECKS, module.CHECK)))


def _nodes(tmp_path, quarantined: str) -> list[dict]:
    out = []
    for name in ("op-1", "op-2"):
        n = agent_node(tmp_path / name, name, None, "device-plugin", register=False)
        if name == "op-1" or quarantined == "both":
            n["metadata"]["labels"][LABEL] = "true"
        out.append(n)
    return out


POD = gpu_pod("p", limits={"nvidia.com/gpu": 1})


def test_a_check_added_by_the_recipe_warns_and_denies_in_its_own_words(tmp_path,
                                                                       monkeypatch):
    one, _, _ = decide(_nodes(tmp_path, "one"), POD)
    assert one.final.allowed and not one.final.warnings  # before: both nodes serve it
    _register(tmp_path, monkeypatch)
    one, _, _ = decide(_nodes(tmp_path / "a", "one"), POD)
    assert one.final.allowed  # op-2 serves it; op-1 is named as failing it
    assert one.final.warnings == (
        "gpupool: 1 of 2 candidate nodes lack CDI devices this pod needs; see gpupool doctor",)
    assert [n.node for n in one.final.nodes] == ["op-1"]
    both, _, _ = decide(_nodes(tmp_path / "b", "both"), POD)
    assert not both.final.allowed and both.final.reason == Reason.CDI_DEVICE_MISSING
    assert "Fix: remove the example.com/quarantined label from those nodes" \
        in both.final.message, both.final.message


def test_its_verdicts_are_kept_until_what_it_declares_changes(tmp_path, monkeypatch):
    _register(tmp_path, monkeypatch)
    nodes = _nodes(tmp_path, "both")
    _, view, policy = decide(nodes, POD)
    asked: list[str] = []
    real = nodechecks.judge
    monkeypatch.setattr(nodechecks, "judge", lambda n, *a: asked.append(n.name) or real(n, *a))
    for labels, judged, allowed in (({"team": "a"}, [], False),
                                    ({LABEL: "false"}, ["op-1"], True)):
        node = copy.deepcopy(nodes[0])
        node["metadata"]["labels"].update(labels)
        view.upsert_node(NodeInfo.from_object(node))
        got = admit.review_pod(POD, "default", view, policy)
        assert asked == judged and got.allowed is allowed, (labels, asked, got.message)
        nodes[0] = node
        asked.clear()


def test_a_read_it_does_not_declare_fails(tmp_path, monkeypatch):
    _register(tmp_path, monkeypatch, MODULE.replace(
        'node_reads=("quarantined",)', "node_reads=()").replace(
        'node_fact(node, "quarantined", ask.view)', f'node.labels.get("{LABEL}")'))
    with pytest.raises(UndeclaredRead):
        decide(_nodes(tmp_path, "one"), POD)
