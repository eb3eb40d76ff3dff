"""``gpupool scan`` at scale: one process holding the view of N nodes and the GPU pods among
P pods, as the scan's Deployment holds them.

    python -m bench.scan --nodes 50000 --pods 200000 --gpu-pods 20000

Reports, each in a fresh interpreter so memory is the scan's own:

- the scan's RSS once the pods are listed and decided (the pods reach it one by one, as the
  watch's pages do, and only GPU pods are kept);
- a full re-scan (start, a relist, a cluster-wide change): every GPU pod decided again, and
  as a ratio to the same pods' admission decisions (the validating stage, warm) timed in the
  same run: what the scan's bookkeeping adds to the engine;
- one node's change: the pods bound to it and its pool's pending ones decided again (median,
  90th percentile and worst of 21 changes, each a node whose CDI spec loses or regains its
  per-UUID devices);
- writes in a steady state: what the writers are told changed when nothing did (0 is the
  target: reports and Events change only when an answer does).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from bench.cluster import GPUS, node, pods, uuids_of
from bench.decision import rss_mib

#: One GPU pod in ten is pending (not bound), as a cluster with some queueing has.
PENDING_EVERY = 10


def _admitted_templates(view: Any, policy: Any) -> dict[str, dict[str, Any]]:
    """A HAMi pod and an operator pod as the API server stores them after gpupool's
    mutation."""
    import jsonpatch

    from webhook.engine import Stage, Subject, decide

    hami = pods()["unpinned"]
    operator = copy.deepcopy(hami)
    operator["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    out = {}
    for name, pod in (("hami", hami), ("operator", operator)):
        d = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace="ml"), view,
                   policy)
        assert d.allowed, d.message
        out[name] = jsonpatch.apply_patch(copy.deepcopy(pod), d.patch)
    return out


def _pods(n_nodes: int, n_pods: int, n_gpu: int, templates: dict[str, dict[str, Any]],
          held: dict[str, dict[str, list[dict[str, Any]]]]) -> Iterator[dict[str, Any]]:
    """Pods one by one, as the watch's pages hand them over: GPU pods spread over the GPU
    nodes of their pool, the rest small CPU pods. ``held`` gets, per node, what each bound
    pod holds there as the node's agent publishes it (``gpupool.io/held-devices``): HAMi's
    plugin hands UUIDs, the GPU Operator's CDI names."""
    hami_nodes = [i for i in range(n_nodes) if i % 5 == 0]
    op_nodes = [i for i in range(n_nodes) if i % 5 != 0]
    cpu = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "web"},
           "spec": {"schedulerName": "default-scheduler", "containers": [
               {"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]},
           "status": {"phase": "Running"}}
    for i in range(n_pods):
        if i < n_gpu:
            hami = i % 2 == 0
            pod = copy.deepcopy(templates["hami" if hami else "operator"])
            pool_nodes = hami_nodes if hami else op_nodes
            if (i // 2) % PENDING_EVERY != PENDING_EVERY - 1:  # both pools have pending pods
                at = pool_nodes[(i // 2) % len(pool_nodes)]
                pod["spec"]["nodeName"] = f"gpu-node-{at:05d}"
                pod["status"] = {"phase": "Running"}
                gpu = uuids_of(at)[(i // 2) % GPUS]
                held.setdefault(pod["spec"]["nodeName"], {})[f"uid-{i}"] = [
                    {"container": "main", "resource": "nvidia.com/gpu", "ids": [gpu],
                     **({"visibleDevices": gpu} if hami else
                        {"cdiDevices": [f"k8s.device-plugin.nvidia.com/gpu={gpu}"]})}]
            else:
                pod["status"] = {"phase": "Pending"}
        else:
            pod = copy.deepcopy(cpu)
        pod["metadata"] = {**pod["metadata"], "name": f"p-{i}", "uid": f"uid-{i}"}
        yield pod


def measure(n_nodes: int, n_pods: int, n_gpu: int) -> dict[str, Any]:
    from webhook.api.held import HELD_ANNOTATION
    from webhook.engine import ClusterView, NodeInfo, Stage, Subject, decide
    from webhook.files.policyfile import default_policy
    from webhook.scan.scanner import Scanner

    base = rss_mib()
    policy = default_policy()
    view = ClusterView()
    view.replace_nodes(NodeInfo.from_object(node(i)) for i in range(n_nodes))
    gc.collect()
    view_rss = rss_mib()
    templates = _admitted_templates(view, policy)
    scanner = Scanner(view, policy)
    held: dict[str, dict[str, list[dict[str, Any]]]] = {}
    t = time.perf_counter()
    scanner.pods_listed(p for p in _pods(n_nodes, n_pods, n_gpu, templates, held)
                        if scanner.keeps(p))
    listed_s = time.perf_counter() - t

    def with_held(i: int) -> dict[str, Any]:
        obj = node(i)
        pods_there = held.get(obj["metadata"]["name"])
        if pods_there is not None:
            obj["metadata"]["annotations"][HELD_ANNOTATION] = json.dumps(
                {"schemaVersion": 1, "observedAt": "2026-12-01T09:00:00Z",
                 "pods": pods_there}, separators=(",", ":"))
        return obj

    for name in held:  # the agents publish what the pods hold, as they start
        view.upsert_node(NodeInfo.from_object(with_held(int(name.rsplit("-", 1)[1]))))
    t = time.perf_counter()
    scanner.sync()
    first_scan_s = time.perf_counter() - t
    gc.collect()
    rss = rss_mib()
    answers = scanner.answers()
    at_risk = sum(a.answer.outcome.at_risk for a in answers)
    scanner.take_dirty()
    # steady state: nothing changed, nothing to write
    scanner.sync()
    steady = scanner.take_dirty()
    steady_writes = len(steady.namespaces) + len(steady.pods) + len(steady.nodes)
    # a full re-scan, and the same pods' admission decisions as a baseline, alternating
    stored = scanner.stored()
    full, baseline = [], []
    for r in range(3):
        view.set_runtime_class(f"bench-{r}", "nvidia")  # a cluster-wide change
        t = time.perf_counter()
        scanner.sync()
        full.append(time.perf_counter() - t)
        view.set_runtime_class(f"bench-b-{r}", "nvidia")
        t = time.perf_counter()
        for p in stored:
            decide(Stage.VALIDATE, Subject(kind="Pod", object=p, namespace="ml"), view,
                   policy)
        baseline.append(time.perf_counter() - t)
    scanner.sync()
    scanner.take_dirty()
    # one node's change: a HAMi node with pods loses, then regains, its per-UUID devices
    node_ms = []
    rechecked = []
    broken_pods = 0
    for k in range(21):
        i = 5 * (k // 2 + 1)  # HAMi nodes 5, 10, ...: each breaks, then is mended
        obj = with_held(i)
        if k % 2 == 0:
            inv = json.loads(obj["metadata"]["annotations"]["gpupool.io/cdi-inventory"])
            inv["kinds"]["management.nvidia.com/gpu"] = ["all"]
            obj["metadata"]["annotations"]["gpupool.io/cdi-inventory"] = json.dumps(inv)
        view.upsert_node(NodeInfo.from_object(obj))
        before = scanner.stats.rechecks
        t = time.perf_counter()
        scanner.sync()
        node_ms.append((time.perf_counter() - t) * 1000)
        rechecked.append(scanner.stats.rechecks - before)
        if k % 2 == 0:
            broken_pods = sum(a.answer.outcome.at_risk for a in scanner.answers())
    return {"nodes": n_nodes, "pods": n_pods, "gpu_pods": n_gpu,
            "gpu_pods_kept": len(stored), "answers": len(answers), "at_risk": at_risk,
            "interpreter_rss_mib": round(base, 1), "view_rss_mib": round(view_rss - base, 1),
            "scan_rss_mib": round(rss, 1),
            "listing_s": round(listed_s, 2), "first_scan_s": round(first_scan_s, 2),
            "full_rescan_s": round(statistics.median(full), 2),
            "full_rescan_vs_admission_decisions": round(
                statistics.median(full) / statistics.median(baseline), 2),
            "one_node_ms_median": round(statistics.median(node_ms), 1),
            "one_node_ms_p90": round(sorted(node_ms)[int(len(node_ms) * 0.9)], 1),
            "one_node_ms_max": round(max(node_ms), 1),
            "pods_rechecked_per_node_change": round(statistics.median(rechecked)),
            "at_risk_with_one_node_broken": broken_pods,
            "steady_state_writes": steady_writes}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[5000])
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--gpu-pods", type=int, default=2000)
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.in_process:
        print(json.dumps(measure(args.nodes[0], args.pods, args.gpu_pods)))
        return
    for n in args.nodes:  # each size in a fresh interpreter: its memory is its own
        out = subprocess.run([sys.executable, "-m", "bench.scan", "--in-process", "--nodes",
                              str(n), "--pods", str(args.pods), "--gpu-pods",
                              str(args.gpu_pods)], capture_output=True, text=True, check=True)
        print(out.stdout.strip())


if __name__ == "__main__":
    main()
