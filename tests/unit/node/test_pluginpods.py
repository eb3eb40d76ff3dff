"""The agent's look at its node's device-plugin pods: at most once per interval, and a failed
look keeps what the last good one found. The API is a named test double (``StandInCore``);
the real kube-apiserver answers in tests/e2e/test_plugin_pods.py."""

from __future__ import annotations

from types import SimpleNamespace

from kubernetes.client.exceptions import ApiException

from webhook.node.pluginpods import KubePluginPods

POD = {"metadata": {"name": "nvdp", "namespace": "nvidia"},
       "spec": {"nodeName": "n1", "containers": [{
           "name": "ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.3",
           "env": [{"name": "DEVICE_LIST_STRATEGY", "value": "cdi-cri"}]}]}}


class StandInCore:
    """Answers as the API server would, or fails as a blip would."""

    def __init__(self) -> None:
        self.lists = 0
        self.fail = False

    def list_pod_for_all_namespaces(self, field_selector: str) -> dict:
        assert field_selector == "spec.nodeName=n1"
        self.lists += 1
        if self.fail:
            raise ApiException(status=503, reason="Service Unavailable")
        return {"items": [POD]}

    def read_node(self, name: str) -> dict:
        return {"metadata": {"name": name, "labels": {}}}


def _reader(clock: list[float]) -> tuple[KubePluginPods, StandInCore]:
    api = SimpleNamespace(sanitize_for_serialization=lambda o: o)
    r = KubePluginPods(api, "n1", interval=300, clock=lambda: clock[0])
    core = StandInCore()
    r.core = core
    return r, core


def test_it_looks_once_per_interval_and_keeps_the_last_good_look():
    clock = [0.0]
    r, core = _reader(clock)
    (first,) = r() or ()
    assert first.strategies == ("cdi-cri",) and first.pod == "nvidia/nvdp"
    clock[0] = 299
    assert r() == (first,) and core.lists == 1
    clock[0] = 301
    core.fail = True
    assert r() == (first,) and core.lists == 2  # the blip changes nothing published
    clock[0] = 700
    core.fail = False
    assert r() == (first,) and core.lists == 3
