"""A server that outlives its own inputs: a policy, certificate or cluster snapshot broken on
disk, then a worker restart (an OOM kill, a drain), must leave the server answering reviews
on the last good version, never exiting with gunicorn's ``Worker failed to boot``. Every
replica reads the same ConfigMap and Secret and the pod webhooks fail closed, so that exit
would block GPU pods cluster-wide."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import requests

from harness.kit import wait_until
from harness.procs import children
from harness.servers import gpupool_cmd, start_server, stop_server
from webhook.files.policyfile import DATA_DIR, default_policy_text

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"


def _respawn_all(srv, want: int = 2) -> None:
    """SIGKILL every worker, as the OOM killer would, and wait for gunicorn's respawns."""
    old = children(srv.proc.pid)
    assert len(old) == want, old
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len(children(srv.proc.pid) - old) == want and srv.proc.poll() is None,
           f"workers respawned\n{srv.log.read_text()[-3000:]}")



def _answers_reviews(srv, rounds: int = 20) -> None:
    """Enough reviews that both workers answer some, each decided as the demo says."""
    validate = (EXAMPLES / "review-hami-pod-validate.json").read_bytes()
    mutate = (EXAMPLES / "review-hami-pod.json").read_bytes()
    for _ in range(rounds):
        with requests.Session() as s:  # a new connection each: any worker may take it
            denied = srv.post("validate", validate, session=s).json()["response"]
            assert denied["allowed"] is False and "hami-node-1" in denied["status"]["message"]
            assert denied["uid"]
            patched = srv.post("mutate", mutate, session=s).json()["response"]
            assert patched["allowed"] is True and patched["patchType"] == "JSONPatch"
    assert srv.proc.poll() is None


def _readyz(srv) -> requests.Response:
    return requests.get(f"{srv.url}/readyz?verbose", verify=srv.ca, timeout=5)


def _metric(srv, line_start: str) -> str:
    text = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=5).text
    return next(line for line in text.splitlines() if line.startswith(line_start))


def test_bad_policy_then_worker_restarts_keeps_serving(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(default_policy_text())
    srv = start_server(tmp_path, "--policy", str(policy))
    try:
        policy.write_text("pools: [\n")  # one bad apply of the ConfigMap
        _respawn_all(srv)
        ready = _readyz(srv)
        assert ready.status_code == 200, ready.text  # not critical: still in the Service
        assert "[-]policy failed" in ready.text and "last good copy" in ready.text
        assert "line 2" in ready.text and "<unicode string>" not in ready.text
        _answers_reviews(srv)
        assert _metric(srv, 'gpupool_serving_last_good_copy{file="policy"}').endswith(" 1.0")
        # a second worker booting after the bad file (gunicorn's TTIN adds one)
        os.kill(srv.proc.pid, signal.SIGTTIN)
        wait_until(lambda: len(children(srv.proc.pid)) == 3, "a third worker")
        _answers_reviews(srv, rounds=10)
        policy.write_text(default_policy_text())  # fixed: every worker follows it again
        wait_until(lambda: "[+]policy ok" in _readyz(srv).text, "policy fixed")
        wait_until(lambda: _metric(srv, 'gpupool_serving_last_good_copy{file="policy"}')
               .endswith(" 0.0"), "metric back to 0")
    finally:
        stop_server(srv)
    assert "Traceback" not in srv.log.read_text()


def test_garbage_certificate_then_worker_restarts_keeps_serving(tmp_path):
    srv = start_server(tmp_path)
    try:
        good = (srv.certs / "tls.crt").read_bytes()
        (srv.certs / "tls.crt").write_text("garbage\n")
        _respawn_all(srv)
        ready = _readyz(srv)  # verified with the CA: the last good pair still serves
        assert ready.status_code == 200, ready.text
        assert "[-]certificate-files failed" in ready.text and "do not load" in ready.text
        assert _metric(srv, "gpupool_certificate_last_update_ok").endswith(" 0.0")
        _answers_reviews(srv)
        (srv.certs / "tls.crt").write_bytes(good)
        wait_until(lambda: "[+]certificate-files ok" in _readyz(srv).text, "certificate fixed")
    finally:
        stop_server(srv)
    assert "Traceback" not in srv.log.read_text()


def test_broken_cluster_snapshot_then_worker_restarts_keeps_serving(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    shutil.copy(DATA_DIR / "demo-cluster.yaml", cluster)
    srv = start_server(tmp_path, "--cluster", str(cluster))
    try:
        cluster.write_text("kind: [\n")
        _respawn_all(srv)
        ready = _readyz(srv)
        assert ready.status_code == 200 and "[-]cluster-file failed" in ready.text, ready.text
        _answers_reviews(srv)
    finally:
        stop_server(srv)
    assert "Traceback" not in srv.log.read_text()


def test_first_start_with_a_bad_policy_is_one_line_and_exit_2(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("pools: [\n")
    r = subprocess.run([*gpupool_cmd(), "serve", "--demo", "--insecure-http", "--bind",
                        "127.0.0.1:0", "--policy", str(policy)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert str(policy) in line and "line 2" in line


def test_a_container_restart_finds_the_copy_kept_in_the_state_directory(tmp_path):
    """The chart keeps the copies in the pod's emptyDir (GPUPOOL_STATE_DIR), which outlives a
    container restart (a liveness kill): the new process starts on the last good policy,
    with one warning line, instead of crash-looping."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(default_policy_text())
    env = {"GPUPOOL_STATE_DIR": str(tmp_path / "state")}
    srv = start_server(tmp_path, "--policy", str(policy), env=env)
    stop_server(srv)
    policy.write_text("pools: [\n")
    srv = start_server(tmp_path, "--policy", str(policy), env=env)
    try:
        assert "[-]policy failed" in _readyz(srv).text
        _answers_reviews(srv, rounds=4)
    finally:
        stop_server(srv)
    log = srv.log.read_text()
    assert f"warning: --policy {policy}:" in log and "Traceback" not in log
