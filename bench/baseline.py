"""The benchmark's baseline: a Flask app that answers every review with a fixed "allowed",
served by exactly the gunicorn, TLS, worker and keep-alive settings of `gpupool serve`.
Everything gpupool costs on top of plain Flask-under-gunicorn shows as the ratio to it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flask import Flask, Response, request

from webhook.server.config import ServeConfig
from webhook.server.runner import GunicornApp


def make_app() -> Flask:
    app = Flask("baseline")

    @app.post("/mutate")
    @app.post("/validate")
    def review() -> Response:
        body = request.get_json(force=True)
        out = {"apiVersion": body.get("apiVersion"), "kind": "AdmissionReview",
               "response": {"uid": body.get("request", {}).get("uid"), "allowed": True}}
        return Response(json.dumps(out), mimetype="application/json")

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
