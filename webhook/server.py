"""The HTTP shell around the engine: Flask routes for /mutate, /validate and the probes.

Everything here is plumbing. ``Handler`` turns a body into a (status, JSON) pair so it can be
tested without a server; the Flask app only moves bytes. An exception in the engine never
becomes a bare 500: the reply is still a well-formed review with the request's uid that lets
the pod through with a warning, because a crash in gpupool must not block pod creation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from flask import Flask, Response, request

from . import admission, engine, workloads
from .admission import BadRequest, Request
from .cluster import ClusterView
from .decision import Decision, Reason, allow
from .policysource import PolicySource

log = logging.getLogger(__name__)

Observer = Callable[[str, Request, Decision, float], None]
ReadyCheck = Callable[[], tuple[bool, str]]


@dataclass
class Handler:
    policies: PolicySource
    view: ClusterView
    observers: list[Observer] = field(default_factory=list)
    ready_checks: list[ReadyCheck] = field(default_factory=list)

    def handle(self, endpoint: str, body: bytes, content_type: str | None
               ) -> tuple[int, dict[str, Any]]:
        start = time.perf_counter()
        try:
            req = admission.parse_review(body, content_type)
            decision = self._decide(endpoint, req)
        except BadRequest as err:
            log.warning("bad admission request on /%s: %s", endpoint, err.message)
            return err.status, admission.error_response(err)
        except Exception:  # the engine failed: log it, never block the pod
            log.exception("internal error deciding on /%s", endpoint)
            decision = allow(Reason.INTERNAL_ERROR, message="internal error; object not checked")
            decision.warn("gpupool: internal error, object admitted without checks")
        elapsed = time.perf_counter() - start
        for observe in self.observers:
            try:
                observe(endpoint, req, decision, elapsed)
            except Exception:
                log.exception("observer failed")
        return 200, admission.response(req, decision, mutating=endpoint == "mutate",
                                       audit_annotations=audit_annotations(decision))

    def _decide(self, endpoint: str, req: Request) -> Decision:
        policy = self.policies.policy
        if req.operation not in ("CREATE", "UPDATE"):
            return allow(Reason.NOT_A_POD, message=f"{req.operation} is not checked")
        if req.kind == "Pod" and req.group == "" and not req.sub_resource:
            if req.operation != "CREATE":
                return allow(Reason.NOT_A_POD, message="pod updates cannot change routing")
            assert req.object is not None
            decide = engine.mutate if endpoint == "mutate" else engine.validate
            return decide(req.object, req.namespace, self.view, policy)
        if endpoint == "validate" and workloads.is_workload(req.group, req.kind):
            assert req.object is not None
            if req.operation == "UPDATE" and req.old_object is not None and \
                    workloads.same_template(req.object, req.old_object, req.kind):
                # Labels, replicas, status...: blocking them would not fix any pod.
                return allow(Reason.NOT_GPU_POD, message="pod template unchanged")
            return workloads.validate_workload(req.object, req.kind, req.namespace,
                                               self.view, policy)
        raise BadRequest(400, f"/{endpoint} handles Pods"
                         f"{' and workload objects' if endpoint == 'validate' else ''}, "
                         f"not {req.group + '/' if req.group else ''}{req.kind}"
                         f"{'/' + req.sub_resource if req.sub_resource else ''}",
                         uid=req.uid, api_version=req.api_version)

    def ready(self) -> tuple[bool, list[str]]:
        ok = True
        details = []
        for check in self.ready_checks:
            good, detail = check()
            ok = ok and good
            details.append(f"[{'+' if good else '-'}]{detail}")
        return ok, details


def audit_annotations(decision: Decision) -> dict[str, str]:
    """Keys the API server's audit log shows as <webhook name>/<key>."""
    if not decision.gpu and decision.allowed:
        return {}
    out = {"decision": "allowed" if decision.allowed else "denied", "reason": decision.reason}
    if decision.pool:
        out["pool"] = decision.pool
    return out


def _drain(length: int, limit: int = 4 * admission.MAX_BODY_BYTES) -> None:
    """Read and drop an oversized body so the client sees our 413, not a reset mid-upload;
    past ``limit`` the connection is simply closed."""
    if length > limit:
        return
    while length > 0:
        chunk = request.stream.read(min(length, 1 << 16))
        if not chunk:
            return
        length -= len(chunk)


def create_app(handler: Handler, extra_routes: Callable[[Flask], None] | None = None) -> Flask:
    app = Flask("gpupool")

    def review(endpoint: str) -> Response:
        length = request.content_length
        if length is not None and length > admission.MAX_BODY_BYTES:
            err = BadRequest(413, f"body is {length} bytes, over the "
                                  f"{admission.MAX_BODY_BYTES}-byte cap")
            status, payload = err.status, admission.error_response(err)
            _drain(length)
        else:
            body = request.stream.read(admission.MAX_BODY_BYTES + 1)
            status, payload = handler.handle(endpoint, body, request.content_type)
        return Response(orjson.dumps(payload), status=status, mimetype="application/json")

    app.add_url_rule("/mutate", "mutate", lambda: review("mutate"), methods=["POST"])
    app.add_url_rule("/validate", "validate", lambda: review("validate"), methods=["POST"])

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        ok, details = handler.ready()
        text = "\n".join([*details, "readyz check " + ("passed" if ok else "failed")]) + "\n"
        return Response(text, status=200 if ok else 503, mimetype="text/plain")

    if extra_routes is not None:
        extra_routes(app)
    return app
