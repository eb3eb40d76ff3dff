"""Property tests: generated pods and AdmissionReviews around them, thousands of examples.

Invariants: the handler never raises and always answers with the request's uid and
apiVersion; every patch applies and yields a valid Pod; a second pass is empty; a non-GPU pod
is never patched; the same input always gets the same decision; warnings and messages stay
within the admission limits.
"""

from __future__ import annotations

import base64
import copy
import json
import os
from functools import partial

import jsonpatch
import kubernetes_validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.kit import IN_CI, only_voids
from webhook.engine import (
    WARNING_LIMIT,
    ClusterView,
    Stage,
    decide_pod,
    review_pod,
    view_from_objects,
)
from webhook.files.policyfile import default_policy
from webhook.server.app import Webhook
from webhook.server.policysource import PolicySource

#: The engine's entry, one stage at a time, as a pod's review reaches it.
mutate, validate = partial(decide_pod, Stage.MUTATE), partial(decide_pod, Stage.VALIDATE)

EXAMPLES = int(os.environ.get("GPUPOOL_PROPERTY_EXAMPLES", "1000" if IN_CI else "400"))
POLICY = default_policy()

dns_label = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?\Z")
label_key = st.one_of(
    st.sampled_from(["gpupool.io/pool", "kubernetes.io/hostname", "zone", "gpu",
                     "nvidia.com/gpu.product", "a.b-c_d/e.f"]),
    st.builds(lambda p, n: f"{p}/{n}", dns_label, dns_label), dns_label)
label_value = st.one_of(st.sampled_from(["hami", "operator", "on", "", "x"]),
                        st.from_regex(r"\A[A-Za-z0-9]([A-Za-z0-9_.-]{0,10}[A-Za-z0-9])?\Z"))
resource = st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
                            "nvidia.com/gpumem-percentage", "nvidia.com/priority",
                            "nvidia.com/mig-1g.10gb", "cpu", "memory", "amd.com/gpu",
                            "example.com/foo"])
quantity = st.one_of(st.integers(0, 100), st.sampled_from(["0", "1", "500m", "2Gi", "10"]))
resources = st.fixed_dictionaries({}, optional={
    "limits": st.dictionaries(resource, quantity, max_size=4),
    "requests": st.dictionaries(resource, quantity, max_size=4)})
container = st.builds(lambda n, r: {"name": n, "image": "img", "resources": r}, dns_label,
                      resources)
operator = st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])


@st.composite
def expression(draw):
    op = draw(operator)
    expr = {"key": draw(label_key), "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = draw(st.lists(label_value, min_size=1, max_size=3))
    elif op in ("Gt", "Lt"):
        expr["values"] = [str(draw(st.integers(0, 99)))]
    return expr


@st.composite
def node_term(draw):
    term = {}
    if draw(st.booleans()):
        term["matchExpressions"] = draw(st.lists(expression(), min_size=1, max_size=3))
    if draw(st.booleans()) or not term:
        term["matchFields"] = [{"key": "metadata.name", "operator": draw(
            st.sampled_from(["In", "NotIn"])), "values": [draw(dns_label)]}]
    return term


toleration = st.fixed_dictionaries({"operator": st.sampled_from(["Exists", "Equal"])}, optional={
    "key": label_key, "value": label_value,
    "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])})


@st.composite
def pods(draw):
    names = draw(st.lists(dns_label, min_size=1, max_size=3, unique=True))
    spec: dict = {"containers": [draw(container) | {"name": n} for n in names]}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(container) | {"name": f"init-{i}"} for i in range(
            draw(st.integers(1, 2)))]
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(label_key, label_value, max_size=3))
    if draw(st.booleans()):
        aff: dict = {"nodeAffinity": {}}
        if draw(st.booleans()):
            aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": draw(st.lists(node_term(), min_size=1, max_size=3))}
        if draw(st.booleans()):
            aff["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": draw(st.integers(1, 100)), "preference": {
                    "matchExpressions": draw(st.lists(expression(), min_size=1, max_size=2))}}]
        spec["affinity"] = aff
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(toleration, max_size=3))
    spec["schedulerName"] = draw(st.sampled_from(
        ["default-scheduler", "default-scheduler", "hami-scheduler", "volcano"]))
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(["h1", "o1", "unknown-node"]))
    if draw(st.booleans()):
        spec["runtimeClassName"] = draw(st.sampled_from(["nvidia-legacy", "nvidia-cdi"]))
    meta: dict = {"name": draw(dns_label), "namespace": "default"}
    labels = draw(st.dictionaries(label_key, label_value, max_size=3))
    if draw(st.integers(0, 4)) == 0:
        labels["gpupool.io/pool"] = draw(st.sampled_from(["hami", "operator", "nope"]))
    if labels:
        meta["labels"] = labels
    ann = draw(st.dictionaries(st.sampled_from(
        ["nvidia.com/use-gpuuuid", "nvidia.com/vgpu-mode", "x.io/y", "gpupool.io/pool"]),
        st.text(max_size=20), max_size=2))
    if ann:
        meta["annotations"] = ann
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _view() -> ClusterView:
    return view_from_objects([
        {"metadata": {"name": "h1", "labels": {"gpupool.io/pool": "hami",
                                               "nvidia.com/gpu.present": "true"}}},
        {"metadata": {"name": "o1", "labels": {"nvidia.com/gpu.present": "true"}},
         "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
        {"metadata": {"name": "bad", "labels": {"nvidia.com/gpu.present": "true"},
                      "annotations": {"gpupool.io/cdi-inventory": "{garbage"}}}],
        POLICY, {"default": {}})


VIEW = _view()
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=IN_CI,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _within_limits(d) -> None:
    for w in d.warnings:
        assert len(w) < WARNING_LIMIT and w.isprintable()


@SETTINGS
@given(pods())
def test_engine_invariants(pod):
    original = copy.deepcopy(pod)
    d = mutate(pod, "default", VIEW, POLICY)
    assert pod == original  # never mutates its input
    _within_limits(d)
    if not d.gpu:
        # untouched, but for NVIDIA_VISIBLE_DEVICES=void in containers without a GPU grant
        # where it can reach a node that would hand them GPUs (docs/security.md)
        assert d.patch == () or (d.reason == "GPUAccessVoided" and only_voids(d.patch))
    if d.patch:
        out = jsonpatch.apply_patch(pod, d.patch)
        # The patched pod is a valid Pod whenever the input was one.
        try:
            kubernetes_validate.validate(pod, "1.35.0", strict=True)
        except kubernetes_validate.ValidationError:
            pass
        else:
            kubernetes_validate.validate(out, "1.35.0", strict=True)
        again = mutate(out, "default", VIEW, POLICY)
        assert again.patch == (), again.patch
        assert again.pool == d.pool
    assert mutate(pod, "default", VIEW, POLICY).to_json() == d.to_json()  # determinism
    v = review_pod(pod, "default", VIEW, POLICY)
    _within_limits(v)
    assert review_pod(pod, "default", VIEW, POLICY).to_json() == v.to_json()


@st.composite
def reviews(draw):
    version = draw(st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]))
    uid = draw(st.text(min_size=1, max_size=40))
    return version, uid, {
        "apiVersion": version, "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "operation": draw(st.sampled_from(["CREATE", "CREATE", "UPDATE",
                                                       "DELETE", "CONNECT"])),
                    "namespace": "default", "object": draw(pods()),
                    "dryRun": draw(st.booleans())}}


HANDLER = Webhook(policies=PolicySource(), view=VIEW)


@SETTINGS
@given(reviews(), st.sampled_from(["mutate", "validate"]))
def test_handler_contract(r, endpoint):
    version, uid, review = r
    status, out = HANDLER.handle(endpoint, json.dumps(review).encode(), "application/json")
    assert status == 200
    assert out["apiVersion"] == version and out["response"]["uid"] == uid
    resp = out["response"]
    assert ("patch" in resp) == ("patchType" in resp)
    if endpoint == "validate":
        assert "patch" not in resp
    if "patch" in resp:
        ops = json.loads(base64.b64decode(resp["patch"]))
        jsonpatch.apply_patch(review["request"]["object"], ops)
    for w in resp.get("warnings", []):
        assert len(w) < WARNING_LIMIT and w.isprintable()
    if not resp["allowed"]:
        assert 400 <= resp["status"]["code"] < 600 and resp["status"]["message"]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_crash(data):
    status, out = HANDLER.handle("mutate", data, "application/json")
    assert status in (200, 400, 413, 415)
    if status == 200:
        assert isinstance(out["response"]["uid"], str) and out["response"]["uid"]
    else:
        assert out["kind"] in ("Status", "AdmissionReview") and "gpupool:" in json.dumps(out)


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c,
                                                                        max_size=3),
                    max_leaves=30))
def test_wrong_types_at_every_level_never_crash(junk):
    """Any JSON value in place of the object, its metadata, spec, containers, resources."""
    for path in ([], ["metadata"], ["spec"], ["spec", "containers"], ["spec", "affinity"],
                 ["spec", "tolerations"], ["metadata", "labels"]):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "resources": {
                   "limits": {"nvidia.com/gpu": 1}}}]}}
        if path:
            target = pod
            for p in path[:-1]:
                target = target[p]
            target[path[-1]] = junk
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE",
                              "object": pod if path else junk}}
        for endpoint in ("mutate", "validate"):
            status, out = HANDLER.handle(endpoint, json.dumps(review).encode(),
                                         "application/json")
            assert status in (200, 400)
            if status == 200:
                assert out["response"]["uid"] == "u"
                assert "InternalError" not in json.dumps(out), out
