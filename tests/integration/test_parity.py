"""Offline and online answers cannot drift: every upstream Pod and workload fixture goes
through the real HTTPS server, as the API server drives it (/mutate, apply the patch,
/validate), and through ``gpupool check``; decisions, reasons, messages, warnings and patches
must be identical. Run under both workload-template modes, since ``warn`` is where the two
used to disagree."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import jsonpatch
import pytest

from harness.kit import UPSTREAM, load_docs, review
from harness.servers import start_server, stop_server
from webhook.engine import Subject, template_pod
from webhook.files.policyfile import DATA_DIR, default_policy_text

DEMO = DATA_DIR / "demo-cluster.yaml"
#: Fixture files holding Kubernetes objects (the Helm values file among them holds none).
FILES = sorted(f for f in (UPSTREAM / "pods").rglob("*.yaml")
               if any(d.get("kind") for d in load_docs(f)))


def _objects() -> list[tuple[str, dict]]:
    out = []
    for path in FILES:
        for doc in load_docs(path):
            subject = Subject.from_manifest(doc)
            if subject.is_pod or (subject.is_workload and
                                  template_pod(doc, subject.kind, None) is not None):
                out.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


OBJECTS = _objects()


@pytest.fixture(scope="module", params=["deny", "warn"])
def mode(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"parity-{request.param}")
    policy = tmp / "policy.yaml"
    policy.write_text(default_policy_text() + f"workloadTemplates: {request.param}\n")
    srv = start_server(tmp, "--cluster", str(DEMO), "--policy", str(policy))
    r = subprocess.run([sys.executable, "-m", "webhook", "check", "--cluster", str(DEMO),
                        "--policy", str(policy), "-o", "json",
                        *[a for f in FILES for a in ("-f", str(f))]],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    results = json.loads(r.stdout)["results"]
    yield request.param, srv, results, r.returncode
    stop_server(srv)


def _online(srv, obj: dict) -> dict:
    """What the API server would end up with, stage by stage, through real HTTPS."""
    subject = Subject.from_manifest(obj)
    group = subject.group
    out: dict = {"patch": [], "warnings": []}
    if subject.is_pod:
        m = srv.post("mutate", json.dumps(review(obj, namespace=subject.namespace)).encode())
        resp = m.json()["response"]
        out["warnings"] += resp.get("warnings", [])
        out["mutate_reason"] = resp.get("auditAnnotations", {}).get("reason")
        if not resp["allowed"]:
            return {**out, "allowed": False, "reason": out["mutate_reason"],
                    "message": resp["status"]["message"]}
        if "patch" in resp:
            out["patch"] = json.loads(base64.b64decode(resp["patch"]))
            obj = jsonpatch.apply_patch(obj, out["patch"])
    v = srv.post("validate", json.dumps(review(obj, namespace=subject.namespace,
                                               kind=subject.kind, group=group)).encode())
    resp = v.json()["response"]
    assert "patch" not in resp  # a validating reply carries no patch
    for w in resp.get("warnings", []):
        if w not in out["warnings"]:
            out["warnings"].append(w)
    out["allowed"] = resp["allowed"]
    out["reason"] = resp.get("auditAnnotations", {}).get("reason")
    if not resp["allowed"]:
        out["message"] = resp["status"]["message"]
    elif subject.is_pod and out.get("mutate_reason"):
        out["reason"] = out["mutate_reason"]  # the final word on an allowed pod is its route
    return out


def test_fixtures_cover_pods_and_workloads():
    kinds = {doc["kind"] for _, doc in OBJECTS}
    assert {"Pod", "Deployment", "Job"} <= kinds and len(OBJECTS) >= 15


def test_server_and_check_decide_every_fixture_identically(mode):
    _, srv, results, exit_code = mode
    assert len(results) == len(OBJECTS)
    denied = 0
    for (label, doc), offline in zip(OBJECTS, results, strict=True):
        assert (offline["kind"], offline["name"]) == (doc["kind"], doc["metadata"]["name"])
        online = _online(srv, doc)
        assert online["allowed"] == offline["allowed"], label
        if online["reason"] is not None:  # non-GPU objects carry no audit annotations
            assert online["reason"] == offline["reason"], label
        assert online["warnings"] == offline["warnings"], label
        if not offline["allowed"]:
            denied += 1
            wire = f"gpupool: {offline['reason']}: {offline['message']}"
            assert online["message"] == wire, label
        if doc["kind"] == "Pod":
            assert online["patch"] == offline["patch"], label
        elif offline["patch"]:
            # A workload is never patched online; check shows, at the template's path, the
            # patch /mutate gives each of its pods. Strip the path and compare with /mutate.
            pod = template_pod(doc, doc["kind"], "default")
            pod_online = _online(srv, pod)
            prefix = "/spec/template" if doc["kind"] != "CronJob" else \
                "/spec/jobTemplate/spec/template"
            rebased = [{**op, "path": op["path"][len(prefix):]} for op in offline["patch"]
                       if op["path"] != prefix + "/metadata"]
            assert rebased == [op for op in pod_online["patch"] if op["path"] != "/metadata"]
            assert all(op["path"].startswith(prefix) for op in offline["patch"])
    assert denied > 0  # the demo cluster has a broken HAMi node: both outcomes are covered
    assert exit_code == 1  # pods are denied in either mode


def test_warn_mode_admits_workloads_both_ways(mode):
    name, _, results, _ = mode
    workloads_out = [r for r in results if r["kind"] != "Pod"]
    denied = [r for r in workloads_out if not r["allowed"]]
    if name == "warn":
        assert not denied
        assert any("would be denied" in w for r in workloads_out for w in r["warnings"])
    else:
        assert denied


def test_check_patch_applies_to_the_workload_as_written(mode):
    _, _, results, _ = mode
    docs = {(d["kind"], d["metadata"]["name"]): d for _, d in OBJECTS}
    for r in results:
        if r["kind"] != "Pod" and r["patch"]:
            out = jsonpatch.apply_patch(docs[(r["kind"], r["name"])], r["patch"])
            assert out["spec"]["template"]["spec"]["schedulerName"] == r["schedulerName"]

