"""Served throughput and latency: gpupool against the baseline, alternating round by round
on the same machine, reported as ratios (``make bench``'s HTTP part and ``make bench-guard``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench import cluster, load, soak
from bench.servers import bodies, certs, server_cmd, start, stop
from harness.servers import free_port


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise median of numeric results, plus every round's throughput for the record."""
    out = {k: statistics.median(r[k] for r in runs) for k, v in runs[0].items()
           if isinstance(v, int | float)}
    out["each"] = [round(r.get("rps", r.get("p99_ms", 0)), 2) for r in runs]
    return out


#: the shortest fixed-rate run a p99 is taken from: at 100 requests a second a 3 s run's p99
#: is its third-slowest request, and read 0.96-1.31 of the baseline's from run to run
FIXED_RATE_SECONDS = 10


def http_bench(tmp: Path, seconds: int, rate: float, rounds: int,
               worker_class: str = "gevent", fixed_seconds: int | None = None
               ) -> dict[str, Any]:
    """``fixed_seconds``: how long each fixed-rate run lasts (``seconds`` when None); at
    ``rate`` requests a second, its p99 rests on ``rate * fixed_seconds / 100`` requests."""
    certs_dir = certs(tmp)
    nodes_file = cluster.write(tmp / "cluster-5000.json", 5000)
    ca = str(certs_dir / "ca.crt")
    common = ("--workers", "2", "--threads", "4", "--worker-class", worker_class)
    servers = {}
    for name in ("gpupool", "baseline"):
        port = free_port()
        servers[name] = (start(server_cmd(name, port, certs_dir, *common,
                                          view=("--cluster", str(nodes_file))),
                               f"https://127.0.0.1:{port}", ca, tmp / f"{name}.log"), port)
    out: dict[str, Any] = {"cluster_nodes": 5000, "seconds": seconds, "connections": 8,
                           "workers": 2,
                 "threads": 4, "worker_class": worker_class, "fixed_rate": rate, "runs": {}}
    try:
        b = bodies()
        # Servers alternate, round after round, and medians are kept: this machine is shared
        # and noisy, and noise must hit the baseline and gpupool alike.
        raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for rnd in range(rounds):
            for endpoint in ("mutate", "validate"):
                order = list(servers.items())
                if rnd % 2:
                    order.reverse()
                for name, (_, port) in order:
                    url = f"https://127.0.0.1:{port}/{endpoint}"
                    runs = raw.setdefault(f"{name}/{endpoint}", {})
                    runs.setdefault("keepalive", []).append(
                        load.wrk(url, b[endpoint], seconds=seconds, connections=8))
                    runs.setdefault("no_keepalive", []).append(
                        load.wrk(url, b[endpoint], seconds=max(2, seconds // 2),
                                 connections=8, close=True))
                    runs.setdefault("fixed_rate", []).append(
                        load.fixed_rate("127.0.0.1", port, f"/{endpoint}", b[endpoint], ca,
                                        rate=rate, seconds=fixed_seconds or seconds))
        for key, runs in raw.items():
            out["runs"][key] = {kind: _median_run(rs) for kind, rs in runs.items()}
        # Ratios are taken round by round (gpupool and the baseline ran back to back) and
        # the median of those is reported: slow drift in the machine's load cancels out.
        out["ratios"] = {}
        for ep in ("mutate", "validate"):
            gp, base = raw[f"gpupool/{ep}"], raw[f"baseline/{ep}"]
            out["ratios"][ep] = {
                "keepalive_rps": statistics.median(
                    g["rps"] / b["rps"] for g, b in zip(gp["keepalive"], base["keepalive"],
                                                         strict=True)),
                "no_keepalive_rps": statistics.median(
                    g["rps"] / b["rps"] for g, b in zip(gp["no_keepalive"],
                                                         base["no_keepalive"], strict=True)),
                "fixed_rate_p99": statistics.median(
                    g["p99_ms"] / b["p99_ms"] for g, b in zip(gp["fixed_rate"],
                                                               base["fixed_rate"], strict=True)),
            }
        out["rounds"] = rounds
        out["worker_rss_mib"] = {name: list(soak.worker_rss(proc.pid).values())
                                 for name, (proc, _) in servers.items()}
    finally:
        for proc, _ in servers.values():
            stop(proc)
    return out


#: the guard's rounds: many short ones, the p99 with both servers at once. Measured with
#: ``python -m bench.p99flips`` (bench/README.md, "How far the guard's p99 verdict can be
#: trusted"): 12 rounds of 5 s together put five trials' /validate p99 ratios within 0.06 of
#: each other, where 4 rounds of 10 s spread 0.39 on the same machine that hour.
GUARD_ROUNDS, GUARD_SECONDS = 12, 5


def _in_order(order: tuple[int, ...], ports: tuple[int, ...],
              results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``results``, given for the servers in ``order``, put back in ``ports``' order."""
    return [results[order.index(port)] for port in ports]


def paired_ratios(tmp: Path, rounds: int = GUARD_ROUNDS, seconds: int = GUARD_SECONDS,
                  rate: float = 100.0) -> dict[str, dict[str, float]]:
    """gpupool over the baseline, each endpoint, in many short rounds, the median of the
    per-round ratios: keep-alive requests per second with both servers loaded at once
    (``load.wrk_together``: each gets the same share of the cores, so the ratio is what a
    request costs each) and the fixed-rate p99 with both servers on one schedule at once
    (``load.fixed_rate_together``), so a shared machine's noise falls on both sides of each
    ratio. (Until 2026-12-07 the requests per second were taken one server after the other:
    each 3 s run got whatever the machine gave it then, and one round's ratio ranged from
    0.45 to 1.07 for one tree; bench/README.md, "Issue 48, fourth day".) Which server is
    given first swaps from round to round: the first of a pair reads slower, whichever it
    is (bench/README.md, "Issue 48, seventh day"). The guard's
    figures (``make bench-guard``); ``http_bench`` keeps the figures ``make bench``
    reports."""

    certs_dir = certs(tmp)
    nodes_file = cluster.write(tmp / "cluster-5000.json", 5000)
    ca = str(certs_dir / "ca.crt")
    common = ("--workers", "2", "--threads", "4", "--worker-class", "gevent")
    servers = []
    for name in ("gpupool", "baseline"):
        port = free_port()
        servers.append((start(server_cmd(name, port, certs_dir, *common,
                                         view=("--cluster", str(nodes_file))),
                              f"https://127.0.0.1:{port}", ca, tmp / f"{name}.log"), port))
    ports = (servers[0][1], servers[1][1])
    out: dict[str, dict[str, float]] = {}
    try:
        b = bodies()
        for endpoint in ("mutate", "validate"):
            rps, p99 = [], []
            for r in range(rounds):
                # Which server is first swaps every round: the first of a fixed-rate pair
                # read slower on its own (two baselines, 12 rounds: 1.05 over the second),
                # and gpupool always first put that on its ratio.
                order = ports if r % 2 == 0 else ports[::-1]
                got = _in_order(order, ports, load.wrk_together(
                    tuple(f"https://127.0.0.1:{port}/{endpoint}" for port in order),
                    b[endpoint], seconds=max(1, seconds - 2), connections=8))
                rps.append(got[0]["rps"] / got[1]["rps"])
                fixed = _in_order(order, ports, load.fixed_rate_together(
                    "127.0.0.1", order, f"/{endpoint}", b[endpoint], ca, rate=rate,
                    seconds=seconds))
                p99.append(fixed[0]["p99_ms"] / fixed[1]["p99_ms"])
            out[endpoint] = {"keepalive_rps": statistics.median(rps),
                             "fixed_rate_p99": statistics.median(p99),
                             "rounds": rounds}
    finally:
        for proc, _ in servers:
            stop(proc)
    return out
