"""Workload objects and the pods they will create.

A Deployment whose pods gpupool would deny fails only later, as FailedCreate events on a
ReplicaSet nobody watches. Checking the pod template when the workload is created or updated
(and under ``kubectl apply --dry-run=server``) moves that failure to the user's terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.engine.core import objects, patch
from webhook.engine.core.patch import Op

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
    return bool(template_of(new, kind) == template_of(old, kind))


def template_pod(obj: Mapping[str, Any], kind: str, namespace: str | None
                 ) -> dict[str, Any] | None:
    """The Pod the workload's controller would create from its template (None: no template)."""
    cur = template_of(obj, kind)
    if not isinstance(cur, Mapping) or not isinstance(cur.get("spec"), Mapping):
        return None
    meta = dict(objects.meta_of(cur))
    owner = objects.meta_of(obj)
    meta.pop("name", None)
    meta["generateName"] = f"{owner.get('name') or owner.get('generateName') or kind.lower()}-"
    if namespace or owner.get("namespace"):
        meta["namespace"] = namespace or owner.get("namespace")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": dict(cur["spec"])}


def template_patch(obj: Mapping[str, Any], kind: str, pod_ops: Sequence[Op]) -> list[Op]:
    """A pod's patch placed at the workload's pod template, so it applies to the workload."""
    if not pod_ops:
        return []
    path = TEMPLATE_PATHS[(KINDS[kind], kind)]
    prefix = patch.pointer(*path)
    ops = [{**op, "path": prefix + op["path"]} for op in pod_ops]
    template = template_of(obj, kind)
    # The engine adds "/metadata" to a pod that has none; a template built without metadata
    # (template_pod gives its pod one) needs the same.
    if isinstance(template, Mapping) and not isinstance(template.get("metadata"), Mapping) \
            and not any(op["path"] == prefix + "/metadata" for op in ops):
        ops.insert(0, patch.add(prefix + "/metadata", {}))
    return ops
