"""DRA decision cost and informer memory as the cluster grows, against the device-plugin
decision measured in the same run.

`python -m bench.dra` (or `make bench BENCH_ARGS="--only dra"`): the synthetic GPU nodes of
bench/cluster.py, each also publishing one ResourceSlice of 8 GPUs as NVIDIA's DRA driver
does (type, UUID, product, architecture, driver version, index; memory capacity), NVIDIA's
DeviceClasses, and claim templates. Per size, interleaved rounds in one process:

- warm: one review (mutate + validate) of a pod once its shape is known: a device-plugin pod
  (today's decision, the baseline), a DRA pod with one GPU from a template, and one whose
  template selects GPUs with a CEL quantity selector;
- after a slice change: the first review after one node's slice was republished;
- first: the first review of a new DRA shape (every node's devices judged once).

Memory: a fresh interpreter per configuration holding the view (nodes alone, then nodes with
their slices), with a worker's imports loaded; RSS and the ratio between the two.
"""

from __future__ import annotations

import copy
import gc
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.cluster import GPUS, node, pods
from bench.decision import _imports, rss_mib, warm_us

SIZES = (1_000, 10_000, 50_000)
TEMPLATES = {
    "one-gpu": {"deviceClassName": "gpu.nvidia.com"},
    "big-gpu": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": (
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0")}}]},
}


def device_class(name: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": (
                "device.driver == 'gpu.nvidia.com' && "
                f"device.attributes['gpu.nvidia.com'].type == '{kind}'")}}]}}


def resource_slice(i: int, generation: int = 1) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": name,
                     "pool": {"name": name, "generation": generation, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{g}", "attributes": {
                         "type": {"string": "gpu"},
                         "uuid": {"string": f"GPU-{i:08x}-{g:04x}-4000-8000-{generation:012x}"},
                         "productName": {"string": "NVIDIA H100 80GB HBM3"},
                         "brand": {"string": "Nvidia"}, "architecture": {"string": "Hopper"},
                         "cudaComputeCapability": {"version": "9.0.0"},
                         "driverVersion": {"version": "560.35.3"},
                         "cudaDriverVersion": {"version": "12.6.0"},
                         "pcieBusID": {"string": f"0000:{g + 0x18:02x}:00.0"},
                         "index": {"int": g}, "minor": {"int": g}},
                         "capacity": {"memory": {"value": "80Gi"}}} for g in range(GPUS)]}}


def template(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                                                        "exactly": TEMPLATES[name]}]}}}}


def dra_pod(base: dict[str, Any], name: str) -> dict[str, Any]:
    """The benchmark's admitted pod, asking for its GPU through a template instead."""
    pod = copy.deepcopy(base)
    spec = pod["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": name}]
    for c in spec["containers"]:
        c["resources"] = {"claims": [{"name": "gpu"}]}
    pod["metadata"]["name"] = f"bench-{name}"
    return pod


def build(n: int, slices: bool = True) -> Any:
    """The view as the server's watch builds it: each slice reduced as it arrives."""
    from webhook.engine import ClusterView, DeviceClass, NodeInfo, Slice, claims_of

    view = ClusterView()
    view.replace_nodes(NodeInfo.from_object(node(i)) for i in range(n))
    if slices:
        classes = (DeviceClass.from_object(device_class(name, kind))
                   for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")))
        view.replace_device_classes(c for c in classes if c is not None)
        published = (Slice.from_object(resource_slice(i)) for i in range(n))
        view.replace_slices(s for s in published if s is not None)
        view.replace_claims("ResourceClaimTemplate", claims_of(
            "ResourceClaimTemplate", [template(t) for t in TEMPLATES]))
    return view


def memory(n: int, slices: bool) -> dict[str, Any]:
    _imports()
    base = rss_mib()
    t0 = time.perf_counter()
    view = build(n, slices)
    build_s = time.perf_counter() - t0
    gc.collect()
    held = rss_mib()
    del view
    return {"nodes": n, "slices": slices, "rss_mib": round(held, 1),
            "view_mib": round(held - base, 1), "build_s": round(build_s, 1)}


def timings(sizes: list[int], rounds: int = 7, per_round: int = 200) -> dict[str, Any]:
    from webhook.engine import Slice, review_pod
    from webhook.files.policyfile import default_policy

    policy = default_policy()
    unpinned = pods()["unpinned"]
    plugin = copy.deepcopy(unpinned)  # the operator pool's device-plugin pod
    plugin["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    shapes = {"device plugin": plugin, "DRA one-gpu": dra_pod(unpinned, "one-gpu"),
              "DRA CEL selector": dra_pod(unpinned, "big-gpu")}
    views = {}
    first: dict[tuple[int, str], float] = {}
    for n in sizes:
        views[n] = build(n)
        for s, pod in shapes.items():  # the first review of each shape: every node judged
            t = time.perf_counter()
            d = review_pod(pod, "ml", views[n], policy)
            first[(n, s)] = (time.perf_counter() - t) * 1e3
            assert d.allowed and d.pool == "operator", d.to_json()
            if s.startswith("DRA"):
                assert any(f.note.startswith("can allocate") for f in d.nodes), d.to_json()
    warm: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    after: dict[tuple[int, str], list[float]] = {(n, s): [] for n in sizes for s in shapes}
    for r in range(rounds):
        for n in sizes:
            for s, pod in shapes.items():
                warm[(n, s)].append(warm_us(pod, views[n], policy, per_round))
                i = (7 * r + 1) % n
                fresh = resource_slice(i, generation=r + 2)
                views[n].set_slice(fresh["metadata"]["name"], Slice.from_object(fresh))
                t = time.perf_counter()
                review_pod(pod, "ml", views[n], policy)
                after[(n, s)].append((time.perf_counter() - t) * 1e6)
    out: dict[str, Any] = {}
    for n in sizes:
        base = statistics.median(warm[(n, "device plugin")])
        out[str(n)] = {s: {"warm_us": round(statistics.median(warm[(n, s)]), 1),
                           "warm_ratio": round(statistics.median(warm[(n, s)]) / base, 2),
                           "after_slice_change_us": round(statistics.median(after[(n, s)]), 1),
                           "first_ms": round(first[(n, s)], 1)} for s in shapes}
    return out


def _run(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "bench.dra", *args], capture_output=True,
                       text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def measure(sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """Each part in its own interpreter (memory of one must not count in another's)."""
    mem = {str(n): {"nodes only": _run("memory", str(n), "no-slices"),
                    "with slices": _run("memory", str(n), "slices")} for n in sizes}
    for row in mem.values():
        row["rss_ratio"] = round(row["with slices"]["rss_mib"] / row["nodes only"]["rss_mib"],
                                 2)
    return {"timings": _run("time", *map(str, sizes)), "memory": mem}


def report(res: dict[str, Any]) -> str:
    lines = ["DRA: decision time against the device-plugin decision, and view memory",
             f"{'nodes':>7} {'pod':<17} {'warm us':>8} {'ratio':>6} {'after slice us':>15} "
             f"{'first ms':>9}"]
    for n, shapes in res["timings"].items():
        for s, v in shapes.items():
            lines.append(f"{int(n):>7} {s:<17} {v['warm_us']:>8.1f} {v['warm_ratio']:>6.2f} "
                         f"{v['after_slice_change_us']:>15.0f} {v['first_ms']:>9.1f}")
    lines.append(f"{'nodes':>7} {'RSS nodes only':>15} {'RSS with slices':>16} {'ratio':>6}")
    for n, m in res["memory"].items():
        lines.append(f"{int(n):>7} {m['nodes only']['rss_mib']:>11.1f} MiB "
                     f"{m['with slices']['rss_mib']:>12.1f} MiB {m['rss_ratio']:>6.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "memory":
        print(json.dumps(memory(int(sys.argv[2]), sys.argv[3] == "slices")))
    elif len(sys.argv) > 1 and sys.argv[1] == "time":
        print(json.dumps(timings([int(x) for x in sys.argv[2:]])))
    else:
        print(report(measure(tuple(int(x) for x in sys.argv[1:]) or SIZES)))
