"""What the server survives: a soak, a worker killed mid-load, slow clients, and old or weak
TLS. Figures are written to bench/results/faults.json and reported in docs/reliability.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest
import requests

from bench import slowclients, soak
from harness.kit import ROOT, body, gpu_pod, wait_until
from harness.servers import start_server, stop_server

RESULTS = ROOT / "bench" / "results" / "faults.json"


def _record(key: str, value) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = value
    RESULTS.write_text(json.dumps(data, indent=2))


@pytest.fixture
def fresh_server(tmp_path):
    srv = start_server(tmp_path, workers=2)
    yield srv
    stop_server(srv)


def test_short_soak_no_errors_bounded_memory_audit_exact(fresh_server):
    srv = fresh_server
    res = soak.run(srv.url, srv.ca, srv.proc.pid, soak.bodies(), seconds=25, warmup=8,
                   rate=80)
    time.sleep(0.5)
    audit = soak.audit_count(srv.audit, res.pop("deny_uids"))
    _record("soak_short", {**res, "audit": audit})
    assert res["errors"] == 0, res["error_samples"]
    assert res["sent"]["deny"] > 500
    assert res["max_rss_growth"] < 0.10, res["rss_mib"]
    assert audit["recorded_once"] == audit["denials_sent"]
    assert audit["missing"] == audit["duplicated"] == 0


def test_worker_killed_during_load(fresh_server):
    srv = fresh_server
    before = set(soak.worker_rss(srv.proc.pid))
    victim = sorted(before)[0]
    stop = threading.Event()
    results: list[bool] = []
    lock = threading.Lock()

    def load() -> None:
        with requests.Session() as s:
            while not stop.is_set():
                try:
                    ok = srv.post("mutate", body(gpu_pod()), session=s).status_code == 200
                except requests.RequestException:
                    ok = False
                with lock:
                    results.append(ok)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for t in threads:
        t.start()
    wait_until(lambda: results.count(True) >= 100, "load answered before the kill")
    os.kill(victim, signal.SIGKILL)
    killed_at = len(results)
    wait_until(lambda: len(results) >= killed_at + 300 and results[-50:].count(False) == 0,
               "load answered again after the kill", timeout=60)
    stop.set()
    for t in threads:
        t.join(20)
    after = set(soak.worker_rss(srv.proc.pid))
    failed = results.count(False)
    _record("sigkill", {"requests": len(results), "failed": failed, "connections": 6,
                        "sent_before_kill": killed_at})
    assert victim not in after and len(after) == 2  # the master replaced it
    # Only requests in flight on (or kept alive to) the killed worker can fail: at most one
    # per client connection.
    assert failed <= 6, failed
    assert all(results[-50:]), "still failing after the worker was replaced"


def test_slow_client_streams_do_not_delay_good_requests(fresh_server):
    """200 connections of each slow kind (stalled handshake, headers, body), reconnecting as
    soon as they are cut, for the whole measurement: good requests keep their latency.

    The p99 is compared with the same server's p99 without them, measured just before, since
    absolute times on this shared machine swing; one more round is allowed when the first
    misses, and both rounds are recorded."""
    srv = fresh_server
    rounds = []
    for _ in range(2):
        res = slowclients.scenario(srv.url, srv.ca, body(gpu_pod()), per_kind=200)
        rounds.append(res)
        assert res["baseline"]["failed"] == 0 and res["with_slow"]["failed"] == 0, res
        if res["p99_ratio"] <= 2.0:
            break
    _record("slow_client_streams", rounds)
    stats = rounds[-1]["slow_client_stats"]["kinds"]
    # The slow clients were really there and really cut by the deadlines, every kind.
    assert all(stats[k].get("opened", 0) >= 200 and stats[k].get("cut", 0) > 0
               for k in slowclients.KINDS), stats
    assert min(r["p99_ratio"] for r in rounds) <= 2.0, rounds


def _openssl(port: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
                           "-servername", "localhost", *args], input="", capture_output=True,
                          text=True, timeout=30)


def _handshook(r: subprocess.CompletedProcess) -> bool:
    return "Cipher is (NONE)" not in r.stdout and "New, TLS" in r.stdout


@pytest.mark.parametrize("flag,accepted", [("-tls1", False), ("-tls1_1", False),
                                           ("-tls1_2", True), ("-tls1_3", True)])
def test_tls_protocol_scan(server, flag, accepted):
    port = int(server.url.rsplit(":", 1)[1])
    r = _openssl(port, flag, "-cipher", "DEFAULT:@SECLEVEL=0")
    assert _handshook(r) == accepted, r.stdout[-600:] + r.stderr[-600:]


@pytest.mark.parametrize("cipher", ["AES128-SHA", "AES256-GCM-SHA384", "DES-CBC3-SHA",
                                    "ECDHE-ECDSA-AES128-SHA", "NULL-SHA256", "aNULL",
                                    "ECDHE-RSA-AES128-SHA256"])
def test_weak_and_non_forward_secret_ciphers_refused(server, cipher):
    port = int(server.url.rsplit(":", 1)[1])
    r = _openssl(port, "-tls1_2", "-cipher", f"{cipher}:@SECLEVEL=0")
    assert not _handshook(r), r.stdout[-600:]


def test_strong_tls12_cipher_accepted(server):
    port = int(server.url.rsplit(":", 1)[1])
    r = _openssl(port, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert _handshook(r) and "ECDHE-ECDSA-AES128-GCM-SHA256" in r.stdout


def test_graceful_stop_closes_idle_connections_and_finishes_requests(tmp_path):
    """SIGTERM (a rollout, a drain): a request already arriving is answered, connections the
    API server keeps alive between requests are closed at once, and the server is gone well
    before gunicorn's 25 s graceful timeout, which idle keep-alive connections used to use up."""
    import socket
    import ssl

    srv = start_server(tmp_path, workers=1)
    idle = requests.Session()
    assert idle.post(f"{srv.url}/mutate", data=body(gpu_pod()), verify=srv.ca, timeout=10,
                     headers={"Content-Type": "application/json"}).status_code == 200
    sent = body(gpu_pod("in-flight"), uid="in-flight")
    host, port = srv.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=srv.ca)
    busy = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=20),
                           server_hostname="localhost")
    busy.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                 b"\r\nContent-Length: " + str(len(sent)).encode() + b"\r\n\r\n" + sent[:50])
    time.sleep(0.5)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "Handling signal: term" in srv.log.read_text(), "the stop to begin")
    busy.sendall(sent[50:])
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        chunk = busy.recv(65536)
        if not chunk:
            break
        reply += chunk
    busy.close()
    srv.proc.wait(20)
    stopped_after = time.monotonic() - t0
    assert reply.startswith(b"HTTP/1.1 200")
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["response"]["uid"] == "in-flight"
    assert stopped_after < 15, f"stop took {stopped_after:.1f}s"
    log = srv.log.read_text()
    assert "graceful timeout" not in log and "Traceback" not in log
