"""helm, built from the Go module proxy by build-helm.sh and cached outside the tree."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from harness.gobuild import built
from harness.kit import ROOT

BUILD = ROOT / "tests" / "tools" / "build-helm.sh"
CHART = ROOT / "manifests" / "helm" / "gpupool"


def binary() -> Path:
    return built(BUILD, "helm") / "helm"


def run(*args: str, check: bool = True, env: dict[str, Any] | None = None
        ) -> subprocess.CompletedProcess[str]:
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
