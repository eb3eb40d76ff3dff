"""bench.throughput's paired ratios: what the guard's HTTPS lines are computed from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import throughput


def test_the_server_measured_first_is_not_always_gpupool(monkeypatch, tmp_path):
    """Two equal servers, and a load generator that slows whichever it is given first by
    10% (what two baselines read on this machine: 1.05): the guard's ratios must come out
    even, not 1.10, or gpupool, started first, pays for its place in the pair."""
    started: dict[int, str] = {}

    def start(cmd: list[str], url: str, ca: str, log: Path) -> str:
        started[int(url.rsplit(":", 1)[1])] = "gpupool" if "webhook" in cmd else "baseline"
        return url

    def first_slower(n: int, value: float) -> list[float]:
        return [value * 1.10 if i == 0 else value for i in range(n)]

    def wrk_together(urls: tuple[str, ...], body: bytes, **_: Any) -> list[dict[str, Any]]:
        return [{"rps": 1000 / x} for x in first_slower(len(urls), 1.0)]

    def fixed_rate_together(host: str, ports: tuple[int, ...], *_: Any, **__: Any
                            ) -> list[dict[str, Any]]:
        assert set(ports) == set(started)
        return [{"p99_ms": x} for x in first_slower(len(ports), 2.0)]

    monkeypatch.setattr(throughput, "start", start)
    monkeypatch.setattr(throughput, "stop", lambda proc: None)
    monkeypatch.setattr(throughput, "certs", lambda tmp: tmp)
    monkeypatch.setattr(throughput.cluster, "write", lambda path, n: path)
    monkeypatch.setattr(throughput.load, "wrk_together", wrk_together)
    monkeypatch.setattr(throughput.load, "fixed_rate_together", fixed_rate_together)
    out = throughput.paired_ratios(tmp_path, rounds=4, seconds=3)
    assert sorted(started.values()) == ["baseline", "gpupool"]
    for endpoint in ("mutate", "validate"):
        assert abs(out[endpoint]["fixed_rate_p99"] - 1.0) < 0.01, out
        assert abs(out[endpoint]["keepalive_rps"] - 1.0) < 0.01, out
