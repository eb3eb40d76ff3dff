"""docs/checks.md's worked example, run as written: a node check added as one pure function
and its declaration takes effect, its findings follow the node facts it declared and no
others, and a read it did not declare fails."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from harness.kit import ROOT
from tests.docs import blocks
from tests.unit.engine.test_steering import agent_node, gpu_pod
from webhook.engine.admission import admit
from webhook.engine.checks import nodechecks
from webhook.engine.checks.assessment import NodeCheck, UndeclaredRead
from webhook.engine.core.decision import Reason
from webhook.engine.view.cluster import view_from_objects
from webhook.engine.view.nodes import NodeInfo
from webhook.engine.wording import words
from webhook.files.policyfile import default_policy

INVENTORY = "gpupool.io/cdi-inventory"
REGISTERED = nodechecks.NODE_CHECKS
BROKEN = "/etc/cdi/broken.yaml"


def example(monkeypatch: pytest.MonkeyPatch | None = None) -> NodeCheck:
    """The page's python block, run as a module of its own; its words registered where the
    page says (``words.WORDS``), when ``monkeypatch`` is given."""
    (block,) = [b for b in blocks([ROOT / "docs" / "checks.md"]) if b.lang == "python"]
    module: dict[str, Any] = {"__name__": "checks_md_example"}
    exec(compile(block.text, block.where, "exec"), module)
    check = module["UNREAD_SPECS"]
    assert isinstance(check, NodeCheck)
    if monkeypatch is not None:
        for what, worded in module["WORDS"].items():
            monkeypatch.setitem(words.WORDS, what, worded)
    return check


def _with_unread_spec(node: dict, unread: bool = True) -> dict:
    node = copy.deepcopy(node)
    ann = node["metadata"]["annotations"]
    inv = json.loads(ann[INVENTORY])
    inv["errors"] = [{"path": BROKEN, "reason": "yaml: line 3: mapping values are not "
                                               "allowed"}] if unread else []
    ann[INVENTORY] = json.dumps(inv)
    return node


@pytest.fixture
def nodes(tmp_path) -> list[dict]:
    return [agent_node(tmp_path, name, None, "operator-management", register=False,
                       per_uuid=True) for name in ("op-1", "op-2")]


def _review(view, policy) -> Any:
    """What the user sees: the final decision, its findings naming each node."""
    return admit.review_pod(gpu_pod("g", limits={"nvidia.com/gpu": 1}), "default", view,
                            policy)


def _said(view, policy) -> str:
    """The validating stage's message (what ``gpupool check`` prints for the pod)."""
    rv = admit.review(admit.Subject(kind="Pod", object=gpu_pod("g", limits={
        "nvidia.com/gpu": 1}), namespace="default"), view, policy)
    assert rv.validation is not None
    return rv.validation.message


def test_the_worked_example_takes_effect_once_registered(nodes, monkeypatch):
    check = example(monkeypatch)
    policy = default_policy()
    objects = [nodes[0], _with_unread_spec(nodes[1])]
    before = _review(view_from_objects(objects, policy), policy)
    assert before.allowed and not before.warnings and not before.nodes, before.to_json()
    monkeypatch.setattr(nodechecks, "NODE_CHECKS", (*REGISTERED, check))
    view = view_from_objects(objects, policy)
    after = _review(view, policy)
    assert after.allowed and after.reason == Reason.ROUTED, after.to_json()
    assert any("1 of 2 candidate nodes" in w for w in after.warnings), after.warnings
    assert [(n.node, BROKEN in n.note) for n in after.nodes] == [("op-2", True)]
    said = _said(view, policy)
    assert said.startswith("pod default/g: 1 of 2 candidate nodes may fail it: op-2: "), said
    assert BROKEN in said

    # the node's findings follow what the check declared it reads...
    view.upsert_node(NodeInfo.from_object(_with_unread_spec(nodes[1], unread=False)))
    fixed = _review(view, policy)
    assert fixed.allowed and not fixed.warnings and not fixed.nodes, fixed.to_json()
    assert fixed.to_json() == _review(view_from_objects(
        [nodes[0], _with_unread_spec(nodes[1], unread=False)], policy), policy).to_json()

    # ...and a label it does not read leaves them as they were: the node is not judged anew
    view.upsert_node(NodeInfo.from_object(_with_unread_spec(nodes[1])))
    assert BROKEN in _said(view, policy)
    asked: list[str] = []
    real = nodechecks.judge
    monkeypatch.setattr(nodechecks, "judge", lambda n, *a: asked.append(n.name) or real(n, *a))
    labelled = _with_unread_spec(nodes[1])
    labelled["metadata"]["labels"]["team"] = "vision"
    view.upsert_node(NodeInfo.from_object(labelled))
    assert BROKEN in _said(view, policy)
    assert asked == [], "a label no check declares made the node be judged again"


def test_a_read_the_example_did_not_declare_fails(nodes, monkeypatch):
    check = example()
    policy = default_policy()

    def also_labels(node, ask, prepared, so_far):
        node.labels  # noqa: B018  (the undeclared read is the test)
        return check.assess(node, ask, prepared, so_far)

    for sloppy in (dataclasses.replace(check, assess=also_labels),
                   dataclasses.replace(check, node_reads=())):
        monkeypatch.setattr(nodechecks, "NODE_CHECKS", (*REGISTERED, sloppy))
        view = view_from_objects([nodes[0], _with_unread_spec(nodes[1])], policy)
        with pytest.raises(UndeclaredRead, match="unread CDI specs"):
            _review(view, policy)


def test_a_pod_fact_the_check_did_not_declare_fails(nodes, monkeypatch):
    """The pod side likewise: a check that reads the pod's RuntimeClass without declaring
    "runtime class" fails, and passes once it declares it."""
    check = example()
    policy = default_policy()

    def runtime_class(node, ask, prepared, so_far):
        ask.facts.runtime_class  # noqa: B018  (the read is the test)
        return None

    for reads, fails in (((), True), (("runtime class",), False)):
        sloppy = dataclasses.replace(check, assess=runtime_class, reads=reads)
        monkeypatch.setattr(nodechecks, "NODE_CHECKS", (*REGISTERED, sloppy))
        view = view_from_objects(nodes, policy)
        if fails:
            with pytest.raises(UndeclaredRead, match="runtime_class"):
                _review(view, policy)
        else:
            assert _review(view, policy).allowed
