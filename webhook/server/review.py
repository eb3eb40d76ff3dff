"""AdmissionReview in, AdmissionReview out: the wire contract, nothing about policy.

Follows controller-runtime's split: parsing turns bytes into a typed Request or a
BadRequest that carries an HTTP status and (when it got that far) the uid; response helpers
build replies that always echo the request's apiVersion and uid, carry a patch only when
mutating, and keep warnings within what the API server accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from webhook.engine import (
    MESSAGE_LIMIT,
    Decision,
    Subject,
    clean_warning,
    clip,
    meta_of,
    name_of,
)

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
#: The API server caps request bodies at 3 MiB; a review carries object and oldObject, so
#: twice that plus envelope fits under this cap with room to spare.
MAX_BODY_BYTES = 7 * 1024 * 1024
MAX_WARNINGS = 10


class BadRequest(Exception):
    """A request we cannot answer with a decision; ``status`` is the HTTP code to send."""

    def __init__(self, status: int, message: str, uid: str | None = None,
                 api_version: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.uid = uid
        self.api_version = api_version


@dataclass(slots=True)
class Request:
    """A review's request as the wire gives it: what the engine decides on is ``subject``
    (kind, group, subresource, operation, namespace, objects, sender), made as it is
    parsed; the rest is the envelope's."""

    api_version: str
    uid: str
    resource: str
    name: str | None
    dry_run: bool
    subject: Subject
    groups: list[str] = field(default_factory=list)

    @property
    def obj_name(self) -> str:
        obj = self.subject.object
        named = name_of(obj) if isinstance(obj, Mapping) else ""
        return named or self.name or ""

    @property
    def owner(self) -> str:
        obj = self.subject.object
        meta = meta_of(obj) if isinstance(obj, Mapping) else {}
        refs = meta.get("ownerReferences")
        if isinstance(refs, list):
            for ref in refs:
                if isinstance(ref, dict) and ref.get("controller"):
                    return f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if refs and isinstance(refs[0], dict):
                return f"{refs[0].get('kind', '')}/{refs[0].get('name', '')}"
        return ""


def parse_review(body: bytes, content_type: str | None) -> Request:
    """Decode and check an AdmissionReview; raise BadRequest with a clear message."""
    if content_type != "application/json":  # (what the API server sends: no parsing)
        media = (content_type or "").split(";")[0].strip().lower()
        if media != "application/json":
            raise BadRequest(415, f"Content-Type must be application/json, got "
                                  f"{media or 'none'!r}")
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(413, f"body is {len(body)} bytes, over the {MAX_BODY_BYTES}-byte cap")
    try:
        # orjson: several times faster than the stdlib on every review. It validates UTF-8,
        # refuses nesting past 1,024 levels, NaN and Infinity (as the API server's decoder
        # does), and resolves duplicate keys last-wins, again like the API server.
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        msg = str(exc)
        if "UTF-8" in msg:
            raise BadRequest(400, "body is not UTF-8") from exc
        if "depth limit" in msg:
            raise BadRequest(400, "body nests too deeply") from exc
        raise BadRequest(400, f"body is not JSON: {msg}") from exc
    if not isinstance(review, dict):
        raise BadRequest(400, "body must be a JSON object (an AdmissionReview)")
    api_version = review.get("apiVersion")
    if api_version not in API_VERSIONS:
        what = "apiVersion is missing" if api_version is None else \
            f"apiVersion {api_version!r} is not one of {', '.join(API_VERSIONS)}"
        raise BadRequest(400, f"{what}: send an AdmissionReview of "
                              f"{' or '.join(API_VERSIONS)}")
    if review.get("kind") != "AdmissionReview":
        raise BadRequest(400, f"kind {review.get('kind')!r} is not AdmissionReview",
                         api_version=api_version)
    req = review.get("request")
    if not isinstance(req, dict):
        raise BadRequest(400, "request is missing or not an object", api_version=api_version)
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadRequest(400, "request.uid is missing or not a string", api_version=api_version)

    kind = req.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        raise _bad("request.kind must be an object with a string 'kind'", uid, api_version)
    resource = req.get("resource")
    if not isinstance(resource, dict):
        resource = {}
    operation = req.get("operation")
    if not isinstance(operation, str):
        raise _bad("request.operation must be a string", uid, api_version)
    obj = req.get("object")
    old = req.get("oldObject")
    if obj is not None and not isinstance(obj, dict):
        raise _bad("request.object must be an object", uid, api_version)
    if old is not None and not isinstance(old, dict):
        raise _bad("request.oldObject must be an object", uid, api_version)
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise _bad(f"request.object is required for {operation}", uid, api_version)
    namespace, name, sub_resource = req.get("namespace"), req.get("name"), req.get("subResource")
    if not (isinstance(namespace, _STR_OR_NONE) and isinstance(name, _STR_OR_NONE)
            and isinstance(sub_resource, _STR_OR_NONE)):
        key = next(k for k, v in (("namespace", namespace), ("name", name),
                                  ("subResource", sub_resource))
                   if v is not None and not isinstance(v, str))
        raise _bad(f"request.{key} must be a string", uid, api_version)
    dry_run = req.get("dryRun", False)
    if dry_run is None:
        dry_run = False
    if not isinstance(dry_run, bool):
        raise _bad("request.dryRun must be a boolean", uid, api_version)
    user = req.get("userInfo")
    if not isinstance(user, dict):
        user = {}
    groups = user.get("groups")
    kind_name, group = kind["kind"], str(kind.get("group", ""))
    namespace, sub_resource = namespace or None, sub_resource or ""
    username = str(user.get("username", ""))
    # (positional, in the fields' order: keywords cost more, on every review)
    return Request(
        api_version, uid, str(resource.get("resource", "")), name, dry_run,
        Subject(kind_name, group, operation, obj, old, namespace, sub_resource, username),
        [str(g) for g in groups] if isinstance(groups, list) else [])


#: (a tuple: ``str | None`` written in the test builds a union object on every review)
_STR_OR_NONE = (str, type(None))


def _bad(msg: str, uid: str, api_version: str) -> BadRequest:
    return BadRequest(400, msg, uid=uid, api_version=api_version)


def _review(api_version: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def response(req: Request, decision: Decision, *, mutating: bool,
             audit_annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    resp: dict[str, Any] = {"uid": req.uid, "allowed": decision.allowed}
    if not decision.allowed:
        resp["status"] = {"code": 403, "reason": "Forbidden",
                          "message": clip(f"gpupool: {decision.reason}: "
                                                  f"{decision.message}", MESSAGE_LIMIT)}
    elif mutating and decision.patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = decision.encoded_patch()
    if decision.warnings:  # (most reviews have none)
        warnings = [w for w in map(clean_warning, decision.warnings) if w][:MAX_WARNINGS]
        if warnings:
            resp["warnings"] = warnings
    if audit_annotations:
        resp["auditAnnotations"] = dict(audit_annotations)
    return {"apiVersion": req.api_version, "kind": "AdmissionReview", "response": resp}


def error_response(err: BadRequest) -> dict[str, Any]:
    """Body for a BadRequest: a review with the uid when we got that far, else a Status."""
    status = {"code": err.status, "message": f"gpupool: {err.message}"}
    if err.uid is not None:
        return _review(err.api_version or API_VERSIONS[0],
                       {"uid": err.uid, "allowed": False, "status": status})
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", **status}
