"""The benchmark's baseline: an app that answers every review with a fixed "allowed", served by
exactly the gunicorn, TLS, worker and keep-alive settings of `gpupool serve` and reached the
way gpupool's reviews are (straight from WSGI, Flask only for the probes). Everything
gpupool's own work costs on top of that serving path shows as the ratio to it.

With ``--mark ANNOTATION`` its /mutate adds that annotation (a JSON patch, as bench/floor's
does), so registered in gpupool's place (bench/e2e_load.py ``--calls``) the API server applies
a mutation and runs its reinvocation pass as it does after gpupool's."""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any

from flask import Flask, Response

from webhook.server.config import ServeConfig
from webhook.server.runner import GunicornApp


def mark_patch(obj: dict[str, Any], annotation: str) -> str:
    """A base64 JSON patch adding ``annotation`` to ``obj`` (the annotations map too, where
    the object has none: a JSON patch cannot add a key to a map that is not there)."""
    if (obj.get("metadata") or {}).get("annotations") is None:
        ops = [{"op": "add", "path": "/metadata/annotations", "value": {annotation: "1"}}]
    else:
        ops = [{"op": "add", "path": "/metadata/annotations/" + annotation.replace("/", "~1"),
                "value": "1"}]
    return base64.b64encode(json.dumps(ops).encode()).decode()


def make_app(mark: str | None = None) -> Flask:
    app = Flask("baseline")
    flask_app = app.wsgi_app

    def reviews(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") not in ("/mutate", "/validate"):
            return flask_app(environ, start_response)
        body = json.loads(environ["wsgi.input"].read())
        request = body.get("request", {})
        response: dict[str, Any] = {"uid": request.get("uid"), "allowed": True}
        if mark and environ["PATH_INFO"] == "/mutate":
            response.update(patchType="JSONPatch",
                            patch=mark_patch(request.get("object") or {}, mark))
        out = json.dumps({"apiVersion": body.get("apiVersion"), "kind": "AdmissionReview",
                          "response": response}).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(out)))])
        return [out]

    # (replaced whole, as Flask's docs advise for middleware)
    app.wsgi_app = reviews  # type: ignore[method-assign]  # Flask types wsgi_app a method

    @app.get("/healthz")
    @app.get("/readyz")
    def ok() -> Response:
        return Response("ok\n")

    return app


class BaselineApp(GunicornApp):
    def __init__(self, cfg: ServeConfig, mark: str | None = None) -> None:
        self.mark = mark
        super().__init__(cfg)

    def load(self) -> Any:
        return make_app(self.mark)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bind", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--worker-class", default="gevent")
    p.add_argument("--mark", metavar="ANNOTATION",
                   help="/mutate adds this annotation to every object (a JSON patch)")
    p.add_argument("--reuse-port", action="store_true",
                   help="share the port with another server (SO_REUSEPORT), as gpupool's "
                        "replicas do in bench/e2e_load.py")
    a = p.parse_args()
    BaselineApp(ServeConfig(bind=a.bind, certfile=a.cert, keyfile=a.key, workers=a.workers,
                            threads=a.threads, worker_class=a.worker_class,
                            loglevel="warning",
                            extra={"reuse_port": True} if a.reuse_port else {}),
                a.mark).run()


if __name__ == "__main__":
    main()
