"""The install docs, run as written against a real kube-apiserver with real kubectl and helm:
each ``<!-- doc-test: cluster:NAME -->`` session gets its own fresh API server and working
copy, and its blocks run in document order as a reader would type them (docs/install.md:
Helm; kustomize with self-signed certificates, renewal, and the failurePolicy escape hatch).

No kubelet runs here, so the installed Deployment's pods never start; what the commands
create is checked object by object."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.controlplane import ControlPlane
from tests.docs import Block, Shell, blocks, path_with, workdir

pytestmark = pytest.mark.e2e
SESSIONS: dict[str, list[Block]] = {}
for _b in blocks():
    if _b.mode.startswith("cluster:"):
        SESSIONS.setdefault(_b.session, []).append(_b)


def test_every_cluster_session_is_checked_here():
    assert set(SESSIONS) == {"helm", "kustomize"}, SESSIONS.keys()


@pytest.fixture
def session(request, k8s_bin, helm, tmp_path):
    cp = ControlPlane(tmp_path / "cp", k8s_bin).start()
    venv_bin = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin"
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "HOME": str(tmp_path / "home"),
           "HELM_CACHE_HOME": str(tmp_path / "helm/cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "helm/config"),
           "HELM_DATA_HOME": str(tmp_path / "helm/data"),
           "PATH": path_with(k8s_bin, helm.parent,
                             venv_bin if venv_bin.is_dir() else Path(sys.executable).parent)}
    (tmp_path / "home").mkdir()
    try:
        yield cp, Shell(workdir(tmp_path), env)
    finally:
        cp.stop()


def _get(cp: ControlPlane, *args: str) -> dict:
    return json.loads(cp.kubectl("get", *args, "-o", "json").stdout)


def test_helm_install_as_documented(session):
    cp, shell = session
    for block in SESSIONS["helm"]:
        shell.run(block)
    mwc = _get(cp, "mutatingwebhookconfiguration", "gpupool-mutating")
    assert mwc["webhooks"][0]["clientConfig"]["service"]["namespace"] == "gpupool-system"
    assert mwc["webhooks"][0]["clientConfig"]["caBundle"]
    dep = _get(cp, "deployment", "-n", "gpupool-system", "gpupool-webhook")
    probes = dep["spec"]["template"]["spec"]["containers"][0]
    assert probes["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_kustomize_install_renew_and_escape_hatch_as_documented(session):
    cp, shell = session
    blocks_ = SESSIONS["kustomize"]
    shell.run(blocks_[0])  # cd overlay; certs generate; kubectl apply -k .
    certs = shell.cwd / "certs"
    secret = _get(cp, "secret", "-n", "gpupool-system", "gpupool-webhook-tls")
    ca_bundle = (certs / "caBundle").read_text().strip()
    mwc = _get(cp, "mutatingwebhookconfiguration", "gpupool-mutating")
    assert mwc["webhooks"][0]["clientConfig"]["caBundle"] == ca_bundle
    assert mwc["webhooks"][0]["failurePolicy"] == "Fail"

    shell.run(blocks_[1])  # renew (not due: nothing changes) and re-apply
    assert _get(cp, "secret", "-n", "gpupool-system", "gpupool-webhook-tls")["data"] == \
        secret["data"]
    assert (certs / "caBundle").read_text().strip() == ca_bundle

    # doctor reads the serving certificate's expiry from the Secret the overlay created.
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--kubeconfig",
                        str(cp.kubeconfig), "-o", "json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr  # no GPU node to fail, a certificate good for a year
    cert = json.loads(r.stdout)["certificate"]
    assert cert["source"] == "secret gpupool-system/gpupool-webhook-tls"
    assert cert["days_left"] in (363, 364) and not cert["finding"]

    shell.run(blocks_[2])  # the failurePolicy escape hatch of "When the webhook is down"
    mwc = _get(cp, "mutatingwebhookconfiguration", "gpupool-mutating")
    vwc = _get(cp, "validatingwebhookconfiguration", "gpupool-validating")
    assert mwc["webhooks"][0]["failurePolicy"] == "Ignore"
    assert vwc["webhooks"][0]["failurePolicy"] == "Ignore"
