"""Load generation: wrk for throughput (keep-alive and per-request TLS handshakes), and a
fixed-rate client for latency under moderate load (latency measured from each request's
scheduled send time, so a stall is not hidden by the client waiting for it)."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import ssl
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def _lua(body: bytes, close: bool) -> str:
    headers = 'wrk.headers["Content-Type"] = "application/json"\n'
    if close:
        headers += 'wrk.headers["Connection"] = "close"\n'
    return f'wrk.method = "POST"\nwrk.body = {json.dumps(body.decode())}\n{headers}'


def wrk(url: str, body: bytes, *, seconds: int, connections: int, threads: int = 2,
        close: bool = False) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(_lua(body, close))
        script = fh.name
    try:
        r = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s",
                            "--latency", "-s", script, url], capture_output=True, text=True,
                           timeout=seconds + 60)
    finally:
        Path(script).unlink()
    out = r.stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise RuntimeError(f"wrk printed no Requests/sec: {out[-500:]} {r.stderr[-500:]}")
    rps = float(found.group(1))
    pct = {}
    for p, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
        pct[f"p{p}_ms"] = float(value) * _UNITS[unit] * 1000
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {"rps": rps, **pct, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(0) if errors else ""}


def fixed_rate(host: str, port: int, path: str, body: bytes, ca: str, *, rate: float,
               seconds: float, connections: int = 8) -> dict[str, Any]:
    """`rate` requests/s spread over `connections` keep-alive connections."""
    ctx = ssl.create_default_context(cafile=ca)
    per_conn = rate / connections
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start = time.perf_counter() + 0.5

    def worker(k: int) -> None:
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
        n = int(per_conn * seconds)
        local = []
        for i in range(n):
            due = start + (i + k / connections) / per_conn
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    errors[0] += 1
            except (OSError, http.client.HTTPException):
                errors[0] += 1
                conn.close()
                conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
            local.append(time.perf_counter() - due)
        conn.close()
        with lock:
            latencies.extend(local)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"rate": rate, "requests": len(latencies), "errors": errors[0],
            "p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99),
            "mean_ms": statistics.fmean(latencies) * 1000}
