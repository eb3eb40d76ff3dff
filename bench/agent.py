"""The node agent: time to scan and publish spec directories of 8, 64 and 512 GPUs, and the
API writes it makes when nothing changes."""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webhook.node.agent import Observer, Publisher


class CountingNodeClient:
    """Test double for the Node API: counts the agent's reads and writes."""

    def __init__(self) -> None:
        self.value: str | None = None
        self.labels: dict[str, str | None] = {}
        self.reads = 0
        self.writes = 0

    def get_state(self) -> tuple[str | None, dict[str, str]]:
        self.reads += 1
        return self.value, {k: v for k, v in self.labels.items() if v is not None}

    def set_state(self, annotation: str, labels: Mapping[str, str | None]) -> None:
        self.writes += 1
        self.value = annotation
        self.labels.update(labels)


def layout(root: Path, gpus: int) -> list[str]:
    run = root / "var/run/cdi"
    run.mkdir(parents=True)
    uuids = [f"GPU-{uuid.UUID(int=g + 1)}" for g in range(gpus)]
    (run / "management.nvidia.com-gpu.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: management.nvidia.com/gpu\ndevices:\n  - name: all\n"
        "    containerEdits:\n      deviceNodes:\n        - path: /dev/nvidiactl\n")
    (run / "k8s.device-plugin.nvidia.com-gpu.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu",
        "devices": [{"name": u, "containerEdits": {"deviceNodes": [
            {"path": f"/dev/nvidia{i}", "hostPath": f"/dev/nvidia{i}"}]}}
            for i, u in enumerate(uuids)]}))
    lines = ["cdiVersion: 0.5.0", "kind: management.nvidia.com/gpu", "devices:"]
    for i, u in enumerate(uuids):
        lines += [f"  - name: {u}", "    containerEdits:", "      deviceNodes:",
                  f"        - path: /dev/nvidia{i}"]
    (run / "management.nvidia.com-gpu-uuid.yaml").write_text("\n".join(lines) + "\n")
    return [str(root / "etc/cdi"), str(run)]


def measure(gpus: int, steady_cycles: int = 20) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        dirs = layout(Path(tmp), gpus)
        client = CountingNodeClient()
        obs, pub = Observer(dirs), Publisher(client)
        t = time.perf_counter()
        inv = obs.observe()
        scan_ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        pub.publish(inv)
        publish_ms = (time.perf_counter() - t) * 1000
        first_writes = client.writes
        t = time.perf_counter()
        for _ in range(steady_cycles):
            pub.publish(obs.observe())
        cycle_ms = (time.perf_counter() - t) / steady_cycles * 1000
        return {"gpus": gpus, "devices": sum(len(v) for v in inv.kinds.values()),
                "annotation_bytes": len(inv.dumps()), "scan_ms": round(scan_ms, 2),
                "publish_ms": round(publish_ms, 2), "steady_cycle_ms": round(cycle_ms, 2),
                "first_writes": first_writes,
                "steady_writes": client.writes - first_writes,
                "steady_cycles": steady_cycles}
