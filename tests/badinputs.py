"""The bad-input corpus: malformed and hostile inputs, each with the answer gpupool owes it.

docs/reliability.md lists the same table; tests/integration/test_bad_inputs.py sends every
HTTP entry to a real server over HTTPS, a good request after each, and checks the
docs table against this list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.kit import gpu_pod, review


@dataclass(frozen=True)
class Case:
    id: str
    what: str
    body: bytes
    status: int
    message: str  # a substring of the reply's message; for 200, of the whole reply
    content_type: str | None = "application/json"
    endpoint: str = "mutate"
    method: str = "POST"


def _r(**kw) -> dict:
    return review(gpu_pod(), uid="bad-1", **kw)


def _with(mutate) -> bytes:
    r = _r()
    mutate(r)
    return json.dumps(r).encode()


GOOD = json.dumps(_r()).encode()


def _deep(n: int) -> bytes:
    return b'{"a": ' * n + b"1" + b"}" * n


CASES = [
    Case("truncated-json", "review cut in half", GOOD[: len(GOOD) // 2], 400, "body is not JSON"),
    Case("empty-body", "no body at all", b"", 400, "body is not JSON"),
    Case("not-json", "plain text", b"hello", 400, "body is not JSON"),
    Case("json-array", "a JSON array", b"[]", 400, "must be a JSON object"),
    Case("json-string", "a JSON string", b'"review"', 400, "must be a JSON object"),
    Case("json-null", "JSON null", b"null", 400, "must be a JSON object"),
    Case("wrong-content-type", "text/plain", GOOD, 415, "Content-Type must be application/json",
         content_type="text/plain"),
    Case("no-content-type", "no Content-Type header", GOOD, 415, "got 'none'",
         content_type=None),
    Case("unknown-api-version", "admission.k8s.io/v2", _with(
        lambda r: r.update(apiVersion="admission.k8s.io/v2")), 400,
         "apiVersion 'admission.k8s.io/v2' is not one of"),
    Case("wrong-review-kind", "kind: Pod at the top", _with(lambda r: r.update(kind="Pod")), 400,
         "kind 'Pod' is not AdmissionReview"),
    Case("missing-request", "no request", _with(lambda r: r.pop("request")), 400,
         "request is missing"),
    Case("request-is-list", "request: []", _with(lambda r: r.update(request=[])), 400,
         "request is missing or not an object"),
    Case("missing-uid", "no request.uid", _with(lambda r: r["request"].pop("uid")), 400,
         "request.uid is missing"),
    Case("uid-is-number", "request.uid: 123", _with(lambda r: r["request"].update(uid=123)), 400,
         "request.uid is missing or not a string"),
    Case("empty-uid", "request.uid: ''", _with(lambda r: r["request"].update(uid="")), 400,
         "request.uid is missing"),
    Case("kind-is-string", "request.kind: 'Pod'", _with(
        lambda r: r["request"].update(kind="Pod")), 400, "request.kind must be an object"),
    Case("operation-is-number", "request.operation: 1", _with(
        lambda r: r["request"].update(operation=1)), 400, "request.operation must be a string"),
    Case("object-is-list", "request.object: []", _with(
        lambda r: r["request"].update(object=[])), 400, "request.object must be an object"),
    Case("create-without-object", "CREATE with object null", _with(
        lambda r: r["request"].update(object=None)), 400, "request.object is required for CREATE"),
    Case("dryrun-is-string", "request.dryRun: 'yes'", _with(
        lambda r: r["request"].update(dryRun="yes")), 400, "request.dryRun must be a boolean"),
    Case("namespace-is-list", "request.namespace: []", _with(
        lambda r: r["request"].update(namespace=[])), 400, "request.namespace must be a string"),
    Case("name-is-number", "request.name: 5", _with(
        lambda r: r["request"].update(name=5)), 400, "request.name must be a string"),
    Case("subresource-is-map", "request.subResource: {}", _with(
        lambda r: r["request"].update(subResource={})), 400,
         "request.subResource must be a string"),
    Case("content-type-with-charset", "Content-Type with a charset parameter: decided",
         json.dumps(review({"metadata": {"name": "p"}}, uid="ct-1")).encode(), 200,
         '"uid":"ct-1"', content_type="Application/JSON; charset=utf-8"),
    Case("non-pod-kind", "a Service sent to /mutate (a rule slip): allowed, warned",
         json.dumps(review({"metadata": {"name": "s"}}, kind="Service", uid="bad-1")).encode(),
         200, "/mutate does not handle Service"),
    Case("v1beta1-deployment", "a v1beta1 Deployment review sent to /mutate: allowed, warned",
         json.dumps(review({"metadata": {"name": "d"}, "spec": {}}, kind="Deployment",
                           group="apps", api_version="admission.k8s.io/v1beta1",
                           uid="bad-1")).encode(),
         200, "/mutate does not handle apps/Deployment"),
    Case("pod-subresource", "pods/binding sent to /mutate: allowed, warned", _with(
        lambda r: r["request"].update(subResource="binding")), 200,
         "does not handle Pod/binding"),
    Case("delete", "DELETE (object null): allowed untouched", _with(
        lambda r: r["request"].update(operation="DELETE", object=None)), 200, '"allowed":true'),
    Case("connect", "CONNECT: allowed untouched", _with(
        lambda r: r["request"].update(operation="CONNECT")), 200, '"allowed":true'),
    Case("huge-body", "an 8 MiB body", b'{"x": "' + b"a" * (8 << 20) + b'"}', 413,
         "over the 7340032-byte cap"),
    Case("deep-nesting", "5,000 nested objects", _deep(5000), 400, "nests too deeply"),
    Case("non-utf8", "bytes that are not UTF-8", b'{"apiVersion": "\xff\xfe"}', 400,
         "body is not UTF-8"),
    Case("duplicate-keys", "apiVersion twice, last valid: last wins, as the API server decodes",
         b'{"apiVersion": "bogus", ' + GOOD[1:], 200, '"uid":"bad-1"'),
    Case("spec-is-string", "object.spec: 'x': no GPU resources readable, untouched", _with(
        lambda r: r["request"]["object"].update(spec="x")), 200, '"allowed":true'),
    Case("containers-is-map", "spec.containers: {}: untouched", _with(
        lambda r: r["request"]["object"]["spec"].update(containers={"a": 1})), 200,
         '"allowed":true'),
    Case("limits-is-list", "resources.limits: []: untouched", _with(
        lambda r: r["request"]["object"]["spec"]["containers"][0]["resources"].update(
            limits=[])), 200, '"allowed":true'),
    Case("terms-is-string", "nodeSelectorTerms: 'x' on a GPU pod: routed, terms replaced", _with(
        lambda r: r["request"]["object"]["spec"].update(affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}})),
         200, '"patchType":"JSONPatch"'),
    Case("control-chars-in-label", "pool label with control characters: denied, named",
         _with(lambda r: r["request"]["object"]["metadata"].update(
             labels={"gpupool.io/pool": "ha\u0007mi"})), 200, "UnknownPool"),
    Case("pool-label-is-list", "pool label that is a list: denied, not an internal error",
         _with(lambda r: r["request"]["object"]["metadata"].update(
             labels={"gpupool.io/pool": ["hami"]})), 200, "UnknownPool"),
    Case("get-method", "GET /mutate", b"", 405, "Method Not Allowed", method="GET"),
    Case("unknown-path", "POST /admit", GOOD, 404, "Not Found", endpoint="admit"),
]
