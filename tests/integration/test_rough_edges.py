"""Rough edges found by trying gpupool as an operator and a new user would: a stalled body,
huge user values, the demo's freshness, the package metadata."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import time
import tomllib

import pytest
import requests

from harness.kit import ROOT, body, gpu_pod, review
from harness.servers import start_server, stop_server


@pytest.fixture(scope="module")
def quick_deadline_server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("edges"), "--request-deadline", "1",
                       audit_stdout=True)
    yield srv
    stop_server(srv)


def _tls(srv) -> ssl.SSLSocket:
    host, port = srv.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=srv.ca)
    return ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                           server_hostname="localhost")


def test_stalled_body_gets_a_json_error_and_one_log_line(quick_deadline_server):
    srv = quick_deadline_server
    sent = body(gpu_pod())
    with _tls(srv) as s:
        s.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                  b"\r\nContent-Length: " + str(len(sent)).encode() + b"\r\n\r\n" + sent[:20])
        reply = b""
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"application/json" in head
    assert "not received in time" in json.loads(payload)["message"]
    log = srv.log.read_text()
    assert "request body not received" in log
    assert "Traceback" not in log and "<html" not in reply.decode(errors="replace").lower()
    # The server is fine afterwards.
    r = srv.post("mutate", body(gpu_pod()))
    assert r.status_code == 200 and r.json()["response"]["allowed"] is True


def test_stalled_headers_are_dropped_with_a_summary_line_not_a_traceback(quick_deadline_server):
    srv = quick_deadline_server
    for _ in range(3):
        with _tls(srv) as s:
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: local")
            assert s.recv(100) == b""  # closed by the server after the deadline
    log = srv.log.read_text()
    assert "dropped slow client connection(s):" in log
    assert "Traceback" not in log


def test_huge_user_value_is_clipped_in_message_and_audit(quick_deadline_server):
    srv = quick_deadline_server
    pod = gpu_pod("huge")
    pod["metadata"]["labels"] = {"gpupool.io/pool": "x" * (1 << 20)}
    raw = review(pod, uid="u-huge")
    raw["request"]["userInfo"] = {"username": "u" * 100_000,
                                  "groups": [f"{i}" + "g" * 5_000 for i in range(100)]}
    r = srv.post("mutate", json.dumps(raw).encode())
    resp = r.json()["response"]
    assert resp["allowed"] is False
    message = resp["status"]["message"]
    assert len(message) < 1000 and "...(+" in message and "chars)" in message
    time.sleep(0.3)
    record = next(json.loads(line) for line in srv.audit.read_text().splitlines()
                  if '"uid":"u-huge"' in line)
    assert len(record["user"]) < 150 and all(len(g) < 150 for g in record["groups"])
    assert len(record["groups"]) == 64 and record["groupsOmitted"] == 36
    assert len(json.dumps(record)) < 16_000


def test_demo_inventories_read_as_fresh(tmp_path):
    srv = start_server(tmp_path)  # start_server serves --demo by default
    try:
        text = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=10).text
    finally:
        stop_server(srv)
    age = float(re.search(r"^gpupool_inventory_oldest_observation_age_seconds (\S+)$", text,
                          re.M).group(1))
    assert 0 <= age < 120


def test_package_licence_is_an_spdx_string():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"


def test_no_cluster_is_explicit_and_says_so_everywhere(tmp_path):
    """Serving with no node view is a choice made out loud: every GPU pod is warned, /readyz
    shows the failing (non-critical) check, the metric names the source."""
    from webhook import __version__

    srv = start_server(tmp_path, "--no-cluster", workers=1)
    try:
        resp = srv.post("validate", body(gpu_pod(
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "gpupool.io/pool", "operator": "NotIn",
                     "values": ["hami"]}]}]}}}))).json()["response"]
        ready = requests.get(f"{srv.url}/readyz?verbose", verify=srv.ca, timeout=10)
        metrics = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=10).text
    finally:
        stop_server(srv)
    assert resp["allowed"] is True
    assert "gpupool: CDI devices not checked: gpupool knows no nodes" in resp["warnings"]
    assert ready.status_code == 200
    assert "[-]node-source failed: none (--no-cluster)" in ready.text
    assert 'gpupool_node_source{source="none"} 1.0' in metrics
    assert 'gpupool_unchecked_total{decision="allowed",why="no-nodes"} 1.0' in metrics
    assert f'gpupool_build_info{{version="{__version__}"}} 1.0' in metrics
    assert f"gpupool {__version__}: serving on" in srv.log.read_text()


def test_plain_http_is_said_out_loud(tmp_path):
    from harness.servers import free_port, gpupool_cmd, stop_group

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*gpupool_cmd(), "serve", "--demo", "--insecure-http", "--bind",
                                 f"127.0.0.1:{port}", "--workers", "1"], stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while "Booting worker" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        stop_group(proc)
    text = log.read_text()
    assert "warning: --insecure-http: serving plain HTTP, for local debugging only" in text
    assert "Traceback" not in text


def test_ctrl_c_stops_the_server_as_sigterm_does(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to every process of the group: the master and each
    gevent worker. It used to print a gevent SystemExit traceback every time, and a worker
    still booting lost the signal and held the stop for gunicorn's 25 s graceful timeout."""
    import os
    import signal

    srv = start_server(tmp_path, workers=2)
    try:
        assert srv.post("mutate", body(gpu_pod())).status_code == 200
        t0 = time.monotonic()
        os.killpg(srv.proc.pid, signal.SIGINT)  # at once: the second worker may still boot
        assert srv.proc.wait(40) == 0
        took = time.monotonic() - t0
    finally:
        stop_server(srv)
    log = srv.log.read_text()
    assert "Handling signal: int" in log and log.count("Worker exiting") == 2, log[-2000:]
    assert "was sent SIGKILL" not in log and took < 10, (took, log[-2000:])
    assert "Traceback" not in log and "SystemExit" not in log


@pytest.mark.parametrize("to_group", [False, True], ids=["master", "group"])
def test_a_stop_right_after_start_is_not_lost_by_a_booting_worker(tmp_path, to_group):
    """SIGTERM to the master alone (the kubelet) or to the whole group, the moment the
    server first answers: every worker stops within seconds, none is killed at the graceful
    timeout because the signal reached it before its own handlers were in place."""
    import os
    import signal

    for _ in range(3):  # the window is a worker's boot: try it a few times
        srv = start_server(tmp_path, workers=2)
        t0 = time.monotonic()
        try:
            (os.killpg if to_group else os.kill)(srv.proc.pid, signal.SIGTERM)
            assert srv.proc.wait(40) == 0
        finally:
            stop_server(srv)
        log = srv.log.read_text()
        assert "was sent SIGKILL" not in log, log[-2000:]
        assert time.monotonic() - t0 < 10
