"""Workload objects and the pods they will create.

A Deployment whose pods gpupool would deny fails only later, as FailedCreate events on a
ReplicaSet nobody watches. Checking the pod template when the workload is created or updated
(and under ``kubectl apply --dry-run=server``) moves that failure to the user's terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import engine, objects
from .cluster import ClusterView
from .decision import Decision, Reason, allow, deny
from .policy import Policy

#: (group, kind) -> path from the object to its pod template.
TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}
KINDS = {kind: group for group, kind in TEMPLATE_PATHS}


def is_workload(group: str, kind: str) -> bool:
    return (group, kind) in TEMPLATE_PATHS


def group_of(api_version: Any) -> str:
    return api_version.split("/")[0] if isinstance(api_version, str) and "/" in api_version else ""


def template_of(obj: Mapping[str, Any], kind: str) -> Any:
    cur: Any = obj
    for token in TEMPLATE_PATHS[(KINDS[kind], kind)]:
        cur = cur.get(token) if isinstance(cur, Mapping) else None
    return cur


def same_template(new: Mapping[str, Any], old: Mapping[str, Any], kind: str) -> bool:
    return template_of(new, kind) == template_of(old, kind)


def template_pod(obj: Mapping[str, Any], kind: str, namespace: str | None
                 ) -> dict[str, Any] | None:
    """The Pod the workload's controller would create from its template (None: no template)."""
    cur = template_of(obj, kind)
    if not isinstance(cur, Mapping) or not isinstance(cur.get("spec"), Mapping):
        return None
    meta = dict(cur.get("metadata") or {}) if isinstance(cur.get("metadata"), Mapping) else {}
    owner = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    meta.pop("name", None)
    meta["generateName"] = f"{owner.get('name') or owner.get('generateName') or kind.lower()}-"
    if namespace or owner.get("namespace"):
        meta["namespace"] = namespace or owner.get("namespace")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": dict(cur["spec"])}



def validate_workload(obj: Mapping[str, Any], kind: str, namespace: str | None,
                      view: ClusterView | None, policy: Policy) -> Decision:
    """Decide on the workload as its pods would be decided; deny or warn per policy."""
    pod = template_pod(obj, kind, namespace)
    if pod is None or policy.workload_templates == "off":
        return allow(Reason.NOT_GPU_POD)
    inner = engine.review(pod, namespace, view, policy)
    if inner.allowed:
        out = allow(inner.reason, gpu=inner.gpu, pool=inner.pool,
                    scheduler_name=inner.scheduler_name, nodes=inner.nodes,
                    message=f"{objects.describe(obj, namespace, kind)}: pods would be admitted")
        for w in inner.warnings:
            out.warn(w)
        return out
    message = f"{objects.describe(obj, namespace, kind)}: its pods would be denied: {inner.message}"
    if policy.workload_templates == "warn":
        out = allow(inner.reason, gpu=True, pool=inner.pool, message=message, nodes=inner.nodes)
        out.warn(f"gpupool: pods of this {kind} would be denied ({inner.reason}); "
                 "see gpupool check")
        return out
    return deny(inner.reason, message, gpu=True, pool=inner.pool, nodes=inner.nodes)
