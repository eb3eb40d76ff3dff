"""What tests and benchmarks both use: where things are, how to wait for a condition, the
upstream fixtures, and admission reviews and GPU pods as the API server would send them.

Upstream inputs live in tests/fixtures/upstream (see its SOURCES.tsv for each file's
project, path, commit and licence). The harness imports nothing from tests/ or bench/.
"""

from __future__ import annotations

import copy
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
DATA = ROOT / "tests" / "fixtures" / "data"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
def wait_until(probe: Callable[[], object], what: str, timeout: float = 30,
               every: float = 0.1) -> None:
    """Until ``probe()`` is true; fails naming ``what`` after ``timeout`` seconds. The one
    way a test waits: for a condition, never for a fixed time."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def load_docs(path: Path | str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def upstream_pods() -> list[tuple[str, dict[str, Any]]]:
    """Every Pod document in the upstream pod fixtures, with a readable id."""
    out = []
    for path in sorted((UPSTREAM / "pods").rglob("*.yaml")):
        for doc in load_docs(path):
            if doc.get("kind") == "Pod":
                out.append((f"{path.relative_to(UPSTREAM / 'pods')}:{doc['metadata']['name']}",
                            doc))
    return out


def review(obj: dict[str, Any] | None, *, api_version: str = "admission.k8s.io/v1",
           operation: str = "CREATE", namespace: str = "default", dry_run: bool = False,
           kind: str = "Pod", group: str = "", uid: str | None = None) -> dict[str, Any]:
    version = "v1"
    resource = {"Pod": "pods", "Deployment": "deployments", "StatefulSet": "statefulsets",
                "DaemonSet": "daemonsets", "ReplicaSet": "replicasets", "Job": "jobs",
                "CronJob": "cronjobs"}.get(kind, kind.lower() + "s")
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "operation": operation,
            "namespace": namespace,
            "name": (obj or {}).get("metadata", {}).get("name", ""),
            "object": copy.deepcopy(obj),
            "oldObject": None,
            "dryRun": dry_run,
            "userInfo": {"username": "alice", "groups": ["devs", "system:authenticated"]},
        },
    }


def body(obj: dict[str, Any] | None, **kw: Any) -> bytes:
    return json.dumps(review(obj, **kw)).encode()


def gpu_pod(name: str = "p", limits: dict[str, Any] | None = None,
            **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "image": "cuda",
                                    "resources": {"limits": limits or {"nvidia.com/gpu": 1}}}]}}
    pod["spec"].update(spec)
    return pod


def only_voids(patch: list[dict[str, Any]]) -> bool:
    """Whether a patch does nothing but set ``NVIDIA_VISIBLE_DEVICES=void`` in containers
    (gpupool's answer to containers without a GPU grant: docs/security.md)."""
    void = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    return all(op["op"] in ("add", "replace") and "/env" in op["path"]
               and op["value"] in (void, [void]) for op in patch)


def hold(node: dict[str, Any], uid: str, ids: tuple[str, ...] | list[str], *,
         container: str = "main", resource: str = "nvidia.com/gpu",
         visible: str | None = None, cdi: tuple[str, ...] | list[str] = (),
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The node as its agent publishes it once the pod ``uid`` holds ``ids`` there
    (``gpupool.io/held-devices``, docs/cdi-inventory.md): the allocate answer the kubelet
    cached for the container, as the device plugin gave it. Changes ``node`` in place."""
    ann = node.setdefault("metadata", {}).setdefault("annotations", {})
    doc = json.loads(ann.get("gpupool.io/held-devices") or
                     '{"schemaVersion": 1, "observedAt": "2026-12-06T08:00:00Z", "pods": {}}')
    entry: dict[str, Any] = {"container": container, "resource": resource, "ids": list(ids)}
    if visible is not None:
        entry["visibleDevices"] = visible
    if cdi:
        entry["cdiDevices"] = list(cdi)
    if annotations:
        entry["annotations"] = annotations
    doc["pods"].setdefault(uid, []).append(entry)
    ann["gpupool.io/held-devices"] = json.dumps(doc, separators=(",", ":"))
    return node
