"""The scan's bookkeeping (``webhook.scan.scanner``) and ``check --running``: which pods a
change re-decides, what the writers are told changed, and the what-if a platform engineer
runs before an upgrade."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import jsonpatch
import yaml

from harness.kit import gpu_pod
from harness.layouts import UUIDS
from tests.unit.engine.test_steering import agent_node, hami_bound, hami_pod
from webhook.engine import NodeInfo, Outcome, Stage, Subject, decide, view_from_objects
from webhook.files.policyfile import default_policy
from webhook.scan.scanner import Scanner


def admitted(pod: dict, view, policy, name: str, node: str | None) -> dict:
    pod = copy.deepcopy(pod)
    pod["metadata"].update(name=name, namespace="ml", uid=f"uid-{name}")
    m = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace="ml"), view, policy)
    out = jsonpatch.apply_patch(pod, m.patch)
    return hami_bound(out, node) if node else out


#: what the test pods hold, as every node's agent publishes it (only a pod's own node's
#: record is read)
HELD = {f"uid-{n}": (UUIDS[0],) for n in (*(f"on-{k}-{i}" for k in (1, 2) for i in range(5)),
                                          "a", "b", "good", "fine", "explodes")}


def cluster(tmp_path):
    policy = default_policy()
    nodes = [agent_node(tmp_path / n, n, "hami", "operator-management", per_uuid=True,
                        held=HELD)
             for n in ("hami-1", "hami-2")]
    view = view_from_objects(nodes, policy)
    return policy, view


def test_a_node_change_re_decides_only_that_nodes_pods_and_the_pending_ones(tmp_path):
    policy, view = cluster(tmp_path)
    s = Scanner(view, policy, clock=lambda: 1000.0)
    pods = [admitted(hami_pod(), view, policy, f"on-1-{i}", "hami-1") for i in range(3)]
    pods += [admitted(hami_pod(), view, policy, f"on-2-{i}", "hami-2") for i in range(5)]
    pods += [admitted(hami_pod(), view, policy, "pending", None),
             gpu_pod("cpu", limits={"cpu": "1"})]
    s.pods_listed(pods)
    assert s.sync()  # the first scan
    assert len(s.answers()) == 9  # the CPU pod is not kept
    assert all(a.answer.outcome is Outcome.FINE for a in s.answers())
    first = s.take_dirty()
    assert first.namespaces == {"ml"} and len(first.pods) == 9
    assert not s.sync() and not s.take_dirty().pods  # nothing changed: nothing to write
    before = s.stats.rechecks
    bad = agent_node(tmp_path / "bad", "hami-1", "hami", "operator-management", held=HELD)
    view.upsert_node(NodeInfo.from_object(bad))
    assert s.sync()
    assert s.stats.rechecks - before == 4  # hami-1's three pods and the pending one
    dirty = s.take_dirty()
    assert dirty.pods == {f"uid-on-1-{i}" for i in range(3)}
    for i in range(3):
        a = s.answer_of(f"uid-on-1-{i}")
        assert a.answer.outcome is Outcome.FAILS_ON_RESTART and a.cause == "node hami-1 changed"
    assert s.answer_of("uid-pending").answer.outcome is Outcome.FINE  # hami-2 still takes it


def test_a_pod_event_re_decides_that_pod_and_a_deleted_one_leaves_the_report(tmp_path):
    policy, view = cluster(tmp_path)
    s = Scanner(view, policy)
    s.pods_listed([])
    s.sync()
    pod = admitted(hami_pod(), view, policy, "late", None)
    pod["spec"]["schedulerName"] = "default-scheduler"  # reset by a later webhook
    s.pod_event("ADDED", pod)
    a = s.answer_of("uid-late")
    assert a.answer.outcome is Outcome.MISROUTED and a.cause == "the pod was created"
    assert s.take_dirty().namespaces == {"ml"}
    s.pod_event("DELETED", pod)
    assert s.answer_of("uid-late") is None
    assert s.take_dirty().pods == {"uid-late"}


def test_hazards_follow_the_nodes_labels(tmp_path):
    policy, view = cluster(tmp_path)
    s = Scanner(view, policy)
    s.pods_listed([])
    s.sync()
    assert s.hazards() == {}
    twice = agent_node(tmp_path / "t", "hami-2", "hami", "operator-management", per_uuid=True,
                       held=HELD)
    twice["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] = "true"
    view.upsert_node(NodeInfo.from_object(twice))
    s.sync()
    assert set(s.hazards()) == {"hami-2"} and s.take_dirty().nodes == {"hami-2"}


def test_check_running_lists_the_pods_a_planned_change_would_break(tmp_path):
    """The what-if: running pods (as ``kubectl get pods -A -o yaml`` lists them) against a
    planned node inventory where hami-1's spec lost its per-UUID devices."""
    policy, view = cluster(tmp_path)
    running = [admitted(hami_pod(), view, policy, "a", "hami-1"),
               admitted(hami_pod(), view, policy, "b", "hami-2")]
    for p in running:
        p["status"] = {"phase": "Running"}
    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                         "items": running}))
    planned = [agent_node(tmp_path / "p1", "hami-1", "hami", "operator-management", held=HELD),
               agent_node(tmp_path / "p2", "hami-2", "hami", "operator-management",
                          per_uuid=True, held=HELD)]
    planned_file = tmp_path / "planned.yaml"
    planned_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                            "items": planned}))
    r = subprocess.run([sys.executable, "-m", "webhook", "check", "--running", "-f",
                        str(pods_file), "--cluster", str(planned_file), "-o", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["atRisk"] == 1
    [a] = [p for p in doc["pods"] if p["outcome"] != "Fine"]
    assert (a["name"], a["node"], a["outcome"], a["reason"]) == (
        "a", "hami-1", "FailsOnRestart", "CDIDeviceMissing")
    text = subprocess.run([sys.executable, "-m", "webhook", "check", "--running", "-f",
                           str(pods_file), "--cluster", str(planned_file)],
                          capture_output=True, text=True, timeout=60).stdout
    assert "ml/a" in text and "FailsOnRestart" in text and "2 GPU pod(s): 1 at risk" in text


def test_pods_it_cannot_read_stop_no_other(tmp_path):
    """Every pod of the bad-input corpus, and junk of its own, beside a good pod: nothing
    raises, the good pod is decided, nothing bad is reported as a GPU pod at risk."""
    import json as _json

    from tests.badinputs import CASES

    policy, view = cluster(tmp_path)
    s = Scanner(view, policy)
    junk: list = []
    for case in CASES:
        try:
            obj = _json.loads(case.body)["request"]["object"]
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
        if isinstance(obj, dict):
            junk.append(obj)
    junk += [{"metadata": "x"}, {"spec": {"containers": "junk"}},
             {"metadata": {"name": "n", "namespace": "ml", "uid": "j1"},
              "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}],
                       "nodeName": 7}},
             {"metadata": {"name": "n2", "namespace": "ml", "uid": "j2"},
              "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}],
                       "affinity": {"nodeAffinity": "junk"}, "tolerations": "junk"}}]
    good = admitted(hami_pod(), view, policy, "good", "hami-1")
    s.pods_listed([*junk, good])
    s.sync()
    for etype in ("ADDED", "MODIFIED"):
        for obj in junk:
            s.pod_event(etype, obj)
    assert s.answer_of("uid-good").answer.outcome is Outcome.FINE
    assert not [a for a in s.answers() if a.answer.name != "good" and a.answer.outcome.at_risk
                and a.answer.reason not in ("SchedulerMismatch", "AffinityMismatch")]


def test_a_pod_the_engine_fails_on_is_logged_and_the_rest_decided(tmp_path, monkeypatch,
                                                                   caplog):
    import webhook.scan.scanner as scanner_module

    policy, view = cluster(tmp_path)
    real = scanner_module.recheck

    def failing(pod, *a):
        if pod["metadata"]["name"] == "explodes":
            raise ValueError("a bug")
        return real(pod, *a)
    monkeypatch.setattr(scanner_module, "recheck", failing)
    s = Scanner(view, policy)
    s.pods_listed([admitted(hami_pod(), view, policy, n, "hami-1")
                   for n in ("explodes", "fine")])
    s.sync()
    assert s.stats.errors == 1 and s.answer_of("uid-explodes") is None
    assert s.answer_of("uid-fine").answer.outcome is Outcome.FINE
    assert "pod ml/explodes not decided (ValueError: a bug)" in caplog.text
