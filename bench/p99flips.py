"""How often does the guard's fixed-rate p99 verdict flip on this machine?

    python -m bench.p99flips [--trials N] [--rounds R] [--seconds S] [--together-only]

Serves gpupool and the do-nothing baseline as the guard does (5,000-node view, 2 workers),
then takes ``--trials`` guard verdicts on ``/validate``'s fixed-rate p99 over the baseline's
(limit ``guard.P99_LIMIT``) two ways, trial by trial, on the same servers:

- one after the other: each side's run of ``--seconds`` in turn, alternating which goes
  first, the median of the per-round ratios (what the guard does);
- together: both sides on one schedule at once (``load.fixed_rate_together``), the median
  of the per-round ratios;
- together, pooled: the same runs, the p99 of all rounds' requests pooled per side.

bench/README.md ("How far the guard's p99 verdict can be trusted") has the readings.

The code under test is the same in every trial, so any spread of verdicts is the
measurement's own: a trustworthy guard gives the same verdict every time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench import cluster, load
from bench.guard import P99_LIMIT
from bench.servers import bodies, certs, server_cmd, start, stop
from harness.servers import free_port


def trials(n: int, rounds: int, seconds: int, rate: float = 100.0,
           apart_too: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        certs_dir = certs(tmp)
        nodes_file = cluster.write(tmp / "cluster-5000.json", 5000)
        ca = str(certs_dir / "ca.crt")
        procs, ports = [], []
        for name in ("gpupool", "baseline"):
            port = free_port()
            procs.append(start(server_cmd(name, port, certs_dir, "--workers", "2",
                                          "--threads", "4", "--worker-class", "gevent",
                                          view=("--cluster", str(nodes_file))),
                               f"https://127.0.0.1:{port}", ca, tmp / f"{name}.log"))
            ports.append(port)
        body = bodies()["validate"]
        out: dict[str, list[float]] = {"one after the other": [], "together": [],
                                       "together, pooled": []}
        try:
            for _ in range(n):
                apart, together = [], []
                runs: list[list[dict[str, Any]]] = [[], []]
                for rnd in range(rounds):
                    if apart_too:
                        order = [0, 1] if rnd % 2 == 0 else [1, 0]
                        got = {i: load.fixed_rate("127.0.0.1", ports[i], "/validate", body,
                                                  ca, rate=rate, seconds=seconds)
                               for i in order}
                        apart.append(got[0]["p99_ms"] / got[1]["p99_ms"])
                    both = load.fixed_rate_together("127.0.0.1", (ports[0], ports[1]),
                                                    "/validate", body, ca, rate=rate,
                                                    seconds=seconds)
                    together.append(both[0]["p99_ms"] / both[1]["p99_ms"])
                    runs[0].append(both[0])
                    runs[1].append(both[1])
                if apart:
                    out["one after the other"].append(round(statistics.median(apart), 3))
                out["together"].append(round(statistics.median(together), 3))
                out["together, pooled"].append(round(
                    load.pooled_p99_ms(runs[0]) / load.pooled_p99_ms(runs[1]), 3))
        finally:
            for p in procs:
                stop(p)
    return {way: {"ratios": r, "beyond_limit": sum(x > P99_LIMIT for x in r),
                  "trials": len(r), "spread": round(max(r) - min(r), 3)}
            for way, r in out.items() if r}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.p99flips", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--together-only", action="store_true",
                   help="skip the runs one after the other (half the time)")
    a = p.parse_args(argv)
    print(json.dumps(trials(a.trials, a.rounds, a.seconds, apart_too=not a.together_only),
                     indent=1))


if __name__ == "__main__":
    main()
