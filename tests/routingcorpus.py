"""A seeded corpus of pods for routing: every kind of evidence routing reads (the pod's pool
label, nodeSelector and required affinity on the pool label, the namespace's label, resources
and annotations only one pool serves, ``schedulerName``), alone and in conflict, with the
things that make a mutation read the cluster (containers without a GPU, RuntimeClasses,
privileged containers, their own ``NVIDIA_VISIBLE_DEVICES``, MIG resources, HAMi's GPU
picking, NRI annotations, ``nodeName``, ``matchFields``, DRA claims) and shapes the patch must
handle (no affinity, only preferred terms, several required terms, empty maps).

Used where a real API server judges the MutatingAdmissionPolicy gpupool compiles against the
webhook (``tests/e2e/test_native_routing.py``): the pods are valid as the API server takes
them, and their namespaces are ``NAMESPACES``.
"""

from __future__ import annotations

import json
import random
from typing import Any

#: namespace -> its labels
NAMESPACES: dict[str, dict[str, str]] = {
    "rc-plain": {},
    "rc-hami": {"gpupool.io/pool": "hami"},
    "rc-operator": {"gpupool.io/pool": "operator"},
    "rc-nopool": {"gpupool.io/pool": "nowhere"},
}

_RESOURCES: list[dict[str, str] | None] = [
    {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "0"},
    {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"},
    {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"},
    {"nvidia.com/gpumem-percentage": "50"}, {"nvidia.com/mig-1g.10gb": "1"},
    {"cpu": "100m"}, None,
]
_LABELS = [None, {}, {"gpupool.io/pool": "hami"}, {"gpupool.io/pool": "operator"},
           {"gpupool.io/pool": "bogus"}, {"hami.io/webhook": "ignore"}, {"team": "a"}]
_ANNOTATIONS = [None, {}, {"nvidia.com/use-gputype": "T4"},
                {"hami.io/gpu-scheduler-policy": "binpack"},
                {"nvidia.cdi.k8s.io/container.c0": "management.nvidia.com/gpu=all"},
                {"note": "x"}]
_SCHEDULERS = [None, "default-scheduler", "hami-scheduler", "volcano"]
_SELECTORS = [None, {"gpupool.io/pool": "hami"}, {"gpupool.io/pool": "operator"},
              {"gpupool.io/pool": "other"}, {"zone": "a"}]


def _expr(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": values} if values is not None else {})}


_TERMS: list[list[dict[str, Any]]] = [
    [{"matchExpressions": [_expr("zone", "In", ["a"])]}],
    [{"matchExpressions": [_expr("zone", "In", ["a"])]},
     {"matchExpressions": [_expr("zone", "In", ["b"])]}],
    [{"matchExpressions": [_expr("gpupool.io/pool", "In", ["hami"])]}],
    [{"matchExpressions": [_expr("gpupool.io/pool", "NotIn", ["hami"])]}],
    [{"matchExpressions": [_expr("gpupool.io/pool", "DoesNotExist")]}],
    [{"matchExpressions": [_expr("gpupool.io/pool", "Exists")]}],
    [{"matchExpressions": [_expr("gpupool.io/pool", "In", ["hami", "x"])]},
     {"matchExpressions": [_expr("zone", "In", ["b"])]}],
    [{"matchFields": [_expr("metadata.name", "In", ["node-a"])]}],
]


def _affinity(rng: random.Random) -> dict[str, Any] | None:
    kind = rng.choice(["none", "none", "required", "required", "preferred", "pod", "both"])
    if kind == "none":
        return None
    if kind == "pod":
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]}}
    preferred = [{"weight": 10, "preference": {
        "matchExpressions": [_expr("gpupool.io/pool", "In", ["hami"])]}}]
    node: dict[str, Any] = {}
    if kind in ("preferred", "both"):
        node["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    if kind in ("required", "both"):
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": rng.choice(_TERMS)}
    return {"nodeAffinity": node}


def _container(rng: random.Random, name: str, resources: dict[str, str] | None,
               plain: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if resources is not None:
        c["resources"] = {rng.choice(["limits", "limits", "requests"]): dict(resources)}
        if "requests" in c["resources"] and any(k.startswith("nvidia.com/") for k in resources):
            c["resources"] = {"limits": dict(resources)}  # extended: limits must be set
    if not plain and rng.random() < 0.06:
        c["securityContext"] = {"privileged": True}
    if not plain and rng.random() < 0.06:
        c["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    return c


def pod(rng: random.Random, i: int) -> tuple[str, dict[str, Any]]:
    """One pod: its namespace, and the pod. Nearly half are plain (one GPU container,
    nothing that reads the cluster), as most GPU pods are; the rest draw every field."""
    if rng.random() < 0.45:
        return _plain(rng, i)
    gpu = _RESOURCES[:7]
    n = rng.choice([1, 1, 1, 2, 3])
    containers = [_container(rng, f"c{k}", rng.choice(gpu) if k == 0 else
                             rng.choice(_RESOURCES)) for k in range(n)]
    spec: dict[str, Any] = {"containers": containers}
    if rng.random() < 0.1:
        spec["initContainers"] = [_container(rng, "init", rng.choice(_RESOURCES))]
    if (s := rng.choice(_SCHEDULERS)) is not None:
        spec["schedulerName"] = s
    if (sel := rng.choice(_SELECTORS)) is not None:
        spec["nodeSelector"] = dict(sel)
    if (aff := _affinity(rng)) is not None:
        spec["affinity"] = aff
    if rng.random() < 0.05:
        spec["runtimeClassName"] = rng.choice(["nvidia", "nvidia-legacy"])
    if rng.random() < 0.04:
        spec["nodeName"] = rng.choice(["hami-1", "op-1"])
    if rng.random() < 0.03:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared-gpu"}]
        containers[0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    meta: dict[str, Any] = {"name": f"rc-{i:04d}"}
    if (labels := rng.choice(_LABELS)) is not None:
        meta["labels"] = dict(labels)
    if (ann := rng.choice(_ANNOTATIONS)) is not None:
        meta["annotations"] = dict(ann)
    namespace = rng.choice(sorted(NAMESPACES))
    meta["namespace"] = namespace
    return namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _plain(rng: random.Random, i: int) -> tuple[str, dict[str, Any]]:
    spec: dict[str, Any] = {"containers": [
        _container(rng, "c0", rng.choice(_RESOURCES[:6]), plain=True)]}
    if (s := rng.choice(_SCHEDULERS[:3])) is not None:
        spec["schedulerName"] = s
    if (sel := rng.choice([None, None, *_SELECTORS])) is not None:
        spec["nodeSelector"] = dict(sel)
    if (aff := _affinity(rng)) is not None and "matchFields" not in json.dumps(aff):
        spec["affinity"] = aff
    meta: dict[str, Any] = {"name": f"rc-{i:04d}"}
    if (labels := rng.choice([None, {}, *_LABELS[2:4], _LABELS[6]])) is not None:
        meta["labels"] = dict(labels)
    if (ann := rng.choice([None, {}, _ANNOTATIONS[3], _ANNOTATIONS[5]])) is not None:
        meta["annotations"] = dict(ann)
    namespace = rng.choice(sorted(NAMESPACES))
    meta["namespace"] = namespace
    return namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pods(seed: int, count: int) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    return [pod(rng, i) for i in range(count)]
