"""The DRA benchmark's own checks, on a small cluster (the figures come from `make bench`):
every DRA shape it times is routed to the operator pool and finds nodes that can allocate
it, so the timings are of real decisions, not of early exits."""

from __future__ import annotations

from bench import dra


def test_the_dra_bench_times_real_decisions():
    out = dra.timings([60], rounds=1, per_round=3)["60"]
    assert set(out) == {"device plugin", "DRA one-gpu", "DRA CEL selector"}
    assert out["device plugin"]["warm_ratio"] == 1.0
    assert all(v["warm_us"] > 0 and v["first_ms"] > 0 for v in out.values())
    report = dra.report({"timings": {"60": out}, "memory": {}})
    assert "DRA CEL selector" in report
