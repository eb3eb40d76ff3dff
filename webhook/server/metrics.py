"""Prometheus metrics, correct across several gunicorn worker processes.

Counters and the latency histogram use prometheus-client's multiprocess mode (one file per
worker under PROMETHEUS_MULTIPROC_DIR, summed at scrape). State that every worker knows alike
(node cache, policy, certificate) is reported at scrape time by the worker that answers, from
its own view, so it is never double counted.

The two series every review moves (``gpupool_admission_requests_total`` and the duration
histogram) are counted in the worker and written to its file at most ``FLUSH_SECONDS``
apart (``Tally``): a scrape sees a worker's last second late, or not at all if the worker
is killed (a graceful exit writes them). Denials and unchecked reviews are written at once.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from webhook import __version__

if TYPE_CHECKING:
    from flask import Flask

    from webhook.cluster.watch import ClusterInformer
    from webhook.engine import ClusterView, Decision
    from webhook.server.policysource import PolicySource
    from webhook.server.review import Request
    from webhook.server.tls import ReloadingContext

#: The API server's apiserver_admission_webhook_admission_duration_seconds buckets, so the two
#: histograms can be compared bucket for bucket.
APISERVER_WEBHOOK_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0)

REQUESTS = Counter("gpupool_admission_requests_total", "Admission reviews answered",
                   ["endpoint", "operation", "decision"])
DENIALS = Counter("gpupool_admission_denials_total", "Admission denials by reason and pool",
                  ["reason", "pool"])
DURATION = Histogram("gpupool_admission_duration_seconds",
                     "Time to decide one admission review", ["endpoint"],
                     buckets=APISERVER_WEBHOOK_BUCKETS)
#: its buckets' upper bounds, +Inf last
_BOUNDS = (*APISERVER_WEBHOOK_BUCKETS, float("inf"))

UNCHECKED = Counter("gpupool_unchecked_total",
                    "Reviews decided without gpupool's checks (docs/reliability.md, "
                    "'Fail-open cases'): why is internal-error (the engine failed: admitted "
                    "with a warning), not-synced (a GPU pod before the node watch listed nodes "
                    "and namespaces) or no-nodes (a GPU pod with --no-cluster or no node); "
                    "decision is denied under onNoNodeView: deny", ["why", "decision"])

AUDIT_LOST = Counter("gpupool_audit_records_lost_total",
                     "Audit records a sink could not write", ["sink"])
AUDIT_FAILING = Gauge("gpupool_audit_sink_failing",
                      "1 while an audit sink cannot write (in any worker)", ["sink"],
                      multiprocess_mode="livemax")


ROUTING_PROOFS = Counter("gpupool_routing_canary_total",
                         "Proofs of the compiled routing policy on the API server by its canary "
                         "pods (docs/install.md, 'Routing in the API server'): result is passed "
                         "(then it routes real pods) or failed (it routes none; the reason is "
                         "logged and recorded on gpupool-mutating)", ["result"])

NODE_SOURCE = Gauge("gpupool_node_source",
                    "1 for the node view the server decides against (watch, file, demo, or "
                    "none: CDI devices not checked)", ["source"], multiprocess_mode="livemax")
BUILD_INFO = Gauge("gpupool_build_info", "gpupool's version (always 1)", ["version"],
                   multiprocess_mode="livemax")
BUILD_INFO.labels(__version__).set(1)


_CHILDREN: dict[tuple[Any, ...], Any] = {}


def _child(metric: Any, *labels: str) -> Any:
    """``metric.labels(...)`` costs several microseconds (validation, a lock); every review
    pays it, so the children of the few label sets seen are kept."""
    key = (metric, *labels)
    child = _CHILDREN.get(key)
    if child is None:
        child = metric.labels(*labels)
        if len(_CHILDREN) < 256:  # operation comes from the request: keep the cache bounded
            _CHILDREN[key] = child
    return child


#: How long a worker holds the counts of the reviews it answered before writing them.
FLUSH_SECONDS = 1.0


class Tally:
    """The requests a worker answered and how long each took, counted here and written to
    the multiprocess files together (``flush``): when a second has passed since the last
    write (checked as each review is counted), every ``FLUSH_SECONDS`` in the background
    (``runner.build_webhook``), before each scrape this worker answers and as it exits.

    Written one review at a time, prometheus-client's multiprocess values take a lock, check
    the pid and write the mmap file three times a review: a worker then served 7-8% fewer
    reviews a second (bench/README.md, "Issue 48, fourth day"). Counted here, a review
    costs a lock and two dictionary updates, and a second's reviews three writes a series."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = {}
        #: per endpoint: the sum of the durations, then the count per bucket (+Inf last)
        self._durations: dict[str, list[float]] = {}
        self._due = time.monotonic() + FLUSH_SECONDS

    def add(self, endpoint: str, operation: str, verdict: str, seconds: float) -> None:
        bucket = bisect_left(_BOUNDS, seconds)  # (the first bound at or over it, as observe)
        with self._lock:
            key = (endpoint, operation, verdict)
            self._requests[key] = self._requests.get(key, 0) + 1
            counts = self._durations.get(endpoint)
            if counts is None:
                counts = self._durations[endpoint] = [0.0] * (len(_BOUNDS) + 1)
            counts[0] += seconds
            counts[bucket + 1] += 1
            due = time.monotonic() >= self._due
        if due:
            self.flush()

    def flush(self) -> None:
        """Write what was counted since the last write."""
        with self._lock:
            requests, durations = self._requests, self._durations
            self._requests, self._durations = {}, {}
            self._due = time.monotonic() + FLUSH_SECONDS
        for (endpoint, operation, verdict), n in requests.items():
            _child(REQUESTS, endpoint, operation, verdict).inc(n)
        for endpoint, counts in durations.items():
            # (Histogram.observe for many at once: its sum, and each bucket's count, which
            # the exposition makes cumulative; prometheus-client has no call for it)
            child = _child(DURATION, endpoint)
            child._sum.inc(counts[0])
            for i, count in enumerate(counts[1:]):
                if count:
                    child._buckets[i].inc(count)


def audit_sink_state(sink: str, failing: bool) -> None:
    AUDIT_FAILING.labels(sink).set(1 if failing else 0)


def audit_record_lost(sink: str) -> None:
    AUDIT_LOST.labels(sink).inc()


def audit_sinks_declared(sinks: list[str]) -> None:
    """Every sink's series exists from the start, so an alert on it has something to read."""
    for sink in sinks:
        AUDIT_LOST.labels(sink)
        AUDIT_FAILING.labels(sink).set(0)


def audit_totals() -> dict[str, tuple[float, bool]]:
    """Per audit sink: records lost by every worker, and whether any live worker is failing
    to write. Read from the multiprocess files, as a scrape would sum them."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(AUDIT_LOST)
        registry.register(AUDIT_FAILING)
    lost: dict[str, float] = {}
    failing: dict[str, bool] = {}
    for family in registry.collect():
        for sample in family.samples:
            sink = sample.labels.get("sink", "")
            if sample.name == "gpupool_audit_records_lost_total":
                lost[sink] = lost.get(sink, 0.0) + sample.value
            elif sample.name == "gpupool_audit_sink_failing":
                failing[sink] = failing.get(sink, False) or sample.value > 0
    return {sink: (lost.get(sink, 0.0), failing.get(sink, False))
            for sink in lost.keys() | failing.keys()}


def routing_proof(result: str, reason: str) -> None:
    """One proof of the routing policy by its canary pods (``routingpolicy.prove``)."""
    ROUTING_PROOFS.labels(result).inc()


def node_source(source: str) -> None:
    """Which node view the server decides against: watch, file, demo, or none
    (``--no-cluster``: CDI devices are not checked)."""
    NODE_SOURCE.labels(source).set(1)


class _StateCollector:
    def __init__(self, metrics: Metrics, tls: ReloadingContext | None) -> None:
        self.metrics = metrics
        self.tls = tls

    def collect(self) -> Iterator[GaugeMetricFamily]:
        view = self.metrics.view
        nodes = view.nodes()
        with_inv = [n for n in nodes if n.inventory is not None]
        yield GaugeMetricFamily("gpupool_inventory_nodes", "Nodes with a CDI inventory",
                                value=len(with_inv))
        yield GaugeMetricFamily("gpupool_cache_nodes", "Nodes in the admission cache",
                                value=len(nodes))
        oldest = None
        for n in with_inv:
            if n.inventory is None:
                continue
            try:
                t = dt.datetime.fromisoformat(n.inventory.observed_at.replace("Z", "+00:00"))
            except (ValueError, AttributeError):
                continue
            oldest = t if oldest is None or t < oldest else oldest
        age = (dt.datetime.now(dt.UTC) - oldest).total_seconds() if oldest else 0.0
        yield GaugeMetricFamily("gpupool_inventory_oldest_observation_age_seconds",
                                "Age of the oldest CDI inventory observation in the cache",
                                value=age)
        stale = self.metrics.staleness()
        if stale is not None:
            yield GaugeMetricFamily("gpupool_cache_staleness_seconds",
                                    "Seconds since the node cache was last known in sync",
                                    value=stale)
        yield GaugeMetricFamily("gpupool_cache_relists",
                                "Full relists of the node cache (watch expiries, outages)",
                                value=self.metrics.relists())
        p = self.metrics.policies
        p.maybe_reload()  # so the scrape is current
        yield GaugeMetricFamily("gpupool_policy_last_update_ok",
                                "1 if the last policy update loaded, 0 if it was rejected",
                                value=0 if p.last_error else 1)
        yield GaugeMetricFamily("gpupool_policy_rejected_updates",
                                "Policy updates rejected (last good policy kept)",
                                value=p.failed_reloads)
        kept = GaugeMetricFamily("gpupool_serving_last_good_copy",
                                 "1 while a file on disk does not load and the last good copy "
                                 "the server kept serves in its place", labels=["file"])
        kept.add_metric(["policy"], 1 if p.serving_kept else 0)
        if self.tls is not None:
            kept.add_metric(["certificate"], 1 if self.tls.serving_kept else 0)
            yield GaugeMetricFamily("gpupool_certificate_expiry_timestamp_seconds",
                                    "When the serving certificate expires (Unix time)",
                                    value=self.tls.not_after.timestamp())
            yield GaugeMetricFamily("gpupool_certificate_last_update_ok",
                                    "1 if the certificate pair on disk loads, 0 if it does not "
                                    "(the last good pair keeps serving)",
                                    value=0 if self.tls.last_error else 1)
        yield kept


class Metrics:
    def __init__(self, policies: PolicySource, view: ClusterView,
                 informer: ClusterInformer | None = None) -> None:
        self.policies = policies
        self.view = view
        self.informer = informer
        self.tally = Tally()
        for why in ("internal-error", "not-synced", "no-nodes"):  # alerts have a series
            for verdict in ("allowed", "denied"):
                UNCHECKED.labels(why, verdict)

    def staleness(self) -> float | None:
        if self.informer is None:
            return None
        return float(max(self.informer.nodes.staleness(),
                         self.informer.namespaces.staleness()))

    def relists(self) -> int:
        return self.informer.nodes.relists if self.informer is not None else 0

    def observe(self, endpoint: str, req: Request, decision: Decision, seconds: float) -> None:
        verdict = "allowed" if decision.allowed else "denied"
        self.tally.add(endpoint, req.subject.operation, verdict, seconds)
        if not decision.allowed:
            DENIALS.labels(decision.reason, decision.pool or "").inc()
        why = "internal-error" if decision.reason == "InternalError" else decision.unchecked
        if why:
            _child(UNCHECKED, why, verdict).inc()


def render(metrics: Metrics, tls: ReloadingContext | None) -> bytes:
    metrics.tally.flush()  # (this worker's counts, up to now: other workers' lag a second)
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        for collector in (REQUESTS, DENIALS, DURATION, UNCHECKED, AUDIT_LOST, AUDIT_FAILING,
                          NODE_SOURCE, BUILD_INFO):
            registry.register(collector)
    registry.register(_StateCollector(metrics, tls))
    return generate_latest(registry)


def install_routes(app: Flask, metrics: Metrics, tls: ReloadingContext | None) -> None:
    from flask import Response

    @app.get("/metrics")
    def metrics_route() -> Response:
        return Response(render(metrics, tls), mimetype=CONTENT_TYPE_LATEST)
