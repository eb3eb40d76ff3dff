"""Audit log and metrics against a real multi-worker gunicorn under concurrent HTTPS load."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from prometheus_client import generate_latest

from harness.kit import ROOT
from harness.servers import start_server, stop_server
from webhook.server.metrics import FLUSH_SECONDS

VALIDATE = json.loads((ROOT / "docs/examples/review-hami-pod-validate.json").read_text())


def denial(i: int, dry_run: bool = False) -> bytes:
    req = json.loads(json.dumps(VALIDATE))
    req["request"]["uid"] = f"deny-{i:05d}"
    req["request"]["dryRun"] = dry_run
    req["request"]["object"]["metadata"]["name"] = f"job-{i}"
    return json.dumps(req).encode()


@pytest.fixture(scope="module")
def rotating_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audit")
    srv = start_server(tmp, "--audit-max-bytes", "20000", "--audit-backups", "200",
                       workers=3)
    yield srv
    stop_server(srv)


def _records(audit: Path) -> list[dict]:
    files = sorted(audit.parent.glob(audit.name + "*"))
    out = []
    for f in files:
        if f.name.endswith(".lock"):
            continue
        for line in f.read_text().splitlines():
            out.append(json.loads(line))  # every line parses: nothing interleaved or torn
    return out


def test_every_denial_recorded_exactly_once_under_load(rotating_server):
    n = 400
    def send(i: int) -> str:
        with requests.Session() as s:
            r = rotating_server.post("validate", denial(i, dry_run=i % 4 == 0), session=s)
            assert r.status_code == 200
            assert r.json()["response"]["allowed"] is False
            return r.json()["response"]["uid"]

    with ThreadPoolExecutor(16) as pool:
        uids = list(pool.map(send, range(n)))
    assert len(set(uids)) == n
    records = _records(rotating_server.audit)
    seen = [r["uid"] for r in records]
    assert sorted(seen) == sorted(uids)  # each once: none lost, none duplicated
    assert len(list(rotating_server.audit.parent.glob("audit.log.*"))) > 3  # rotation happened
    rec = next(r for r in records if r["uid"] == "deny-00004")
    assert rec["dryRun"] is True and rec["reason"] == "CDIDeviceMissing"
    assert rec["user"] == "alice" and "devs" in rec["groups"]
    assert rec["pool"] == "hami" and rec["name"] == "job-4" and rec["namespace"] == "default"
    assert rec["nodes"][0]["node"] == "hami-node-1"
    assert rec["nodes"][0]["missing"][0].startswith("management.nvidia.com/gpu=GPU-")
    assert sum(r["dryRun"] for r in records) == n // 4


def test_stdout_records_over_pipe_buf_never_interleave(tmp_path):
    srv = start_server(tmp_path, workers=3, audit_stdout=True)
    try:
        def send(i: int) -> None:
            req = json.loads(denial(20_000 + i))
            # 60 long group names (kept whole: under the per-value clip and the group cap)
            # make each record ~6 KiB, over the 4 KiB a pipe writes atomically.
            req["request"]["userInfo"] = {"username": "u", "groups": [
                f"oidc:platform-team-{i}-{g:03d}-" + "x" * 50 for g in range(60)]}
            assert srv.post("validate", json.dumps(req).encode()).status_code == 200

        with ThreadPoolExecutor(12) as pool:
            list(pool.map(send, range(150)))
        time.sleep(0.5)
    finally:
        stop_server(srv)
    from webhook.cli.audit import read_records

    lines = srv.log.read_text().splitlines()
    recs = list(read_records(lines))
    assert len(recs) == 150 and len({r["uid"] for r in recs}) == 150
    assert min(len(json.dumps(r)) for r in recs) > 4096
    # No torn lines: every line that starts a record parses as one.
    assert sum(1 for x in lines if x.startswith('{"audit":"gpupool"')) == 150


def test_dry_run_and_real_requests_identical_over_https(server):
    real = server.post("validate", denial(1)).json()["response"]
    dry = server.post("validate", denial(1, dry_run=True)).json()["response"]
    assert real == dry and real["allowed"] is False


def test_audit_cli_reads_it_back(rotating_server):
    r = subprocess.run([sys.executable, "-m", "webhook", "audit", "--file",
                        str(rotating_server.audit), "--dry-run", "-o", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    recs = json.loads(r.stdout)
    assert recs and all(x["dryRun"] for x in recs)
    r = subprocess.run([sys.executable, "-m", "webhook", "audit", "--file",
                        str(rotating_server.audit), "--since", "1h", "--reason",
                        "CDIDeviceMissing"], capture_output=True, text=True, timeout=60)
    assert "BY REASON" in r.stdout and re.search(r"CDIDeviceMissing\s+\d+", r.stdout)
    assert "BY NAMESPACE" in r.stdout and "BY POOL" in r.stdout


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_sum_across_workers(rotating_server):
    url = f"{rotating_server.url}/metrics"
    before = requests.get(url, verify=rotating_server.ca, timeout=10).text
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: rotating_server.post("mutate", denial(10_000 + i)), range(60)))
    # Each worker writes the requests it counted at most a second apart (``metrics.Tally``):
    # every one is there within that, none twice.
    deadline = time.monotonic() + 3 * FLUSH_SECONDS
    while True:
        text = requests.get(url, verify=rotating_server.ca, timeout=10).text
        delta = (_metric(text, "gpupool_admission_requests_total", endpoint="mutate")
                 - _metric(before, "gpupool_admission_requests_total", endpoint="mutate"))
        if delta >= 60 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert delta == 60
    denied = _metric(text, "gpupool_admission_denials_total", reason="CDIDeviceMissing",
                     pool="hami")
    assert denied >= 400
    assert _metric(text, "gpupool_admission_duration_seconds_bucket", endpoint="mutate",
                   le="+Inf") >= 60
    for le in ("0.005", "0.025", "0.1", "0.5", "1.0", "2.5", "10.0", "25.0"):
        assert f'le="{le}"' in text
    assert _metric(text, "gpupool_inventory_nodes") == 2
    assert _metric(text, "gpupool_certificate_expiry_timestamp_seconds") > 1.7e9
    assert "gpupool_policy_last_update_ok 1.0" in text


def test_a_stopping_worker_writes_the_requests_it_counted(tmp_path):
    """Each worker writes the requests it answered at most a second apart, and the rest as
    it stops: a rollout loses none of them. The server is stopped the moment its last
    answer arrives, and its metrics files read afterwards. (A graceful stop here takes
    about a second, so the background write may come first: ``worker_exit``'s own is
    shown in ``tests/unit/server/test_metrics_tally.py``.)"""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    files = tmp_path / "metrics"
    files.mkdir()
    srv = start_server(tmp_path, workers=2, env={"PROMETHEUS_MULTIPROC_DIR": str(files)})
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: srv.post("mutate", denial(20_000 + i)), range(40)))
    finally:
        stop_server(srv)
    assert srv.proc.returncode == 0
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(files))
    exposition = generate_latest(registry).decode()
    assert _metric(exposition, "gpupool_admission_requests_total", endpoint="mutate") == 40
    assert _metric(exposition, "gpupool_admission_duration_seconds_count",
                   endpoint="mutate") == 40


def test_a_worker_leaving_keeps_the_metrics_folder_for_the_others(tmp_path):
    """A worker that stops on its own (TTOU, a recycle) leaves the metrics folder ``gpupool
    serve`` made to the workers still running: until 2026-12-07 its exit deleted it, and
    every series a worker made afterwards failed (a traceback per review)."""
    import os
    import signal

    from harness.kit import wait_until
    from harness.procs import children

    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ  # (the server makes its own)
    srv = start_server(tmp_path, workers=2)
    try:
        srv.post("mutate", denial(30_000))
        old = children(srv.proc.pid)
        leaving = min(old)
        os.kill(leaving, signal.SIGTERM)  # a graceful exit, as gunicorn's TTOU asks
        wait_until(lambda: leaving not in children(srv.proc.pid)
                   and len(children(srv.proc.pid)) == 2, "the worker replaced")
        for i in range(20):  # both workers, the new one too, make new series
            assert srv.post("validate", denial(30_001 + i)).json()["response"]["allowed"] \
                is False
        text = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=10).text
        assert _metric(text, "gpupool_admission_denials_total") >= 20
    finally:
        stop_server(srv)
    log = srv.log.read_text()
    assert "Traceback" not in log, log[-3000:]
