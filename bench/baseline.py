"""The benchmark's baseline: an app that answers every review with a fixed "allowed", served by
exactly the gunicorn, TLS, worker and keep-alive settings of `gpupool serve` and reached the
way gpupool's reviews are (straight from WSGI, Flask only for the probes). Everything
gpupool's own work costs on top of that serving path shows as the ratio to it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flask import Flask, Response

from webhook.server.config import ServeConfig
from webhook.server.runner import GunicornApp


def make_app() -> Flask:
    app = Flask("baseline")
    flask_app = app.wsgi_app

    def reviews(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") not in ("/mutate", "/validate"):
            return flask_app(environ, start_response)
        body = json.loads(environ["wsgi.input"].read())
        out = json.dumps({"apiVersion": body.get("apiVersion"), "kind": "AdmissionReview",
                          "response": {"uid": body.get("request", {}).get("uid"),
                                       "allowed": True}}).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(out)))])
        return [out]

    app.wsgi_app = reviews  # type: ignore[method-assign]

    @app.get("/healthz")
    @app.get("/readyz")
    def ok() -> Response:
        return Response("ok\n")

    return app


class BaselineApp(GunicornApp):
    def load(self) -> Any:
        return make_app()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bind", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--worker-class", default="gevent")
    a = p.parse_args()
    BaselineApp(ServeConfig(bind=a.bind, certfile=a.cert, keyfile=a.key, workers=a.workers,
                            threads=a.threads, worker_class=a.worker_class,
                            loglevel="warning")).run()


if __name__ == "__main__":
    main()
