"""bench/scan.py at a small size: it measures what it says (the GPU pods alone kept, a node
change re-deciding that node's pods and its pool's pending ones, nothing to write when nothing
changed), so its figures at 50,000 nodes mean what bench/README.md says."""

from __future__ import annotations

from bench.scan import PENDING_EVERY, measure


def test_the_scan_bench_measures_what_it_says():
    out = measure(100, 1000, 100)
    assert out["gpu_pods_kept"] == out["answers"] == 100  # 900 CPU pods not kept
    assert out["steady_state_writes"] == 0
    # a HAMi node's change: its own pods and the pending pods of HAMi's pool (half of them)
    pending = 100 // PENDING_EVERY
    assert pending // 2 <= out["pods_rechecked_per_node_change"] < pending // 2 + 20
    assert out["at_risk_with_one_node_broken"] > out["at_risk"]
    assert out["full_rescan_s"] > 0 and out["one_node_ms_median"] > 0
