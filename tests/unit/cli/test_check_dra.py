"""DRA pods through ``gpupool check`` and ``gpupool doctor`` as a user runs them: a cluster
file exported with ``kubectl get nodes,deviceclasses,resourceslices -o yaml``, manifests that
carry their ResourceClaimTemplates, the built-in policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.unit.engine.test_dra import docs

DEPLOYMENT = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: trainer-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('%s')) >= 0
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer}
spec:
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: trainer-gpu}]
      containers:
      - name: main
        image: cuda
        resources: {claims: [{name: gpu}]}
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True,
                          text=True, timeout=60)


def cluster_file(tmp_path: Path, *, extended: bool = False) -> Path:
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
              "status": {"allocatable": {"nvidia.com/gpu": "2"} if extended and n ==
                         "dra-node-2" else {}}}
             for n in ("dra-node-1", "dra-node-2")]
    resources = docs("nvidia.yaml")
    if extended:
        resources[0]["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                 "items": nodes + resources}))
    return f


def test_a_dra_deployment_is_routed_and_checked_offline(tmp_path):
    app = tmp_path / "app.yaml"
    app.write_text(DEPLOYMENT % "40Gi")
    r = run("check", "--cluster", str(cluster_file(tmp_path)), "-f", str(app), "-o", "json")
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(r.stdout)["results"]
    assert (result["kind"], result["pool"], result["allowed"]) == ("Deployment", "operator",
                                                                    True)
    assert result["warnings"] == []
    assert [n["node"] for n in result["nodes"]] == ["dra-node-1"]  # the one with 80Gi GPUs
    # pinned to its pool, not steered by the agent's device-plugin labels
    assert "gpupool.io/pool" in json.dumps(result["patch"])
    assert "resolve.gpupool.io" not in json.dumps(result["patch"])
    assert "skipped ResourceClaimTemplate" not in r.stderr

    app.write_text(DEPLOYMENT % "100Gi")
    r = run("check", "--cluster", str(cluster_file(tmp_path)), "-f", str(app), "-o", "json")
    (result,) = json.loads(r.stdout)["results"]
    assert result["allowed"] and any("no node in pool operator has the DRA devices" in w
                                     for w in result["warnings"])
    strict = tmp_path / "policy.yaml"
    from webhook.files.policyfile import default_policy_text
    strict.write_text(default_policy_text() + "onNoCandidates: deny\n")
    r = run("check", "--cluster", str(cluster_file(tmp_path)), "--policy", str(strict),
            "-f", str(app))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DENIED  Deployment default/trainer" in r.stdout
    assert "ResourceClaimTemplate trainer-gpu request gpu needs 1 device of class " \
           "gpu.nvidia.com matching its selectors; 0 found" in r.stdout


def test_without_dra_objects_in_the_file_claims_are_not_judged(tmp_path):
    """A node export without DeviceClasses says nothing of DRA: warn, never deny."""
    f = tmp_path / "nodes.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node",
                                 "metadata": {"name": "n1"}}))
    app = tmp_path / "app.yaml"
    app.write_text(DEPLOYMENT % "100Gi")
    r = run("check", "--cluster", str(f), "-f", str(app), "-o", "json")
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(r.stdout)["results"]
    assert result["pool"] == "operator"
    assert "gpupool: DeviceClasses unknown to gpupool; DRA claims not checked" in \
        result["warnings"]


def test_doctor_flags_a_gpu_resource_served_two_ways(tmp_path):
    r = run("doctor", "--cluster", str(cluster_file(tmp_path, extended=True)), "-o", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {row["node"]: row for row in json.loads(r.stdout)["nodes"]}
    assert rows["dra-node-1"]["dra_devices"] == {"gpu.nvidia.com": 2}
    assert rows["dra-node-1"]["hazards"] == []
    (hazard,) = rows["dra-node-2"]["hazards"]
    assert hazard.startswith("nvidia.com/gpu is served here both by a device plugin and by "
                             "DeviceClass gpu.nvidia.com")
    r = run("doctor", "--cluster", str(cluster_file(tmp_path)))
    assert "DRA devices: gpu.nvidia.com(2)" in r.stdout and "hazard:" not in r.stdout
