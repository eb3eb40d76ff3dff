"""Which pool each GPU pod lands in, and what is denied, over real upstream pods."""

from __future__ import annotations

import copy
from functools import partial

import jsonpatch
import pytest

from harness.kit import UPSTREAM, gpu_pod, load_docs, upstream_pods
from webhook.engine import Stage, decide_pod
from webhook.engine.admission import admit
from webhook.engine.core.decision import Reason
from webhook.engine.core.policy import load_policy_text
from webhook.engine.view.cluster import view_from_objects

#: The engine's entry, one stage at a time, as a pod's review reaches it.
mutate, validate = partial(decide_pod, Stage.MUTATE), partial(decide_pod, Stage.VALIDATE)

# What a reader of each upstream example expects: HAMi's sharing knobs and HAMi-only
# annotations go to HAMi; a plain whole-GPU request goes to the default (operator) pool.
EXPECTED = {
    "hami/nvidia/default_use.yaml:gpu-pod": "hami",  # gpumem + gpucores
    "hami/nvidia/default_use_legacy.yaml:gpu-pod": "operator",  # nvidia.com/gpu only
    "hami/nvidia/dynamic_mig_example.yaml:gpu-pod": "hami",  # gpumem, vgpu-mode annotation
    "hami/nvidia/mig_example.yaml:gpu-pod": "operator",  # MIG resource of NVIDIA's plugin
    "hami/nvidia/specify_card_type_not_use.yaml:gpu-pod": "hami",  # nvidia.com/nouse-gputype
    "hami/nvidia/specify_card_type_to_use.yaml:gpu-pod": "hami",  # nvidia.com/use-gputype
    "hami/nvidia/specify_scheduling_policy.yaml:gpu-pod": "hami",  # hami.io/*-scheduler-policy
    "hami/nvidia/specify_uuid_not_use.yaml:gpu-pod": "hami",  # nvidia.com/nouse-gpuuuid
    "hami/nvidia/specify_uuid_to_use.yaml:gpu-pod": "hami",  # nvidia.com/use-gpuuuid
    "hami/nvidia/use_as_normal.yaml:gpu-pod1": "operator",
    "hami/nvidia/use_as_normal.yaml:gpu-pod2": "operator",
    "hami/nvidia/use_exclusive_card.yaml:gpu-pod1": "hami",  # gpucores + gpumem-percentage
    "hami/nvidia/use_memory_fraction.yaml:gpu-pod": "hami",
    "hami/nvidia/use_sharing_card.yaml:gpu-pod1": "hami",
    "hami/nvidia/use_sharing_card.yaml:gpu-pod2": "hami",
    "nvidia/gpu-operator-docs-rdma-demo-pod-1.yaml:demo-pod-1": "operator",
    "nvidia/gpu-operator-docs-tf-notebook.yaml:tf-notebook": "operator",
    "nvidia/gpu-operator-tests-gpu-pod.yaml:gpu-operator-test": "operator",
}
SCHEDULER = {"hami": "hami-scheduler", "operator": "default-scheduler"}
PODS = dict(upstream_pods())


def test_every_upstream_pod_has_an_expectation():
    assert set(PODS) == set(EXPECTED)


@pytest.mark.parametrize("pod_id", sorted(EXPECTED))
def test_upstream_pod_routes_where_a_reader_expects(pod_id, policy):
    pod = PODS[pod_id]
    d = mutate(pod, "default", None, policy)
    assert d.allowed and d.gpu, d.message
    assert d.pool == EXPECTED[pod_id]
    out = jsonpatch.apply_patch(pod, d.patch)
    assert out["spec"]["schedulerName"] == SCHEDULER[d.pool]
    assert out["metadata"]["annotations"]["gpupool.io/pool"] == d.pool
    labels = out["metadata"].get("labels", {})
    assert (labels.get("hami.io/webhook") == "ignore") == (d.pool != "hami")
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    want = ({"key": "gpupool.io/pool", "operator": "In", "values": ["hami"]} if d.pool == "hami"
            else {"key": "gpupool.io/pool", "operator": "NotIn", "values": ["hami"]})
    assert all(want in t["matchExpressions"] for t in terms)
    # The validating pass accepts what the mutating pass produced.
    v = validate(out, "default", None, policy)
    assert v.allowed and v.pool == d.pool, v.message


def test_upstream_deployment_template_routes_to_hami(policy):
    from webhook.engine.admission.workloads import template_pod

    (deploy,) = load_docs(UPSTREAM / "pods/hami/nvidia/example.yaml")
    pod = template_pod(deploy, "Deployment", "default")
    assert admit.review_pod(pod, "default", None, policy).pool == "hami"


def test_non_gpu_pod_untouched(policy):
    pod = gpu_pod(limits={"cpu": "1", "memory": "1Gi"})
    d = mutate(pod, "default", None, policy)
    assert d.allowed and not d.gpu and d.patch == () and d.reason == Reason.NOT_GPU_POD


#: quantities that ask for nothing, and some that ask for something (or cannot be read, and
#: count as asking): tests/integration/test_cel_judge.py has Kubernetes' parser judge them
ZERO_QUANTITIES = ["0", "0Gi", "+0", "0.0", "0e3", " 0 ", "000", 0, 0.0]
OTHER_QUANTITIES = ["1", "8000", "1Gi", "0.5", "1e-3", "500m", "+1", "01", "junk", 1, 0.5]


@pytest.mark.parametrize("quantity", ZERO_QUANTITIES)
def test_zero_quantity_is_not_a_gpu_request(policy, quantity):
    d = mutate(gpu_pod(limits={"nvidia.com/gpu": quantity}), "default", None, policy)
    assert not d.gpu and d.patch == ()


@pytest.mark.parametrize("quantity", OTHER_QUANTITIES)
def test_any_other_quantity_is_a_gpu_request(policy, quantity):
    assert mutate(gpu_pod(limits={"nvidia.com/gpu": quantity}), "default", None, policy).gpu


def test_requests_alone_make_a_gpu_pod(policy):
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    assert mutate(pod, "default", None, policy).gpu


def test_init_container_gpu_counts(policy):
    pod = gpu_pod(limits={"cpu": "1"})
    pod["spec"]["initContainers"] = [{"name": "i", "image": "x", "resources": {
        "limits": {"nvidia.com/gpucores": 10}}}]
    d = mutate(pod, "default", None, policy)
    assert d.gpu and d.pool == "hami"


# ------------------------------------------------------------- order of evidence


def _nodes():
    def node(name, labels):
        return {"kind": "Node", "metadata": {"name": name, "labels": {
            "nvidia.com/gpu.present": "true", **labels}}}
    return [node("h1", {"gpupool.io/pool": "hami"}), node("o1", {}),
            node("o2", {"gpupool.io/pool": "something-else"}),
            {"kind": "Node", "metadata": {"name": "cpu1", "labels": {}}}]


@pytest.fixture
def view(policy):
    return view_from_objects(_nodes(), policy, {"team-hami": {"gpupool.io/pool": "hami"},
                                                "team-op": {"gpupool.io/pool": "operator"},
                                                "typo": {"gpupool.io/pool": "hamii"}})


def test_pod_label_wins_over_namespace(policy, view):
    pod = gpu_pod(limits={"nvidia.com/gpu": 1})
    pod["metadata"]["labels"] = {"gpupool.io/pool": "operator"}
    d = mutate(pod, "team-hami", view, policy)
    assert d.pool == "operator" and "label" in d.message


def test_unknown_pool_label_denied_listing_known(policy, view):
    pod = gpu_pod()
    pod["metadata"]["labels"] = {"gpupool.io/pool": "hamii"}
    d = mutate(pod, "default", view, policy)
    assert not d.allowed and d.reason == Reason.UNKNOWN_POOL
    assert "hami, operator" in d.message and "pod default/p" in d.message


def test_a_pool_label_that_is_not_a_string_is_denied_not_a_crash(policy, view):
    pod = gpu_pod()
    pod["metadata"]["labels"] = {"gpupool.io/pool": ["hami"]}
    d = mutate(pod, "default", view, policy)
    assert not d.allowed and d.reason == Reason.UNKNOWN_POOL and "names no pool" in d.message


def _with_env(pod: dict, value: str) -> dict:
    pod["spec"]["containers"][0]["env"] = [{"name": "RUN", "value": value}]
    return pod


#: one pod per input routing reads, each routed elsewhere than the plain pod (operator)
_ROUTE_INPUTS = {
    "namespace label": (lambda p: p, "team-hami"),
    "pool label": (lambda p: p["metadata"].update(labels={"gpupool.io/pool": "hami"}),
                   "default"),
    "nodeSelector": (lambda p: p["spec"].update(nodeSelector={"gpupool.io/pool": "hami"}),
                     "default"),
    "nodeName": (lambda p: p["spec"].update(nodeName="h1"), "default"),
    "exclusive resource": (lambda p: p["spec"]["containers"][0]["resources"]["limits"].update(
        {"nvidia.com/gpumem": 1000}), "default"),
    "exclusive annotation": (lambda p: p["metadata"].update(
        annotations={"nvidia.com/use-gputype": "A100"}), "default"),
}


def test_a_kept_route_is_a_fresh_views_route(policy, view):
    """Routing is kept per what it reads: after a pod routed by default, a pod new in
    anything it reads is routed as a view that keeps nothing routes it."""
    assert mutate(_with_env(gpu_pod(), "1"), "default", view, policy).pool == "operator"
    assert mutate(_with_env(gpu_pod(), "2"), "default", view, policy).pool == "operator"
    for what, (change, namespace) in _ROUTE_INPUTS.items():
        pod = _with_env(gpu_pod(), what)
        change(pod)
        kept = mutate(copy.deepcopy(pod), namespace, view, policy)
        fresh = mutate(pod, namespace, view_from_objects(_nodes(), policy, {
            "team-hami": {"gpupool.io/pool": "hami"}}), policy)
        assert kept.pool == fresh.pool == "hami", what
        assert (kept.reason, kept.message, kept.patch) == (fresh.reason, fresh.message,
                                                           fresh.patch), what
    # A change of the view routes anew: the default namespace now names the hami pool.
    view.replace_namespaces({"default": {"gpupool.io/pool": "hami"}})
    assert mutate(_with_env(gpu_pod(), "3"), "default", view, policy).pool == "hami"


def test_node_name_pins_pool(policy, view):
    assert mutate(gpu_pod(nodeName="h1"), "default", view, policy).pool == "hami"
    assert mutate(gpu_pod(nodeName="o2"), "default", view, policy).pool == "operator"


def test_node_name_contradicting_label_denied(policy, view):
    pod = gpu_pod(nodeName="o1")
    pod["metadata"]["labels"] = {"gpupool.io/pool": "hami"}
    d = mutate(pod, "default", view, policy)
    assert d.reason == Reason.POOL_CONFLICT
    assert "spec.nodeName o1" in d.message and "gpupool.io/pool=hami" in d.message


def test_node_selector_pins_pool_over_namespace(policy, view):
    pod = gpu_pod(nodeSelector={"gpupool.io/pool": "hami"})
    assert mutate(pod, "team-op", view, policy).pool == "hami"


def test_node_selector_with_unknown_value_means_default_pool(policy, view):
    pod = gpu_pod(nodeSelector={"gpupool.io/pool": "something-else"})
    assert mutate(pod, "team-hami", view, policy).pool == "operator"


def test_node_selector_contradicting_label_denied(policy, view):
    pod = gpu_pod(nodeSelector={"gpupool.io/pool": "hami"})
    pod["metadata"]["labels"] = {"gpupool.io/pool": "operator"}
    d = mutate(pod, "default", view, policy)
    assert d.reason == Reason.POOL_CONFLICT
    assert "nodeSelector gpupool.io/pool=hami" in d.message and "operator" in d.message


@pytest.mark.parametrize("expr,pool", [
    ({"operator": "In", "values": ["hami"]}, "hami"),
    ({"operator": "NotIn", "values": ["hami"]}, "operator"),
    ({"operator": "DoesNotExist"}, "operator"),
    ({"operator": "In", "values": ["x", "y"]}, "operator"),
])
def test_required_affinity_on_pool_label_pins(policy, view, expr, pool):
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpupool.io/pool", **expr}]}]}}}
    assert mutate(gpu_pod(affinity=aff), "team-hami" if pool == "operator" else "team-op",
                         view, policy).pool == pool


def test_affinity_admitting_both_pools_does_not_pin(policy, view):
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpupool.io/pool", "operator": "In",
                                   "values": ["hami"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    assert mutate(gpu_pod(affinity=aff), "team-op", view, policy).pool == "operator"
    assert mutate(gpu_pod(affinity=aff), "team-hami", view, policy).pool == "hami"


def test_namespace_label_routes(policy, view):
    assert mutate(gpu_pod(), "team-hami", view, policy).pool == "hami"


def test_namespace_label_naming_no_pool_warns_and_falls_through(policy, view):
    d = mutate(gpu_pod(), "typo", view, policy)
    assert d.allowed and d.pool == "operator"
    assert any("hamii" in w for w in d.warnings)


def test_exclusive_resource_routes_to_its_pool(policy, view):
    d = mutate(gpu_pod(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}),
                      "default", view, policy)
    assert d.pool == "hami" and "nvidia.com/gpumem" in d.message


def test_exclusive_resource_in_pod_bound_elsewhere_denied(policy, view):
    pod = gpu_pod(limits={"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50})
    d = mutate(pod, "team-op", view, policy)
    assert d.reason == Reason.EXCLUSIVE_RESOURCE_CONFLICT
    assert "nvidia.com/gpucores" in d.message and "namespace team-op" in d.message


def test_default_pool_when_no_evidence(policy, view):
    d = mutate(gpu_pod(), "default", view, policy)
    assert d.pool == "operator" and "default pool" in d.message


# ------------------------------------------------------------- schedulers


def test_custom_scheduler_left_alone_with_warning(policy):
    d = mutate(gpu_pod(schedulerName="volcano"), "default", None, policy)
    assert d.allowed and d.patch == () and d.reason == Reason.CUSTOM_SCHEDULER
    assert any("volcano" in w for w in d.warnings)
    assert validate(gpu_pod(schedulerName="volcano"), "default", None, policy).allowed


def test_other_pools_scheduler_is_overwritten_with_warning(policy):
    d = mutate(gpu_pod(schedulerName="hami-scheduler"), "default", None, policy)
    assert d.pool == "operator"
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "default-scheduler"} in d.patch
    assert any("hami-scheduler replaced" in w for w in d.warnings)


# ------------------------------------------------------------- validating pass


def _mutated(policy, pod, ns="default", view=None):
    return jsonpatch.apply_patch(pod, mutate(pod, ns, view, policy).patch)


def test_validate_catches_hami_rewriting_scheduler(policy):
    out = _mutated(policy, gpu_pod())
    out["spec"]["schedulerName"] = "hami-scheduler"  # as HAMi's webhook would, running later
    d = validate(out, "default", None, policy)
    assert d.reason == Reason.SCHEDULER_MISMATCH
    assert "hami-webhook" in d.message and "pod default/p" in d.message


def test_validate_without_scheduler_name_says_what_is_known(policy):
    """A pod sent to /validate by hand (never through the API server) is not blamed on a
    later webhook: nothing changed its scheduler, it never had one."""
    pod = gpu_pod()
    pod["spec"].pop("schedulerName", None)
    pod["metadata"]["labels"] = {"gpupool.io/pool": "hami"}
    d = validate(pod, "default", None, policy)
    assert d.reason == Reason.SCHEDULER_MISMATCH
    assert "has no spec.schedulerName" in d.message and "/mutate" in d.message
    assert "another mutating webhook changed" not in d.message


def test_validate_with_default_scheduler_names_both_likely_causes(policy):
    pod = gpu_pod()
    pod["metadata"]["labels"] = {"gpupool.io/pool": "hami"}
    pod["spec"]["schedulerName"] = "default-scheduler"
    d = validate(pod, "default", None, policy)
    assert "did not run" in d.message and "reset the field" in d.message


def test_validate_catches_hami_adding_gpucores(policy):
    out = _mutated(policy, gpu_pod())
    out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = 100
    d = validate(out, "default", None, policy)
    assert d.reason == Reason.HAMI_RESOURCE_OUTSIDE_POOL
    assert "nvidia.com/gpucores" in d.message and "hami-webhook" in d.message


def test_validate_catches_missing_affinity(policy):
    pod = gpu_pod()
    pod["metadata"]["annotations"] = {"gpupool.io/pool": "operator"}
    d = validate(pod, "default", None, policy)
    assert d.reason == Reason.AFFINITY_MISMATCH and "hami" in d.message


def test_validate_accepts_pod_bound_to_pool_node(policy, view):
    pod = gpu_pod(nodeName="h1", schedulerName="hami-scheduler")
    assert validate(pod, "default", view, policy).allowed


# ------------------------------------------------------------- other conventions


GPU_ON_POLICY = """
apiVersion: gpupool.io/v1alpha1
kind: PoolPolicy
poolLabel: gpu
defaultPool: operator
gpuResources: [nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpucores]
pools:
  - name: hami
    labelValues: ["on"]
    schedulerName: hami-scheduler
    exclusiveResources: [nvidia.com/gpumem, nvidia.com/gpucores]
  - name: operator
    schedulerName: default-scheduler
"""


def test_hami_gpu_on_convention():
    policy = load_policy_text(GPU_ON_POLICY)
    d = mutate(gpu_pod(limits={"nvidia.com/gpumem": 100}), "default", None, policy)
    assert d.pool == "hami"
    expr = {"key": "gpu", "operator": "In", "values": ["on"]}
    assert d.patch[-1]["value"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"] == [expr]
    d = mutate(gpu_pod(nodeSelector={"gpu": "on"}), "default", None, policy)
    assert d.pool == "hami"


def test_other_vendor_resources_when_configured():
    policy = load_policy_text(GPU_ON_POLICY.replace(
        "gpuResources: [", "gpuResources: [cambricon.com/vmlu, "))
    d = mutate(gpu_pod(limits={"cambricon.com/vmlu": 1}), "default", None, policy)
    assert d.gpu and d.pool == "operator"
    d = mutate(gpu_pod(limits={"cambricon.com/vmlu": 1}), "default", None,
                      load_policy_text(GPU_ON_POLICY))
    assert not d.gpu


def test_engine_does_not_modify_its_input(policy):
    pod = PODS["hami/nvidia/default_use.yaml:gpu-pod"]
    before = copy.deepcopy(pod)
    admit.review_pod(pod, "default", None, policy)
    assert pod == before


def test_daemonset_pods_pinned_by_match_fields_follow_their_node(policy, view):
    ds_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                "values": ["h1"]}]}]}}}
    d = mutate(gpu_pod(affinity=ds_affinity), "default", view, policy)
    assert d.pool == "hami" and "metadata.name h1" in d.message
    out = jsonpatch.apply_patch(gpu_pod(affinity=ds_affinity), d.patch)
    assert validate(out, "default", view, policy).allowed
    ds_affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchFields"][0]["values"] = ["o1"]
    assert mutate(gpu_pod(affinity=ds_affinity), "default", view, policy).pool == \
        "operator"
