"""Decision time per review, in process, as the cluster grows; and one worker's memory.

Run per cluster size in a fresh interpreter (`python -m bench.decision N`) so RSS is that of
a process holding exactly one view, with the server's imports loaded, like a worker."""

from __future__ import annotations

import gc
import json
import sys
import time

from bench.cluster import node, pods


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        kb = int(fh.read().split("VmRSS:")[1].split()[0])
    return kb / 1024


def measure(n: int, repeats: int = 2000) -> dict:
    import flask  # noqa: F401 - what a worker has loaded
    import gunicorn  # noqa: F401
    import jsonpatch  # noqa: F401
    import kubernetes  # noqa: F401
    import prometheus_client  # noqa: F401

    from webhook import engine
    from webhook.cluster import ClusterView, NodeInfo
    from webhook.policy import default_policy

    base = rss_mib()
    t0 = time.perf_counter()
    view = ClusterView()
    view.replace_nodes(NodeInfo.from_object(node(i)) for i in range(n))
    build_s = time.perf_counter() - t0
    gc.collect()
    held = rss_mib()
    policy = default_policy()
    out = {"nodes": n, "rss_base_mib": round(base, 1), "rss_mib": round(held, 1),
           "view_mib": round(held - base, 1), "build_s": round(build_s, 2), "shapes": {}}
    for name, pod in pods().items():
        engine.review(pod, "ml", view, policy)
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(repeats // 5):
                engine.review(pod, "ml", view, policy)
            samples.append((time.perf_counter() - t) / (repeats // 5) * 1e6)
        # Cold: the first review of this shape after the cluster changed (memo invalidated).
        cold = []
        for i in range(3):
            view.upsert_node(NodeInfo.from_object({**node(n + i), "metadata": {
                **node(n + i)["metadata"], "name": f"churn-{i}"}}))
            t = time.perf_counter()
            engine.review(pod, "ml", view, policy)
            cold.append((time.perf_counter() - t) * 1e6)
        out["shapes"][name] = {"warm_us": round(sorted(samples)[2], 1),
                               "cold_us": round(sorted(cold)[1], 1)}
    return out


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
