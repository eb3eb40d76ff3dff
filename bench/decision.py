"""Decision time per review, in process, as the cluster grows; and one worker's memory.

`python -m bench.decision memory N` reports the RSS of a fresh interpreter holding one N-node
view with the server's imports loaded, like a worker; `python -m bench.decision time N...`
times every size in one process, interleaved."""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from typing import Any

from bench.cluster import node, pods
from bench.engine import engine


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        kb = int(fh.read().split("VmRSS:")[1].split()[0])
    return kb / 1024


def _imports() -> None:
    import flask  # noqa: F401 - what a worker has loaded
    import gunicorn  # noqa: F401
    import jsonpatch  # noqa: F401
    import kubernetes  # noqa: F401
    import prometheus_client  # noqa: F401


def memory(n: int) -> dict[str, Any]:
    """RSS of a fresh process holding an n-node view (run in its own interpreter)."""
    e = engine()
    _imports()
    base = rss_mib()
    t0 = time.perf_counter()
    view = e.ClusterView()
    view.replace_nodes(e.NodeInfo.from_object(node(i)) for i in range(n))
    build_s = time.perf_counter() - t0
    gc.collect()
    held = rss_mib()
    return {"nodes": n, "rss_base_mib": round(base, 1), "rss_mib": round(held, 1),
            "view_mib": round(held - base, 1), "build_s": round(build_s, 2)}


def warm_us(pod: dict[str, Any], view: Any, policy: Any, per_round: int) -> float:
    """Microseconds per review of a pod whose shape the view already knows (mutate and
    validate, as a user's create runs them)."""
    review_pod = engine().review_pod
    review_pod(pod, "ml", view, policy)
    t = time.perf_counter()
    for _ in range(per_round):
        review_pod(pod, "ml", view, policy)
    return (time.perf_counter() - t) / per_round * 1e6


def new_shape_us(pod: dict[str, Any], view: Any, policy: Any, per_round: int,
                 tag: str) -> float:
    """Microseconds per review of pods the view has not seen the shape of (each container
    sets a variable of its own, part of what a decision reads): what a one-off pod, or a new
    workload's first replica, costs with every node and fold already known. A tree that
    keeps no decision per shape answers as warm. (Until 2026-12-05 each pod carried a label
    of its own instead: the same thing then, ``new_labels_us`` since.)"""
    return _each_once(_new_shapes(pod, per_round, tag), view, policy)


def _new_shapes(pod: dict[str, Any], count: int, tag: str) -> list[dict[str, Any]]:
    """``count`` copies of ``pod``, each a shape no review has had (``new_shape_us``)."""
    fresh = []
    for i in range(count):
        p = dict(pod)
        spec = dict(p["spec"])
        spec["containers"] = [{**c, "env": [*c.get("env", ()),
                                            {"name": "BENCH_RUN", "value": f"{tag}-{i}"}]}
                              for c in spec["containers"]]
        p["spec"] = spec
        fresh.append(p)
    return fresh


def served_stages_us(pod: dict[str, Any], view: Any, policy: Any, per_round: int,
                     tag: str) -> float:
    """Microseconds per pod of a shape no review has had, decided as the server decides it:
    /mutate on the pod, then /validate on the pod its patch makes, each on its own request
    (the patch applied untimed, by jsonpatch, as the API server applies it). ``new_shape_us``
    reviews both stages in one call (a workload's template, ``gpupool check``), which a
    tree may keep as one; a pod created on its own pays this."""
    import jsonpatch

    e = engine()
    decide, mutate, validate, subject = e.decide, e.Stage.MUTATE, e.Stage.VALIDATE, e.Subject
    created = [subject(kind="Pod", object=p, namespace="ml")
               for p in _new_shapes(pod, per_round, tag)]
    mutations = []
    t = time.perf_counter()
    for s in created:
        mutations.append(decide(mutate, s, view, policy))
    spent = time.perf_counter() - t
    patched = [subject(kind="Pod", namespace="ml",
                       object=jsonpatch.apply_patch(s.object, list(m.patch)) if m.patch
                       else s.object) for s, m in zip(created, mutations, strict=True)]
    t = time.perf_counter()
    for s in patched:
        decide(validate, s, view, policy)
    spent += time.perf_counter() - t
    return spent / per_round * 1e6


def new_labels_us(pod: dict[str, Any], view: Any, policy: Any, per_round: int,
                  tag: str) -> float:
    """Microseconds per review of pods that differ from a known one in labels no decision
    reads (each carries a label of its own): a CronJob's next Job, a Deployment's next
    ReplicaSet with the same template."""
    fresh = []
    for i in range(per_round):
        p = dict(pod)
        p["metadata"] = {**pod["metadata"],
                         "labels": {**pod["metadata"].get("labels", {}), "bench/i": f"{tag}-{i}"}}
        fresh.append(p)
    return _each_once(fresh, view, policy)


def _each_once(fresh: list[dict[str, Any]], view: Any, policy: Any) -> float:
    review_pod = engine().review_pod
    t = time.perf_counter()
    for p in fresh:
        review_pod(p, "ml", view, policy)
    return (time.perf_counter() - t) / len(fresh) * 1e6


#: node updates (each followed by a cold review) per round and shape, their median taken
UPDATES = 15


def timings(sizes: list[int], rounds: int = 7, per_round: int = 300) -> dict[str, Any]:
    """Decision time for every size and shape, measured in interleaved rounds in one process
    so machine noise hits every size alike; medians reported. Warm: a shape the view knows
    (a workload's replicas); new shape: a pod no review has had the shape of, the view
    otherwise warm; new labels: a known shape in labels no decision reads; served stages: a
    new shape's two stages as the server decides them, on two requests; cold: the first
    review after a node of the pool changed."""
    from bench.engine import default_policy

    e = engine()
    policy = default_policy()
    views = {}
    for n in sizes:
        v = e.ClusterView()
        v.replace_nodes(e.NodeInfo.from_object(node(i)) for i in range(n))
        views[n] = v
    shapes = pods()
    warm: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    cold: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    update: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    new: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    labels: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    stages: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    for r in range(rounds):
        for n in sizes:
            for s, pod in shapes.items():
                warm[(n, s)].append(warm_us(pod, views[n], policy, per_round))
                new[(n, s)].append(new_shape_us(pod, views[n], policy, per_round,
                                                f"{r}-{n}-{s}"))
                labels[(n, s)].append(new_labels_us(pod, views[n], policy, per_round,
                                                    f"{r}-{n}-{s}"))
                stages[(n, s)].append(served_stages_us(pod, views[n], policy, per_round,
                                                       f"{r}-{n}-{s}-served"))
                # Cold: the first review of this shape after a node of its pool changed (a
                # label flips, as when the node's agent republishes), and what the node
                # update itself cost the watch: the median of UPDATES such updates, each
                # timed with the collector held off, as ``timeit`` times (one update's time
                # was a coin flip on whether a collector pass, due to the reviews around
                # it, landed in it: 100 or 220 us for the same code, run to run).
                ups, colds = [], []
                for u in range(UPDATES):
                    churn = node(5 * ((r * UPDATES + u) % max(n // 5, 1)))  # (of its pool)
                    churn["metadata"]["labels"] = {**churn["metadata"]["labels"],
                                                   "bench/round": f"{r}-{n}-{s}-{u}"}
                    changed = e.NodeInfo.from_object(churn)
                    gc.disable()
                    t = time.perf_counter()
                    views[n].upsert_node(changed)
                    ups.append((time.perf_counter() - t) * 1e6)
                    gc.enable()
                    t = time.perf_counter()
                    e.review_pod(pod, "ml", views[n], policy)
                    colds.append((time.perf_counter() - t) * 1e6)
                update[(n, s)].append(statistics.median(ups))
                cold[(n, s)].append(statistics.median(colds))
    return {str(n): {s: {"warm_us": round(statistics.median(warm[(n, s)]), 1),
                         "new_shape_us": round(statistics.median(new[(n, s)]), 1),
                         "new_labels_us": round(statistics.median(labels[(n, s)]), 1),
                         "served_stages_us": round(statistics.median(stages[(n, s)]), 1),
                         "cold_us": round(statistics.median(cold[(n, s)]), 1),
                         "node_update_us": round(statistics.median(update[(n, s)]), 1)}
                     for s in shapes} for n in sizes}


if __name__ == "__main__":
    if sys.argv[1] == "memory":
        print(json.dumps(memory(int(sys.argv[2]))))
    else:
        print(json.dumps(timings([int(x) for x in sys.argv[2:]])))
