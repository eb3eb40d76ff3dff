"""Pods at risk, offline: the running pods of a cluster re-checked against a cluster state
(the one there now for ``doctor``, a planned one for ``check --running``), through the same
engine entry the scan and admission use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.cli.table import table
from webhook.engine import ClusterView, PodAnswer, Policy, recheck


def pods_of(docs: Iterable[Any]) -> list[dict[str, Any]]:
    """Pods from ``kubectl get pods -A -o yaml`` output (a List, or Pods one by one)."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        if doc.get("kind") == "Pod":
            out.append(dict(doc))
        elif isinstance(doc.get("items"), list):
            out.extend(pods_of({**i, "kind": i.get("kind") or "Pod"} if isinstance(i, Mapping)
                               and str(doc.get("kind", "")).startswith("Pod") else i
                               for i in doc["items"]))
    return out


def answers(pods: Iterable[Mapping[str, Any]], view: ClusterView, policy: Policy
            ) -> list[PodAnswer]:
    """Every GPU pod's answer, at-risk ones first, then by namespace and name."""
    found = [a for p in pods if (a := recheck(p, view, policy)) is not None]
    return sorted(found, key=lambda a: (not a.outcome.at_risk, a.namespace, a.name))


def by_node(found: Iterable[PodAnswer]) -> dict[str, list[PodAnswer]]:
    out: dict[str, list[PodAnswer]] = {}
    for a in found:
        if a.outcome.at_risk:
            out.setdefault(a.node or "", []).append(a)
    return out


def format_answers(found: list[PodAnswer], wide: bool = False) -> str:
    risky = [a for a in found if a.outcome.at_risk]
    lines = table(["POD", "NODE", "POOL", "OUTCOME", "REASON"],
                  [[f"{a.namespace}/{a.name}", a.node or "(pending)", a.pool or "-",
                    a.outcome.value, a.reason] for a in (found if wide else risky)])
    if not risky and not wide:
        lines = [lines[0], "(no GPU pod at risk)"]
    for a in risky:
        lines.append(f"{a.namespace}/{a.name}: {a.message}")
    lines.append("")
    lines.append(f"{len(found)} GPU pod(s): {len(risky)} at risk")
    return "\n".join(lines)
