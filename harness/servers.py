"""The webhook as users run it, for tests and benchmarks alike: a real gunicorn serving real
TLS (``start_server``), certificates from ``gpupool certs``, free ports, and stopping a
process group without leaving strays."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORTS = random.SystemRandom()


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` is one it can hand out again, as the local
    end of any outgoing connection, the moment its listener stops: a kube-apiserver or
    webhook restarted on its old port (the outage tests) then fails with "address already
    in use" because a client's connection took it. Below the range, only another caller
    of this function can take it, and a random draw over thousands of ports, checked by a
    bind here, makes that rare."""
    floor = _ephemeral_floor()
    # (from 10000, under the ports services usually listen on; with a range that starts
    # lower than 11000, 0: the kernel's choice, as before)
    draws = 200 if floor >= 11000 else 0
    for port in (_PORTS.randrange(10000, floor) for _ in range(draws)):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


@dataclass
class Server:
    url: str
    ca: str
    certs: Path
    audit: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def post(self, endpoint: str, data: bytes, session: requests.Session | None = None,
             content_type: str = "application/json") -> requests.Response:
        s = session or requests
        return s.post(f"{self.url}/{endpoint}", data=data, verify=self.ca, timeout=10,
                      headers={"Content-Type": content_type})


def kubeconfig_for(path: Path, server: str) -> Path:
    """A kubeconfig for ``server`` with a token and TLS verification off, as a stand-in API
    server (whose certificate nobody trusts) needs."""
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


def gpupool_cmd() -> list[str]:
    return [sys.executable, "-m", "webhook"]


def generate_certs(out: Path) -> None:
    subprocess.run([*gpupool_cmd(), "certs", "generate", "--out", str(out), "--ip", "127.0.0.1",
                    "--dns", "localhost"], check=True, capture_output=True)


def start_server(tmp: Path, *extra: str, workers: int = 2, env: dict[str, Any] | None = None,
                 cert: Path | None = None, key: Path | None = None,
                 ca: Path | None = None, audit_stdout: bool = False,
                 port: int | None = None, wait_for: str = "readyz") -> Server:
    """``wait_for``: the probe that must pass before it returns (``livez`` for a server
    that is expected not to turn ready)."""
    certs = tmp / "certs"
    if cert is None and not (certs / "tls.crt").exists():
        generate_certs(certs)
    cert, key, ca = (cert or certs / "tls.crt", key or certs / "tls.key", ca or certs / "ca.crt")
    port = port or free_port()
    audit = tmp / "audit.log"
    log = tmp / f"server-{port}.log"
    cmd = [*gpupool_cmd(), "serve", "--bind", f"127.0.0.1:{port}",
           "--cert", str(cert), "--key", str(key),
           "--workers", str(workers), "--threads", "4", "--audit-file", str(audit),
           *([] if audit_stdout else ["--no-audit-stdout"]), *extra]
    if not {"--cluster", "--kubeconfig", "--no-cluster"} & set(extra):
        cmd.append("--demo")
    fh = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    server = Server(f"https://127.0.0.1:{port}", str(ca), certs, audit, proc, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()}")
        try:
            if requests.get(f"{server.url}/{wait_for}", verify=server.ca, timeout=2).ok:
                return server
        except requests.RequestException:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise RuntimeError(f"server not ready in 30s: {log.read_text()}")


def wait_ready(proc: subprocess.Popen[bytes], url: str, ca: str, log: Path,
               timeout: float = 60) -> None:
    """Until ``url``/readyz answers 200 over TLS verified with ``ca``; fails with the log's
    tail if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"exited:\n{log.read_text()[-3000:]}"
        try:
            if os.path.exists(ca) and requests.get(f"{url}/readyz", verify=ca, timeout=2).ok:
                return
        except (requests.RequestException, OSError):
            pass
        assert time.monotonic() < deadline, f"not ready:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def stop_group(proc: subprocess.Popen[bytes], grace: float = 30) -> None:
    """SIGTERM to the process group started with ``start_new_session``; SIGKILL after
    ``grace`` seconds. Returns once it is gone."""
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def stop_server(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(20)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
