"""``--kube-version``: offline, gpupool decides DRA allocation as the release the user names
(the newest supported when none is named), and says which in ``doctor``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests import drareleases

POLICY = """apiVersion: gpupool.io/v1alpha1
kind: PoolPolicy
defaultPool: dra
gpuResources: [nvidia.com/gpu]
onNoCandidates: deny
pools:
  - name: dra
    labelValues: [dra]
    schedulerName: default-scheduler
    dra: {deviceClasses: [any]}
"""


def gp(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A node whose one device allows multiple allocations, and a pod whose claim asks for
    two devices: 1.35's allocator hands the device out twice, 1.36's and 1.37's do not."""
    case = next(c for c in drareleases.cases() if c.switch == "request_takes_a_device_once")
    q = case.question
    node = q["nodes"][0]
    node["metadata"]["labels"]["gpupool.io/pool"] = "dra"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                       "items": [node, *q["classes"], *q["slices"]]}))
    claim = q["claims"][0]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two", "namespace": "ml"},
           "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "c"}],
                    "containers": [{"name": "main", "image": "cuda",
                                    "resources": {"claims": [{"name": "c"}]}}]}}
    manifests = tmp_path / "pod.yaml"
    manifests.write_text(yaml.safe_dump_all([claim, pod]))
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    return cluster, manifests, policy


def _verdict(tmp_path: Path, *extra: str) -> dict:
    cluster, manifests, policy = _files(tmp_path)
    r = gp("check", "-f", manifests, "--cluster", cluster, "--policy", policy, "-o", "json",
           *extra)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    return next(o for o in doc["results"] if o["kind"] == "Pod")


def test_check_decides_as_the_release_it_is_told(tmp_path):
    old = _verdict(tmp_path, "--kube-version", "1.35")
    assert old["allowed"], old
    new = _verdict(tmp_path, "--kube-version", "v1.37.2")
    assert not new["allowed"], new
    assert "n0" in new["message"]
    # untold, the newest supported release decides
    assert _verdict(tmp_path)["allowed"] is False
    # a release whose allocator gpupool does not decide as: never a denial, and said
    unknown = _verdict(tmp_path, "--kube-version", "1.34")
    assert unknown["allowed"], unknown
    assert any("claims not checked: Kubernetes 1.34's allocator is not one gpupool decides "
               "as" in w
               for w in unknown["warnings"]), unknown


def test_a_version_that_is_not_one_is_one_line_and_exit_2(tmp_path):
    cluster, manifests, _ = _files(tmp_path)
    r = gp("check", "-f", manifests, "--cluster", cluster, "--kube-version", "2.0")
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "--kube-version" in r.stderr \
        and "'2.0' is not a Kubernetes version" in r.stderr, r.stderr


def test_doctor_says_which_release_decides_and_flags_one_gpupool_does_not_support(tmp_path):
    cluster, _, policy = _files(tmp_path)
    ok = gp("doctor", "--cluster", cluster, "--policy", policy, "--kube-version", "1.36")
    assert "Kubernetes 1.36 (--kube-version): DRA allocation is decided as its scheduler " \
           "decides it" in ok.stdout, ok.stdout
    old = gp("doctor", "--cluster", cluster, "--policy", policy, "--kube-version", "1.33",
             "-o", "json")
    assert old.returncode == 1, old.stderr
    k8s = json.loads(old.stdout)["kubernetes"]
    assert k8s["release"] == "1.33" and not k8s["supported"]
    assert "1.35 to 1.37" in k8s["note"]
    assert "does not decide DRA allocation as Kubernetes 1.33's allocator" in k8s["note"]
