"""``gpupool check`` as a user runs it: real files in, text or JSON out, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonpatch
import yaml

from harness.kit import UPSTREAM


def run(*args: str) -> subprocess.CompletedProcess:
    """``check``; routing only (``--no-cluster``) where the test gives no nodes."""
    source = [] if "--cluster" in args else ["--no-cluster"]
    return subprocess.run([sys.executable, "-m", "webhook", "check", *source, *args],
                          capture_output=True, text=True, timeout=60)


def test_json_output_names_each_object_and_patches_apply():
    files = [UPSTREAM / "pods/hami/nvidia/use_sharing_card.yaml",
             UPSTREAM / "pods/hami/nvidia/vllm_cross_vgpu.yaml",
             UPSTREAM / "pods/nvidia/k8s-device-plugin-testdata-job-1.yaml"]
    r = run(*[a for f in files for a in ("-f", str(f))], "-o", "json")
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout)["results"]
    assert [(x["kind"], x["name"], x["pool"]) for x in results] == [
        ("Pod", "gpu-pod1", "hami"), ("Pod", "gpu-pod2", "hami"),
        ("Deployment", "vllm-cross-vgpu", "hami"), ("Job", "j-e2e-1", "operator")]
    for x in results:
        assert {"allowed", "pool", "schedulerName", "patch", "warnings", "reason",
                "message", "namespace"} <= set(x)
    # Each patch applies to its own object as written in the file.
    docs = {d["metadata"]["name"]: d for f in files for d in yaml.safe_load_all(f.read_text())
            if d}
    for x in results:
        out = jsonpatch.apply_patch(docs[x["name"]], x["patch"])
        spec = out["spec"] if x["kind"] == "Pod" else out["spec"]["template"]["spec"]
        assert spec["schedulerName"] == x["schedulerName"]
    assert "skipped PersistentVolumeClaim" in r.stderr


def test_denied_exits_1_with_message(tmp_path):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "ml",
           "labels": {"gpupool.io/pool": "hami"}},
           "spec": {"nodeSelector": {"gpupool.io/pool": "other"},
                    "containers": [{"name": "c", "image": "i",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    f = tmp_path / "pod.yaml"
    f.write_text(yaml.safe_dump(pod))
    r = run("-f", str(f))
    assert r.returncode == 1
    assert "DENIED  Pod ml/x" in r.stdout and "PoolConflict" in r.stdout


def test_namespace_labels_route(tmp_path):
    f = UPSTREAM / "pods/hami/nvidia/default_use_legacy.yaml"
    r = run("-f", str(f), "--namespace-labels", "gpupool.io/pool=hami", "-o", "json")
    assert json.loads(r.stdout)["results"][0]["pool"] == "hami"


def test_cluster_snapshot_as_node_list(tmp_path):
    nodes = {"apiVersion": "v1", "kind": "NodeList", "items": [
        {"metadata": {"name": "n1", "labels": {"gpupool.io/pool": "hami",
                                               "nvidia.com/gpu.present": "true"}}}]}
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump(nodes))
    pod = yaml.safe_load((UPSTREAM / "pods/hami/nvidia/default_use_legacy.yaml").read_text())
    pod["spec"]["nodeName"] = "n1"
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    r = run("-f", str(tmp_path / "pod.yaml"), "--cluster", str(tmp_path / "nodes.yaml"),
            "-o", "json")
    assert json.loads(r.stdout)["results"][0]["pool"] == "hami", r.stderr


def test_bad_input_exits_2(tmp_path):
    (tmp_path / "bad.yaml").write_text("a: [")
    r = run("-f", str(tmp_path / "bad.yaml"))
    assert r.returncode == 2 and "not valid YAML" in r.stderr
    r = run("-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "missing.yaml" in r.stderr
    (tmp_path / "policy.yaml").write_text("apiVersion: gpupool.io/v1alpha1\nkind: PoolPolicy\n")
    r = run("-f", str(UPSTREAM / "pods/hami/nvidia/default_use.yaml"), "--policy",
            str(tmp_path / "policy.yaml"))
    assert r.returncode == 2 and "gpuResources" in r.stderr
    r = run("-f", str(UPSTREAM / "pods/hami/nvidia/default_use.yaml"), "--namespace-labels", "x")
    assert r.returncode == 2 and "not key=value" in r.stderr


def test_file_without_any_kubernetes_object_is_bad_input(tmp_path):
    """A CI gate over a values file, or the wrong YAML, must fail rather than pass."""
    values = tmp_path / "values.yaml"
    values.write_text("replicas: 3\nimage: {tag: v1}\n")
    r = run("-f", str(values))
    assert r.returncode == 2
    assert f"{values}: no Kubernetes object in it" in r.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\nmetadata: [unclosed\n")
    r = run("-f", str(broken))
    assert r.returncode == 2 and "not valid YAML" in r.stderr


def test_other_kinds_are_still_skipped_with_exit_0(tmp_path):
    f = tmp_path / "cm.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    r = run("-f", str(f))
    assert r.returncode == 0 and "0 checked, 0 denied, 1 skipped" in r.stdout
