"""Startup: how long `make run` takes, warm (the virtualenv exists), from the command to the
first ready /readyz, beside a baseline measured in the same rounds: the bench's plain
Flask-under-gunicorn server with the same TLS and workers (bench/baseline.py).

`make run` pays for the certificate step (a Python process and a key), the policy and the
demo snapshot, and gpupool's imports; the ratio shows what that costs over plain gunicorn.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

from harness.servers import free_port, generate_certs, stop_group

ROOT = Path(__file__).resolve().parent.parent


def _time_to_ready(cmd: list[str], url: str, ca: Path, log: Path, env: dict[str, str]) -> float:
    start = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        while time.monotonic() - start < 120:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[:3]} exited: {log.read_text()[-2000:]}")
            try:
                if ca.exists() and requests.get(f"{url}/readyz", verify=str(ca),
                                                timeout=2).ok:
                    return time.monotonic() - start
            except requests.RequestException:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"not ready in 120 s: {log.read_text()[-2000:]}")
    finally:
        stop_group(proc)


def measure(tmp: Path, rounds: int = 5) -> dict[str, Any]:
    from bench.servers import server_cmd

    certs = tmp / "certs"
    generate_certs(certs)
    env = {**os.environ}
    make_run, baseline = [], []
    for i in range(rounds):
        run_dir = tmp / f"run-{i}"  # fresh: make run generates its certificates each time
        port = free_port()
        make_run.append(_time_to_ready(
            ["make", "run", f"PORT={port}", f"RUN={run_dir}"], f"https://127.0.0.1:{port}",
            run_dir / "certs" / "ca.crt", tmp / f"make-run-{i}.log", env))
        port = free_port()
        baseline.append(_time_to_ready(
            server_cmd("baseline", port, certs),
            f"https://127.0.0.1:{port}", certs / "ca.crt", tmp / f"baseline-{i}.log", env))
    ratios = [m / b for m, b in zip(make_run, baseline, strict=True)]
    return {"rounds": rounds, "make_run_s": statistics.median(make_run),
            "baseline_s": statistics.median(baseline), "ratio": statistics.median(ratios),
            "make_run_all_s": make_run, "baseline_all_s": baseline}


def report(r: dict[str, Any]) -> str:
    return (f"startup (warm, median of {r['rounds']}): make run {r['make_run_s']:.2f} s, "
            f"plain gunicorn {r['baseline_s']:.2f} s, ratio {r['ratio']:.2f} "
            f"(target: make run under 2 s)")
