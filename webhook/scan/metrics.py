"""The scan's Prometheus metrics, read at scrape time from the scanner.

Pods at risk and nodes with GPUs advertised twice are exported by the leader alone: every
replica computes them, and two replicas adding up the same pods would double every sum. The
chart's alerts take ``max`` over replicas anyway, so a scrape during a hand-over is safe.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from webhook import __version__
from webhook.engine import Outcome
from webhook.scan.scanner import Scanner


class ScanCollector:
    def __init__(self, scanner: Scanner, leading: Callable[[], bool],
                 outputs: Callable[[], dict[str, tuple[bool | None, int, int]]]) -> None:
        """``outputs()``: per output (policyreports, events), whether it works (None: not
        tried), its writes and its failures."""
        self.scanner = scanner
        self.leading = leading
        self.outputs = outputs

    def collect(self) -> Iterator[Metric]:
        lead = self.leading()
        info = GaugeMetricFamily("gpupool_scan_info", "The scan's version", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield GaugeMetricFamily("gpupool_scan_leader",
                                "1 while this replica leads (writes reports and Events)",
                                value=1 if lead else 0)
        answers = self.scanner.answers()
        yield GaugeMetricFamily("gpupool_scan_gpu_pods", "GPU pods this replica re-checks",
                                value=len(answers))
        at_risk = GaugeMetricFamily(
            "gpupool_scan_pods_at_risk",
            "GPU pods whose answer is not fine, by outcome (FailsOnRestart, Misrouted, "
            "SchedulerNotRunning, NeverSchedulable), reason code and pool; leader only",
            labels=["outcome", "reason", "pool"])
        twice = GaugeMetricFamily(
            "gpupool_scan_nodes_gpus_advertised_twice",
            "Nodes whose GPUs two allocators hand out (leader only)")
        if lead:
            counts = Counter((a.answer.outcome.value, a.answer.reason, a.answer.pool or "")
                             for a in answers if a.answer.outcome is not Outcome.FINE)
            for (outcome, reason, pool), n in sorted(counts.items()):
                at_risk.add_metric([outcome, reason, pool], n)
            twice.add_metric([], len(self.scanner.hazards()))
        yield at_risk
        yield twice
        stats = self.scanner.stats
        yield CounterMetricFamily("gpupool_scan_rechecks", "Pod decisions the scan made",
                                  value=stats.rechecks)
        yield CounterMetricFamily("gpupool_scan_pod_errors", "Pods the engine failed on "
                                  "(logged and left out of the reports)", value=stats.errors)
        yield CounterMetricFamily("gpupool_scan_full_scans", "Times every GPU pod was decided "
                                  "again (start, a relist, a cluster-wide change)",
                                  value=stats.full_scans)
        yield GaugeMetricFamily("gpupool_scan_last_full_scan_seconds",
                                "How long the last full re-scan took",
                                value=stats.last_full_scan_seconds)
        ok = GaugeMetricFamily("gpupool_scan_output_available",
                               "1 while an output can be written (0: its CRD is missing, or "
                               "the API server refuses)", labels=["output"])
        writes = CounterMetricFamily("gpupool_scan_writes", "Objects the scan wrote",
                                     labels=["output", "result"])
        for name, (works, done, failed) in sorted(self.outputs().items()):
            if works is not None:
                ok.add_metric([name], 1 if works else 0)
            writes.add_metric([name, "ok"], done)
            writes.add_metric([name, "failed"], failed)
        yield ok
        yield writes


def registry_for(collector: ScanCollector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    out: Any = generate_latest(reg)
    return bytes(out)
