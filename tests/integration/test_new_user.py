"""What a new user meets first, through the installed ``gpupool`` command and server: labels
that follow the decision, results told apart by file, and requests answered in words that
say what to send."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.kit import ROOT, body, gpu_pod
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


def test_the_server_names_a_misspelt_gpu_resource_and_tells_a_bad_review_what_to_send(tmp_path):
    srv = start_server(tmp_path)
    try:
        # A misspelt GPU resource reaches /mutate through access.gpupool.io (every pod that
        # asks for no GPU): the answer names it and the name it likely meant.
        r = srv.post("mutate", body(gpu_pod("typo", limits={"nvidia.com/gpus": 1})))
        assert r.status_code == 200 and r.json()["response"]["allowed"] is True
        assert "gpupool: no node serves nvidia.com/gpus (did you mean nvidia.com/gpu?); the " \
            "pod would wait forever" in r.json()["response"]["warnings"]
        r = srv.post("validate", json.dumps({"kind": "AdmissionReview",
                                             "request": {"uid": "u-1"}}).encode())
        assert r.status_code == 400
        assert r.json()["message"] == ("gpupool: apiVersion is missing: send an AdmissionReview of "
                                       "admission.k8s.io/v1 or admission.k8s.io/v1beta1")
    finally:
        stop_server(srv)


def test_the_demo_cluster_checks_what_the_docs_show(tmp_path):
    """Shaped like ``kubectl get nodes,deviceclasses,resourceslices -o yaml``: allocatable
    on every node (a pod asking more GPUs than a node has is warned about), and NVIDIA's
    DeviceClasses with a node's ResourceSlice (the DRA example is checked, not skipped)."""
    r = gpupool("check", "-f", str(EXAMPLES / "dra-trainer.yaml"), "--cluster", str(DEMO))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ALLOWED Deployment default/trainer" in r.stdout
    assert "not checked" not in r.stdout and "warning" not in r.stdout, r.stdout
    nine = tmp_path / "nine.yaml"
    nine.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: nine}\nspec:\n  containers:\n"
                    "  - name: c\n    image: cuda\n    resources: {limits: {nvidia.com/gpu: 9}}\n")
    r = gpupool("check", "-f", str(nine), "--cluster", str(DEMO))
    assert "no node in pool operator has the GPUs this pod asks for" in r.stdout, r.stdout
    big = tmp_path / "big.yaml"
    big.write_text((EXAMPLES / "dra-trainer.yaml").read_text().replace("40Gi", "100Gi"))
    r = gpupool("check", "-f", str(big), "--cluster", str(DEMO))
    assert "no node in pool operator has the DRA devices this pod asks for" in r.stdout, r.stdout


def test_a_gpu_uuid_no_node_has_is_named_in_the_denial(tmp_path):
    picky = tmp_path / "picky.yaml"
    wanted = "GPU-00000000-0000-0000-0000-000000000000"
    picky.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: picky\n  annotations: "
        f"{{nvidia.com/use-gpuuuid: {wanted}}}\nspec:\n  containers:\n  - name: c\n"
        "    image: cuda\n    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}\n")
    r = gpupool("check", "-f", str(picky), "--cluster", str(DEMO))
    assert r.returncode == 1
    assert f"nvidia.com/use-gpuuuid asks for {wanted}, none of them on this node; the node has " \
        "GPU-59ab2c0d-7c4e-4d4a-9f1e-1a2b3c4d5e6f" in r.stdout, r.stdout
