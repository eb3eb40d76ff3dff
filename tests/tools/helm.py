"""helm, built from the Go module proxy by build-helm.sh and cached outside the tree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI, ROOT

BUILD = ROOT / "tests" / "tools" / "build-helm.sh"
CHART = ROOT / "manifests" / "helm" / "gpupool"
_bin: Path | None = None


def binary() -> Path:
    global _bin
    if _bin is not None:
        return _bin
    if shutil.which("go") is None:
        msg = "Go toolchain not found: helm cannot be built, the chart is not tested"
        if IN_CI:
            pytest.fail(msg)
        print(f"\n{'!' * 78}\n!! SKIPPING HELM TESTS: {msg}\n{'!' * 78}")
        pytest.skip(msg)
    r = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        pytest.fail(f"helm build failed:\n{r.stderr[-4000:]}")
    _bin = Path(r.stdout.strip().splitlines()[-1]) / "helm"
    return _bin


def run(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    home = Path(os.environ.get("TMPDIR", "/tmp")) / "gpupool-helm-home"
    full_env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
                "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data"),
                **(env or {})}
    r = subprocess.run([str(binary()), *args], capture_output=True, text=True, timeout=300,
                       env=full_env)
    if check and r.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{r.stderr}")
    return r
