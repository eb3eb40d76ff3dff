"""The e2e load scenario's own arithmetic and failure reporting (the scenario itself runs in
`make bench`, not here)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.e2e_load import (
    StartError,
    _component,
    accepted_connections,
    buckets,
    cpu_seconds,
    owners,
    pin,
    quantile,
    server_view,
    webhook_calls,
)

SCRAPE = """\
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.gpupool.io",operation="CREATE",rejected="false",type="admit",le="0.005"} @A@
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.gpupool.io",operation="CREATE",rejected="false",type="admit",le="0.025"} @B@
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.gpupool.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} @B@
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.1"} @C@
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="+Inf"} @C@
"""  # noqa: E501


def test_quantiles_come_from_what_was_observed_between_two_scrapes():
    def scrape(a: int, b: int, c: int) -> str:
        return SCRAPE.replace("@A@", str(a)).replace("@B@", str(b)).replace("@C@", str(c))

    before = scrape(100, 100, 50)
    after = scrape(100, 200, 150)  # 100 new observations, all in (5 ms, 25 ms]
    b = buckets(before, "apiserver_admission_webhook_admission_duration_seconds", {})
    a = buckets(after, "apiserver_admission_webhook_admission_duration_seconds", {})
    p99 = quantile(b["mutate.gpupool.io"], a["mutate.gpupool.io"], 0.99)
    assert p99 == pytest.approx(0.005 + 0.02 * 0.99)
    assert quantile(a["mutate.gpupool.io"], a["mutate.gpupool.io"], 0.99) is None
    view = server_view(before, after)
    assert view["webhook mutate.gpupool.io p99 ms"] == pytest.approx(24.8)
    assert view["create p99 ms"] == pytest.approx(99.0)
    assert webhook_calls(before, after) == {"mutate.gpupool.io": 100}
    assert webhook_calls(after, after) == {}


def test_a_component_that_does_not_start_is_named():
    with pytest.raises(StartError, match="kwok did not start: no such binary"):
        _component("kwok", lambda: (_ for _ in ()).throw(FileNotFoundError("no such binary")))


def _spawn(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_cpu_is_billed_to_the_program_that_started_it_forks_and_threads_included():
    # a program whose forked worker burns CPU, as gunicorn's workers do under its master
    busy = _spawn("import os, sys, time\n"
                  "if os.fork() == 0:\n"
                  "    t = time.process_time()\n"
                  "    while time.process_time() - t < 0.4: pass\n"
                  "    print('ready', flush=True); time.sleep(60)\n"
                  "else:\n"
                  "    time.sleep(60)\n")
    try:
        spent = cpu_seconds({busy.pid: "busy"})
        assert spent["busy"] >= 0.3, spent
        assert "load generator" in spent  # this process, apart from the program
        assert set(owners({busy.pid: "busy"}).values()) == {busy.pid, os.getpid()}
    finally:
        for pid in owners({busy.pid: "busy"}):
            if pid != os.getpid() and pid != busy.pid:
                os.kill(pid, signal.SIGKILL)
        busy.kill()
        busy.wait()


def test_split_placement_pins_every_thread_of_a_program():
    prog = _spawn("import threading, time\n"
                  "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
                  "print('ready', flush=True); time.sleep(60)\n")
    try:
        core = min(os.sched_getaffinity(0))
        pin(prog.pid, {core})
        tasks = list(Path(f"/proc/{prog.pid}/task").iterdir())
        assert len(tasks) >= 2
        assert all(os.sched_getaffinity(int(t.name)) == {core} for t in tasks)
    finally:
        prog.kill()
        prog.wait()


def test_accepted_connections_counts_what_a_listener_accepts():
    with socket.create_server(("127.0.0.1", 0)) as server:
        before = accepted_connections()
        for _ in range(3):
            with socket.create_connection(server.getsockname()):
                server.accept()[0].close()
        assert accepted_connections() - before >= 3


def test_a_component_that_does_not_start_ends_the_run_with_its_name_and_exit_2(
        monkeypatch, tmp_path, capsys):
    from bench import e2e_load

    started: list[subprocess.Popen] = []

    def start(self):  # one replica up, then a component fails
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                        start_new_session=True))
        self.replicas.append(started[0])
        raise StartError("HAMi's webhook did not start: exit status 1")

    monkeypatch.setattr(e2e_load.Rig, "start", start)
    out = tmp_path / "e2e.json"
    monkeypatch.setattr(sys, "argv", ["e2e_load", "--quick", "--out", str(out)])
    assert e2e_load.main() == 2
    assert capsys.readouterr().err.strip() == (
        "e2e load: HAMi's webhook did not start: exit status 1")
    assert not out.exists()
    assert started[0].poll() is not None  # what did start was stopped


def test_the_decomposition_sets_gpupool_without_its_validating_call_beside_hami():
    from bench.e2e_load import MUTATING_ONLY, PLANS, summarise

    plan = PLANS["calls"]
    assert plan["configs"][:2] == ("none", "hami") and MUTATING_ONLY in plan["configs"]

    def batch(p99: float, calls: dict[str, int]) -> dict:
        return {"p50_ms": p99 / 2, "p99_ms": p99, "rate": 100.0, "failed": 0, "errors": [],
                "answered": 300, "cpu_ms_per_pod": {"kube-apiserver": 3.0},
                "connections_per_pod": 0.1, "webhook_calls": calls, "cpu_ms_per_call": {}}

    raw = {"none": [batch(100, {}), batch(120, {})],
           "hami": [batch(200, {"vgpu.hami.io": 300}), batch(240, {"vgpu.hami.io": 300})],
           "gpupool": [batch(300, {"mutate.gpupool.io": 200, "validate-pods.gpupool.io": 200})] * 2,
           MUTATING_ONLY: [batch(180, {"mutate.gpupool.io": 200})] * 2}
    rows = summarise(raw)
    # ratios are taken round by round against the same round's batch, then the median
    assert rows[MUTATING_ONLY]["p99_vs_hami"] == pytest.approx((180 / 200 + 180 / 240) / 2)
    assert rows["gpupool"]["p99_vs_none"] == pytest.approx((300 / 100 + 300 / 120) / 2)
    assert rows[MUTATING_ONLY]["calls_per_pod"] == pytest.approx(200 / 300)
    assert rows["gpupool"]["calls_per_pod"] == pytest.approx(400 / 300)



def test_routing_in_the_api_server_is_measured_beside_the_webhook_alone():
    """``--routing``: none, gpupool and gpupool with its compiled policy; a GPU pod's calls
    counted apart from the grant check's on pods without a GPU, and p99 against gpupool's
    webhook-only figure of the same round."""
    from bench.e2e_load import CALLS, CONFIGS, PLANS, POLICY, summarise

    assert PLANS["routing"]["configs"] == ("none", "gpupool", POLICY) and POLICY in CONFIGS
    assert CALLS[POLICY] == {"validate-pods.gpupool.io"}

    def batch(p99: float, per_gpu_pod: float) -> dict:
        return {"p50_ms": p99 / 2, "p99_ms": p99, "rate": 100.0, "failed": 0, "errors": [],
                "answered": 300, "cpu_ms_per_pod": {}, "connections_per_pod": 0.1,
                "webhook_calls": {}, "cpu_ms_per_call": {},
                "gpu_calls_per_gpu_pod": per_gpu_pod}

    rows = summarise({"none": [batch(100, 0.0)] * 2, "gpupool": [batch(300, 2.0)] * 2,
                      POLICY: [batch(150, 1.0), batch(240, 1.0)]})
    assert rows[POLICY]["p99_vs_gpupool"] == pytest.approx((150 / 300 + 240 / 300) / 2)
    assert rows[POLICY]["gpu_calls_per_gpu_pod"] == 1.0
    assert "p99_vs_hami" not in rows[POLICY]  # no HAMi in this plan


PPROF_TOP = """\
File: kube-apiserver
Type: cpu
Duration: 20s, Total samples = 14130ms (70.65%)
Showing nodes accounting for 14130ms, 100% of 14130ms total
      flat  flat%   sum%        cum   cum%
         0     0% 13.09%      810ms  5.73%  k8s.io/apiserver/pkg/admission/plugin/webhook/mutating.(*mutatingDispatcher).callAttrMutatingHook
         0     0% 13.16%      780ms  5.52%  k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions.(*matcher).Match
      10ms 0.071% 27.60%      270ms  1.91%  k8s.io/apiserver/pkg/admission/plugin/webhook/validating.(*validatingDispatcher).callHook
         0     0% 36.31%      200ms  1.42%  crypto/tls.(*Conn).HandshakeContext (inline)
         0     0% 36.40%       30ms  0.21%  crypto/tls.(*Conn).HandshakeContext
"""  # noqa: E501  (rows as `go tool pprof -top -cum -unit=ms` prints them)


def test_where_the_api_servers_cpu_goes_is_read_from_pprofs_rows():
    from bench.e2e_load import pprof_parts

    total, parts = pprof_parts(PPROF_TOP)
    assert total == 14130
    assert parts == {"matchConditions": 780, "mutating calls": 810, "validating calls": 270,
                     "TLS handshakes": 230}  # inlined at some call sites: both rows count
    assert pprof_parts("no profile") == (0.0, dict.fromkeys(parts, 0.0))


def test_profiles_without_go_are_refused_before_anything_starts(monkeypatch, tmp_path, capsys):
    from bench import e2e_load

    monkeypatch.setenv("PATH", str(tmp_path))  # no go here
    monkeypatch.setattr(e2e_load.Rig, "start", lambda self: pytest.fail("the rig started"))
    monkeypatch.setattr(sys, "argv", ["e2e_load", "--calls", "--apiserver-profiles",
                                      str(tmp_path / "profiles")])
    assert e2e_load.main() == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("e2e load: --apiserver-profiles reads the profiles with `go tool pprof`")
    assert "\n" not in err


def test_no_rounds_is_refused_before_anything_starts(monkeypatch, capsys):
    from bench import e2e_load

    monkeypatch.setattr(e2e_load.Rig, "start", lambda self: pytest.fail("the rig started"))
    monkeypatch.setattr(sys, "argv", ["e2e_load", "--calls", "--rounds", "0"])
    assert e2e_load.main() == 2
    assert capsys.readouterr().err == "e2e load: --rounds 0: give at least 1\n"


def test_another_releases_programs_stand_in_for_the_suites_own(tmp_path):
    from bench.e2e_load import overlay

    suite, mine = tmp_path / "suite", tmp_path / "mine"
    suite.mkdir()
    mine.mkdir()
    for prog in ("etcd", "kube-apiserver", "kubectl"):
        (suite / prog).write_text(f"suite {prog}")
    (mine / "kube-apiserver").write_text("1.37 kube-apiserver")
    into = overlay(suite, mine, tmp_path / "bin")
    assert {p.name: p.read_text() for p in into.iterdir()} == {
        "etcd": "suite etcd", "kube-apiserver": "1.37 kube-apiserver",
        "kubectl": "suite kubectl"}
    with pytest.raises(StartError, match=r"the programs in .*nowhere did not start: "
                                         r".*nowhere: no such directory"):
        _component(f"the programs in {tmp_path / 'nowhere'}",
                   lambda: overlay(suite, tmp_path / "nowhere", tmp_path / "bin2"))


def test_stand_ins_are_registered_as_gpupool_and_as_hami_are():
    """A stand-in measures a pattern of calls: its registrations must be gpupool's and HAMi's
    in all the API server evaluates (rules, matchConditions, policies), with only the names
    and the address changed."""
    from bench.e2e_load import CALLS, STAND_INS, stand_in
    from harness.kit import load_docs

    assert STAND_INS == {"floor:gpupool": ("floor", "gpupool"),
                         "floor:hami": ("floor", "hami"),
                         "baseline:gpupool": ("baseline", "gpupool")}
    url = "https://127.0.0.1:4443"
    for cfg in load_docs(Path(__file__).parents[2] / "manifests/base/webhooks.yaml"):
        before = repr(cfg)
        out = stand_in(cfg, url, "gpupool.io", "floor")
        assert repr(cfg) == before  # the manifests' objects are registered again later
        assert out["metadata"] == {"name": f"floor-{cfg['metadata']['name']}"}
        for mine, theirs in zip(out["webhooks"], cfg["webhooks"], strict=True):
            assert mine["name"] == theirs["name"].replace("gpupool.io", "floor.example.com")
            assert mine["clientConfig"]["url"] == url + theirs["clientConfig"]["service"]["path"]
            assert "service" not in mine["clientConfig"]
            assert {k: v for k, v in mine.items() if k not in ("name", "clientConfig")} == {
                k: v for k, v in theirs.items() if k not in ("name", "clientConfig")}
            if theirs["name"] in CALLS["gpupool"]:  # what a GPU pod is sent to
                assert mine["name"] in CALLS["floor:gpupool"]
                assert (mine["name"].replace("floor.", "baseline.")
                        in CALLS["baseline:gpupool"])
    assert len(CALLS["floor:gpupool"]) == len(CALLS["baseline:gpupool"]) == 2

    hami = {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "hami-webhook"},
            "webhooks": [{"name": "vgpu.hami.io", "clientConfig": {
                "url": "https://127.0.0.1:9999/webhook", "caBundle": "Q0E="},
                "rules": [{"operations": ["CREATE"], "resources": ["pods"]}]}]}
    out = stand_in(hami, url, "hami.io", "floor")
    assert CALLS["floor:hami"] == {out["webhooks"][0]["name"]} == {"vgpu.floor.example.com"}
    assert out["webhooks"][0]["clientConfig"] == {"url": url + "/webhook", "caBundle": "Q0E="}
    assert out["webhooks"][0]["rules"] == hami["webhooks"][0]["rules"]


def test_a_placement_without_the_decomposition_is_refused_before_anything_starts(
        monkeypatch, capsys):
    from bench import e2e_load

    monkeypatch.setattr(e2e_load.Rig, "start", lambda self: pytest.fail("the rig started"))
    monkeypatch.setattr(sys, "argv", ["e2e_load", "--placement", "split"])
    assert e2e_load.main() == 2
    assert capsys.readouterr().err == (
        "e2e load: --placement chooses the decomposition's placement: add --calls (the full "
        "scenario runs both)\n")


def test_the_decomposition_runs_in_the_placement_asked_for(monkeypatch, tmp_path):
    from bench import e2e_load

    seen = {}

    def fake_run(tmp, **plan):
        seen.update(plan)
        return {"placements": {}, "leftover_processes": []}

    monkeypatch.setattr(e2e_load, "run", fake_run)
    monkeypatch.setattr(e2e_load, "report", lambda res: "")
    monkeypatch.setattr(sys, "argv", ["e2e_load", "--calls", "--placement", "split", "--out",
                                      str(tmp_path / "out.json")])
    assert e2e_load.main() == 0
    assert seen["placements"] == ("split",)
    assert seen["configs"] == e2e_load.PLANS["calls"]["configs"]
    written = json.loads((tmp_path / "out.json").read_text())
    assert written["command"] == ("python -m bench.e2e_load --calls --placement split --out "
                                  f"{tmp_path / 'out.json'}")
