"""``gpupool check``: the admission decisions for manifests on disk, with no cluster.

Goes through the same engine entry as the server (``admit.review``: mutate, then validate
the patched object) for every Pod and workload, against an optional ``kubectl get nodes -o yaml``
snapshot, so "what would gpupool do with this?" has the same answer offline and online.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from webhook import engine
from webhook.engine import ClusterView, Policy, claims_of, clip, meta_of, name_of
from webhook.files.snapshot import SnapshotError, load_yaml_objects, load_yaml_text


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
    #: why the CDI check could not run at all ("": it ran against the nodes given)
    cdi_unchecked: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if all(r.decision["allowed"] for r in self.results) else 1


def check_object(obj: Mapping[str, Any], view: ClusterView | None, policy: Policy,
                 source: str) -> CheckResult | None:
    """The decision the API server would reach for ``obj`` with gpupool's webhooks
    registered (None: a kind they are not registered for)."""
    subject = engine.Subject.from_manifest(obj)
    if subject.kind == "Pod":
        _valid_pod(obj, source)
    if not any(engine.handles(stage, subject) for stage in engine.Stage):
        return None
    if subject.is_workload and engine.template_pod(obj, subject.kind, None) is None:
        return None
    d = engine.review(subject, view, policy).final
    return CheckResult(subject.kind, subject.namespace or "default", name_of(obj),
                       source, d.to_json())


def _pod_problem(obj: Mapping[str, Any]) -> str | None:
    """Why the API server would refuse this Pod before any webhook sees it (None: it would
    not, for these reasons)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return f"spec is {spec!r}, not an object"
    containers = spec.get("containers")
    if containers is None:
        return "spec.containers is missing"
    if not isinstance(containers, list) or not containers \
            or not all(isinstance(c, dict) for c in containers):
        return f"spec.containers is {containers!r}, not a list of containers"
    return None


def _valid_pod(obj: Mapping[str, Any], source: str) -> None:
    """A Pod the API server refuses is decided here as no pod at all, never as a pod without
    GPUs that would be allowed."""
    problem = _pod_problem(obj)
    if problem:
        raise SnapshotError(f"{source}: Pod {name_of(obj) or '(no name)'}: {problem}, so it is "
                            "not a valid Pod and the API server would refuse it; fix the "
                            "manifest")


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def expand_paths(paths: list[str], recursive: bool = False) -> list[str]:
    """``-f`` as kubectl reads it: a file, ``-`` for standard input, or a directory's
    .yaml/.yml/.json files (its subdirectories too with ``-R``), in name order."""
    out: list[str] = []
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            out.append(path)
            continue
        found: list[str] = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            found.extend(os.path.join(root, n) for n in sorted(names)
                         if n.endswith(MANIFEST_SUFFIXES))
            if not recursive:
                break
        if not found:
            raise SnapshotError(f"{path}: no .yaml, .yml or .json file in it"
                                + ("" if recursive else " (-R reads its subdirectories)"))
        out.extend(found)
    return out


def load_manifests(files: list[str], stdin: TextIO | None = None,
                   default_namespace: str | None = None
                   ) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each file's objects. A file that holds no Kubernetes object at all (nothing with a
    kind: a values file, a typo'd path to the wrong YAML) is bad input, not "0 checked": a CI
    gate over it must fail, not pass silently. Objects without a namespace get
    ``default_namespace`` (``-n``), as ``kubectl apply -n`` would create them."""
    out = []
    for path in files:
        if path == "-":
            objs = load_yaml_text((stdin or sys.stdin).read(), "<stdin>")
        else:
            objs = load_yaml_objects(path)
        if not any(isinstance(o.get("kind"), str) and o["kind"] for o in objs):
            raise SnapshotError(f"{path}: no Kubernetes object in it (no document has a kind)")
        if default_namespace:
            for obj in objs:
                meta = obj.get("metadata")
                if not isinstance(meta, dict):
                    continue
                if not meta.get("namespace"):
                    meta["namespace"] = default_namespace
                elif meta["namespace"] != default_namespace:  # kubectl refuses this too
                    raise SnapshotError(
                        f"{path}: {obj.get('kind')} {clip(str(meta.get('name')))} is "
                        f"in namespace {clip(str(meta['namespace']))}, not "
                        f"{default_namespace} (-n); drop one of them")
        out.append((path, objs))
    return out


_CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def _claims_from_manifests(manifests: list[tuple[str, list[dict[str, Any]]]],
                           view: ClusterView) -> None:
    """Claims and templates applied with the pods exist when the pods are reviewed (kubectl
    applies a file in order; checking does not hold users to that order)."""
    for kind in _CLAIM_KINDS:
        items = []
        for _, objs in manifests:
            for obj in objs:
                if obj.get("kind") == kind:
                    meta = dict(meta_of(obj))
                    meta.setdefault("namespace", "default")
                    items.append({**obj, "metadata": meta})
        for (ns, name), spec in claims_of(kind, items).items():
            view.set_claim(kind, ns, name, spec)


def run_check(manifests: list[tuple[str, list[dict[str, Any]]]], view: ClusterView | None,
              policy: Policy) -> CheckReport:
    report = CheckReport()
    if view is not None:
        _claims_from_manifests(manifests, view)
    for path, objs in manifests:
        for obj in objs:
            result = check_object(obj, view, policy, path)
            if result is None and obj.get("kind") in _CLAIM_KINDS:
                continue  # read into the view above, for the pods that use them
            if result is None:
                what = " ".join(str(w) for w in (obj.get("kind") or "(no kind)",
                                                 meta_of(obj).get("name")) if w)
                report.skipped.append(f"{path}: skipped {what}: not a Pod or a workload with "
                                      "a pod template")
            else:
                report.results.append(result)
    return report


def format_text(report: CheckReport, wide: bool = False) -> str:
    lines = []
    if report.cdi_unchecked:
        lines.append(f"note: CDI devices not checked: {report.cdi_unchecked}")
    # (an object named in more than one file is told apart by its file)
    seen = Counter((r.kind, r.namespace, r.name) for r in report.results)
    for r in report.results:
        d = r.decision
        verdict = "ALLOWED" if d["allowed"] else "DENIED "
        head = f"{verdict} {r.kind} {r.namespace}/{r.name}"
        if seen[(r.kind, r.namespace, r.name)] > 1 and not wide:
            head += f" ({r.source})"
        if d["gpu"] and (d["pool"] or d["allowed"]):
            head += f"  pool={d['pool'] or '-'} scheduler={d['schedulerName'] or '-'}"
            head += f"  patch={len(d['patch'])} op(s)"
        elif not d["gpu"] and d["allowed"]:
            head += "  (no GPU resources: untouched)"
        if wide:
            head += f"  reason={d['reason']}  source={r.source}"
        lines.append(head)
        if not d["allowed"]:
            lines.append(f"        {d['reason']}: {d['message']}")
        for w in d["warnings"]:
            lines.append(f"        warning: {w}")
        if wide:
            for op in d["patch"]:
                lines.append(f"        patch: {json.dumps(op, sort_keys=True)}")
            for n in d["nodes"]:
                lines.append(f"        node {n['node']}: "
                             + (f"lacks {', '.join(n['missing'])}" if n["missing"]
                                else n.get("note", "")))
    lines.extend(report.skipped)
    denied = sum(1 for r in report.results if not r.decision["allowed"])
    lines.append(f"{len(report.results)} checked, {denied} denied, "
                 f"{len(report.skipped)} skipped")
    return "\n".join(lines)


def to_document(report: CheckReport) -> dict[str, Any]:
    """The report as ``-o json`` and ``-o yaml`` print it."""
    return {"kind": "CheckReport",
            "cdiCheck": {"ran": not report.cdi_unchecked, "reason": report.cdi_unchecked},
            "results": [r.to_json() for r in report.results],
            "skipped": report.skipped}
