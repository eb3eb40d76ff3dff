"""The servers a benchmark runs and what it sends them: gpupool and the do-nothing baseline
(``bench.baseline``) over HTTPS on the same certificates, and the admission reviews of the
usual GPU pod. Every entry point that starts a server starts it here.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonpatch
import requests

from bench import cluster


def review(obj: dict[str, Any], uid: str) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": uid, "kind": {"group": "", "version": "v1",
                                                        "kind": "Pod"},
                                   "resource": {"group": "", "version": "v1",
                                                "resource": "pods"},
                                   "operation": "CREATE", "namespace": "ml", "object": obj,
                                   "dryRun": False,
                                   "userInfo": {"username": "system:serviceaccount:ml:ci"}}}
                      ).encode()


def bodies() -> dict[str, bytes]:
    from webhook.engine import Stage, decide_pod
    from webhook.files.policyfile import default_policy

    pod = cluster.pods()["unpinned"]
    mutated = jsonpatch.apply_patch(copy.deepcopy(pod),
                                    decide_pod(Stage.MUTATE, pod, "ml", None,
                                               default_policy()).patch)
    return {"mutate": review(pod, "bench-m"), "validate": review(mutated, "bench-v")}


def start(cmd: list[str], url: str, ca: str, log: Path,
          cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            start_new_session=True, cwd=cwd, env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[:4]} exited: {log.read_text()[-2000:]}")
        try:
            if requests.get(f"{url}/readyz", verify=ca, timeout=2).ok:
                return proc
        except requests.RequestException:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"not ready: {log.read_text()[-2000:]}")


def server_cmd(server: str, port: int, certs: Path, *extra: str,
               view: tuple[str, ...] = ()) -> list[str]:
    """How the bench starts ``server`` ("gpupool" or "baseline") on ``127.0.0.1:port`` with the
    certificates in ``certs``: gpupool on the node view the ``view`` flags give, with no audit
    on stdout and warnings only; ``extra`` holds the serving settings both take."""
    tls = ["--bind", f"127.0.0.1:{port}", "--cert", str(certs / "tls.crt"), "--key",
           str(certs / "tls.key")]
    if server == "gpupool":
        return [sys.executable, "-m", "webhook", "serve", *tls, *view, "--no-audit-stdout",
                "--log-level", "warning", *extra]
    return [sys.executable, "-m", "bench.baseline", *tls, *extra]


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def certs(tmp: Path) -> Path:
    """The webhook's certificates for 127.0.0.1 and localhost, made once under ``tmp``."""
    certs = tmp / "certs"
    if not (certs / "ca.crt").exists():
        subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out",
                        str(certs), "--ip", "127.0.0.1", "--dns", "localhost"],
                       check=True, capture_output=True)
    return certs
