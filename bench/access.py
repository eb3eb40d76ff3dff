"""What the grant check (docs/security.md) costs a pod that asks for no GPU, in process.

Every pod the cluster creates now reaches gpupool. The figure that matters is a pod that asks
for no GPU and reaches no GPU node (tainted GPU nodes, the usual setup): warm (a workload's
next replica) and new (a one-off pod), each against the same pod decided in the same run with
``access.ungranted: off``, which is the engine before the check. A pod that does reach GPU
nodes and gets the void is shown too. `python -m bench --only access`."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.cluster import node
from bench.decision import new_shape_us, warm_us
from bench.engine import engine

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _view(n: int, tainted: bool) -> Any:
    e = engine()
    view = e.ClusterView()
    objs = []
    for i in range(n):
        obj = node(i)
        if tainted:
            obj = {**obj, "spec": {**obj.get("spec", {}), "taints": [TAINT]}}
        objs.append(obj)
    view.replace_nodes(e.NodeInfo.from_object(o) for o in objs)
    return view


def _policies() -> tuple[Any, Any]:
    from webhook.engine import load_policy_text
    from webhook.files.policyfile import default_policy_text

    text = default_policy_text()
    return load_policy_text(text), load_policy_text(text + "access: {ungranted: \"off\"}\n")


def _web() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ml"},
            "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"}}},
                {"name": "side", "image": "envoy"}]}}


def measure(sizes: tuple[int, ...] = (1_000, 10_000), rounds: int = 5,
            per_round: int = 2_000) -> list[dict[str, Any]]:
    on, off = _policies()
    out = []
    for n in sizes:
        for tainted in (True, False):
            view = _view(n, tainted)
            pod = _web()
            rows: dict[str, list[float]] = {"warm": [], "warm_off": [], "new": [],
                                            "new_off": []}
            for r in range(rounds):
                # (interleaved: the machine's noise falls on both sides alike)
                rows["warm"].append(warm_us(pod, view, on, per_round))
                rows["warm_off"].append(warm_us(pod, view, off, per_round))
                rows["new"].append(new_shape_us(pod, view, on, per_round // 10, f"on{r}"))
                rows["new_off"].append(new_shape_us(pod, view, off, per_round // 10,
                                                    f"off{r}"))
            med = {k: statistics.median(v) for k, v in rows.items()}
            out.append({"nodes": n, "gpu_nodes_tainted": tainted,
                        "warm_us": round(med["warm"], 2),
                        "warm_ratio": round(med["warm"] / med["warm_off"], 2),
                        "new_us": round(med["new"], 2),
                        "new_ratio": round(med["new"] / med["new_off"], 2),
                        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    return out


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["grant check, a pod that asks for no GPU (ratio: against access.ungranted off, "
             "same run)",
             f"{'nodes':>7} {'GPU nodes':>10} {'warm us':>8} {'ratio':>6} {'new us':>8} "
             f"{'ratio':>6}"]
    for r in rows:
        lines.append(f"{r['nodes']:>7} {'tainted' if r['gpu_nodes_tainted'] else 'open':>10} "
                     f"{r['warm_us']:>8.2f} {r['warm_ratio']:>6.2f} {r['new_us']:>8.2f} "
                     f"{r['new_ratio']:>6.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(measure((1_000,), rounds=3, per_round=1_000)))
