"""Synthetic clusters shaped like real GPU nodes, for the benchmarks.

Every node carries the 158 labels GPU feature discovery and NFD put on a real H100 node
(tests/fixtures/upstream/nodes/, from NVIDIA's GPU Operator docs) with its own hostname,
8 GPUs, and a CDI inventory and steering labels as gpupool's agent publishes them. One node in
five is in HAMi's pool with HAMi's register annotation; a few of those lack per-UUID specs.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from webhook.api.delivery import steering_labels
from webhook.api.inventory import Inventory, RuntimeInfo

ROOT = Path(__file__).resolve().parent.parent
LABELS = json.loads((ROOT / "tests/fixtures/upstream/nodes/"
                     "gpu-operator-docs-mig-single-node-labels.json").read_text())
GPUS = 8
RUNTIME = RuntimeInfo(mode="cdi", default_kind="management.nvidia.com/gpu", containerd_cdi=True,
                      spec_dirs=("/etc/cdi", "/var/run/cdi"),
                      handlers={"nvidia": "cdi", "nvidia-cdi": "cdi", "nvidia-legacy": "legacy"},
                      default_handler="nvidia")


def uuids_of(i: int) -> list[str]:
    return [f"GPU-{uuid.UUID(int=(i << 16) + g)}" for g in range(GPUS)]


def node(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    hami = i % 5 == 0
    uuids = uuids_of(i)
    labels = {**LABELS, "kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true",
              "topology.kubernetes.io/zone": f"zone-{i % 3}"}
    kinds = {"management.nvidia.com/gpu": frozenset(["all"])}
    annotations = {}
    if hami:
        labels["gpupool.io/pool"] = "hami"
        if i % 50 != 0:  # a few HAMi nodes miss their per-UUID specs
            kinds["management.nvidia.com/gpu"] = frozenset(["all", *uuids])
        annotations["hami.io/node-nvidia-register"] = json.dumps([
            {"id": u, "count": 10, "devmem": 81559, "devcore": 100, "type": "NVIDIA-H100",
             "numa": g // 4, "health": True, "index": g, "mode": "hami-core"}
            for g, u in enumerate(uuids)])
    else:
        kinds["k8s.device-plugin.nvidia.com/gpu"] = frozenset(uuids)
    inv = Inventory(kinds=kinds, runtime=RUNTIME, observed_at="2026-12-01T09:00:00Z",
                    gpus=tuple(uuids))
    # What the node's agent learns from the device plugin's pod there (docs/cdi-inventory.md):
    # HAMi's chart's plugin in its default envvar, the GPU Operator's in its CDI strategies.
    # (Added to the document, not through Inventory: the reference engine's has no such
    # field, and its reader skips fields it does not know.)
    doc = json.loads(inv.dumps())
    doc["plugins"] = [{
        "pod": f"kube-system/hami-device-plugin-{i:05d}", "container": "device-plugin",
        "deployedBy": "HAMi's chart", "strategies": ["envvar"],
        "source": "variable DEVICE_LIST_STRATEGY"} if hami else {
        "pod": f"gpu-operator/nvidia-device-plugin-daemonset-{i:05d}",
        "container": "nvidia-device-plugin", "deployedBy": "the GPU Operator",
        "strategies": ["cdi-annotations", "cdi-cri"],
        "source": "variable DEVICE_LIST_STRATEGY"}]
    annotations["gpupool.io/cdi-inventory"] = json.dumps(doc, separators=(",", ":"),
                                                         sort_keys=True)
    labels.update(steering_labels(inv, inv.gpus))  # as the node's agent publishes them
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "status": {"capacity": {"nvidia.com/gpu": str(GPUS * (10 if hami else 1)),
                                    "cpu": "192", "memory": "2Ti"}}}


def nodes(n: int) -> list[dict[str, Any]]:
    return [node(i) for i in range(n)]


def write(path: Path, n: int) -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes(n)}))
    return path


def _as_admitted(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server sends it to webhooks: defaults applied, the service-account
    token volume projected, default tolerations, and kubectl's managedFields."""
    spec = pod["spec"]
    for c in spec["containers"]:
        c.update({"imagePullPolicy": "IfNotPresent", "terminationMessagePath":
                  "/dev/termination-log", "terminationMessagePolicy": "File",
                  "env": [*c.get("env", ()), {"name": "MODEL", "value": "llama-3-8b"},
                          {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                              "apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                  "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]})
    spec.update({"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                 "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
                 "serviceAccount": "default", "securityContext": {}, "priority": 0,
                 "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
                 "tolerations": [
                     {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                      "effect": "NoExecute", "tolerationSeconds": 300},
                     {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                      "effect": "NoExecute", "tolerationSeconds": 300}],
                 "volumes": [{"name": "kube-api-access-x7k2p", "projected": {
                     "defaultMode": 420, "sources": [
                         {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                         {"configMap": {"name": "kube-root-ca.crt", "items": [
                             {"key": "ca.crt", "path": "ca.crt"}]}},
                         {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                             "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]})
    pod["metadata"]["managedFields"] = [{
        "manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
        "time": "2026-12-01T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {'k:{"name":"c"}': {
                ".": {}, "f:env": {".": {}, 'k:{"name":"MODEL"}': {".": {}, "f:name": {},
                                                                    "f:value": {}}},
                "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                "f:resources": {".": {}, "f:limits": {".": {}, "f:nvidia.com/gpu": {},
                                                      "f:nvidia.com/gpumem": {}}},
                "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                "f:schedulerName": {}, "f:securityContext": {},
                "f:terminationGracePeriodSeconds": {}}}}]
    return pod


def pods() -> dict[str, dict[str, Any]]:
    """The pod shapes of the benchmark, HAMi-pool pods (the CDI check runs), as the API
    server sends them to webhooks: three that use none of the checks added since the
    reference (``bench/reference``), and one that uses them (its own NVIDIA_VISIBLE_DEVICES,
    an NRI annotation), which issue 36 holds to a looser limit."""
    def pod(env: list[dict[str, str]] | None = None,
            annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "c", "image": "cuda", "resources": {"limits": {
            "nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000}}}
        if env:
            container["env"] = env
        meta: dict[str, Any] = {"name": "bench", "namespace": "ml", "labels": {"app": "bench"}}
        if annotations:
            meta["annotations"] = annotations
        return _as_admitted({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "default-scheduler", "containers": [container], **spec}})
    return {
        "unpinned": pod(),
        "nodeSelector": pod(nodeSelector={"topology.kubernetes.io/zone": "zone-1",
                                          "kubernetes.io/hostname": "gpu-node-00010"}),
        "affinity": pod(affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                       "values": [f"gpu-node-{i:05d}" for i in
                                                  (5, 10, 15, 20)]}]}]}}}),
        "newFeatures": pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                           annotations={"nvidia.cdi.k8s.io/pod":
                                        "management.nvidia.com/gpu=all"}),
    }
