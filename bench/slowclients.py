"""Slow clients, as a bad day brings them: connections that trickle one byte a second.

    python -m bench.slowclients --host 127.0.0.1 --port P --ca CA [--per-kind 200]
                                [--seconds 30] [--kinds handshake,headers,body]

Three kinds, each reconnecting as soon as the server cuts it:

- ``handshake``: a TCP connection that sends a TLS ClientHello one byte a second;
- ``headers``: a finished handshake, then request headers that never end;
- ``body``: complete headers announcing a body that arrives one byte a second.

Runs in its own process (asyncio, one thread) so the client measuring good requests does not
share a GIL with it. Prints one JSON line of counters when done. Only loopback targets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import ssl
import sys
import threading
import time
from collections import Counter

KINDS = ("handshake", "headers", "body")
_STOP_EARLY = threading.Event()  # set by SIGINT: the caller is done measuring
#: A TLS 1.2 ClientHello record header and the start of its body: enough to look real.
_HELLO = bytes.fromhex("160301020001" "0001fc0303") + bytes(range(32)) * 16


async def _trickle(writer: asyncio.StreamWriter, data: bytes, stop: asyncio.Event) -> None:
    for i in range(len(data)):
        writer.write(data[i:i + 1])
        await writer.drain()
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
            return
        except TimeoutError:
            pass
    raise ConnectionError("ran out of bytes to trickle")


async def _one(kind: str, host: str, port: int, ctx: ssl.SSLContext, stop: asyncio.Event,
               stats: Counter[str], ramp: float) -> None:
    await asyncio.sleep(random.uniform(0, ramp))  # they do not all arrive in the same instant
    while not stop.is_set():
        writer: asyncio.StreamWriter | None = None
        try:
            if kind == "handshake":
                _, writer = await asyncio.open_connection(host, port)
                stats["opened"] += 1
                await _trickle(writer, _HELLO, stop)
            else:
                _, tls = await asyncio.wait_for(asyncio.open_connection(
                    host, port, ssl=ctx, server_hostname=host), 30)
                writer = tls
                stats["opened"] += 1
                head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n"
                if kind == "headers":
                    tls.write(head)
                    await _trickle(tls, b"X-Slow: " + b"a" * 4000, stop)
                else:
                    tls.write(head + b"Content-Type: application/json\r\n"
                                        b"Content-Length: 100000\r\n\r\n")
                    await _trickle(tls, b"{" + b" " * 99999, stop)
        except (OSError, ConnectionError, TimeoutError, ssl.SSLError):
            stats["cut"] += 1
            await asyncio.sleep(0.05)
        finally:
            if writer is not None:
                writer.close()


async def run(host: str, port: int, ca: str, per_kind: int, seconds: float,
              kinds: tuple[str, ...], ramp: float = 3.0) -> dict[str, dict[str, int]]:
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("slow clients only target loopback")
    ctx = ssl.create_default_context(cafile=ca)
    stop = asyncio.Event()
    stats: dict[str, Counter[str]] = {k: Counter() for k in kinds}
    tasks = [asyncio.create_task(_one(k, host, port, ctx, stop, stats[k], ramp))
             for k in kinds for _ in range(per_kind)]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not _STOP_EARLY.is_set():
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.wait(tasks, timeout=10)
    return {k: dict(v) for k, v in stats.items()}


def good_requests(url: str, ca: str, body: bytes, n: int, deadline: float = 5.0,
                  budget: float = 60.0, pace: float = 0.0) -> tuple[list[float], int]:
    """``n`` good reviews, alternating a kept-alive connection and a fresh one (the API server
    does both). A reply later than ``deadline`` (the webhook's timeoutSeconds) counts as a
    failure, as the API server would count it; so does every request not sent within
    ``budget`` seconds (a starved server must not stall the measurement). With ``pace``, one
    request starts every ``pace`` seconds, so the sample spans that long a window."""
    import requests

    latencies: list[float] = []
    failures = 0
    headers = {"Content-Type": "application/json"}
    with requests.Session() as kept:
        stop_at = time.perf_counter() + budget
        for i in range(n):
            if time.perf_counter() > stop_at:
                failures += n - i
                break
            t0 = time.perf_counter()
            try:
                client = kept if i % 2 == 0 else requests
                r = client.post(f"{url}/mutate", data=body, headers=headers, verify=ca,
                                timeout=deadline + 5)
                ok = r.status_code == 200 and r.json()["response"]["allowed"] is True
            except Exception:  # any failure counts; the loop must finish
                ok = False
            elapsed = time.perf_counter() - t0
            latencies.append(elapsed)
            failures += (not ok) or elapsed > deadline
            if pace > elapsed:
                time.sleep(pace - elapsed)
    return latencies, failures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scenario(url: str, ca: str, body: bytes, *, per_kind: int = 200, n: int = 400,
             window: float = 25.0, kinds: tuple[str, ...] = KINDS, settle: float = 5.0
             ) -> dict[str, object]:
    """Good requests without slow clients, then with them, in one run: p50/p99 and the ratio
    of the p99s, failures, and what the slow clients saw. Each sample is paced over
    ``window`` seconds, long enough to span several waves of slow clients being cut and
    coming back (the request deadline is 10 s)."""
    pace = window / n
    import subprocess

    host, port = url.removeprefix("https://").rsplit(":", 1)
    good_requests(url, ca, body, 20)  # warm both workers' caches and TLS sessions
    base, base_failed = good_requests(url, ca, body, n, pace=pace)
    proc = subprocess.Popen([sys.executable, "-m", "bench.slowclients", "--host", host,
                             "--port", port, "--ca", ca, "--per-kind", str(per_kind),
                             "--kinds", ",".join(kinds), "--seconds", "600"],
                            stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(settle)  # every slow connection opened and trickling
        slow, slow_failed = good_requests(url, ca, body, n, pace=pace,
                                          budget=window * 3)
    finally:
        proc.send_signal(2)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    p99_base, p99_slow = percentile(base, 0.99), percentile(slow, 0.99)
    return {"slow_connections": per_kind * len(kinds), "kinds": list(kinds), "good": n,
            "baseline": {"p50_ms": round(percentile(base, 0.5) * 1e3, 2),
                         "p99_ms": round(p99_base * 1e3, 2), "failed": base_failed},
            "with_slow": {"p50_ms": round(percentile(slow, 0.5) * 1e3, 2),
                          "p99_ms": round(p99_slow * 1e3, 2),
                          "max_ms": round(max(slow) * 1e3, 2), "failed": slow_failed},
            "p99_ratio": round(p99_slow / p99_base, 2),
            "slow_client_stats": _last_json(out)}


def _last_json(text: str | None) -> object:
    for line in reversed((text or "").splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.slowclients")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--per-kind", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if not set(kinds) <= set(KINDS):
        ap.error(f"--kinds: choose from {', '.join(KINDS)}")
    t0 = time.monotonic()
    signal.signal(signal.SIGINT, lambda *_: _STOP_EARLY.set())
    out = asyncio.run(run(args.host, args.port, args.ca, args.per_kind, args.seconds, kinds))
    print(json.dumps({"kinds": out, "seconds": round(time.monotonic() - t0, 1)}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
