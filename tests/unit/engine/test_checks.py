"""The checks as a registered list: what each reads makes the verdict cache key, so pods that
differ in it never share a verdict, and the pod-level checks join as one."""

from __future__ import annotations

import dataclasses

from tests.unit.engine.test_own_devices import own
from tests.unit.engine.test_steering import agent_node, decide
from webhook.api import delivery
from webhook.engine.admission import admit
from webhook.engine.checks import nodechecks, registry
from webhook.engine.checks.assessment import FACTS, NODE_FACTS
from webhook.engine.core.decision import Reason
from webhook.engine.pod.podfacts import PodFacts
from webhook.files.policyfile import default_policy_text


def test_every_fact_a_check_reads_is_one_the_key_can_read():
    for check in nodechecks.NODE_CHECKS:
        assert check.reads and set(check.reads) <= set(FACTS), check.name
    assert set(nodechecks.reads()) == set(FACTS), "a fact no check reads: drop it from FACTS"


def test_every_node_fact_a_check_reads_is_one_the_node_key_reads():
    for check in nodechecks.NODE_CHECKS:
        assert set(check.node_reads) <= set(NODE_FACTS), check.name
    assert set(nodechecks.node_reads()) == set(NODE_FACTS), \
        "a node fact no check reads: drop it from NODE_FACTS"


def test_the_key_is_derived_from_the_checks_declarations(tmp_path):
    """Two pods that differ only in their own NVIDIA_VISIBLE_DEVICES: with a check that reads
    it they have two keys; had no registered check declared it, they would share one."""
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False)
    _, view, policy = decide([node], own("all"))
    a, b = (PodFacts.parse(p, "default", policy) for p in (own("all"), own("void")))
    checks = nodechecks.NODE_CHECKS
    assert nodechecks.shape_key(a, view, checks) != nodechecks.shape_key(b, view, checks)
    blind = tuple(dataclasses.replace(c, reads=tuple(r for r in c.reads
                                                     if r != "own NVIDIA_VISIBLE_DEVICES"))
                  for c in checks)
    assert nodechecks.shape_key(a, view, blind) == nodechecks.shape_key(b, view, blind)


def test_pods_differing_in_what_a_check_reads_get_their_own_verdicts(tmp_path):
    """One view, one workload shape: the first pod's cached verdict must not answer the
    second, whose own NVIDIA_VISIBLE_DEVICES names a GPU the node does not have."""
    node = agent_node(tmp_path, "op-jit", None, "operator-management", register=False,
                      default_kind=delivery.JIT_KIND)
    rv, view, policy = decide([node], own("all"))
    assert rv.final.allowed, rv.final.to_json()
    stranger = own("GPU-00000000-0000-0000-0000-000000000000")
    second = admit.review(admit.Subject(kind="Pod", object=stranger, namespace="default"),
                          view, policy)
    assert not second.final.allowed, second.final.to_json()


def test_a_denial_ends_validation_and_an_allowed_answer_joins(tmp_path):
    """The user-namespace check comes first: its denial is the answer even where the
    delivery check would deny too. Allowed (``onUserNamespace: warn``), it lends only its
    warning, and the delivery check's finding (its message and nodes) still decides."""
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False,
                      per_uuid=True)
    pod = own("nvidia.com/gpu=all")
    pod["spec"]["hostUsers"] = False
    rv, _, _ = decide([node], pod)
    assert rv.final.reason == Reason.USER_NAMESPACE_UNSUPPORTED
    rv, _, _ = decide([node], pod, default_policy_text() + "onUserNamespace: warn\n")
    assert rv.final.reason == Reason.CDI_DEVICE_MISSING, rv.final.to_json()
    assert "op-1 lacks nvidia.com/gpu=all" in rv.final.message
    assert registry.POD_CHECKS[0].name == "user namespace"


def test_a_user_namespace_warning_joins_an_allowed_pod(tmp_path):
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False)
    pod = own("all")
    pod["spec"]["hostUsers"] = False
    rv, _, _ = decide([node], pod, default_policy_text() + "onUserNamespace: warn\n")
    assert rv.final.allowed and rv.final.reason == Reason.ROUTED
    assert "hostUsers: false" not in rv.final.message  # warnings only, not its message
    assert any("#648" in w for w in rv.final.warnings)


def test_pod_checks_write_no_words_and_every_finding_has_some():
    """Issue 48: a pod check returns data; ``render`` alone makes the decision and its words.
    No pod check module builds a decision, and every finding the CDI check can make (and
    the user-namespace check's) is worded, allowed or denied."""
    import ast
    import inspect

    from webhook.engine.checks import allocation, cdi, render, usernamespace
    from webhook.engine.checks.findings import found
    from webhook.engine.core.policy import load_policy_text
    from webhook.engine.view.cluster import ClusterView

    for module in (allocation, cdi, usernamespace):
        tree = ast.parse(inspect.getsource(module))
        built = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id in ("allow", "deny", "Decision")}
        assert not built, f"{module.__name__} builds a decision itself: {built}"
    policy = load_policy_text(default_policy_text())
    pool = policy.default_pool
    s = cdi.Verdicts(total=0, unfit=[], ok=0, missing=[], unknown=[], shown=())
    for finding in cdi.Finding:
        for denies in (False, True):
            d = render.decision(found(f"cdi.{finding.value}", pool, denies=denies,
                                      reason=cdi.OUTCOMES[finding].reason, finding=finding,
                                      verdicts=s), policy, ClusterView())
            assert d.allowed is not denies and d.statement, (finding, denies)
    d = render.decision(found(usernamespace.HOST_USERS, pool, denies=True,
                              reason=Reason.USER_NAMESPACE_UNSUPPORTED), policy, None)
    assert not d.allowed and "hostUsers: false" in d.about("pod ns/p").message
