"""HAMi's device plugin allocates only for a pod HAMi's scheduler bound, as HAMi's own code
decides it (``hami-allocate``: HAMi v2.10.0 ``util.GetPendingPod``, the first step of its
plugin's ``Allocate``), and gpupool keeps another pool's pods off a node HAMi's plugin
serves (``checks.hamibinding``). The CDI corpus asks the same function of every pod that
reaches such a node (tests/integration/test_corpus.py)."""

from __future__ import annotations

from harness.kit import gpu_pod
from tests import pendingpod
from tests.unit.engine.test_hami_binding import served_by_hami
from tests.unit.engine.test_steering import decide
from webhook.engine import Reason


def test_hamis_plugin_finds_only_the_pod_its_scheduler_bound():
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    pod["metadata"]["namespace"] = "ml"
    by_default = pendingpod.allocates(pendingpod.as_bound(pod, "n1", by_hami=False), "n1")
    assert by_default == {"error": "no binding pod found on node n1"}
    by_hami = pendingpod.allocates(pendingpod.as_bound(pod, "n1", by_hami=True), "n1")
    assert by_hami == {"pod": "ml/p"}
    # bound to another node by HAMi: not this node's pod either
    elsewhere = pendingpod.as_bound(pod, "n1", by_hami=True)
    elsewhere["metadata"]["annotations"][pendingpod.NODE_ANNOTATION] = "n2"
    assert "error" in pendingpod.allocates(elsewhere, "n1")


def test_gpupool_denies_what_hamis_plugin_would_refuse(tmp_path):
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([served_by_hami(tmp_path)], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.NOT_BOUND_BY_HAMI
    # the pod as the default scheduler would bind it: HAMi's plugin refuses it
    admitted = {**pod, "metadata": {**pod["metadata"], "namespace": "default"}}
    answer = pendingpod.allocates(pendingpod.as_bound(admitted, "op-h", by_hami=False), "op-h")
    assert "error" in answer
