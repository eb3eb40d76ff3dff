"""The chart under a release that is not called ``gpupool``, in a namespace that is not
``gpupool-system``: the commands its notes print run as printed against the real API server
with the real kubectl (and ``kubectl gpupool``), ``doctor`` finds the release's Secret and
webhook configurations by label, and an identity without RBAC gets the API server's own
403 in one line.

gpupool itself runs on loopback (no kubelet runs pods here): the chart points its webhooks at
it with ``webhook.url`` and trusts its CA through ``certificates.mode=secret``, as in
tests/e2e/test_helm_install.py."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import helm as helmtool
from harness import install
from harness.controlplane import ControlPlane
from harness.servers import free_port, start_server, stop_server

pytestmark = pytest.mark.e2e
RELEASE, NS = "edge", "gpu-admission"


@pytest.fixture(scope="module")
def release(k8s_bin, helm, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("release-names")
    cp = ControlPlane(tmp / "cp", k8s_bin).start()
    server = None
    try:
        certs = tmp / "certs"
        port = free_port()
        subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out",
                        str(certs), "--ip", "127.0.0.1"], check=True, capture_output=True)
        cp.kubectl("create", "namespace", NS)
        cp.kubectl("create", "namespace", "ml")
        cp.kubectl("create", "secret", "tls", "edge-serving", "-n", NS,
                   f"--cert={certs / 'tls.crt'}", f"--key={certs / 'tls.key'}")
        values = tmp / "values.yaml"
        values.write_text(yaml.safe_dump({
            "webhook": {"url": f"https://127.0.0.1:{port}"},
            "certificates": {"mode": "secret", "secret": {
                "name": "edge-serving",
                "caBundle": base64.b64encode((certs / "ca.crt").read_bytes()).decode()}}}))
        notes = helmtool.run("install", RELEASE, str(helmtool.CHART), "--namespace", NS,
                             "-f", str(values), "--kubeconfig", str(cp.kubeconfig)).stdout
        # the admin's identity: the chart's RBAC names this release's ServiceAccount, whose
        # token the test API server does not issue
        server = start_server(tmp, "--kubeconfig", str(cp.kubeconfig), workers=1, port=port,
                              cert=certs / "tls.crt", key=certs / "tls.key",
                              ca=certs / "ca.crt")
        install.wait_for_webhooks(cp, server, "ml")
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig),
               "PATH": os.pathsep.join([str(k8s_bin), str(Path(sys.executable).parent),
                                        os.environ["PATH"]])}
        yield cp, notes, env
    finally:
        if server is not None:
            stop_server(server)
        cp.stop()


def _printed_commands(notes: str) -> list[str]:
    """The notes' command lines, joined across their backslash continuations."""
    out: list[str] = []
    pending = ""
    for raw in notes.splitlines():
        line = raw.strip()
        if pending:
            pending += " " + line.removesuffix("\\").strip()
            if not line.endswith("\\"):
                out.append(pending)
                pending = ""
        elif line.startswith("kubectl "):
            if line.endswith("\\"):
                pending = line.removesuffix("\\").strip()
            else:
                out.append(line)
    return out


def _sh(cmd: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_notes_name_this_release_and_their_commands_run(release):
    cp, notes, env = release
    commands = _printed_commands(notes)
    assert not any("gpupool-system" in c for c in commands), commands
    rollout = next(c for c in commands if "rollout status" in c)
    assert f"deployment/{RELEASE}-gpupool-webhook" in rollout and f"-n {NS}" in rollout
    # No kubelet runs the Deployment's pods here: the object it names exists, and waiting for
    # it only times out (it is not "not found").
    r = _sh(rollout + " --timeout=2s", env)
    assert "not found" not in r.stderr.lower(), r.stderr
    doctor = next(c for c in commands if "gpupool doctor" in c)
    assert doctor == f"kubectl gpupool doctor -n {NS}"
    r = _sh(doctor, env)
    assert r.returncode == 0, r.stdout + r.stderr  # no GPU node, a good certificate
    assert f"gpupool in namespace {NS}: mutatingwebhookconfiguration/gpupool-mutating" in r.stdout
    assert f"validatingwebhookconfiguration/{RELEASE}-gpupool-validating" in r.stdout
    assert f"secret {NS}/edge-serving" in r.stdout and "(cover 127.0.0.1)" in r.stdout
    dry = next(c for c in commands if "--dry-run=server" in c)
    r = _sh(dry, env)
    assert r.returncode == 0, r.stderr
    assert "schedulerName: default-scheduler" in r.stdout and "gpupool.io/pool" in r.stdout
    pods = next(c for c in commands if "get pods,endpoints" in c)
    assert f"app.kubernetes.io/instance={RELEASE}" in pods
    assert _sh(pods, env).returncode == 0
    patches = [c for c in commands if c.startswith("kubectl patch")]
    assert len(patches) == 2
    for cmd in patches:
        r = _sh(cmd, env)
        assert r.returncode == 0, (cmd, r.stderr)
    for kind, name in (("mutatingwebhookconfiguration", "gpupool-mutating"),
                       ("validatingwebhookconfiguration", f"{RELEASE}-gpupool-validating")):
        cfg = json.loads(cp.kubectl("get", kind, name, "-o", "json").stdout)
        assert cfg["webhooks"][0]["failurePolicy"] == "Ignore"


def test_doctor_finds_the_release_by_label_and_refuses_a_namespace_without_one(release):
    _, _, env = release
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "-o", "json"], env=env,
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(r.stdout)
    assert doc["installation"]["namespace"] == NS
    assert doc["installation"]["tlsSecret"] == f"{NS}/edge-serving"
    assert doc["certificate"]["covers_host"] is True
    assert doc["totals"]["pods_at_risk"] == 0  # counted in a live cluster (none at risk)
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "-n", "ml"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "-n ml: no gpupool installation there" in r.stderr


def test_an_identity_without_rbac_gets_the_api_servers_words(release, tmp_path):
    cp, _, env = release
    cfg = yaml.safe_load(cp.kubeconfig.read_text())
    cfg["users"] = [{"name": "nobody", "user": {"token": cp.tokens["agent"]}}]
    cfg["contexts"][0]["context"]["user"] = "nobody"
    kubeconfig = tmp_path / "nobody.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--kubeconfig",
                        str(kubeconfig)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert "403 forbidden (listing nodes)" in line
    assert re.search(r'cannot list resource "nodes" in API group "" at the cluster scope', line)
    assert shlex.split(line)  # one printable line
