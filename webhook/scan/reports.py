"""Policy reports: one per namespace with GPU pods, one result per pod, in the format policy
tools read.

``wgpolicyk8s.io/v1alpha2`` PolicyReport is what Kyverno writes by default and what Policy
Reporter, its UI and Kyverno's own CLI read today; ``openreports.io/v1alpha1`` Report is its
successor (the OpenReports project; Kyverno 1.15+ writes it with ``--openreportsEnabled``),
with the same results. ``--report-api`` picks one; the CRDs come from their projects
(Kyverno's chart, OpenReports' chart), not from gpupool's.

A report changes only when an answer in it changes: each result's timestamp is the time its
answer last changed, so a steady cluster costs no write. Without the CRD the writer says so
(``/readyz``, a gauge, one log line) and keeps trying; Events and metrics go on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.scan.scanner import Answer

log = logging.getLogger(__name__)

REPORT_NAME = "gpupool-gpu-pods"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpupool"}
POLICY = "gpupool-gpu-pods"
SOURCE = "gpupool"
#: How much each outcome matters to the people reading the report.
SEVERITY = {"FailsOnRestart": "high", "NeverSchedulable": "high", "SchedulerNotRunning": "high",
            "Misrouted": "medium"}


@dataclass(frozen=True)
class ReportAPI:
    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}"


REPORT_APIS = {
    "wgpolicyk8s": ReportAPI("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports"),
    "openreports": ReportAPI("openreports.io", "v1alpha1", "Report", "reports"),
}


def result_of(a: Answer) -> dict[str, Any]:
    ans = a.answer
    props = {"outcome": ans.outcome.value, "reason": ans.reason, "pool": ans.pool or "",
             "scheduler": ans.scheduler or "", "node": ans.node or "", "changedBy": a.cause}
    if ans.missing:
        props["missing"] = ", ".join(ans.missing)
    out: dict[str, Any] = {
        "policy": POLICY, "rule": ans.outcome.value, "source": SOURCE, "category": "GPU",
        "result": "fail" if ans.outcome.at_risk else "warn" if ans.outcome.doubtful
        else "pass",
        "message": ans.message or f"pod {ans.namespace}/{ans.name}: fine",
        "properties": {k: v for k, v in props.items() if v},
        "resources": [{"apiVersion": "v1", "kind": "Pod", "name": ans.name,
                       "namespace": ans.namespace, "uid": ans.uid}],
        "scored": True,
        "timestamp": {"seconds": int(a.since), "nanos": 0},
    }
    if ans.outcome.at_risk or ans.outcome.doubtful:
        out["severity"] = SEVERITY.get(ans.outcome.value, "low")
    return out


#: Results one report holds at most: etcd refuses an object over 1.5 MiB, and a result is
#: about 700 bytes. Failures and warnings come first; results beyond the limit (passes,
#: unless the failures alone exceed it) are counted in the summary and left out, and the
#: annotation says how many.
MAX_RESULTS = 1500
OMITTED = "gpupool.io/results-omitted"


def report_of(api: ReportAPI, namespace: str, answers: Iterable[Answer]) -> dict[str, Any]:
    order = {"fail": 0, "warn": 1, "pass": 2}
    results = sorted((result_of(a) for a in answers),
                     key=lambda r: (order[r["result"]], r["resources"][0]["name"]))
    summary = {"pass": sum(r["result"] == "pass" for r in results),
               "fail": sum(r["result"] == "fail" for r in results),
               "warn": sum(r["result"] == "warn" for r in results), "error": 0, "skip": 0}
    meta: dict[str, Any] = {"name": REPORT_NAME, "namespace": namespace, "labels": MANAGED_BY}
    if len(results) > MAX_RESULTS:
        meta["annotations"] = {OMITTED: str(len(results) - MAX_RESULTS)}
        results = results[:MAX_RESULTS]
    return {"apiVersion": api.api_version, "kind": api.kind, "metadata": meta,
            "summary": summary, "results": results}


def _stamp_key(result: Mapping[str, Any]) -> tuple[Any, ...]:
    res = (result.get("resources") or [{}])[0]
    return res.get("uid"), result.get("rule"), result.get("message")


def _content(doc: Mapping[str, Any]) -> tuple[Any, Any]:
    return doc.get("summary"), doc.get("results")


class ReportWriter:
    """Writes the reports of changed namespaces (the leader only). Remembers what it last
    wrote, so an unchanged report is never written again."""

    def __init__(self, api_client: Any, api: ReportAPI) -> None:
        from kubernetes import client

        self.custom: Any = client.CustomObjectsApi(api_client)
        self.api = api
        self.written: dict[str, tuple[Any, Any]] = {}  # namespace -> content as written
        self.available: bool | None = None  # None: not tried yet
        self.problem = ""
        self.writes = 0
        self.failures = 0
        self.pending: set[str] = set()  # namespaces still to write (after a failure)
        self.stamps: dict[tuple[Any, ...], Any] = {}

    def learn(self) -> None:
        """Read the reports already there (a new leader starts from them, not from nothing)."""
        from kubernetes.client.exceptions import ApiException

        try:
            found = self.custom.list_cluster_custom_object(
                self.api.group, self.api.version, self.api.plural,
                label_selector="app.kubernetes.io/managed-by=gpupool")
        except ApiException as exc:
            self._unavailable(exc)
            return
        mine = [i for i in found.get("items", ())
                if i.get("metadata", {}).get("name") == REPORT_NAME]
        for doc in mine:
            self._keep_stamps(doc)
        self.written = {i["metadata"]["namespace"]: _content(i) for i in mine}
        self._available()

    def _keep_stamps(self, doc: Mapping[str, Any]) -> None:
        """Remember when each answer was first reported, so that another replica reporting
        the same answer writes the same report (a new leader rewrites nothing)."""
        for r in doc.get("results") or ():
            self.stamps[_stamp_key(r)] = r.get("timestamp")

    def _stamped(self, doc: dict[str, Any]) -> dict[str, Any]:
        for r in doc["results"]:
            r["timestamp"] = self.stamps.get(_stamp_key(r)) or r["timestamp"]
        return doc

    def write(self, namespaces: Iterable[str], answers_in: Any) -> None:
        """``answers_in(namespace)``: the answers to report there now."""
        from kubernetes.client.exceptions import ApiException

        todo = sorted(set(namespaces) | self.pending)
        self.pending = set()
        for i, ns in enumerate(todo):
            answers = answers_in(ns)
            try:
                if not answers:
                    self._delete(ns)
                    continue
                doc = self._stamped(report_of(self.api, ns, answers))
                if self.written.get(ns) == _content(doc):
                    continue
                self._put(ns, doc)
                self._keep_stamps(doc)
                self.written[ns] = _content(doc)
                self.writes += 1
                self._available()
            except ApiException as exc:
                self.failures += 1
                self.pending.update(todo[i:])  # written on the next round
                self._unavailable(exc)
                return
            except Exception as exc:  # the API server unreachable: next round
                self.failures += 1
                self.pending.update(todo[i:])
                self.problem = f"writing {self.api.kind} in {ns}: {exc}"
                log.warning("%s", self.problem)
                return

    def _put(self, ns: str, doc: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        a = self.api
        try:
            current = self.custom.get_namespaced_custom_object(a.group, a.version, ns,
                                                                a.plural, REPORT_NAME)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.custom.create_namespaced_custom_object(a.group, a.version, ns, a.plural, doc)
            return
        doc = {**doc, "metadata": {**doc["metadata"],
                                   "resourceVersion": current["metadata"]["resourceVersion"]}}
        self.custom.replace_namespaced_custom_object(a.group, a.version, ns, a.plural,
                                                     REPORT_NAME, doc)

    def _delete(self, ns: str) -> None:
        from kubernetes.client.exceptions import ApiException

        if ns not in self.written:
            return
        a = self.api
        try:
            self.custom.delete_namespaced_custom_object(a.group, a.version, ns, a.plural,
                                                        REPORT_NAME)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.written.pop(ns, None)
        self.writes += 1

    def _available(self) -> None:
        if self.available is not True:
            self.available, self.problem = True, ""

    def _unavailable(self, exc: Any) -> None:
        if exc.status == 404:
            problem = (f"the {self.api.kind} CRD ({self.api.crd}) is not installed: install "
                       f"it (Kyverno's or Policy Reporter's chart installs "
                       f"{REPORT_APIS['wgpolicyk8s'].crd}; OpenReports' chart "
                       f"{REPORT_APIS['openreports'].crd}) or set --report-api to the one "
                       "you have; Events and metrics go on meanwhile")
        elif exc.status == 403:
            problem = (f"forbidden to write {self.api.plural}.{self.api.group}: grant the "
                       "scan's ClusterRole create/update/delete on it")
        else:
            problem = f"writing {self.api.kind}: {exc.status} {exc.reason}"
        if problem != self.problem:
            log.warning("%s", problem)
        self.available, self.problem = False, problem
