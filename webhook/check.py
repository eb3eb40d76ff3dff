"""``gpupool check``: the admission decisions for manifests on disk, with no cluster.

Runs the same engine as the server (mutate, then validate the patched object) on every Pod
and on the pod template of every workload, against an optional ``kubectl get nodes -o yaml``
snapshot, so "what would gpupool do with this?" has the same answer offline and online.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import engine, workloads
from .cluster import ClusterView
from .policy import Policy
from .snapshot import load_yaml_objects


@dataclass
class CheckResult:
    kind: str
    namespace: str
    name: str
    source: str
    decision: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name,
                "source": self.source, **self.decision}


@dataclass
class CheckReport:
    results: list[CheckResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if all(r.decision["allowed"] for r in self.results) else 1


def _rebase(ops: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [{**op, "path": prefix + op["path"]} for op in ops]


def check_object(obj: Mapping[str, Any], view: ClusterView | None, policy: Policy,
                 source: str) -> CheckResult | None:
    kind = obj.get("kind")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    namespace = meta.get("namespace") or "default"
    name = meta.get("name") or meta.get("generateName") or ""
    group = workloads.group_of(obj.get("apiVersion"))
    if kind == "Pod" and group == "":
        d = engine.review(obj, namespace, view, policy)
        return CheckResult("Pod", namespace, name, source, d.to_json())
    if isinstance(kind, str) and workloads.is_workload(group, kind):
        pod = workloads.template_pod(obj, kind, namespace)
        if pod is None:
            return None
        d = engine.review(pod, namespace, view, policy)
        out = d.to_json()
        path = workloads.TEMPLATE_PATHS[(group, kind)]
        prefix = "".join("/" + t for t in path)
        ops = _rebase(d.patch, prefix)
        template = workloads.template_of(obj, kind)
        if ops and isinstance(template, Mapping) and not isinstance(template.get("metadata"),
                                                                   Mapping):
            ops.insert(0, {"op": "add", "path": prefix + "/metadata", "value": {}})
        out["patch"] = ops
        return CheckResult(kind, namespace, name, source, out)
    return None


def run_check(files: list[str], view: ClusterView | None, policy: Policy) -> CheckReport:
    report = CheckReport()
    for path in files:
        for obj in load_yaml_objects(path):
            result = check_object(obj, view, policy, path)
            if result is None:
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
                report.skipped.append(f"{path}: skipped {obj.get('kind', '(no kind)')} "
                                      f"{meta.get('name', '')}: not a Pod or a workload "
                                      "with a pod template".replace("  ", " "))
            else:
                report.results.append(result)
    return report


def format_text(report: CheckReport) -> str:
    lines = []
    for r in report.results:
        d = r.decision
        verdict = "ALLOWED" if d["allowed"] else "DENIED "
        head = f"{verdict} {r.kind} {r.namespace}/{r.name}"
        if d["gpu"]:
            head += f"  pool={d['pool'] or '-'} scheduler={d['schedulerName'] or '-'}"
            head += f"  patch={len(d['patch'])} op(s)"
        else:
            head += "  (no GPU resources: untouched)"
        lines.append(head)
        if not d["allowed"]:
            lines.append(f"        {d['reason']}: {d['message']}")
        for w in d["warnings"]:
            lines.append(f"        warning: {w}")
    lines.extend(report.skipped)
    denied = sum(1 for r in report.results if not r.decision["allowed"])
    lines.append(f"{len(report.results)} checked, {denied} denied, "
                 f"{len(report.skipped)} skipped")
    return "\n".join(lines)


def format_json(report: CheckReport) -> str:
    return json.dumps([r.to_json() for r in report.results], indent=2)
