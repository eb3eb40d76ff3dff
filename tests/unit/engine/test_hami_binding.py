"""HAMi's device plugin allocates only for a pod HAMi's scheduler bound (HAMi v2.10.0
``util.GetPendingPod``, judged by that function itself in
tests/integration/test_hami_allocate.py): a pod of another pool on a node HAMi's plugin
serves fails there, whatever its devices."""

from __future__ import annotations

from harness.kit import gpu_pod
from tests.unit.engine.test_steering import agent_node, decide, terms
from webhook.api.pluginconfig import Settled
from webhook.engine.core.decision import Reason

HAMI_PLUGIN = (Settled("kube-system/hami-device-plugin-x", "device-plugin", ("envvar",),
                       "variable DEVICE_LIST_STRATEGY", deployed_by="HAMi's chart"),)


def served_by_hami(tmp_path, name: str = "op-h") -> dict:
    """A node of the operator's pool whose GPUs HAMi's plugin serves (its DaemonSet's
    selector reaches it), with specs that would resolve every GPU."""
    return agent_node(tmp_path / name, name, None, "operator-management", register=True,
                      per_uuid=True, plugins=HAMI_PLUGIN)


def test_a_pod_the_default_scheduler_binds_fails_where_hamis_plugin_serves(tmp_path):
    rv, _, _ = decide([served_by_hami(tmp_path)], gpu_pod("p", limits={"nvidia.com/gpu": 1}))
    assert not rv.final.allowed and rv.final.reason == Reason.NOT_BOUND_BY_HAMI
    assert "allocates only for pods HAMi's scheduler bound" in rv.final.message
    assert "'no binding pod found on node'" in rv.final.message
    assert "op-h" in rv.final.message and "Fix: keep HAMi's device plugin off" in \
        rv.final.message


def test_such_nodes_are_steered_off_where_others_take_the_pod(tmp_path):
    ok = agent_node(tmp_path / "op-1", "op-1", None, "operator-management", register=False,
                    per_uuid=True)
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([served_by_hami(tmp_path), ok], pod)
    assert rv.final.allowed, rv.final.to_json()
    fields = [e for t in terms(pod, rv.mutation.patch) for e in t.get("matchFields", [])]
    assert fields == [{"key": "metadata.name", "operator": "NotIn", "values": ["op-h"]}]


def test_hamis_own_pool_is_bound_by_hamis_scheduler_and_not_asked(tmp_path):
    node = agent_node(tmp_path / "h", "hami-1", "hami", "operator-management", per_uuid=True)
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    rv, _, _ = decide([node], pod)
    assert rv.final.allowed, rv.final.to_json()
