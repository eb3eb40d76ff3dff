"""`make bench`: every benchmark in one run, ratios against a baseline measured in that run.

    python -m bench [--quick] [--out bench/results/results.json]

Prints a table and writes JSON. Nothing here asserts: targets are compared and reported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import access as access_bench
from bench import agent as agent_bench
from bench import dra as dra_bench
from bench import (
    e2e_load,
    load,
    machine,
    slowclients,
    startup,
    versus_hami,
)
from bench.publish import publish
from bench.servers import bodies, certs, start, stop
from bench.throughput import FIXED_RATE_SECONDS, http_bench
from harness.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
SIZES = (100, 1000, 5000, 50000)


def slow_client_bench(tmp: Path, per_kind: int) -> dict[str, Any]:
    """Good requests' latency without and with slow clients (bench/slowclients.py), for each
    worker class: gthread shows what a stream of slow clients did before, gevent what it does
    now."""
    certs_dir = certs(tmp)
    ca = str(certs_dir / "ca.crt")
    out = {}
    # gevent first: the gthread server collapses under the same load, and what it leaves
    # behind (connections draining, a busy CPU) must not count against gevent.
    for worker_class in ("gevent", "gthread"):
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        proc = start([sys.executable, "-m", "webhook", "serve", "--bind", f"127.0.0.1:{port}",
                      "--demo", "--no-audit-stdout", "--log-level", "error",
                      "--cert", str(certs_dir / "tls.crt"), "--key", str(certs_dir / "tls.key"),
                      "--workers", "2", "--threads", "4", "--worker-class", worker_class],
                     url, ca, tmp / f"slow-{worker_class}.log")
        try:
            out[worker_class] = slowclients.scenario(url, ca, bodies()["mutate"],
                                                     per_kind=per_kind)
        finally:
            stop(proc)
    return out


def _run_json(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "bench.decision", *args], capture_output=True,
                       text=True, timeout=3600, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    found: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return found


def decision_bench(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    times = _run_json("time", *map(str, sizes))
    return [{**_run_json("memory", str(n)), "shapes": times[str(n)]} for n in sizes]


def report(res: dict[str, Any]) -> str:
    lines = [f"gpupool benchmarks ({machine.line(res['machine'])}, {res['when']})", ""]
    if res.get("startup"):
        lines += [startup.report(res["startup"]), ""]
    if res.get("e2e_load"):
        lines += [e2e_load.report(res["e2e_load"]), ""]
    if res.get("versus_hami"):
        lines += [versus_hami.report(res["versus_hami"]), ""]
    h = res.get("http")
    if h:
        lines.append(f"1. Admission over HTTPS ({h['cluster_nodes']}-node view, gunicorn "
                     f"{h['workers']} {h.get('worker_class', 'gevent')} workers, "
                     f"{h['connections']} connections)")
        lines.append(f"{'endpoint':<10} {'server':<9} {'req/s':>8} {'ratio':>6} {'p50 ms':>7} "
                     f"{'p90 ms':>7} {'p99 ms':>7} | {'fixed-rate p99':>14} {'ratio':>6} | "
                     f"{'no-keepalive req/s':>18} {'ratio':>6}")
        for ep in ("mutate", "validate"):
            for name in ("baseline", "gpupool"):
                r = h["runs"][f"{name}/{ep}"]
                k, f, n = r["keepalive"], r["fixed_rate"], r["no_keepalive"]
                ratios = h["ratios"][ep] if name == "gpupool" else {
                    "keepalive_rps": 1.0, "fixed_rate_p99": 1.0, "no_keepalive_rps": 1.0}
                kr, fr, nr = (ratios["keepalive_rps"], ratios["fixed_rate_p99"],
                              ratios["no_keepalive_rps"])
                lines.append(
                    f"{ep:<10} {name:<9} {k['rps']:>8.0f} {kr:>6.2f} {k.get('p50_ms', 0):>7.2f} "
                    f"{k.get('p90_ms', 0):>7.2f} {k.get('p99_ms', 0):>7.2f} | "
                    f"{f['p99_ms']:>11.2f} ms {fr:>6.2f} | {n['rps']:>18.0f} {nr:>6.2f}")
        lines.append(f"medians of {h['rounds']} rounds; ratios: median of per-round pairs")
        lines.append(f"fixed rate: {h['fixed_rate']} req/s; worker RSS MiB: "
                     f"{json.dumps(h['worker_rss_mib'])}")
        lines.append("")
    if res.get("dra"):
        lines += [dra_bench.report(res["dra"]), ""]
    if res.get("access"):
        lines += [access_bench.report(res["access"]), ""]
    d = res.get("decision")
    if d:
        base = d[0]
        lines.append("2. Decision time per review (mutate + validate, in process, microseconds)")
        lines.append(f"{'nodes':>7} {'shape':<13} {'warm us':>8} {'x100':>6} {'cold us':>9} "
                     f"{'update us':>9} {'view MiB':>9} {'RSS MiB':>8}")
        for row in d:
            for shape, v in row["shapes"].items():
                ratio = v["warm_us"] / base["shapes"][shape]["warm_us"]
                lines.append(f"{row['nodes']:>7} {shape:<13} {v['warm_us']:>8.1f} {ratio:>6.2f} "
                             f"{v['cold_us']:>9.0f} {v['node_update_us']:>9.0f} "
                             f"{row['view_mib']:>9.1f} {row['rss_mib']:>8.1f}")
        lines.append("")
    sc = res.get("slow_clients")
    if sc:
        lines.append("4. Slow clients: good requests without / with slow connections (each kind "
                     "reconnecting when cut)")
        lines.append(f"{'workers':<8} {'slow conns':>10} {'p50 ms':>15} {'p99 ms':>17} "
                     f"{'p99 ratio':>9} {'failed':>9}")
        for wc, r in sc.items():
            b, w = r["baseline"], r["with_slow"]
            lines.append(f"{wc:<8} {r['slow_connections']:>10} {b['p50_ms']:>6.1f} / "
                         f"{w['p50_ms']:>6.1f} {b['p99_ms']:>7.1f} / {w['p99_ms']:>7.1f} "
                         f"{r['p99_ratio']:>9.2f} {b['failed']:>3} / {w['failed']:>3}")
        lines.append("")
    a = res.get("agent")
    if a:
        lines.append("3. Agent: scan and publish")
        lines.append(f"{'GPUs':>5} {'devices':>8} {'bytes':>7} {'scan ms':>8} {'publish ms':>10} "
                     f"{'cycle ms':>9} {'steady writes':>14}")
        for row in a:
            lines.append(f"{row['gpus']:>5} {row['devices']:>8} {row['annotation_bytes']:>7} "
                         f"{row['scan_ms']:>8.2f} {row['publish_ms']:>10.2f} "
                         f"{row['steady_cycle_ms']:>9.2f} {row['steady_writes']:>5} of "
                         f"{row['steady_cycles']} cycles")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("--quick", action="store_true", help="short runs, sizes up to 5,000")
    p.add_argument("--out", default=str(ROOT / "bench/results/results.json"))
    p.add_argument("--skip-http", action="store_true")
    p.add_argument("--only", choices=("http", "slow", "decision", "dra", "agent", "startup",
                                      "hami", "e2e", "access"),
                   action="append",
                   help="run only these parts (repeatable)")
    p.add_argument("--worker-class", default="gevent", choices=("gevent", "gthread"),
                   help="worker class for the HTTPS throughput part")
    a = p.parse_args()
    res: dict[str, Any] = {"machine": machine.describe(),
                 "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    parts = set(a.only or ("http", "slow", "decision", "dra", "agent", "startup", "hami",
                           "e2e", "access"))
    if a.skip_http:
        parts -= {"http", "slow"}
    if "e2e" in parts:
        with tempfile.TemporaryDirectory(prefix="gpupool-e2e-load-") as tmp:
            try:
                res["e2e_load"] = e2e_load.run(
                    Path(tmp), **e2e_load.PLANS["quick" if a.quick else "full"])
            except e2e_load.StartError as exc:
                print(f"e2e load: {exc}", file=sys.stderr)
                return 2
    if "hami" in parts:
        if not load.have_wrk():
            print("wrk not found: `make bench` installs it (Debian package wrk)", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            res["versus_hami"] = versus_hami.measure(Path(tmp), seconds=3 if a.quick else 5,
                                                     rounds=1 if a.quick else 5)
    if "startup" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            res["startup"] = startup.measure(Path(tmp), 3 if a.quick else 5)
    if "agent" in parts:
        res["agent"] = [agent_bench.measure(g) for g in (8, 64, 512)]
    if "decision" in parts:
        res["decision"] = decision_bench(SIZES[:3] if a.quick else SIZES)
    if "access" in parts:
        res["access"] = access_bench.measure((1_000,) if a.quick else (1_000, 10_000),
                                             rounds=3 if a.quick else 5)
    if "dra" in parts:
        res["dra"] = dra_bench.measure((1_000, 5_000) if a.quick else dra_bench.SIZES)
    if "slow" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            res["slow_clients"] = slow_client_bench(Path(tmp), 50 if a.quick else 200)
    if "http" in parts:
        if not load.have_wrk():
            print("wrk not found: `make bench` installs it (Debian package wrk)", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            res["http"] = http_bench(Path(tmp), seconds=3 if a.quick else 5,
                                     rate=50 if a.quick else 100, rounds=1 if a.quick else 7,
                                     worker_class=a.worker_class,
                                     fixed_seconds=None if a.quick else FIXED_RATE_SECONDS)
    publish(res, a.out, "bench", report)
    left = (res.get("e2e_load") or {}).get("leftover_processes")
    if left:
        print("e2e load: processes left behind:\n" + "\n".join(left), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
