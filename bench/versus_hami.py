"""Webhook throughput side by side (``python -m bench.versus_hami``, or as part of
``make bench``): HAMi's mutating webhook (its v2.10.0 Go code, built as the
suite builds it, logging at its chart's -v=4) and gpupool's /mutate (as installed: two gevent
workers, TLS), on the same two cores, one at a time, with the same wrk load and the same
AdmissionReview bodies, in interleaved rounds.

Two request types: a GPU pod (both mutate it) and a pod without GPU resources (both let it
through untouched; in a cluster gpupool's matchConditions keep the API server from sending it
at all, HAMi's registration sends every pod). gpupool on a 5,000-node view, as in the HTTPS
bench. The ratio is gpupool's requests/s over HAMi's, per round, then the median.
"""

from __future__ import annotations

import copy
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import cluster, load, machine
from bench.publish import publish
from harness.servers import free_port, generate_certs, stop_group

PATHS = {"hami": "/webhook", "gpupool": "/mutate"}


def bodies() -> dict[str, bytes]:
    from bench.servers import review

    pod = cluster.pods()["unpinned"]
    plain = copy.deepcopy(pod)
    for c in plain["spec"]["containers"]:
        c["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    return {"gpu-pod": review(pod, "bench-gpu"), "no-gpu-pod": review(plain, "bench-plain")}


def measure(tmp: Path, *, seconds: int = 5, rounds: int = 5, connections: int = 8,
            rate: float = 100) -> dict[str, Any]:
    from bench.servers import server_cmd, start
    from harness.hami import HamiWebhook

    certs = tmp / "certs"
    generate_certs(certs)
    ca = str(certs / "ca.crt")
    nodes = cluster.write(tmp / "cluster-5000.json", 5000)
    hami = HamiWebhook(certs / "tls.crt", certs / "tls.key", tmp / "hami.log").start(verbosity=4)
    port = free_port()
    gp = start(server_cmd("gpupool", port, certs, "--workers", "2",
                          view=("--cluster", str(nodes))),
               f"https://127.0.0.1:{port}", ca, tmp / "gpupool.log")
    urls = {"hami": f"https://127.0.0.1:{hami.port}", "gpupool": f"https://127.0.0.1:{port}"}
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for kind, body in bodies().items():
            for name in urls:  # warm both
                load.wrk(urls[name] + PATHS[name], body, seconds=1, connections=connections)
            for _ in range(rounds):
                for name, url in urls.items():
                    r = load.wrk(url + PATHS[name], body, seconds=seconds,
                                 connections=connections)
                    # Latency as the API server sees it: a fixed moderate rate, measured from
                    # each request's scheduled send time (wrk's closed loop saturates both).
                    fixed = load.fixed_rate("127.0.0.1", int(url.rsplit(":", 1)[1]),
                                            PATHS[name], body, ca, rate=rate, seconds=seconds)
                    runs.setdefault(f"{name}/{kind}", []).append(
                        {**r, "fixed_p99_ms": fixed["p99_ms"], "fixed_errors": fixed["errors"]})
    finally:
        hami.stop()
        stop_group(gp)
    out: dict[str, Any] = {"machine": machine.describe(), "seconds": seconds, "rounds": rounds,
                 "connections": connections, "rate": rate,
                 "gpupool_workers": 2, "gpupool_view_nodes": 5000, "rows": {}}
    for kind in bodies():
        g, h = runs[f"gpupool/{kind}"], runs[f"hami/{kind}"]
        out["rows"][kind] = {
            "gpupool_rps": statistics.median(r["rps"] for r in g),
            "hami_rps": statistics.median(r["rps"] for r in h),
            "ratio": statistics.median(a["rps"] / b["rps"] for a, b in zip(g, h, strict=True)),
            "gpupool_p99_ms": statistics.median(r.get("p99_ms", 0.0) for r in g),
            "hami_p99_ms": statistics.median(r.get("p99_ms", 0.0) for r in h),
            "gpupool_fixed_p99_ms": statistics.median(r["fixed_p99_ms"] for r in g),
            "hami_fixed_p99_ms": statistics.median(r["fixed_p99_ms"] for r in h),
            "fixed_p99_ratio": statistics.median(a["fixed_p99_ms"] / b["fixed_p99_ms"]
                                                 for a, b in zip(g, h, strict=True)),
            "errors": sum(r["non2xx"] + r["fixed_errors"] for r in g + h)}
    return out


def report(r: dict[str, Any]) -> str:
    lines = [f"Webhook throughput beside HAMi's ({machine.line(r['machine'])}; wrk, "
             f"{r['connections']} keep-alive "
             f"connections; p99 at a fixed {r['rate']:.0f} req/s; median of {r['rounds']} "
             f"interleaved rounds of {r['seconds']} s)",
             f"{'request':<12} {'gpupool req/s':>14} {'HAMi req/s':>11} {'ratio':>6} | "
             f"{'gpupool p99 ms':>15} {'HAMi p99 ms':>12} {'ratio':>6} | "
             f"{'saturated p99 ms gpupool/HAMi':>30} | errors"]
    for kind, row in r["rows"].items():
        lines.append(f"{kind:<12} {row['gpupool_rps']:>14.0f} {row['hami_rps']:>11.0f} "
                     f"{row['ratio']:>6.2f} | {row['gpupool_fixed_p99_ms']:>15.2f} "
                     f"{row['hami_fixed_p99_ms']:>12.2f} {row['fixed_p99_ratio']:>6.2f} | "
                     f"{row['gpupool_p99_ms']:>14.1f} / {row['hami_p99_ms']:<13.1f} | "
                     f"{row['errors']}")
    return "\n".join(lines)


def main() -> int:
    import argparse
    import tempfile

    p = argparse.ArgumentParser(prog="python -m bench.versus_hami", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(Path(__file__).parent / "results/versus-hami.json"))
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpupool-versus-hami-") as tmp:
        res = measure(Path(tmp))
    publish(res, a.out, "bench.versus_hami", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
