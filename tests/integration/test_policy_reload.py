"""Policy hot reload through a ConfigMap-style symlink swap; a bad update keeps the last
good policy and says so in the log and the metrics."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import requests

from harness.kit import body, gpu_pod
from harness.servers import start_server, stop_server
from webhook.files.policyfile import default_policy_text


def _swap(root: Path, text: str, generation: int) -> None:
    data = root / f"..{generation}"
    data.mkdir()
    (data / "policy.yaml").write_text(text)
    os.symlink(data.name, root / "..tmp")
    os.replace(root / "..tmp", root / "..data")
    if not (root / "policy.yaml").is_symlink():
        os.symlink("..data/policy.yaml", root / "policy.yaml")


def _pool(srv) -> str:
    resp = srv.post("mutate", body(gpu_pod())).json()["response"]
    ops = json.loads(base64.b64decode(resp["patch"]))
    scheduler = next((op["value"] for op in ops if op["path"] == "/spec/schedulerName"),
                     "default-scheduler")
    return f"{resp['auditAnnotations']['pool']}/{scheduler}"


def _eventually(fn, want, timeout=15.0):
    deadline = time.monotonic() + timeout
    while (got := fn()) != want:
        assert time.monotonic() < deadline, f"still {got!r}, want {want!r}"
        time.sleep(0.3)


def test_policy_reload_and_bad_update(tmp_path):
    vol = tmp_path / "policy"
    vol.mkdir()
    _swap(vol, default_policy_text(), 1)
    srv = start_server(tmp_path, "--policy", str(vol / "policy.yaml"), workers=2)
    try:
        assert _pool(srv) == "operator/default-scheduler"
        _swap(vol, default_policy_text().replace("schedulerName: default-scheduler",
                                                 "schedulerName: gpu-batch-scheduler"), 2)
        for _ in range(6):  # every worker, whichever answers
            _eventually(lambda: _pool(srv), "operator/gpu-batch-scheduler")
        # Past one check interval, every worker, even an idle one, has it. Nothing outside
        # can tell which worker answers, and a worker that booted after the swap loads it
        # without a reload line, so this one wait is for the interval itself.
        time.sleep(2.5)
        _swap(vol, default_policy_text().replace("poolLabel:", "poolLable:"), 3)

        def rejected_everywhere() -> bool:
            metrics = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=5).text
            ready = requests.get(f"{srv.url}/readyz?verbose", verify=srv.ca, timeout=5)
            return ("gpupool_policy_last_update_ok 0.0" in metrics and ready.status_code == 200
                    and "[-]policy failed: last update rejected" in ready.text)

        _eventually(lambda: all(rejected_everywhere() for _ in range(4)), True)
        for _ in range(6):
            assert _pool(srv) == "operator/gpu-batch-scheduler"  # the last good policy serves
        log = srv.log.read_text()
        assert "policy changed but does not load; keeping the last good one" in log
        assert "poolLable: unknown field" in log
    finally:
        stop_server(srv)
