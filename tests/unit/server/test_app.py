"""The admission contract, in process: replies echo apiVersion and uid, carry a patch only
when mutating, and bad input gets a clear 4xx rather than a crash."""

from __future__ import annotations

import base64
import json

import pytest

from harness.kit import body, gpu_pod, review
from webhook.engine import ClusterView
from webhook.server.app import Webhook
from webhook.server.policysource import PolicySource


@pytest.fixture
def handler():
    view = ClusterView()
    view.replace_nodes([])
    view.replace_namespaces({})
    return Webhook(policies=PolicySource(), view=view)


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_mutate_reply_echoes_version_and_uid(handler, version):
    status, out = handler.handle("mutate", body(gpu_pod(), api_version=version, uid="u-1"),
                                 "application/json")
    assert status == 200
    assert out["apiVersion"] == version and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is True
    assert resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert {k: ops[-1][k] for k in ("op", "path")} == {"op": "add", "path": "/spec/affinity"}
    assert resp["auditAnnotations"] == {"decision": "allowed", "reason": "Routed",
                                        "pool": "operator"}


def test_validate_reply_never_has_a_patch(handler):
    _, out = handler.handle("validate", body(gpu_pod()), "application/json")
    resp = out["response"]
    assert "patch" not in resp and "patchType" not in resp
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert resp["status"]["message"].startswith("gpupool: AffinityMismatch: pod default/p")


def test_non_gpu_pod_gets_plain_allow(handler):
    pod = gpu_pod(limits={"cpu": "1"})
    _, out = handler.handle("mutate", body(pod), "application/json")
    assert out["response"] == {"uid": out["response"]["uid"], "allowed": True}


def test_denial_carries_reason_and_warnings_within_limits(handler):
    pod = gpu_pod()
    pod["metadata"]["labels"] = {"gpupool.io/pool": "nope"}
    _, out = handler.handle("mutate", body(pod), "application/json")
    resp = out["response"]
    assert resp["allowed"] is False
    assert "UnknownPool" in resp["status"]["message"]
    assert resp["auditAnnotations"]["reason"] == "UnknownPool"


@pytest.mark.parametrize("op", ["DELETE", "CONNECT", "UPDATE"])
def test_other_operations_allowed_untouched(handler, op):
    r = review(gpu_pod(), operation=op)
    if op in ("DELETE", "CONNECT"):
        r["request"]["object"] = None
    status, out = handler.handle("mutate", json.dumps(r).encode(), "application/json")
    assert status == 200 and out["response"]["allowed"] is True
    assert "patch" not in out["response"]


def test_dry_run_same_decision(handler):
    pod = gpu_pod()
    pod["metadata"]["labels"] = {"gpupool.io/pool": "nope"}
    _, real = handler.handle("mutate", body(pod, uid="a"), "application/json")
    _, dry = handler.handle("mutate", body(pod, uid="a", dry_run=True), "application/json")
    assert real == dry


BAD = [
    ("not json", b"{nope", "application/json", 400, "not JSON"),
    ("wrong content type", body(gpu_pod()), "text/plain", 415, "Content-Type"),
    ("array", b"[]", "application/json", 400, "must be a JSON object"),
    ("unknown apiVersion", json.dumps({**review(gpu_pod()), "apiVersion": "v9"}).encode(),
     "application/json", 400, "apiVersion 'v9'"),
    ("no request", json.dumps({"apiVersion": "admission.k8s.io/v1",
                               "kind": "AdmissionReview"}).encode(),
     "application/json", 400, "request is missing"),
    ("no uid", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": {"kind": {"kind": "Pod"}}}).encode(),
     "application/json", 400, "request.uid"),
    ("non-utf8", b'{"a": "\xff"}', "application/json", 400, "not UTF-8"),
    # Duplicate keys resolve last-wins, as the API server's decoder does.
    ("duplicate keys", b'{"apiVersion": "admission.k8s.io/v1", "apiVersion": "b"}',
     "application/json", 400, "apiVersion 'b'"),
    ("deep nesting", b'{"a": ' * 5000 + b'1' + b'}' * 5000, "application/json", 400,
     "nests too deeply"),
]


@pytest.mark.parametrize("name,raw,ctype,status,text", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_clear_4xx(handler, name, raw, ctype, status, text):
    code, out = handler.handle("mutate", raw, ctype)
    assert code == status
    message = out["response"]["status"]["message"] if "response" in out else out["message"]
    assert text in message


def test_bad_input_after_uid_keeps_the_uid(handler):
    raw = json.loads(body(gpu_pod(), uid="keep-me"))
    raw["request"]["dryRun"] = "yes"
    code, out = handler.handle("mutate", json.dumps(raw).encode(), "application/json")
    assert code == 400 and out["response"]["uid"] == "keep-me"
    assert out["response"]["allowed"] is False


@pytest.mark.parametrize("stage,kind,group", [("mutate", "Service", ""),
                                              ("mutate", "Deployment", "apps"),
                                              ("validate", "ConfigMap", "")])
@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_kind_a_webhook_does_not_handle_is_let_through_with_a_warning(handler, stage, kind,
                                                                      group, version):
    """A rule slip in a webhook configuration must never block unrelated objects."""
    code, out = handler.handle(stage, body({"metadata": {"name": "x"}, "spec": {}}, kind=kind,
                                           group=group, api_version=version, uid="u-k"),
                               "application/json")
    resp = out["response"]
    assert code == 200 and resp["uid"] == "u-k" and resp["allowed"] is True
    assert "patch" not in resp
    assert any(f"does not handle {group + '/' if group else ''}{kind}" in w
               for w in resp["warnings"])


def test_engine_crash_still_answers_with_uid(handler, monkeypatch):
    from webhook import engine

    def boom(*a, **k):
        raise RuntimeError("boom")

    from webhook.server import metrics

    monkeypatch.setattr(engine, "decide", boom)
    counted = metrics.Metrics(handler.policies, handler.view)
    handler.hooks.append(counted.observe)
    before = metrics.UNCHECKED.labels("internal-error", "allowed")._value.get()
    code, out = handler.handle("mutate", body(gpu_pod(), uid="crash"), "application/json")
    assert code == 200 and out["response"]["uid"] == "crash"
    assert out["response"]["allowed"] is True
    assert "internal error" in out["response"]["warnings"][0]
    # a fail-open case, counted (docs/reliability.md, "Fail-open cases")
    assert metrics.UNCHECKED.labels("internal-error", "allowed")._value.get() == before + 1


def test_audit_records_denials_and_optionally_mutations(tmp_path):
    from webhook.cli.audit import read_records
    from webhook.engine import load_policy_text
    from webhook.files.policyfile import default_policy_text
    from webhook.server.audit import AuditLog

    log = AuditLog.from_config(stdout=False, path=str(tmp_path / "a.log"))
    view = ClusterView()
    view.replace_nodes([])
    h = Webhook(policies=PolicySource(), view=view)
    h.hooks.append(lambda ep, req, d, _s: log.record(ep, req, d, h.policies.policy))
    denied = gpu_pod("d")
    denied["metadata"]["labels"] = {"gpupool.io/pool": "nope"}
    denied["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs-1",
                                              "controller": True}]
    h.handle("mutate", body(denied, uid="u-deny"), "application/json")
    h.handle("mutate", body(gpu_pod("ok"), uid="u-ok"), "application/json")
    recs = list(read_records((tmp_path / "a.log").read_text().splitlines()))
    assert [r["uid"] for r in recs] == ["u-deny"]
    assert recs[0]["owner"] == "ReplicaSet/rs-1" and recs[0]["reason"] == "UnknownPool"
    h.policies = PolicySource(fixed=load_policy_text(default_policy_text()
                                                     + "audit:\n  mutations: true\n"))
    h.handle("mutate", body(gpu_pod("ok"), uid="u-ok2"), "application/json")
    recs = list(read_records((tmp_path / "a.log").read_text().splitlines()))
    assert recs[-1]["uid"] == "u-ok2" and recs[-1]["decision"] == "allowed"
    assert recs[-1]["patch"]


def _probe_app(checks):
    from webhook.server.app import Probe, create_app

    view = ClusterView()
    webhook = Webhook(policies=PolicySource(), view=view)
    webhook.ready_checks.extend(Probe(*c) for c in checks)
    return create_app(webhook).test_client()


def test_readyz_reports_as_kubernetes_components_do():
    client = _probe_app([("node-source", lambda: (True, "3 nodes synced")),
                         ("audit-file", lambda: (False, "cannot write"), False)])
    r = client.get("/readyz")
    assert r.status_code == 200 and r.text == "ok\n"  # terse on success, like kube-apiserver
    r = client.get("/readyz?verbose")
    assert r.status_code == 200
    assert r.text.splitlines() == [
        "[+]ping ok", "[+]node-source ok: 3 nodes synced",
        "[-]audit-file failed: cannot write (not critical: still ready)",
        "readyz check passed"]
    assert client.get("/readyz/audit-file").status_code == 503
    assert client.get("/readyz/node-source").text == "ok\n"
    assert client.get("/readyz/nope").status_code == 404


def test_a_failing_critical_check_fails_readiness_and_lists_every_check():
    client = _probe_app([("node-source", lambda: (False, "not synced yet")),
                         ("broken", lambda: 1 / 0)])
    r = client.get("/readyz")
    assert r.status_code == 503
    assert "[-]node-source failed: not synced yet" in r.text
    assert "[-]broken failed: check raised ZeroDivisionError" in r.text
    assert r.text.endswith("readyz check failed\n")
    r = client.get("/readyz?exclude=node-source&exclude=broken")
    assert r.status_code == 200


def test_livez_and_healthz_are_liveness():
    client = _probe_app([("node-source", lambda: (False, "not synced yet"))])
    for path in ("/livez", "/healthz"):
        assert client.get(path).text == "ok\n"  # readiness failing is not liveness failing
        assert client.get(f"{path}?verbose").text == f"[+]ping ok\n{path[1:]} check passed\n"


def test_a_repaired_pod_is_always_audited(tmp_path):
    """cdi.repair changes more than routing: every such mutation gets a record, whatever
    audit.mutations says."""
    from tests.unit.engine.test_steering import agent_node, hami_pod
    from webhook.cli.audit import read_records
    from webhook.engine import load_policy_text, view_from_objects
    from webhook.files.policyfile import default_policy_text
    from webhook.server.audit import AuditLog

    policy = load_policy_text(default_policy_text().replace(
        "    cdi:\n      delivery: detect\n", "    cdi:\n      delivery: detect\n"
        "      repair: true\n", 1))
    view = view_from_objects([agent_node(tmp_path / "n", "hami-b", "hami",
                                         "operator-management")], policy,
                             runtime_classes={"nvidia-legacy": "nvidia-legacy"})
    log = AuditLog.from_config(stdout=False, path=str(tmp_path / "a.log"))
    h = Webhook(policies=PolicySource(fixed=policy), view=view)
    h.hooks.append(lambda ep, req, d, _s: log.record(ep, req, d, h.policies.policy))
    code, out = h.handle("mutate", body(hami_pod(), uid="u-fix"), "application/json")
    assert code == 200 and out["response"]["allowed"]
    (rec,) = read_records((tmp_path / "a.log").read_text().splitlines())
    assert rec["uid"] == "u-fix" and rec["reason"] == "Repaired"
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia-legacy"} in \
        rec["patch"]


def test_a_crash_while_reading_the_review_is_a_400_not_a_500(handler, monkeypatch):
    """A bug in the review parser: logged, answered, never an unbound name and a 500."""
    from webhook.server import review as review_mod

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(review_mod, "parse_review", boom)
    code, out = handler.handle("validate", body(gpu_pod(), uid="u-parse"), "application/json")
    assert code == 400 and out["kind"] == "Status" and "could not be read" in out["message"]
