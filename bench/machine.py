"""What a result was measured on: every figure in bench/results/ carries it, because these
figures only compare with others taken on the same kind of machine."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def _proc_field(path: str, key: str) -> str | None:
    """The value of the first ``key: value`` line of a /proc file."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _memory_gib() -> float | None:
    kib = _proc_field("/proc/meminfo", "MemTotal:")
    return round(int(kib.split()[0]) / (1 << 20), 1) if kib else None


def _go() -> str | None:
    if shutil.which("go") is None:
        return None
    r = subprocess.run(["go", "version"], capture_output=True, text=True, timeout=30)
    return r.stdout.strip() or None


def describe() -> dict[str, Any]:
    return {"host": platform.node(), "cpu": _proc_field("/proc/cpuinfo", "model name") or "unknown",
            "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "memory_gib": _memory_gib(), "kernel": platform.release(),
            "python": platform.python_version(), "go": _go()}


def line(m: dict[str, Any]) -> str:
    return (f"{m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}, "
            f"Python {m['python']}")
