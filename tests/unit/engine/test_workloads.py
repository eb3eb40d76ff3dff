"""Workload objects: their pod templates are decided as their pods will be, on create and on
updates that change the template, for every workload kind."""

from __future__ import annotations

import copy
import json

import pytest

from harness.kit import body
from harness.layouts import hami_register
from tests.unit.engine.test_cdi import inventory, node
from webhook.engine.core.policy import load_policy_text
from webhook.engine.view.cluster import view_from_objects
from webhook.files.policyfile import default_policy, default_policy_text
from webhook.server.app import Webhook
from webhook.server.policysource import PolicySource

POD_SPEC = {"containers": [{"name": "c", "image": "cuda",
                            "resources": {"limits": {"nvidia.com/gpu": 1,
                                                     "nvidia.com/gpumem": 4000}}}]}
TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": POD_SPEC}
SELECTOR = {"matchLabels": {"app": "x"}}


def workload(kind: str) -> tuple[str, dict]:
    group, spec = {
        "Deployment": ("apps", {"selector": SELECTOR, "template": TEMPLATE}),
        "StatefulSet": ("apps", {"selector": SELECTOR, "serviceName": "x", "template": TEMPLATE}),
        "DaemonSet": ("apps", {"selector": SELECTOR, "template": TEMPLATE}),
        "ReplicaSet": ("apps", {"selector": SELECTOR, "template": TEMPLATE}),
        "Job": ("batch", {"template": {**TEMPLATE, "spec": {**POD_SPEC,
                                                            "restartPolicy": "Never"}}}),
        "CronJob": ("batch", {"schedule": "* * * * *", "jobTemplate": {"spec": {
            "template": {**TEMPLATE, "spec": {**POD_SPEC, "restartPolicy": "Never"}}}}}),
    }[kind]
    return group, copy.deepcopy({"apiVersion": f"{group}/v1", "kind": kind,
                                 "metadata": {"name": f"{kind.lower()}-x", "namespace": "ml"},
                                 "spec": spec})


KINDS = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]


@pytest.fixture
def broken_view(tmp_path):
    policy = default_policy()
    mgmt = inventory(tmp_path, "operator-management")
    return view_from_objects([node("hami-1", "hami", mgmt, register=hami_register())], policy)


def _handler(view, policy_text=None) -> Webhook:
    fixed = load_policy_text(policy_text) if policy_text else None
    return Webhook(policies=PolicySource(fixed=fixed), view=view)


@pytest.mark.parametrize("kind", KINDS)
def test_workload_whose_pods_would_be_denied_is_denied(broken_view, kind):
    group, obj = workload(kind)
    code, out = _handler(broken_view).handle("validate", body(obj, kind=kind, group=group,
                                                              namespace="ml"), "application/json")
    resp = out["response"]
    assert code == 200 and resp["allowed"] is False, resp
    msg = resp["status"]["message"]
    assert msg.startswith(f"gpupool: CDIDeviceMissing: {kind} ml/{kind.lower()}-x: its pods "
                          "would be denied: pod ml/")
    assert "management.nvidia.com/gpu=GPU-" in msg


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_warn_mode_admits_with_a_warning(broken_view, kind):
    group, obj = workload(kind)
    h = _handler(broken_view, default_policy_text() + "workloadTemplates: warn\n")
    _, out = h.handle("validate", body(obj, kind=kind, group=group), "application/json")
    assert out["response"]["allowed"] is True
    assert "would be denied (CDIDeviceMissing)" in out["response"]["warnings"][0]


def test_update_without_template_change_is_not_blocked(broken_view):
    group, obj = workload("Deployment")
    req = json.loads(body(obj, kind="Deployment", group=group, operation="UPDATE"))
    old = copy.deepcopy(obj)
    obj["metadata"]["labels"] = {"team": "ml"}
    req["request"]["object"], req["request"]["oldObject"] = obj, old
    _, out = _handler(broken_view).handle("validate", json.dumps(req).encode(),
                                          "application/json")
    assert out["response"]["allowed"] is True
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = "cuda:2"
    req["request"]["object"] = obj
    _, out = _handler(broken_view).handle("validate", json.dumps(req).encode(),
                                          "application/json")
    assert out["response"]["allowed"] is False


def test_good_workload_allowed(tmp_path):
    group, obj = workload("Deployment")
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": 1}
    view = view_from_objects([node("op-1", None, inventory(tmp_path, "device-plugin"))],
                             default_policy())
    _, out = _handler(view).handle("validate", body(obj, kind="Deployment", group=group),
                                   "application/json")
    assert out["response"]["allowed"] is True
    assert out["response"]["auditAnnotations"]["pool"] == "operator"


def test_workload_on_mutate_endpoint_is_let_through_untouched_with_a_warning(broken_view):
    """/mutate is registered for Pods only: a Deployment there is a rule slip, not a verdict
    on the Deployment (its pods are still checked by /validate and when they are created)."""
    group, obj = workload("Deployment")
    code, out = _handler(broken_view).handle("mutate", body(obj, kind="Deployment", group=group),
                                             "application/json")
    resp = out["response"]
    assert code == 200 and resp["allowed"] is True and "patch" not in resp
    assert "does not handle apps/Deployment" in resp["warnings"][0]
