"""Pods re-checked after admission: the answer is the admission decision of the pod as it
stands, read for where the pod is (``aftercare.podrisk``), and nodes whose GPUs go out twice
(``aftercare.nodehazards``)."""

from __future__ import annotations

import copy

import pytest

from harness.kit import gpu_pod
from harness.layouts import UUIDS
from tests.unit.engine.test_steering import agent_node, hami_bound, hami_pod
from webhook.engine.admission import admit
from webhook.engine.aftercare.nodehazards import advertised_twice
from webhook.engine.aftercare.podrisk import Outcome, SchedulerState, recheck
from webhook.engine.core import patch
from webhook.engine.core.decision import Reason
from webhook.engine.view.cluster import view_from_objects
from webhook.engine.view.nodes import NodeInfo
from webhook.files.policyfile import default_policy


def admitted(pod: dict, view, policy, node: str | None = None) -> dict:
    """The pod as the API server stores it after gpupool's mutation (and, with ``node``,
    after HAMi's scheduler bound it and it started)."""
    m = admit.decide(admit.Stage.MUTATE, admit.Subject(kind="Pod", object=pod,
                                                        namespace="default"), view, policy)
    assert m.allowed, m.message
    out = patch.apply(copy.deepcopy(pod), m.patch)
    out["metadata"].update(namespace="default", uid=f"uid-{out['metadata']['name']}")
    return hami_bound(out, node) if node else out


def test_a_running_pod_whose_node_loses_its_per_uuid_devices_fails_on_restart(tmp_path):
    policy = default_policy()
    good = agent_node(tmp_path / "a", "hami-1", "hami", "operator-management", per_uuid=True,
                      held={"uid-h": (UUIDS[0],)})
    bad = agent_node(tmp_path / "b", "hami-1", "hami", "operator-management",
                     held={"uid-h": (UUIDS[0],)})
    view = view_from_objects([good], policy)
    pod = admitted(hami_pod(), view, policy, node="hami-1")
    fine = recheck(pod, view, policy)
    assert fine is not None and fine.outcome is Outcome.FINE and fine.node == "hami-1"
    view.upsert_node(NodeInfo.from_object(bad))  # the spec regenerated without them
    a = recheck(pod, view, policy)
    assert a is not None and a.outcome is Outcome.FAILS_ON_RESTART
    assert a.reason == Reason.CDI_DEVICE_MISSING and a.node == "hami-1"
    assert "hami-1" in a.message and a.missing
    assert a.missing[0].startswith("management.nvidia.com/gpu=GPU-")


def test_a_pod_created_while_gpupool_was_bypassed_is_misrouted(tmp_path):
    policy = default_policy()
    good = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    view = view_from_objects([good], policy)
    pod = hami_pod()
    pod["metadata"].update(namespace="default", uid="u1")
    pod["spec"]["schedulerName"] = "default-scheduler"  # as the API server defaults it
    a = recheck(pod, view, policy)
    assert a is not None and a.outcome is Outcome.MISROUTED
    assert a.reason == Reason.SCHEDULER_MISMATCH and a.node is None


def test_a_pending_pod_waits_for_a_scheduler_only_when_its_lease_says_it_is_gone(tmp_path):
    policy = default_policy()
    good = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True,
                      held={"uid-h": (UUIDS[0],)})
    view = view_from_objects([good], policy)
    pod = admitted(hami_pod(), view, policy)
    assert recheck(pod, view, policy).outcome is Outcome.FINE
    unknown = {"hami-scheduler": SchedulerState(None, "no Lease")}
    assert recheck(pod, view, policy, unknown).outcome is Outcome.FINE
    gone = {"hami-scheduler": SchedulerState(False, "Lease kube-system/hami-scheduler "
                                                     "expired 40s ago")}
    a = recheck(pod, view, policy, gone)
    assert a.outcome is Outcome.SCHEDULER_NOT_RUNNING and a.reason == "SchedulerNotRunning"
    assert "hami-scheduler" in a.message and "expired 40s ago" in a.message
    bound = admitted(hami_pod(), view, policy, node="hami-1")  # already placed: not waiting
    assert recheck(bound, view, policy, gone).outcome is Outcome.FINE


def test_a_pending_pod_no_node_of_its_pool_can_start_is_never_schedulable(tmp_path):
    policy = default_policy()
    good = agent_node(tmp_path / "a", "hami-1", "hami", "operator-management", per_uuid=True)
    bad = agent_node(tmp_path / "b", "hami-1", "hami", "operator-management")
    view = view_from_objects([good], policy)
    pod = admitted(hami_pod(), view, policy)
    view.upsert_node(NodeInfo.from_object(bad))
    a = recheck(pod, view, policy)
    assert a.outcome is Outcome.NEVER_SCHEDULABLE and a.reason == Reason.CDI_DEVICE_MISSING


def test_finished_deleted_and_non_gpu_pods_get_no_answer(tmp_path):
    policy = default_policy()
    view = view_from_objects([agent_node(tmp_path, "hami-1", "hami", "operator-management",
                                         per_uuid=True)], policy)
    pod = admitted(hami_pod(), view, policy, node="hami-1")
    assert recheck({**pod, "status": {"phase": "Succeeded"}}, view, policy) is None
    gone = copy.deepcopy(pod)
    gone["metadata"]["deletionTimestamp"] = "2026-12-05T10:00:00Z"
    assert recheck(gone, view, policy) is None
    plain = gpu_pod("cpu", limits={"cpu": "1"})
    assert recheck(plain, view, policy) is None


@pytest.mark.parametrize("layout,per_uuid", [("operator-management", True),
                                             ("operator-management", False),
                                             ("device-plugin", False),
                                             ("nvidia-ctk", False)])
@pytest.mark.parametrize("limits", [{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
                                    {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 2}])
@pytest.mark.parametrize("pool", ["hami", "operator"])
def test_a_pending_pods_answer_is_its_admission(tmp_path, layout, per_uuid, limits, pool):
    """The same answer as admission: a pod admitted is fine, and one that admission would
    deny now gets the reason admission gives."""
    policy = default_policy()
    nodes = [agent_node(tmp_path / "n", f"{pool}-1", pool, layout, per_uuid=per_uuid)]
    view = view_from_objects(nodes, policy)
    pod = gpu_pod("p", limits=limits)
    pod["metadata"]["labels"] = {"gpupool.io/pool": pool}
    review = admit.review(admit.Subject(kind="Pod", object=pod, namespace="default"), view,
                          policy)
    if review.mutation is not None and not review.mutation.allowed:
        # such a pod is stored only when the webhook was bypassed: the same routing denial
        bypassed = {**pod, "metadata": {**pod["metadata"], "namespace": "default"}}
        a = recheck(bypassed, view, policy)
        assert a is not None and a.outcome is Outcome.MISROUTED
        # validation names the usual culprit for HAMi's resources outside HAMi's pool
        assert a.reason in (review.mutation.reason, Reason.HAMI_RESOURCE_OUTSIDE_POOL)
        return
    a = recheck(admitted(pod, view, policy), view, policy)
    final = review.final
    assert a is not None
    assert (a.outcome is Outcome.FINE) == final.allowed
    if not final.allowed:
        assert a.reason == final.reason and a.outcome is Outcome.NEVER_SCHEDULABLE


def test_hami_and_the_operators_plugin_on_one_node_hand_out_its_gpus_twice(tmp_path):
    policy = default_policy()
    node = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    view = view_from_objects([node], policy)
    assert advertised_twice(view.node("hami-1"), view) == []
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] = "true"
    view.upsert_node(NodeInfo.from_object(node))
    [h] = advertised_twice(view.node("hami-1"), view)
    assert h.reason == "GPUsAdvertisedTwice" and h.node == "hami-1" and h.gpus
    assert "HAMi's device plugin" in h.message and "GPU Operator's" in h.message
    assert "nvidia.com/gpu.deploy.device-plugin=false" in h.message
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] = "false"
    view.upsert_node(NodeInfo.from_object(node))
    assert advertised_twice(view.node("hami-1"), view) == []
