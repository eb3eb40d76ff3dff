"""`kubectl gpupool ...` through a real kubectl binary that finds the installed plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.kit import UPSTREAM


def test_kubectl_finds_and_runs_the_plugin(kubectl):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    listing = subprocess.run([str(kubectl), "plugin", "list"], capture_output=True, text=True,
                             env=env, timeout=60)
    assert "kubectl-gpupool" in listing.stdout
    r = subprocess.run([str(kubectl), "gpupool", "check", "--no-cluster", "-f",
                        str(UPSTREAM / "pods/hami/nvidia/use_memory_fraction.yaml"), "-o", "json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    (res,) = json.loads(r.stdout)["results"]
    assert res["pool"] == "hami" and res["schedulerName"] == "hami-scheduler"
    bad = subprocess.run([str(kubectl), "gpupool", "check", "-f", "/nonexistent.yaml"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("kubectl gpupool: error:")
