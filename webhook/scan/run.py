"""The scan as a long-running service: the cluster watched into a view and a scanner, one
leader writing reports and Events, probes and metrics over HTTP.

Nothing here decides: the scanner asks the engine. A write the API server refuses is tried
again on the next round (reports) or the next change (Events); a missing CRD turns one
output off, says so on ``/readyz?verbose`` and in a gauge, and leaves the others working.
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from webhook.engine import ClusterView, Policy
from webhook.scan import schedulers
from webhook.scan.events import EventWriter, node_event, pod_event
from webhook.scan.leader import Elector
from webhook.scan.metrics import ScanCollector, exposition, registry_for
from webhook.scan.reports import REPORT_APIS, ReportWriter
from webhook.scan.scanner import Dirty, Scanner

log = logging.getLogger(__name__)


@dataclass
class ScanConfig:
    namespace: str  # where the leader-election Lease lives
    identity: str = field(default_factory=socket.gethostname)
    lease_name: str = "gpupool-scan"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry: float = 2.0
    report_api: str = "wgpolicyk8s"  # or "openreports", or "none"
    events: bool = True
    scheduler_leases: list[schedulers.LeaseRef] = field(default_factory=list)
    scheduler_pods: list[schedulers.PodsRef] = field(default_factory=list)
    lease_poll: float = 5.0
    interval: float = 1.0
    #: every pod decided again this often (seconds), as a controller's resync period
    resync: float = 600.0
    listen: tuple[str, int] = ("0.0.0.0", 8080)


class ScanService:
    def __init__(self, api_client: Any, policy: Policy, cfg: ScanConfig) -> None:
        from kubernetes import client

        from webhook.cluster.watch import ClusterInformer, Reflector

        self.cfg = cfg
        self.view = ClusterView(policy.pool_label)
        self.scanner = Scanner(self.view, policy)
        self.informer = ClusterInformer(self.view, api_client, keep_held=True)
        # Finished pods are never at risk: the API server leaves them out (and a pod that
        # finishes leaves the watch as DELETED).
        self.pods = Reflector(
            "pods", functools.partial(client.CoreV1Api(api_client).list_pod_for_all_namespaces,
                                      field_selector="status.phase!=Succeeded,"
                                                     "status.phase!=Failed"),
            lambda items: self.scanner.pods_listed(p for p in items if p is not None),
            self.scanner.pod_event, api_client,
            convert=lambda o: o if self.scanner.keeps(o) else None)
        self._leases = client.CoordinationV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self.reports = (ReportWriter(api_client, REPORT_APIS[cfg.report_api])
                        if cfg.report_api != "none" else None)
        self.events = EventWriter(api_client, cfg.identity) if cfg.events else None
        self._took_lead = threading.Event()
        self.elector = Elector(api_client, cfg.namespace, cfg.lease_name, cfg.identity,
                               lease_duration=cfg.lease_duration,
                               renew_deadline=cfg.renew_deadline, retry=cfg.retry,
                               on_change=self._leadership)
        self.collector = ScanCollector(self.scanner, self.elector.leading.is_set,
                                       self._outputs)
        self._stop = threading.Event()
        self._http: ThreadingHTTPServer | None = None
        self._loop: threading.Thread | None = None
        self.last_round = 0.0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.informer.start()
        self.pods.start()
        self.elector.start()
        self._http = _serve(self, self.cfg.listen)
        self._loop = threading.Thread(target=self._run, name="scan-loop", daemon=True)
        self._loop.start()

    def stop(self) -> None:
        self._stop.set()
        self.elector.stop()
        self.informer.stop()
        self.pods.stop()
        if self._http is not None:
            self._http.shutdown()

    def wait(self) -> None:
        self._stop.wait()

    # ------------------------------------------------------------ the loop

    def _leadership(self, leading: bool) -> None:
        if leading:
            self._took_lead.set()

    def _run(self) -> None:
        next_poll = 0.0
        next_resync = time.monotonic() + self.cfg.resync
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if (self.cfg.scheduler_leases or self.cfg.scheduler_pods) \
                        and now >= next_poll:
                    next_poll = now + self.cfg.lease_poll
                    self.scanner.set_schedulers(schedulers.poll(
                        self.cfg.scheduler_leases,
                        lambda name, ns: self._leases.read_namespaced_lease(
                            name, ns, _preload_content=False),
                        pod_refs=self.cfg.scheduler_pods,
                        list_pods=lambda ns, sel: self._core.list_namespaced_pod(
                            ns, label_selector=sel, _preload_content=False)))
                self.scanner.sync()
                if now >= next_resync:
                    next_resync = now + self.cfg.resync
                    self.scanner.resync()
                self.round()
                self.last_round = time.monotonic()
            except Exception:  # a bug must not stop the scan; it is logged with its cause
                log.exception("scan round failed")
            self._stop.wait(self.cfg.interval)

    def round(self) -> None:
        """Write what changed, if this replica leads."""
        dirty = self.scanner.take_dirty()
        if not self.elector.leading.is_set() or not self.scanner.scanned:
            return
        if self._took_lead.is_set():
            self._took_lead.clear()
            if self.reports is not None:
                self.reports.learn()
            dirty = self.scanner.everything_dirty()
        self.write(dirty)

    def write(self, dirty: Dirty) -> None:
        if self.reports is not None and (dirty.namespaces or self.reports.pending):
            self.reports.write(dirty.namespaces, self.scanner.in_namespace)
        if self.events is None:
            return
        for uid in sorted(dirty.pods):
            a = self.scanner.answer_of(uid)
            if a is None or not a.answer.outcome.at_risk:
                self.events.forget(uid)
                continue
            self.events.send(uid, a.answer.key, pod_event(a, self.cfg.identity))
        hazards = self.scanner.hazards()
        for node in sorted(dirty.nodes):
            for h in hazards.get(node, ()):
                self.events.send(f"node/{node}/{h.message}", h.key,
                                 node_event(h, "", self.cfg.identity))

    # ------------------------------------------------------------ probes

    def _outputs(self) -> dict[str, tuple[bool | None, int, int]]:
        out: dict[str, tuple[bool | None, int, int]] = {}
        if self.reports is not None:
            r = self.reports
            out[r.api.plural] = (r.available, r.writes, r.failures)
        if self.events is not None:
            e = self.events
            out["events"] = (None if not e.writes and not e.failures else not e.problem,
                             e.writes, e.failures)
        return out

    def checks(self) -> list[tuple[str, bool, str, bool]]:
        """(name, ok, detail, required): required checks decide readiness."""
        synced = self.view.synced and self.pods.synced.is_set()
        role = "leads" if self.elector.leading.is_set() else "stands by"
        out = [("cluster-view", self.view.synced, f"{len(self.view)} nodes", True),
               ("pods", self.pods.synced.is_set(),
                f"{len(self.scanner.answers())} GPU pods", True),
               ("first-scan", self.scanner.scanned or not synced, "", True),
               ("leader", True, f"this replica {role} (Lease {self.cfg.namespace}/"
                                f"{self.cfg.lease_name} held by "
                                f"{self.elector.holder or 'nobody'})", False)]
        if self.reports is not None:
            out.append(("reports", self.reports.available is not False,
                        self.reports.problem or self.reports.api.kind, False))
        if self.events is not None:
            out.append(("events", not self.events.problem, self.events.problem, False))
        return out


def _serve(svc: ScanService, listen: tuple[str, int]) -> ThreadingHTTPServer:
    registry = registry_for(svc.collector)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path == "/metrics":
                self._send(200, exposition(registry), "text/plain; version=0.0.4")
            elif path in ("/healthz", "/livez"):
                alive, why = svc.informer.alive()
                loop_ok = svc._loop is not None and svc._loop.is_alive()
                ok = alive and loop_ok and svc.pods.running()
                self._send(200 if ok else 500, (b"ok" if ok else
                                                f"{why or 'scan loop stopped'}".encode()))
            elif path == "/readyz":
                checks = svc.checks()
                ready = all(ok for _, ok, _, required in checks if required)
                if "verbose" in query:
                    body = "\n".join(f"[{'+' if ok else '-'}]{name} "
                                     f"{'ok' if ok else 'failed'}{': ' + d if d else ''}"
                                     for name, ok, d, _ in checks)
                    body += f"\nreadyz check {'passed' if ready else 'failed'}"
                else:
                    body = "ok" if ready else "not ready"
                self._send(200 if ready else 503, body.encode())
            elif path == "/answers":
                doc = {"pods": [a.answer.to_json() | {"since": a.since, "cause": a.cause}
                                for a in svc.scanner.answers()],
                       "nodes": [h.to_json() for hs in svc.scanner.hazards().values()
                                 for h in hs]}
                self._send(200, json.dumps(doc).encode(), "application/json")
            else:
                self._send(404, b"not found")

        def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(listen, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="scan-http", daemon=True).start()
    return server
