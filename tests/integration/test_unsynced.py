"""Not synced means not trusted: a server whose node watch has not listed nodes and
namespaces yet (here: an API server that accepts connections and never answers, a named
stand-in) is not ready, and a GPU pod that reaches it anyway gets the documented outcome for
a missing node view (docs/reliability.md, "Fail-open cases"), counted in a metric; with
``onNoNodeView: deny`` it is denied. It is never checked against an empty view as if that
were the cluster."""

from __future__ import annotations

import base64
import json
import socket
import threading

import jsonpatch
import pytest
import requests

from harness.kit import body, gpu_pod
from harness.servers import kubeconfig_for, start_server, stop_server
from webhook.files.policyfile import default_policy_text


@pytest.fixture
def silent_api_server(tmp_path):
    """Accepts TCP connections and never says a word (no TLS handshake either)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    yield kubeconfig_for(tmp_path / "kubeconfig",
                         f"https://127.0.0.1:{listener.getsockname()[1]}")
    stop.set()
    for s in held:
        s.close()
    listener.close()


def _metric(srv, name: str) -> float:
    text = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name))


@pytest.mark.parametrize("on_no_node_view", ["warn", "deny"])
def test_a_gpu_pod_before_the_node_view_synced(tmp_path, silent_api_server, on_no_node_view):
    policy = tmp_path / "policy.yaml"
    policy.write_text(default_policy_text() + f"onNoNodeView: {on_no_node_view}\n")
    srv = start_server(tmp_path, "--kubeconfig", str(silent_api_server), "--policy",
                       str(policy), workers=1, wait_for="livez")
    try:
        ready = requests.get(f"{srv.url}/readyz?verbose", verify=srv.ca, timeout=5)
        assert ready.status_code == 503 and "not synced yet" in ready.text
        pod = gpu_pod(limits={"nvidia.com/gpumem": 4000})
        # The mutating call routes (by what the pod says: no namespace label is known yet);
        # the outcome is the validating call's, which checks the pod as it will be stored.
        mutated = srv.post("mutate", body(pod)).json()["response"]
        assert mutated["allowed"] is True
        stored = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(mutated["patch"])))
        resp = srv.post("validate", body(stored)).json()["response"]
        if on_no_node_view == "warn":
            assert resp["allowed"] is True, resp
            assert any("node view has not synced yet" in w for w in resp["warnings"])
        else:
            assert resp["allowed"] is False, resp
            assert "NodeViewMissing" in resp["status"]["message"]
            assert "node view has not synced yet" in resp["status"]["message"]
        verdict = "allowed" if on_no_node_view == "warn" else "denied"
        assert _metric(srv, f'gpupool_unchecked_total{{decision="{verdict}",'
                            f'why="not-synced"}}') == 1
        plain = srv.post("mutate", body(gpu_pod(limits={"cpu": "1"}))).json()["response"]
        assert plain["allowed"] is True and not plain.get("warnings")  # not a GPU pod
    finally:
        stop_server(srv)
