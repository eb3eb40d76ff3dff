"""The CLI's calls to a live API server, against a stand-in HTTPS server (a named test
double: it answers as an API server that is slow, or refuses a permission, would). The real
kube-apiserver's 403 is checked in tests/e2e/test_release_names.py."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.servers import generate_certs, kubeconfig_for

FORBIDDEN = ('nodes is forbidden: User "system:serviceaccount:ci:reader" cannot list resource '
             '"nodes" in API group "" at the cluster scope')


class _StandIn(BaseHTTPRequestHandler):
    mode = "slow"

    def do_GET(self) -> None:
        if self.mode == "slow":
            time.sleep(30)
            return
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": FORBIDDEN, "reason": "Forbidden", "code": 403}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_server(tmp_path, request):
    generate_certs(tmp_path / "certs")
    handler = type("Handler", (_StandIn,), {"mode": request.param})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "certs/tls.crt", tmp_path / "certs/tls.key")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield kubeconfig_for(tmp_path / "kubeconfig", f"https://127.0.0.1:{httpd.server_address[1]}")
    httpd.shutdown()


def _gpupool(*args: str | Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "webhook", *map(str, args)], capture_output=True,
                       text=True, timeout=120)
    return r, time.monotonic() - start


@pytest.mark.parametrize("api_server", ["slow"], indirect=True)
@pytest.mark.parametrize("command", ["doctor", "check"])
def test_a_silent_api_server_costs_the_timeout_in_all_with_one_progress_line(api_server,
                                                                             command):
    extra = ["-f", "docs/examples/pod-hami.yaml"] if command == "check" else []
    r, took = _gpupool(command, "--kubeconfig", api_server, "--request-timeout", "5", *extra)
    assert r.returncode == 2, r.stderr
    progress, error = r.stderr.splitlines()  # no retries, no urllib3 warnings
    assert progress.startswith("waiting for the API server at https://127.0.0.1:")
    assert "giving up after 5 s in all" in progress
    assert "no answer within 5 s (listing nodes)" in error
    assert took < 5 + 8, took  # the budget, not three retries of it (plus start-up)


@pytest.mark.parametrize("api_server", ["forbidden"], indirect=True)
def test_a_403_repeats_what_the_api_server_refused(api_server):
    r, _ = _gpupool("doctor", "--kubeconfig", api_server)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert "403 forbidden (listing nodes)" in line and FORBIDDEN in line
