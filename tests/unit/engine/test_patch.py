"""Patches: they apply, the result is a valid Pod, a second pass is empty, and they are
minimal and correctly escaped."""

from __future__ import annotations

import copy
from functools import partial

import jsonpatch
import kubernetes_validate
import pytest

from harness.kit import gpu_pod, upstream_pods
from webhook.engine import Stage, decide_pod
from webhook.engine.core import patch
from webhook.engine.pod.affinity import affinity_patch

#: The engine's entry, one stage at a time, as a pod's review reaches it.
mutate, validate = partial(decide_pod, Stage.MUTATE), partial(decide_pod, Stage.VALIDATE)

K8S_VERSION = "1.35.0"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def _shapes():
    """Pods covering every affinity layout the patch must handle."""
    yield "no-affinity", gpu_pod()
    yield "no-labels-no-annotations", {"apiVersion": "v1", "kind": "Pod",
                                       "metadata": {"name": "bare"},
                                       "spec": {"containers": [{"name": "c", "image": "i",
                                                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    yield "pod-affinity-only", gpu_pod(affinity={"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname"}}]}})
    yield "preferred-only", gpu_pod(affinity={"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": {
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}})
    yield "three-terms", gpu_pod(affinity={"nodeAffinity": {REQ: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        {"matchExpressions": [{"key": "gpu.type", "operator": "Exists"}]}]}}})
    yield "odd-keys", gpu_pod(limits={"nvidia.com/gpu": 1}) | {"metadata": {
        "name": "odd", "labels": {"a/b~c": "x"}, "annotations": {"x~/y": "1"}}}


@pytest.mark.parametrize("pod_id,pod", list(_shapes()) + upstream_pods(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_patch_applies_validates_and_is_idempotent(pod_id, pod, policy):
    original = copy.deepcopy(pod)
    d = mutate(pod, "default", None, policy)
    assert d.allowed and d.patch
    out = jsonpatch.apply_patch(pod, d.patch)
    assert pod == original
    kubernetes_validate.validate(out, K8S_VERSION, strict=True)
    assert mutate(out, "default", None, policy).patch == ()
    # Preferred terms and everything we do not own survive untouched.
    before_aff = (original["spec"].get("affinity") or {})
    after_aff = out["spec"]["affinity"]
    for key in ("podAntiAffinity", "podAffinity"):
        assert after_aff.get(key) == before_aff.get(key)
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    assert after_aff["nodeAffinity"].get(pref) == (before_aff.get("nodeAffinity") or {}).get(pref)
    for k, v in (original["metadata"].get("labels") or {}).items():
        assert out["metadata"]["labels"][k] == v


def test_expression_added_to_every_term(policy):
    pod = dict(_shapes())["three-terms"]
    d = mutate(pod, "default", None, policy)
    out = jsonpatch.apply_patch(pod, d.patch)
    terms = out["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    want = {"key": "gpupool.io/pool", "operator": "NotIn", "values": ["hami"]}
    assert len(terms) == 3 and all(want in t["matchExpressions"] for t in terms)
    # The matchFields term keeps its field and gains an expression list.
    assert terms[1]["matchFields"] == pod["spec"]["affinity"]["nodeAffinity"][REQ][
        "nodeSelectorTerms"][1]["matchFields"]


def test_minimal_operations(policy):
    d = mutate(gpu_pod(), "default", None, policy)
    assert [op["op"] for op in d.patch] == ["add", "add", "add"]
    assert [op["path"] for op in d.patch] == ["/metadata/labels", "/metadata/annotations",
                                             "/spec/affinity"]
    pod = dict(_shapes())["three-terms"]
    ops = affinity_patch(pod, {"key": "k", "operator": "In", "values": ["v"]})
    assert [op["path"] for op in ops] == [
        f"/spec/affinity/nodeAffinity/{REQ}/nodeSelectorTerms/0/matchExpressions/-",
        f"/spec/affinity/nodeAffinity/{REQ}/nodeSelectorTerms/1/matchExpressions",
        f"/spec/affinity/nodeAffinity/{REQ}/nodeSelectorTerms/2/matchExpressions/-"]


def test_pointer_escaping():
    assert patch.pointer("metadata", "labels", "hami.io/webhook") == \
        "/metadata/labels/hami.io~1webhook"
    assert patch.escape("a~/b") == "a~0~1b"  # '~' first, or '/' -> '~1' -> '~01'
    obj = {"metadata": {"labels": {"a~/b": "1"}}}
    ops = patch.set_map_entry(obj, ("metadata", "labels"), "a~/b", "2")
    assert jsonpatch.apply_patch(obj, ops)["metadata"]["labels"]["a~/b"] == "2"


def test_encoded_patch_round_trips():
    import base64
    import json

    ops = [patch.add("/metadata/labels/x~1y", "z")]
    assert json.loads(base64.b64decode(patch.encode_patch(ops))) == ops


@pytest.mark.parametrize("pod_id,pod", list(_shapes()) + upstream_pods(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_own_applier_agrees_with_jsonpatch_and_leaves_input_alone(pod_id, pod, policy):
    original = copy.deepcopy(pod)
    ops = mutate(pod, "default", None, policy).patch
    assert patch.apply(pod, ops) == jsonpatch.apply_patch(pod, ops)
    assert pod == original


def test_own_applier_never_writes_into_a_patch_value():
    """Patches are memoised per pod shape and reused: a later operation that writes inside a
    value an earlier one added must copy it, not change the memoised patch."""
    ops = [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {}}},
           {"op": "add", "path": "/spec/affinity/nodeAffinity/x", "value": [1]}]
    first = patch.apply({"spec": {}}, ops)
    assert first["spec"]["affinity"] == {"nodeAffinity": {"x": [1]}}
    assert ops[0]["value"] == {"nodeAffinity": {}}  # untouched
    assert patch.apply({"spec": {}}, ops) == first  # and reusable
