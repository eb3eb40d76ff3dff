"""The HTTP shell around the engine: /mutate and /validate, and Flask routes for the probes.

Everything here is plumbing: one ``Handler`` per path (its admission stage) turns a body into
a (status, JSON) pair so it can be tested without a server; the Flask app only moves bytes.
An exception in the engine never becomes a bare 500: the reply is still a well-formed review
with the request's uid that lets the pod through with a warning, because a crash in gpupool
must not block pod creation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson
from flask import Flask, Response, request

from webhook import engine
from webhook.engine import ClusterView, Decision, Reason, Stage, allow, clip
from webhook.server import review
from webhook.server.policysource import PolicySource
from webhook.server.review import BadRequest, Request

log = logging.getLogger(__name__)

#: Called after every decision (audit, metrics): stage, request, decision, seconds taken.
DecisionHook = Callable[[Stage, Request, Decision, float], None]


@dataclass(frozen=True)
class Probe:
    """One named check behind /readyz or /livez, reported as Kubernetes components report
    theirs (``[+]name ok``, ``[-]name failed: why``).

    A failing check that is not ``critical`` is shown as failing but keeps the server ready:
    an audit sink that cannot write, or a rejected policy update (the last good policy still
    serves), must not take every replica out of the Service and so block pod creation."""

    name: str
    run: Callable[[], tuple[bool, str]]
    critical: bool = True


def _ping() -> tuple[bool, str]:
    return True, ""


@dataclass
class Handler:
    """Answers one admission path, as controller-runtime registers one Handler per path."""

    stage: Stage
    policies: PolicySource
    view: ClusterView
    hooks: list[DecisionHook] = field(default_factory=list)

    def handle(self, body: bytes, content_type: str | None) -> tuple[int, dict[str, Any]]:
        start = time.perf_counter()
        try:
            req = review.parse_review(body, content_type)
        except BadRequest as err:
            log.warning("bad admission request on /%s: %s", self.stage.value, err.message)
            return err.status, review.error_response(err)
        except Exception:  # a bug in reading the review: no uid to answer with, but no 500
            log.exception("internal error reading a review on /%s", self.stage.value)
            unread = BadRequest(400, "the review could not be read (internal error, logged)")
            return unread.status, review.error_response(unread)
        try:
            decision = engine.decide(self.stage, req.subject, self.view,
                                     self.policies.policy)
        except Exception:  # the engine failed: log it, never block the pod
            log.exception("internal error deciding on /%s", self.stage.value)
            decision = allow(Reason.INTERNAL_ERROR, message="internal error; object not checked",
                             warnings=("gpupool: internal error, object admitted without "
                                       "checks",))
        if decision.reason == Reason.KIND_NOT_HANDLED:
            log.warning("/%s got a review for %s: %s", self.stage.value, req.subject.kind,
                        decision.message)
        elapsed = time.perf_counter() - start
        for hook in self.hooks:
            try:
                hook(self.stage, req, decision, elapsed)
            except Exception:
                log.exception("decision hook failed")
        return 200, review.response(req, decision, mutating=self.stage is Stage.MUTATE,
                                    audit_annotations=audit_annotations(decision))


@dataclass
class Webhook:
    """The server's handlers, one per stage, and the readiness checks /readyz reports."""

    policies: PolicySource
    view: ClusterView
    hooks: list[DecisionHook] = field(default_factory=list)
    ready_checks: list[Probe] = field(default_factory=lambda: [Probe("ping", _ping)])
    live_checks: list[Probe] = field(default_factory=lambda: [Probe("ping", _ping)])

    def __post_init__(self) -> None:
        # The handlers share the hook list: a hook added later reaches both paths.
        self.handlers = {stage: Handler(stage, self.policies, self.view, self.hooks)
                         for stage in engine.Stage}

    def handle(self, stage: Stage, body: bytes, content_type: str | None
               ) -> tuple[int, dict[str, Any]]:
        return self.handlers[stage].handle(body, content_type)


@dataclass(frozen=True)
class ProbeResult:
    probe: Probe
    good: bool
    detail: str = ""
    excluded: bool = False

    @property
    def line(self) -> str:
        name = self.probe.name
        if self.excluded:
            return f"[+]{name} excluded: ok"
        if self.good:
            return f"[+]{name} ok" + (f": {self.detail}" if self.detail else "")
        return (f"[-]{name} failed" + (f": {self.detail}" if self.detail else "")
                + ("" if self.probe.critical else " (not critical: still ready)"))


def run_probes(probes: list[Probe], exclude: frozenset[str] = frozenset()
               ) -> list[ProbeResult]:
    """One result per check; a check that raises counts as failed."""
    results = []
    for probe in probes:
        if probe.name in exclude:
            results.append(ProbeResult(probe, True, excluded=True))
            continue
        try:
            good, detail = probe.run()
        except Exception as exc:  # a broken check is a failed check, never a 500
            log.exception("%s check failed", probe.name)
            good, detail = False, f"check raised {type(exc).__name__}"
        results.append(ProbeResult(probe, good, detail))
    return results


def passed(results: list[ProbeResult]) -> bool:
    """Only a failing critical check fails the endpoint."""
    return all(r.good or not r.probe.critical for r in results)


def audit_annotations(decision: Decision) -> dict[str, str]:
    """Keys the API server's audit log shows as <webhook name>/<key>."""
    if not decision.gpu and decision.allowed:
        return {}
    out = {"decision": "allowed" if decision.allowed else "denied", "reason": decision.reason}
    if decision.pool:
        out["pool"] = decision.pool
    return out


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_STATUS = {code: f"{code} {HTTPStatus(code).phrase}" for code in (200, 400, 405, 408, 413, 415)}


class ReviewPaths:
    """The admission paths, answered straight from WSGI; every other path goes to Flask.

    The API server calls these on every pod create, and under its load a profile of the
    workers showed Flask's request and response objects, URL matching and context locals
    costing more than the decision itself. These paths need none of it: a body in, a review
    out (bench/README.md has what it gained)."""

    def __init__(self, handlers: dict[Stage, Handler], fallback: WSGIApp) -> None:
        self.paths = {f"/{stage.value}": handler for stage, handler in handlers.items()}
        self.fallback = fallback

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        handler = self.paths.get(environ.get("PATH_INFO", ""))
        if handler is None:
            return self.fallback(environ, start_response)
        headers = [("Content-Type", "application/json")]
        if environ.get("REQUEST_METHOD") != "POST":
            status, body = 405, b"405 Method Not Allowed: admission reviews are POSTed\n"
            headers = [("Content-Type", "text/plain; charset=utf-8"), ("Allow", "POST")]
        else:
            status, payload, close = serve_review(handler, environ)
            body = orjson.dumps(payload)
            if close:
                headers.append(("Connection", "close"))
        headers.append(("Content-Length", str(len(body))))
        start_response(_STATUS.get(status) or f"{status} {HTTPStatus(status).phrase}",
                       headers)
        return [body]


def serve_review(handler: Handler, environ: dict[str, Any]
                 ) -> tuple[int, dict[str, Any], bool]:
    """Read one review's body and answer it: (status, payload, close the connection)."""
    stream = environ["wsgi.input"]
    try:
        length: int | None = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        length = None
    if length is not None and length > review.MAX_BODY_BYTES:
        err = BadRequest(413, f"body is {length} bytes, over the "
                              f"{review.MAX_BODY_BYTES}-byte cap")
        _drain(stream, length)
        return err.status, review.error_response(err), False
    try:
        body = stream.read(review.MAX_BODY_BYTES + 1)
    except OSError as exc:  # the client stalled mid-body (deadline) or went away
        log.info("/%s: request body not received: %s", handler.stage.value, exc)
        err = BadRequest(408, "request body not received in time")
        return err.status, review.error_response(err), True
    status, payload = handler.handle(body, environ.get("CONTENT_TYPE"))
    return status, payload, False


def _drain(stream: Any, length: int, limit: int = 4 * review.MAX_BODY_BYTES) -> None:
    """Read and drop an oversized body so the client sees our 413, not a reset mid-upload;
    past ``limit`` the connection is simply closed."""
    if length > limit:
        return
    while length > 0:
        chunk = stream.read(min(length, 1 << 16))
        if not chunk:
            return
        length -= len(chunk)


def create_app(webhook: Webhook, extra_routes: Callable[[Flask], None] | None = None) -> Flask:
    app = Flask("gpupool")
    # (the admission paths wrap Flask's wsgi_app, as Flask's docs advise for middleware)
    app.wsgi_app = ReviewPaths(  # type: ignore[method-assign]  # Flask types it a method
        webhook.handlers, app.wsgi_app)

    def probe_route(path: str, probes: Callable[[], list[Probe]]) -> None:
        """``/<path>`` and ``/<path>/<check>`` as kube-apiserver serves them: ``ok`` alone on
        success, every check on failure or with ``?verbose``, ``?exclude=<check>``."""

        def overall() -> Response:
            results = run_probes(probes(), frozenset(request.args.getlist("exclude")))
            ok = passed(results)
            if ok and "verbose" not in request.args:
                return Response("ok\n", mimetype="text/plain")
            text = "\n".join([*(r.line for r in results),
                               f"{path} check " + ("passed" if ok else "failed")])
            return Response(text + "\n", status=200 if ok else 503, mimetype="text/plain")

        def single(name: str) -> Response:
            chosen = [p for p in probes() if p.name == name]
            if not chosen:
                return Response(f"no {path} check named {clip(name)}\n", status=404,
                                mimetype="text/plain")
            (result,) = run_probes(chosen[:1])
            return Response(("ok" if result.good else result.line) + "\n",
                            status=200 if result.good else 503, mimetype="text/plain")

        app.add_url_rule(f"/{path}", path, overall, methods=["GET"])
        app.add_url_rule(f"/{path}/<name>", f"{path}-single", single, methods=["GET"])

    probe_route("readyz", lambda: webhook.ready_checks)
    probe_route("livez", lambda: webhook.live_checks)
    # /healthz: the older name for liveness, kept for probes written against it.
    probe_route("healthz", lambda: webhook.live_checks)

    if extra_routes is not None:
        extra_routes(app)
    return app
