"""`make bench-guard`: a short paired run that fails when the engine or the served path got
slower than the limits, against the reference commit recorded in `bench/reference`.

    python -m bench.guard [--ref REF] [--rounds N] [--http-rounds N] [--seconds S] [--skip-http]

Decision: this tree's warm decision, cold decision and node update over the reference's
(`bench.versus_ref`, paired rounds alternating which runs first); the grant check on a pod
that asks for no GPU over the same engine with the check off (`bench.access`). HTTPS: `/mutate` and
`/validate` requests per second over a do-nothing baseline on the same serving stack, and
the fixed-rate p99 over the baseline's, both servers loaded at once in each of many short
rounds, the median of the rounds' ratios (`bench.throughput.paired_ratios`). Every
figure is a ratio taken in this run, so a shared, noisy machine moves both sides alike. It
is a benchmark, not a test: `make test` never runs it. Exit 1 when a ratio is beyond its
limit, 2 when it cannot run (no `wrk`, no git history for the reference).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "bench" / "reference"


@dataclass(frozen=True)
class Limit:
    """A ratio and the bound it must stay within (``most``: at most; else at least)."""

    what: str
    ratio: float
    bound: float
    most: bool = True

    @property
    def ok(self) -> bool:
        return self.ratio <= self.bound if self.most else self.ratio >= self.bound

    def line(self) -> str:
        sign = "<=" if self.most else ">="
        return (f"{self.what:<48} {self.ratio:>6.2f}  {sign} {self.bound:<5.2f} "
                f"{'ok' if self.ok else 'BEYOND'}")


#: issue 36's targets: the usual pod pays nothing for features it does not use (warm
#: decision), a pod that uses them at most 1.2x. A pod that differs from a known shape only
#: in labels no decision reads (a CronJob's next Job) is held to the warm limit: it is
#: decided as one.
WARM_LIMIT, FEATURES_LIMIT, NODE_UPDATE_LIMIT = 1.05, 1.20, 1.10
RPS_FLOOR, P99_LIMIT = 0.80, 1.10
#: A pod shape no review has had (a one-off pod, a workload's first replica) is decided in
#: full, which per-shape decisions hide from the warm figure. The 1.2x bench/README.md sets
#: it is not met (1.38-1.55, and 1.75 for a pod that uses the new checks, on 2026-12-05;
#: 2.2-2.8 before that day's work): it is held where it stands, with this machine's noise as
#: margin, so it cannot slide back unnoticed.
NEW_SHAPE_HELD, NEW_SHAPE_HELD_FEATURES = 1.75, 2.00
#: The new-shape figure is ``review_pod``'s (a workload's template, ``gpupool check``), which
#: since 2026-12-07 keeps a pod's two stages as one. A pod created on its own reaches the
#: server's two stages on two requests: that is timed apart (``served_stages_us``) and
#: printed beside the limits, not held (1.68-1.81 and 2.04-2.09 that day; bench/README.md,
#: "Issue 48, sixth day").


#: issue 47: a pod that asks for no GPU and reaches no GPU node pays for the grant check a
#: lookup or two (``bench.access``: against the same run's engine with the check off).
ACCESS_WARM_LIMIT, ACCESS_NEW_LIMIT = 1.10, 1.60


#: the benchmark's pod shape that uses the checks added since the reference (issue 36:
#: "<= 1.2x for pods that use them")
NEW_FEATURES_SHAPE = "newFeatures"


def decision_limits(ratios: dict[tuple[str, str], dict[str, float]]) -> list[Limit]:
    out = []
    for (nodes, shape), r in ratios.items():
        features = shape == NEW_FEATURES_SHAPE
        out.append(Limit(f"warm decision, {shape} pod, {nodes} nodes", r["warm_us"],
                         FEATURES_LIMIT if features else WARM_LIMIT))
        out.append(Limit(f"new pod shape, {shape} pod, {nodes} nodes", r["new_shape_us"],
                         NEW_SHAPE_HELD_FEATURES if features else NEW_SHAPE_HELD))
        out.append(Limit(f"new labels only, {shape} pod, {nodes} nodes", r["new_labels_us"],
                         WARM_LIMIT))
        out.append(Limit(f"node update, {shape} pod, {nodes} nodes", r["node_update_us"],
                         NODE_UPDATE_LIMIT))
    return out


def served_stages(ratios: dict[tuple[str, str], dict[str, float]]) -> list[str]:
    """The new shape's two stages as the server decides them, reported (not a limit)."""
    return [f"{f'served stages, {shape} pod, {nodes} nodes':<48} "
            f"{r['served_stages_us']:>6.2f}  (a new shape's; reported, not held)"
            for (nodes, shape), r in ratios.items() if "served_stages_us" in r]


def access_limits(rows: list[dict[str, float]]) -> list[Limit]:
    out = []
    for r in rows:
        if r["gpu_nodes_tainted"]:
            out.append(Limit(f"no-GPU pod, warm, {r['nodes']:.0f} tainted GPU nodes",
                             r["warm_ratio"], ACCESS_WARM_LIMIT))
            out.append(Limit(f"no-GPU pod, new shape, {r['nodes']:.0f} tainted GPU nodes",
                             r["new_ratio"], ACCESS_NEW_LIMIT))
    return out


def http_limits(ratios: dict[str, dict[str, float]]) -> list[Limit]:
    out = []
    for endpoint, r in ratios.items():
        out.append(Limit(f"/{endpoint} req/s over the baseline's", r["keepalive_rps"],
                         RPS_FLOOR, most=False))
        out.append(Limit(f"/{endpoint} fixed-rate p99 over the baseline's",
                         r["fixed_rate_p99"], P99_LIMIT))
    return out


def reference() -> str:
    """The commit whose figures bench/README.md reports: the first word of bench/reference."""
    return REFERENCE.read_text().split()[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.guard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", help="compare against this commit (default: bench/reference)")
    # (six: the median of six rounds stands with two spoilt by a noisy stretch of the
    # machine, where the median of four moves half way with two; bench/README.md, "Issue 48,
    # seventh day")
    p.add_argument("--rounds", type=int, default=6, help="paired rounds (default: 6)")
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--http-rounds", type=int, default=None,
                   help="paired HTTPS rounds (default: bench.throughput.GUARD_ROUNDS)")
    p.add_argument("--seconds", type=int, default=None,
                   help="per HTTPS round (default: bench.throughput.GUARD_SECONDS)")
    p.add_argument("--skip-http", action="store_true", help="the decision part only")
    a = p.parse_args(argv)
    from bench.throughput import GUARD_ROUNDS, GUARD_SECONDS

    a.http_rounds = a.http_rounds or GUARD_ROUNDS
    a.seconds = a.seconds or GUARD_SECONDS
    if a.rounds < 1 or a.seconds < 1 or a.http_rounds < 1:
        print("bench.guard: --rounds and --seconds take 1 or more", file=sys.stderr)
        return 2
    from bench import load, versus_ref

    ref = a.ref or reference()
    if not a.skip_http and not load.have_wrk():
        print("bench.guard: wrk not found: `make bench-guard` installs it (Debian package "
              "wrk), or pass --skip-http", file=sys.stderr)
        return 2
    try:
        ratios = versus_ref.compare(ref, a.sizes, a.rounds)
    except Exception as exc:
        print(f"bench.guard: cannot compare with {ref}: {exc}", file=sys.stderr)
        return 2
    limits = decision_limits(ratios)
    from bench import access

    limits += access_limits(access.measure(tuple(a.sizes), rounds=a.rounds, per_round=1000))
    if not a.skip_http:
        from bench.throughput import paired_ratios

        with tempfile.TemporaryDirectory(prefix="gpupool-guard-") as tmp:
            res = paired_ratios(Path(tmp), rounds=a.http_rounds, seconds=a.seconds)
        limits += http_limits(res)
    print(f"bench guard against {ref} ({a.rounds} paired rounds; ratios taken in this run)")
    for limit in limits:
        print(limit.line())
    for line in served_stages(ratios):
        print(line)
    beyond = [x for x in limits if not x.ok]
    print(f"{len(limits) - len(beyond)} within, {len(beyond)} beyond their limits")
    return 1 if beyond else 0


if __name__ == "__main__":
    sys.exit(main())
