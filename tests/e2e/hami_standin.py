"""A test double for HAMi's mutating webhook (`hami-webhook`, webhook `vgpu.hami.io`).

It does what the end-to-end scenario needs from HAMi's real webhook
(Project-HAMi/HAMi pkg/scheduler/webhook.go, as summarised in shared/domain.md): speak
admission.k8s.io/v1beta1, skip pods whose schedulerName is neither default-scheduler nor
hami-scheduler, and rewrite default-scheduler to hami-scheduler on every pod with an
nvidia.com/gpu* limit. Its registration copies the chart's objectSelector and
namespaceSelector on `hami.io/webhook: ignore`, reinvocationPolicy Never, failurePolicy Ignore.
HAMi's own code is not built here: its module pulls NVML/cgo device libraries that are
irrelevant to admission ordering.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    seen: list[str] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        pod = req["object"]
        self.seen.append(pod["metadata"].get("name") or pod["metadata"].get("generateName", ""))
        resp = {"uid": req["uid"], "allowed": True}
        spec = pod["spec"]
        sched = spec.get("schedulerName", "default-scheduler")
        gpu = any(k.startswith("nvidia.com/gpu") for c in spec["containers"]
                  for k in (c.get("resources", {}).get("limits") or {}))
        if gpu and sched == "default-scheduler":
            ops = [{"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}]
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        out = json.dumps({"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                          "response": resp}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class HamiStandIn:
    def __init__(self, cert: Path, key: Path) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.seen = _Handler.seen

    def start(self) -> HamiStandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()

    def configuration(self, ca_bundle: str) -> dict:
        ignore = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn",
                                        "values": ["ignore"]}]}
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "hami-webhook"},
            "webhooks": [{
                "name": "vgpu.hami.io", "admissionReviewVersions": ["v1beta1"],
                "sideEffects": "None", "failurePolicy": "Ignore", "timeoutSeconds": 10,
                "reinvocationPolicy": "Never",
                "clientConfig": {"url": f"https://127.0.0.1:{self.port}/webhook",
                                 "caBundle": ca_bundle},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"], "scope": "*"}],
                "namespaceSelector": ignore, "objectSelector": ignore}]}
