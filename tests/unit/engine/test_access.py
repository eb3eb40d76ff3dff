"""No container gets a GPU it was not granted (issue 47): containers that ask for no GPU
voided where a node they can reach would hand them GPUs anyway, NRI annotations for them
refused, HAMi's scheduler-owned annotations kept to their owners, gpupool's own label kept.
The real runtime judges the void in tests/integration/test_access_runtime.py."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
import yaml

from harness.kit import gpu_pod, only_voids
from harness.layouts import UUIDS
from tests.unit.engine.test_nri import DOMAIN, TOOLKIT_LABEL, cluster_policy
from tests.unit.engine.test_steering import agent_node, hami_pod
from webhook.engine import (
    Reason,
    Stage,
    Subject,
    decide,
    load_policy_text,
    review,
    view_from_objects,
)
from webhook.engine.core.policy import PolicyError
from webhook.files.policyfile import default_policy_text

VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
OWNER = "system:serviceaccount:kube-system:hami-scheduler"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _policy(**access) -> object:
    text = default_policy_text()
    if access:
        text += yaml.safe_dump({"access": access})
    return load_policy_text(text)


def _review(nodes, pod, namespace: str = "ml", policy=None):
    policy = policy or _policy()
    others = [o for o in nodes if o.get("kind", "Node") != "Node"]
    view = view_from_objects([o for o in nodes if o.get("kind", "Node") == "Node"], policy,
                             {namespace: {}}, resources=others or None)
    pod["metadata"]["namespace"] = namespace
    return review(Subject(kind="Pod", object=pod, namespace=namespace), view, policy), view


def _web(**spec) -> dict:
    """A pod that asks for no GPU, with a sidecar and an init container."""
    pod = gpu_pod("web", limits={"cpu": "1"}, **spec)
    pod["spec"]["containers"].append({"name": "side", "image": "nvidia/cuda",
                                      "env": [{"name": "A", "value": "b"}]})
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
    return pod


@pytest.fixture
def node(tmp_path):
    return agent_node(tmp_path, "op-1", None, "operator-management", per_uuid=True,
                      register=False)


def _env_of(pod: dict, field: str, i: int) -> list:
    return pod["spec"][field][i].get("env") or []


def test_a_pod_that_asks_for_no_gpu_gets_void_in_every_container(node):
    pod = _web()
    rv, view = _review([node], pod)
    d = rv.final
    assert d.allowed and d.reason == Reason.ACCESS_VOIDED and not d.gpu, d.to_json()
    assert only_voids(d.patch) and len(d.patch) == 3
    out = jsonpatch.apply_patch(pod, d.patch)
    for field, i in (("containers", 0), ("containers", 1), ("initContainers", 0)):
        assert _env_of(out, field, i)[-1] == VOID  # the last: the value the runtime keeps
    assert _env_of(out, "containers", 1)[0] == {"name": "A", "value": "b"}
    assert "op-1" in d.message and "side" in d.message
    assert all(len(w) < 120 for w in d.warnings) and d.warnings
    # idempotent: reinvoked on its own output, nothing more
    again = decide(Stage.MUTATE, Subject(kind="Pod", object=out, namespace="ml"), view,
                   _policy())
    assert again.patch == () and again.reason == Reason.NOT_GPU_POD


def test_its_own_value_is_overridden_not_trusted(node):
    pod = _web()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    d = _review([node], pod)[0].final
    out = jsonpatch.apply_patch(pod, d.patch)
    assert _env_of(out, "containers", 0) == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, VOID]
    # one that already asks for nothing is left as it is
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    d = _review([node], pod)[0].final
    assert not any("/containers/0/" in op["path"] for op in d.patch)


@pytest.mark.parametrize("why", ["tainted", "runc", "switch off", "exempt", "off",
                                 "no gpu node"])
def test_pods_that_cannot_be_handed_a_gpu_are_untouched(tmp_path, why):
    kw = {"default_runtime": "runc"} if why == "runc" else \
        {"envvar_unprivileged": False} if why == "switch off" else {}
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False, **kw)
    if why == "tainted":
        node["spec"]["taints"] = [TAINT]
    if why == "no gpu node":
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"}}
    namespace = "gpu-operator" if why == "exempt" else "ml"
    policy = _policy(ungranted="off") if why == "off" else None
    d = _review([node], _web(), namespace, policy)[0].final
    assert d.allowed and d.reason == Reason.NOT_GPU_POD and d.patch == (), d.to_json()
    assert not d.warnings


def test_privileged_containers_are_handed_gpus_whatever_the_switch(tmp_path):
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False,
                      envvar_unprivileged=False)
    pod = _web()
    pod["spec"]["containers"][1]["securityContext"] = {"privileged": True}
    d = _review([node], pod)[0].final
    assert [op["path"] for op in d.patch] == ["/spec/containers/1/env/-"]


def test_a_gpu_pods_other_containers_are_voided_and_its_gpu_container_left_alone(node):
    pod = gpu_pod("train", limits={"nvidia.com/gpu": 1})
    pod["spec"]["containers"].append({"name": "logger", "image": "nvidia/cuda"})
    rv, view = _review([node], pod)
    m = rv.mutation
    assert m is not None and m.allowed and m.gpu and m.pool == "operator"
    voids = [op for op in m.patch if "/env" in op["path"]]
    assert [op["path"] for op in voids] == ["/spec/containers/1/env"]
    assert rv.final.allowed
    # a later mutating webhook that drops the void is caught at validation
    out = jsonpatch.apply_patch(pod, m.patch)
    out["spec"]["containers"][1].pop("env")
    v = decide(Stage.VALIDATE, Subject(kind="Pod", object=out, namespace="ml"), view,
               _policy())
    assert not v.allowed and v.reason == Reason.GPU_NOT_GRANTED
    assert "later mutating webhook" in v.message


@pytest.mark.parametrize("mode", ["deny", "warn"])
def test_the_policy_picks_deny_or_warn(node, mode):
    d = _review([node], _web(), policy=_policy(ungranted=mode))[0].final
    if mode == "deny":
        assert not d.allowed and d.reason == Reason.GPU_NOT_GRANTED
        assert "op-1" in d.message and "access.exemptNamespaces" in d.message
    else:
        assert d.allowed and d.patch == () and d.warnings


def test_an_nri_annotation_for_a_container_without_a_grant_is_refused(tmp_path):
    node = agent_node(tmp_path, "op-1", None, "device-plugin", register=False)
    node["metadata"]["labels"][TOOLKIT_LABEL] = "true"
    pod = _web()
    pod["metadata"]["annotations"] = {
        f"{DOMAIN}/container.side": "k8s.device-plugin.nvidia.com/gpu=GPU-x"}
    d = _review([node, cluster_policy()], pod)[0].final
    assert not d.allowed and d.reason == Reason.GPU_NOT_GRANTED, d.to_json()
    assert "NRI plugin" in d.message and "side" in d.message
    # management devices the plugin drops for this namespace reach nobody
    pod["metadata"]["annotations"] = {f"{DOMAIN}/container.side":
                                      "management.nvidia.com/gpu=all"}
    assert _review([node, cluster_policy()], pod)[0].final.allowed


def _update(old: dict, new: dict, user: str, policy=None):
    policy = policy or _policy()
    view = view_from_objects([], policy)
    return decide(Stage.VALIDATE, Subject(kind="Pod", operation="UPDATE", object=new,
                                          old_object=old, namespace="ml", user=user),
                  view, policy)


def test_hamis_allocation_annotations_belong_to_its_scheduler():
    alloc = {"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,1000,10:;",
             "hami.io/bind-phase": "allocating"}
    pod = hami_pod()
    pod["metadata"]["annotations"] = dict(alloc)
    d = _review([], pod)[0].final
    assert not d.allowed and d.reason == Reason.FORGED_ALLOCATION
    assert "hami.io/bind-phase" in d.message and "hami.io/vgpu-devices-allocated" in d.message
    running = hami_pod()
    forged = copy.deepcopy(running)
    forged["metadata"]["annotations"] = dict(alloc)
    assert _update(running, forged, "alice").reason == Reason.FORGED_ALLOCATION
    assert _update(running, forged, OWNER).allowed  # HAMi's scheduler writes them
    assert _update(forged, forged, "alice").allowed  # unchanged: a label, a status
    changed = copy.deepcopy(forged)
    changed["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-2,NVIDIA,1,1:;"
    assert not _update(forged, changed, "alice").allowed
    assert _update(forged, running, "alice").allowed  # removing hands nobody a device
    other = copy.deepcopy(running)
    other["metadata"]["annotations"] = {"example.com/x": "y"}
    assert _update(running, other, "alice").allowed
    mine = _policy(schedulerIdentities=["system:serviceaccount:hami:hami-scheduler"])
    assert _update(running, forged, "system:serviceaccount:hami:hami-scheduler", mine).allowed


def test_gpupool_owns_hamis_opt_out_label_on_the_pods_it_routes(node):
    pod = hami_pod()
    pod["metadata"]["labels"] = {"hami.io/webhook": "ignore", "gpupool.io/pool": "hami"}
    m = _review([node], pod)[0].mutation
    assert m is not None and m.pool == "hami"
    assert {"op": "remove", "path": "/metadata/labels/hami.io~1webhook"} in m.patch
    out = jsonpatch.apply_patch(pod, m.patch)
    assert "hami.io/webhook" not in out["metadata"]["labels"]
    # on another pool's pods gpupool sets it, as before
    op = _review([node], gpu_pod("o", limits={"nvidia.com/gpu": 1}))[0].mutation
    assert op is not None and any(o["path"].endswith("labels") or "hami.io~1webhook" in
                                  o["path"] for o in op.patch)


@pytest.mark.parametrize("access, error", [
    ({"ungranted": "maybe"}, "access.ungranted: 'maybe' is not one of"),
    ({"exemptNamespaces": ["Bad_NS"]}, "access.exemptNamespaces[0]"),
    ({"schedulerIdentity": []}, "access.schedulerIdentity: unknown field"),
])
def test_bad_access_settings_name_the_field(access, error):
    with pytest.raises(PolicyError, match=error.replace("[", r"\[").replace("]", r"\]")):
        _policy(**access)


def test_a_bare_off_in_yaml_means_off():
    """YAML 1.1 reads ``ungranted: off`` as false; the user meant the choice."""
    policy = load_policy_text(default_policy_text() + "access:\n  ungranted: off\n")
    assert policy.access.ungranted == "off"


def test_a_running_pod_is_rejudged_for_its_restart_not_for_its_admission(tmp_path):
    """A running HAMi pod carries the annotations HAMi's scheduler wrote when it bound it,
    and may have a sidecar from before gpupool voided such containers: its next container
    start still gets its GPUs, so the scan says Fine, not a forged allocation or a failure
    (``aftercare.podrisk``)."""
    from webhook.engine import Outcome, recheck

    node = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True,
                      held={"u1": (UUIDS[0],)})
    policy = _policy()
    view = view_from_objects([node], policy, {"ml": {}})
    pod = hami_pod()
    pod["metadata"].update(name="train", namespace="ml", uid="u1")
    pod["spec"]["containers"].append({"name": "log", "image": "nvidia/cuda"})
    m = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace="ml"), view, policy)
    assert "/spec/containers/1/env" in [op["path"] for op in m.patch]
    running = jsonpatch.apply_patch(pod, [op for op in m.patch if "/env" not in op["path"]])
    running["metadata"]["annotations"].update({
        "hami.io/vgpu-devices-allocated": f"{UUIDS[0]},NVIDIA,1000,10:;",
        "hami.io/bind-phase": "success"})
    running["spec"]["nodeName"] = "hami-1"
    answer = recheck(running, view, policy)
    assert answer is not None and answer.outcome is Outcome.FINE, answer
    assert answer.reason == "Routed"
