"""A running pod's next container start judged by what it holds (``aftercare.restart``):
the answer the kubelet cached, through the node as it is now. The real runtime judges the
same cases in tests/integration/test_restart_corpus.py; these pin what each answer says."""

from __future__ import annotations

import copy

import jsonpatch

from harness.kit import hold
from harness.layouts import UUIDS
from tests.unit.engine.test_steering import agent_node, hami_pod
from webhook.engine import NodeInfo, Outcome, Stage, Subject, decide, view_from_objects
from webhook.engine.aftercare.podrisk import recheck
from webhook.engine.aftercare.restart import started
from webhook.files.policyfile import default_policy

MGMT = "management.nvidia.com/gpu"


def _running(view, policy, *, uid: str = "u1", node: str = "hami-1", status: dict | None = None,
             **spec) -> dict:
    pod = hami_pod(**spec)
    pod["metadata"].update(name="train", namespace="ml", uid=uid)
    m = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace="ml"), view, policy)
    pod = jsonpatch.apply_patch(pod, m.patch)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"} if status is None else status
    return pod


def _answer(node: dict, pod: dict | None = None, **kw):
    policy = default_policy()
    view = view_from_objects([node], policy, {"ml": {}})
    pod = pod or _running(view, policy, **kw)
    return recheck(pod, view, policy)


def test_the_seed_after_the_fact_an_envvar_pod_on_a_node_moved_to_cdi():
    """Started under the legacy runtime with a UUID in NVIDIA_VISIBLE_DEVICES; the toolkit
    now runs CDI mode with the management spec alone: the cached UUID does not resolve."""
    node = hold(agent_node_at("cdi"), "u1", [UUIDS[0]], container="c", visible=UUIDS[0])
    a = _answer(node)
    assert a.outcome is Outcome.FAILS_ON_RESTART and a.reason == "CDIDeviceMissing"
    assert a.missing == (f"{MGMT}={UUIDS[0]}",)
    assert "kubelet cached it" in a.message and "hami-1" in a.message
    assert "NVIDIA_VISIBLE_DEVICES=" + UUIDS[0] in a.message
    legacy = hold(agent_node_at("legacy"), "u1", [UUIDS[0]], container="c", visible=UUIDS[0])
    assert _answer(legacy).outcome is Outcome.FINE


def agent_node_at(mode: str, **kw) -> dict:
    import tempfile
    from pathlib import Path

    return agent_node(Path(tempfile.mkdtemp()), "hami-1", "hami", "operator-management",
                      mode=mode, **kw)


def test_only_the_gpus_it_holds_count():
    """A partial per-UUID spec: the GPU the pod holds resolves, the other does not. A new
    pod could be handed the other; this one restarts with its own."""
    node = agent_node_at("cdi", per_uuid=(UUIDS[0],))
    holding = hold(copy.deepcopy(node), "u1", [UUIDS[0]], container="c", visible=UUIDS[0])
    assert _answer(holding).outcome is Outcome.FINE
    other = hold(copy.deepcopy(node), "u1", [UUIDS[1]], container="c", visible=UUIDS[1])
    assert _answer(other).outcome is Outcome.FAILS_ON_RESTART


def test_cdi_names_it_was_handed_must_still_be_defined():
    name = f"k8s.device-plugin.nvidia.com/gpu={UUIDS[0]}"
    node = hold(agent_node_at("cdi", per_uuid=True), "u1", [UUIDS[0]], container="c",
                cdi=[name])
    a = _answer(node)
    assert a.outcome is Outcome.FAILS_ON_RESTART and a.missing == (name,)
    assert "CDI device(s)" in a.message


def test_a_runtime_handler_gone_from_containerd_fails_every_restart():
    node = agent_node_at("cdi", per_uuid=True)
    hold(node, "u1", [UUIDS[0]], container="c", visible=UUIDS[0])
    inv = NodeInfo.from_object(node).inventory
    assert inv is not None and inv.runtime.runtime_handlers == (
        "nvidia", "nvidia-cdi", "nvidia-legacy")
    fine = _answer(node, runtimeClassName="nvidia-cdi")
    assert fine.outcome is Outcome.FINE
    gone = _answer(node, runtimeClassName="kata-gpu")
    assert gone.outcome is Outcome.FAILS_ON_RESTART and gone.reason == "RuntimeHandlerMissing"
    assert "runtime handler kata-gpu" in gone.message


def test_what_it_holds_unknown_is_doubt_with_the_reason():
    node = agent_node_at("cdi", per_uuid=True)
    a = _answer(node)  # no record published on the node
    assert a.outcome is Outcome.MAY_FAIL_ON_RESTART and a.reason == "DevicesUnverified"
    assert "publishes no gpupool.io/held-devices" in a.message
    late = hold(copy.deepcopy(node), "someone-else", [UUIDS[1]], container="c",
                visible=UUIDS[1])
    b = _answer(late)
    assert b.outcome is Outcome.MAY_FAIL_ON_RESTART and "not have caught up" in b.message
    broken = copy.deepcopy(node)
    broken["metadata"]["annotations"]["gpupool.io/held-devices"] = \
        '{"schemaVersion": 1, "pods": {}, "error": "/host/cp: not JSON"}'
    c = _answer(broken)
    assert c.outcome is Outcome.MAY_FAIL_ON_RESTART and "not JSON" in c.message


def test_a_pod_that_has_not_started_is_allocated_afresh():
    """Bound, nothing started, the kubelet holds nothing for it yet: its first start asks
    the device plugin, so the node is judged as at admission."""
    node = agent_node_at("cdi", per_uuid=True)
    pending = {"phase": "Pending", "containerStatuses": [
        {"name": "c", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}
    a = _answer(node, status=pending)
    assert a.outcome is Outcome.FINE and "kubelet cached" not in a.message
    assert not started({"status": pending})
    assert started({"status": {"phase": "Pending", "containerStatuses": [
        {"name": "c", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})


def test_hami_s_record_decides_only_where_both_ways_agree():
    """Without the checkpoint, HAMi's ``vgpu-devices-allocated`` names the GPUs but not how
    its plugin handed them: both ways are judged."""
    both_fail = agent_node_at("cdi")
    policy = default_policy()
    view = view_from_objects([both_fail], policy, {"ml": {}})
    pod = _running(view, policy)
    pod["metadata"].setdefault("annotations", {})["hami.io/vgpu-devices-allocated"] = \
        f"{UUIDS[0]},NVIDIA,1000,0:;"
    a = recheck(pod, view, policy)
    assert a.outcome is Outcome.FAILS_ON_RESTART and "hami.io/vgpu-devices-allocated" in \
        a.message
    one_way = agent_node_at("cdi", per_uuid=True)  # UUIDs resolve, CDI names do not
    view.upsert_node(NodeInfo.from_object(one_way))
    b = recheck(pod, view, policy)
    assert b.outcome is Outcome.MAY_FAIL_ON_RESTART and "handed as UUIDs they resolve" in \
        b.message


def test_the_webhook_keeps_no_record_of_what_pods_hold():
    """Admission never reads ``gpupool.io/held-devices``: the webhook's view leaves it out,
    and a pod starting on a node (a new record) does not store the node again there; the
    scan's view keeps it, and notices."""
    from webhook.cluster.watch import ClusterInformer

    node = hold(agent_node_at("cdi"), "u1", [UUIDS[0]], container="c", visible=UUIDS[0])
    more = hold(copy.deepcopy(node), "u2", [UUIDS[1]], container="c", visible=UUIDS[1])
    policy = default_policy()
    webhook = ClusterInformer(view_from_objects([], policy), None, keep_held=False)
    scan = ClusterInformer(view_from_objects([], policy), None, keep_held=True)
    w1, w2 = webhook._node_info(node), webhook._node_info(more)
    assert w1 is not None and w2 is not None and w1.held is None
    assert w1.fingerprint == w2.fingerprint
    s1, s2 = scan._node_info(node), scan._node_info(more)
    assert s1 is not None and s2 is not None and s1.held and s1.fingerprint != s2.fingerprint


def test_a_mig_device_the_node_cannot_list_is_doubt_not_a_failure():
    """HAMi's MIG mode creates the MIG device it hands a pod; the kubelet never lists it.
    Under the just-in-time kind the driver decides at the restart: doubt, never a failure
    that cannot be shown. Where the kubelet's list is read and lacks it, it is gone."""
    mig = "MIG-0a1b2c3d-0000-5000-8000-00000000000f"
    unknown = hold(agent_node_at("auto"), "u1", [mig], container="c", visible=mig)
    a = _answer(unknown)
    assert a.outcome is Outcome.MAY_FAIL_ON_RESTART and "just in time" in a.message
    listed = hold(agent_node_at("auto", mig={"nvidia.com/mig-1g.10gb": (
        "MIG-0a1b2c3d-0000-5000-8000-000000000001",)}), "u1", [mig], container="c",
        visible=mig)
    assert _answer(listed).outcome is Outcome.FAILS_ON_RESTART


def test_a_held_gpu_the_driver_no_longer_lists_cannot_come_back():
    """A GPU replaced under a running pod: a spec left from before still names the old
    card, but the card is gone, and so is any MIG device HAMi made on it (its device ids
    carry the GPU's UUID). The restarted container is handed the old device again."""
    old = "GPU-0a1b2c3d-0000-4000-8000-0000000000ee"
    created = "MIG-0a1b2c3d-0000-5000-8000-0000000000ee"
    stale = agent_node_at("cdi", per_uuid=(*UUIDS, old))
    plain = hold(copy.deepcopy(stale), "u1", [old], container="c", visible=old)
    a = _answer(plain)
    assert a.outcome is Outcome.FAILS_ON_RESTART and a.missing == (old,), a.message
    assert a.reason == "UnknownDevice"
    assert "no longer has" in a.message and "hami-1" in a.message
    in_mig_mode = hold(copy.deepcopy(stale), "u1", [f"{old}-3"], container="c",
                       visible=created)
    b = _answer(in_mig_mode)
    assert b.outcome is Outcome.FAILS_ON_RESTART and b.missing == (old,), b.message
    # the same pod on a GPU still there is judged as before
    kept = hold(copy.deepcopy(stale), "u1", [UUIDS[0]], container="c", visible=UUIDS[0])
    assert _answer(kept).outcome is Outcome.FINE
