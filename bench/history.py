"""What each step of the engine's history cost: decision time at several commits, paired.

`python -m bench.history REF1 REF2 ... [--sizes 1000] [--rounds 2]` extracts each commit's
``webhook/`` and runs this tree's ``bench.decision`` timings against every one (this tree
last), round after round in a rotating order so machine noise lands on all alike, every
run of a round on one hash seed (``bench.versus_ref``). It prints
each commit's median warm time, and the time of a pod shape never seen before, as a ratio to
the first commit's: where a feature's cost came in, and whether a later step gave it back.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.versus_ref import ROOT, extract, timings


def history(refs: list[str], sizes: list[int], rounds: int
            ) -> dict[str, dict[tuple[str, str], dict[str, float]]]:
    """commit -> (nodes, shape) -> metric -> median time (us); "HEAD" is this tree."""
    with tempfile.TemporaryDirectory(prefix="gpupool-history-") as tmp:
        trees: dict[str, Path] = {}
        for ref in refs:
            trees[ref] = Path(tmp) / ref
            extract(ref, trees[ref])
        trees["HEAD"] = ROOT
        names = list(trees)
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                runs[name].append(timings(trees[name], sizes, seed=r + 1))
                print(f"round {r + 1}/{rounds}: {name} done", file=sys.stderr)
    out: dict[str, dict[tuple[str, str], dict[str, float]]] = {}
    for name, rs in runs.items():
        out[name] = {(n, shape): {m: statistics.median(run[n][shape][m] for run in rs)
                                  for m in ("warm_us", "new_shape_us", "node_update_us")}
                     for n in map(str, sizes) for shape in rs[0][n]}
    return out


def _subject(ref: str) -> str:
    if ref == "HEAD":
        return "this tree"
    r = subprocess.run(["git", "log", "-1", "--format=%s", ref], cwd=ROOT, capture_output=True,
                       text=True, check=True)
    return r.stdout.strip()[:60]


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("refs", nargs="+", help="commits, oldest first (the first is the baseline)")
    a.add_argument("--sizes", type=int, nargs="+", default=[1000])
    a.add_argument("--rounds", type=int, default=2)
    args = a.parse_args(argv)
    found = history(args.refs, args.sizes, args.rounds)
    base = found[args.refs[0]]
    print(f"decision time over {args.refs[0]}'s, median of {args.rounds} rounds (unpinned, "
          "nodeSelector, affinity pods)")
    print(f"{'commit':<10} {'warm':>17} {'new shape':>17} {'node update':>17}  subject")
    for name, res in found.items():
        cols = []
        for metric in ("warm_us", "new_shape_us", "node_update_us"):
            cols.append(" ".join(f"{res[k][metric] / base[k][metric]:.2f}"
                                 for k in res if base[k][metric]))
        print(f"{name[:10]:<10} {cols[0]:>17} {cols[1]:>17} {cols[2]:>17}  {_subject(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
