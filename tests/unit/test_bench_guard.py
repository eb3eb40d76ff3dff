"""bench.guard's judgement: which ratios are beyond their limits, and its refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import guard
from harness.kit import ROOT


def test_limits_judge_each_ratio_the_way_it_points():
    rows = guard.decision_limits({("1000", "unpinned"): {
        "warm_us": 1.04, "new_shape_us": 1.76, "new_labels_us": 1.06, "cold_us": 9.0,
        "node_update_us": 1.2}})
    assert [(x.what.split(",")[0], x.ok) for x in rows] == [("warm decision", True),
                                                           ("new pod shape", False),
                                                           ("new labels only", False),
                                                           ("node update", False)]
    # A pod that uses the checks added since the reference has the looser warm
    # limit, and its full decision is held where it stands, apart.
    features = guard.decision_limits({("1000", guard.NEW_FEATURES_SHAPE): {
        "warm_us": 1.19, "new_shape_us": 1.99, "new_labels_us": 1.0, "cold_us": 1.0,
        "node_update_us": 1.0}})
    assert all(x.ok for x in features)
    assert not guard.decision_limits({("1000", "unpinned"): {
        "warm_us": 1.19, "new_shape_us": 1.5, "new_labels_us": 1.0, "cold_us": 1.0,
        "node_update_us": 1.0}})[0].ok
    http = guard.http_limits({"mutate": {"keepalive_rps": 0.79, "fixed_rate_p99": 1.1,
                                         "no_keepalive_rps": 0.1}})
    assert [x.ok for x in http] == [False, True]  # a floor for throughput, a ceiling for p99
    assert "BEYOND" in http[0].line() and ">= 0.80" in http[0].line()


def test_the_reference_is_a_commit_of_this_repository():
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                             capture_output=True, text=True, timeout=30).stdout.strip()
    if shallow == "true":
        pytest.skip("a shallow clone holds no history to find the reference in")
    ref = guard.reference()
    r = subprocess.run(["git", "cat-file", "-t", ref], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert r.stdout.strip() == "commit", (ref, r.stderr)


def test_refusals_are_one_line_and_exit_2():
    r = subprocess.run([sys.executable, "-m", "bench.guard", "--rounds", "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    r = subprocess.run([sys.executable, "-m", "bench.guard", "--skip-http", "--ref",
                        "no-such-commit"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "cannot compare with no-such-commit" in r.stderr


def test_the_served_stages_are_reported_beside_the_limits_not_held():
    """A new shape's two stages as the server decides them are printed with the guard's
    lines but fail nothing: the held new-shape figure is review_pod's."""
    ratios = {("1000", "unpinned"): {
        "warm_us": 1.0, "new_shape_us": 1.5, "new_labels_us": 1.0, "cold_us": 1.0,
        "node_update_us": 1.0, "served_stages_us": 2.5}}
    assert all(x.ok for x in guard.decision_limits(ratios))
    assert not any("served" in x.what for x in guard.decision_limits(ratios))
    (line,) = guard.served_stages(ratios)
    assert "served stages, unpinned pod, 1000 nodes" in line and "2.50" in line
    assert "not held" in line
