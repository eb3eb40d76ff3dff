"""The requests and durations a worker counts before writing them (``metrics.Tally``): once
written, the series read exactly as prometheus-client's own ``Histogram.observe`` and
``Counter.inc`` make them, one review at a time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from webhook.server import metrics

#: durations on every bucket's edge, inside each bucket and past the last one
DURATIONS = (0.0, 0.0004, 0.005, 0.0051, 0.024, 0.025, 0.09, 0.5, 0.7, 1.0, 2.5, 9.0, 10.0,
             24.0, 25.0, 26.0, 1e6)


def _samples(name: str, endpoint: str, registry: CollectorRegistry | None = None
             ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``name`` ("duration" or "requests") for ``endpoint``, as gpupool's
    metric holds it (or the ``registry`` given): (sample name, its labels) -> value."""
    metric = metrics.DURATION if name == "duration" else metrics.REQUESTS
    prefix = metric._name  # (the family's name, without _total)
    families = metric.collect() if registry is None else registry.collect()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in families
            for s in family.samples if s.labels.get("endpoint") == endpoint
            and s.name.startswith(prefix) and not s.name.endswith("_created")}


def test_written_counts_read_as_prometheus_client_counts_them_one_by_one():
    own = CollectorRegistry()
    judge_duration = Histogram("gpupool_admission_duration_seconds", "judge", ["endpoint"],
                               buckets=metrics.APISERVER_WEBHOOK_BUCKETS, registry=own)
    judge_requests = Counter("gpupool_admission_requests_total", "judge",
                             ["endpoint", "operation", "decision"], registry=own)
    tally = metrics.Tally()
    for i, seconds in enumerate(DURATIONS):
        verdict = "denied" if i % 3 == 0 else "allowed"
        tally.add("tally-test", "CREATE", verdict, seconds)
        judge_duration.labels("tally-test").observe(seconds)
        judge_requests.labels("tally-test", "CREATE", verdict).inc()
    # Counted, not yet written: a scrape in another worker sees them a second later.
    assert _samples("duration", "tally-test") == {}
    tally.flush()
    judged = _samples("duration", "tally-test", own)
    assert _samples("duration", "tally-test") == judged
    assert judged[("gpupool_admission_duration_seconds_count",
                   (("endpoint", "tally-test"),))] == len(DURATIONS)
    judged_requests = _samples("requests", "tally-test", own)
    assert _samples("requests", "tally-test") == judged_requests
    assert sum(judged_requests.values()) == len(DURATIONS)
    # A second flush with nothing new counted writes nothing more.
    tally.flush()
    assert _samples("duration", "tally-test") == judged


def test_counts_are_written_once_a_second_has_passed(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: clock[0])
    tally = metrics.Tally()
    tally.add("tally-clock", "CREATE", "allowed", 0.001)
    assert _samples("requests", "tally-clock") == {}
    clock[0] += metrics.FLUSH_SECONDS
    tally.add("tally-clock", "CREATE", "allowed", 0.001)  # due: both are written
    written = _samples("requests", "tally-clock")
    assert sum(written.values()) == 2


def test_a_stopping_worker_writes_what_it_counted():
    """gunicorn's ``worker_exit`` writes the worker's last counts (the background write
    comes a second apart; a stop can come sooner)."""
    from types import SimpleNamespace

    from webhook.engine import ClusterView
    from webhook.server.policysource import PolicySource
    from webhook.server.runner import _worker_exit

    counted = metrics.Metrics(PolicySource(), ClusterView())
    counted.tally.add("tally-exit", "CREATE", "allowed", 0.002)
    worker = SimpleNamespace(wsgi=SimpleNamespace(config={"gpupool.keep": [counted]}))
    assert _samples("requests", "tally-exit") == {}
    _worker_exit(None, worker)
    assert sum(_samples("requests", "tally-exit").values()) == 1
    _worker_exit(None, SimpleNamespace())  # the master: no app, nothing to write
