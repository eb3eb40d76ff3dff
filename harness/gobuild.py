"""Test programs built from Go modules by a script that caches them outside the tree."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.kit import IN_CI


@functools.cache
def built(script: Path, what: str, *args: str) -> Path:
    """Run ``script`` with ``args`` (it prints the bin directory last) and return that
    directory, once per process and arguments. Without Go the tests that need it skip
    loudly here, and fail under CI, where Go is part of the machine."""
    if shutil.which("go") is None:
        msg = f"Go toolchain not found: {what} cannot be built"
        if IN_CI:
            pytest.fail(msg)
        print(f"\n{'!' * 78}\n!! SKIPPING TESTS THAT NEED {what.upper()}: {msg}\n{'!' * 78}")
        pytest.skip(msg)
    r = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        pytest.fail(f"{what} build failed:\n{r.stderr[-4000:]}")
    return Path(r.stdout.strip().splitlines()[-1])
