"""Decision time of this tree against another commit's, paired in one run.

`python -m bench.versus_ref REF [--sizes 1000 10000] [--rounds 4]` extracts REF's ``webhook/``
with ``git archive`` and runs this tree's ``bench.decision`` timings against both packages,
alternating which goes first each round, so machine noise lands on both alike. It reports
this tree's median time over REF's, per cluster size and pod shape: the check a refactor
of the engine must pass (no regression beyond noise).

Both runs of a round hash with the same seed (``PYTHONHASHSEED``, another each round):
a process's hash seed sets the layout of every dict and set it builds, and with it how fast
that process runs. Left random, a run of this tree against itself read 0.93-1.09 over four
rounds, every line of a run moved together; paired, 0.96-1.03 (bench/README.md, "Issue
48, fourth day").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def extract(ref: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", "--format=tar", ref, "webhook"],
                             cwd=ROOT, capture_output=True, check=True, timeout=120).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(into, filter="data")


def timings(package_root: Path, sizes: list[int], seed: int | None = None) -> dict[str, Any]:
    """This tree's benchmark, deciding with the ``webhook`` package under ``package_root``
    (``seed``: the process's ``PYTHONHASHSEED``; None, a random one)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import webhook\n"
            "assert webhook.__file__.startswith(sys.argv[1]), webhook.__file__\n"
            "from bench.decision import timings; import json\n"
            "print(json.dumps(timings([int(x) for x in sys.argv[2:]])))")
    env = None if seed is None else {**os.environ, "PYTHONHASHSEED": str(seed)}
    r = subprocess.run([sys.executable, "-c", code, str(package_root), *map(str, sizes)],
                       cwd=ROOT, capture_output=True, text=True, timeout=3600, env=env)
    if r.returncode:
        raise SystemExit(f"bench.versus_ref: the run against {package_root} failed:\n"
                         f"{r.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return found


METRICS = ("warm_us", "new_shape_us", "new_labels_us", "served_stages_us", "cold_us",
           "node_update_us")


def compare(ref: str, sizes: list[int], rounds: int) -> dict[tuple[str, str], dict[str, float]]:
    """(nodes, pod shape) -> metric -> this tree's time over REF's, the median of paired
    rounds (alternating which goes first; both runs of a round on one hash seed)."""
    with tempfile.TemporaryDirectory(prefix="gpupool-ref-") as tmp:
        base = Path(tmp)
        extract(ref, base)
        runs: dict[str, list[dict[str, Any]]] = {"head": [], "ref": []}
        for r in range(rounds):
            order = [("head", ROOT), ("ref", base)]
            for name, tree in order if r % 2 == 0 else order[::-1]:
                runs[name].append(timings(tree, sizes, seed=r + 1))
                print(f"round {r + 1}/{rounds}: {name} done", file=sys.stderr)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for n in map(str, sizes):
        for shape in runs["head"][0][n]:
            out[(n, shape)] = {
                metric: statistics.median(
                    h / b for h, b in zip([run[n][shape][metric] for run in runs["head"]],
                                          [run[n][shape][metric] for run in runs["ref"]],
                                          strict=True) if b)
                for metric in METRICS}
    return out


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(prog="python -m bench.versus_ref", description=__doc__)
    a.add_argument("ref", help="the commit to compare against (e.g. HEAD~3, a tag)")
    a.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    a.add_argument("--rounds", type=int, default=4)
    args = a.parse_args(argv)
    ratios = compare(args.ref, args.sizes, args.rounds)
    print(f"decision time, this tree / {args.ref} (median of {args.rounds} paired rounds; "
          "< 1 is faster)")
    print(f"{'nodes':>7}  {'pod shape':<24} {'warm':>6} {'new shape':>10} {'new labels':>11} "
          f"{'served stages':>14} {'cold':>6} {'node update':>12}")
    for (n, shape), r in ratios.items():
        print(f"{n:>7}  {shape:<24} {r['warm_us']:>6.2f} {r['new_shape_us']:>10.2f} "
              f"{r['new_labels_us']:>11.2f} {r['served_stages_us']:>14.2f} "
              f"{r['cold_us']:>6.2f} {r['node_update_us']:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
