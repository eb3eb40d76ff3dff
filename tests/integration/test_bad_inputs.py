"""The bad-input corpus against a real server over HTTPS: each input gets its documented
answer, and a good request right after it still succeeds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests
import yaml

from harness.kit import ROOT
from harness.layouts import write_layout
from tests.badinputs import CASES, GOOD

#: Cases whose error is found after the uid was read: the reply still carries it.
UID_KEPT = {"kind-is-string", "operation-is-number", "object-is-list", "create-without-object",
            "dryrun-is-string", "namespace-is-list", "non-pod-kind", "pod-subresource",
            "v1beta1-deployment"}


def test_corpus_is_large_and_documented():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)
    doc = (ROOT / "docs/reliability.md").read_text()
    for c in CASES:
        rows = [line for line in doc.splitlines() if line.startswith(f"| `{c.id}` |")]
        assert len(rows) == 1 and f"| {c.status} |" in rows[0], c.id


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_answered_and_server_keeps_serving(server, case):
    headers = {"Content-Type": case.content_type} if case.content_type else {}
    r = requests.request(case.method, f"{server.url}/{case.endpoint}", data=case.body,
                         headers=headers, verify=server.ca, timeout=30)
    assert r.status_code == case.status, r.text[:300]
    assert case.message in r.text, r.text[:300]
    if case.id in UID_KEPT:
        assert r.json()["response"]["uid"] == "bad-1"
    good = server.post("mutate", GOOD)
    assert good.status_code == 200 and good.json()["response"]["allowed"] is True


def test_invalid_policy_at_startup_is_refused_clearly(tmp_path):
    (tmp_path / "p.yaml").write_text("apiVersion: gpupool.io/v1alpha1\nkind: PoolPolicy\n"
                                     "poolLabel: gpupool.io/pool\ndefaultPool: x\n"
                                     "gpuResources: [nvidia.com/gpu]\npools: [{name: x}]\n")
    r = subprocess.run([sys.executable, "-m", "webhook", "serve", "--insecure-http",
                        "--no-cluster", "--policy", str(tmp_path / "p.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "pools[0].schedulerName: required field is missing" in r.stderr


def test_cdi_directory_full_of_garbage(tmp_path):
    paths = write_layout(tmp_path, "device-plugin")
    run = paths["run"]
    (run / "binary.json").write_bytes(os.urandom(4096))
    (run / "empty.yaml").write_text("")
    (run / "list.yaml").write_text("- 1\n- 2\n")
    (run / "dir.yaml").mkdir()
    os.symlink("loop.yaml", run / "loop.yaml")
    (run / "huge.yaml").write_bytes(b"#" * (17 << 20))
    (run / "latin1.yaml").write_bytes(b"kind: \xe9\n")
    (run / "anchors.yaml").write_text("a: &a [*a]\n")
    r = subprocess.run([sys.executable, "-m", "webhook", "agent", "--once", "--print",
                        "--cdi-dir", str(run)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    inv = yaml.safe_load(r.stdout)
    assert len(inv["kinds"]["k8s.device-plugin.nvidia.com/gpu"]) == 2  # the good file counts
    reasons = {os.path.basename(e["path"]): e["reason"] for e in inv["errors"]}
    assert set(reasons) >= {"binary.json", "empty.yaml", "list.yaml", "loop.yaml", "huge.yaml",
                            "latin1.yaml", "anchors.yaml"}
    assert "over the" in reasons["huge.yaml"] and reasons["empty.yaml"] == "empty file"
