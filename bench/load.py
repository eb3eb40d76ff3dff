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
    return wrk_together((url,), body, seconds=seconds, connections=connections,
                        threads=threads, close=close)[0]


def wrk_together(urls: tuple[str, ...], body: bytes, *, seconds: int, connections: int,
                 threads: int = 2, close: bool = False) -> list[dict[str, Any]]:
    """One ``wrk`` per URL, all running at once: servers loaded together share the machine,
    so each one's requests per second over another's is what each request costs it, with
    every moment of a shared machine's noise falling on both (``fixed_rate_together``
    pairs the latencies the same way)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(_lua(body, close))
        script = fh.name
    try:
        procs = [subprocess.Popen(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s",
                                   "--latency", "-s", script, url], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for url in urls]
        outs = [p.communicate(timeout=seconds + 60) for p in procs]
    finally:
        Path(script).unlink()
    return [_wrk_result(out, err) for out, err in outs]


def _wrk_result(out: str, err: str) -> dict[str, Any]:
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise RuntimeError(f"wrk printed no Requests/sec: {out[-500:]} {err[-500:]}")
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
    out = fixed_rate_together(host, (port,), path, body, ca, rate=rate, seconds=seconds,
                              connections=connections)[0]
    del out["samples"]  # (kept only where runs are pooled)
    return out


def fixed_rate_together(host: str, ports: tuple[int, ...], path: str, body: bytes, ca: str, *,
                        rate: float, seconds: float, connections: int = 8
                        ) -> list[dict[str, Any]]:
    """`rate` requests/s to each server at once, on one schedule: the k-th request to each
    server is due within a few milliseconds of the other's (staggered by a fraction of the
    gap between requests, so the client's own threads do not queue one behind the other). A
    comparison's two sides then share every moment of a shared machine's noise, where runs
    one after the other each get their own (a 10 s run whose neighbour's burst fell on it
    alone flipped the guard's p99 verdict). Each result keeps its ``samples`` (seconds), so
    a p99 can be taken over several runs pooled."""
    ctx = ssl.create_default_context(cafile=ca)
    per_conn = rate / connections
    latencies: list[list[float]] = [[] for _ in ports]
    errors = [0 for _ in ports]
    lock = threading.Lock()
    start = time.perf_counter() + 0.5

    def worker(which: int, k: int) -> None:
        port = ports[which]
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
        n = int(per_conn * seconds)
        local = []
        failed = 0
        for i in range(n):
            due = start + (i + (k + which / len(ports)) / connections) / per_conn
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    failed += 1
            except (OSError, http.client.HTTPException):
                failed += 1
                conn.close()
                conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
            local.append(time.perf_counter() - due)
        conn.close()
        with lock:
            latencies[which].extend(local)
            errors[which] += failed

    threads = [threading.Thread(target=worker, args=(w, k))
               for k in range(connections) for w in range(len(ports))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [_latency_summary(sorted(lat), rate, err) for lat, err in zip(latencies, errors,
                                                                          strict=True)]


def _latency_summary(latencies: list[float], rate: float, errors: int) -> dict[str, Any]:
    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"rate": rate, "requests": len(latencies), "errors": errors,
            "p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99),
            "mean_ms": statistics.fmean(latencies) * 1000, "samples": latencies}


def pooled_p99_ms(runs: list[dict[str, Any]]) -> float:
    """The p99 of every request of these runs together (``samples``): four 10 s runs at 100
    requests a second put it on the 40 slowest of 4,000 requests, not on a run's 10."""
    pooled = sorted(x for r in runs for x in r["samples"])
    return float(pooled[min(len(pooled) - 1, int(0.99 * len(pooled)))]) * 1000
