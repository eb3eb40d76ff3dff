"""What a new user meets first, through the installed ``gpupool`` command and server: labels
that follow the decision, results told apart by file, and requests answered in words that
say what to send."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.kit import ROOT
from harness.servers import start_server, stop_server

DEMO = ROOT / "webhook/data/demo-cluster.yaml"
EXAMPLES = ROOT / "docs/examples"


def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "gpupool"), *args],
                          capture_output=True, text=True, timeout=120)


def test_check_labels_follow_the_decision_and_results_name_their_file():
    r = gpupool("check", "-f", str(EXAMPLES), "--cluster", str(DEMO))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    # Two files define pod default/vllm-0: each result says which file it came from.
    vllm = [line for line in lines if "Pod default/vllm-0" in line]
    assert len(vllm) == 2
    assert "pod-hami.yaml)" in vllm[0]
    assert "running-pods.yaml)" in vllm[1]
    # The forged allocation asks for nvidia.com/gpu: never labelled as a pod without GPUs.
    forged = vllm[1]
    assert forged.startswith("DENIED") and "no GPU resources" not in forged
    assert "ForgedAllocation" in lines[lines.index(forged) + 1]
    # A skipped object is named without a stray space.
    assert any(line.endswith("skipped AdmissionReview: not a Pod or a workload with a pod "
                             "template") for line in lines), lines
    doc = json.loads(gpupool("check", "-f", str(EXAMPLES / "running-pods.yaml"), "--cluster",
                             str(DEMO), "-o", "json").stdout)
    (result,) = [x for x in doc["results"] if x["name"] == "vllm-0"]
    assert result["reason"] == "ForgedAllocation" and result["gpu"] is True


def test_doctor_says_the_release_was_assumed_in_words():
    r = gpupool("doctor", "--cluster", str(DEMO))
    assert "Kubernetes 1.37 (assumed: the release is not known, so the newest supported)" \
        in r.stdout, r.stdout


def test_a_review_without_api_version_is_told_what_to_send(tmp_path):
    srv = start_server(tmp_path)
    try:
        r = srv.post("validate", json.dumps({"kind": "AdmissionReview",
                                             "request": {"uid": "u-1"}}).encode())
        assert r.status_code == 400
        assert r.json()["message"] == ("gpupool: apiVersion is missing: send an AdmissionReview of "
                                       "admission.k8s.io/v1 or admission.k8s.io/v1beta1")
    finally:
        stop_server(srv)
