"""Routing in the API server on the patches of a release that behave differently from the
one the layer runs: the compiled MutatingAdmissionPolicy judged on each, as
``test_native_routing`` judges it on the layer's own API server.

Kubernetes 1.36 before v1.36.5 panics during admission on a JSON patch whose value holds a
list of typed ``Object`` initializers (kubernetes#142181; fixed by #140419, cherry-picked to
release-1.36 by #140557): the request's connection is dropped whatever ``failurePolicy``
says, so every GPU pod such a policy claims fails to be created. gpupool's patches are plain
CEL maps and lists (``native.routing._value``), and must route every claimed pod there exactly
as on a fixed release. The first test shows the judge sees the bug at all: a policy of the
shape the issue names makes that API server drop the request.

Each patch's kube-apiserver is built from its module (tests/tools/build-kube-apiserver.sh);
etcd and kubectl are the layer's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import install
from harness.controlplane import ControlPlane
from harness.gobuild import built
from harness.kit import ROOT
from tests.e2e.test_native_routing import DROPPED, Judge, agreement, judging, outage

pytestmark = pytest.mark.e2e

BUILD = ROOT / "tests" / "tools" / "build-kube-apiserver.sh"
#: Patches judged beside the layers' own (v1.35.4, v1.36.5, v1.37.2): the last 1.36 patch
#: before the fix (docs/compatibility.md, "Routing in the API server").
PATCHES = ("v1.36.3",)


@pytest.fixture(scope="module", params=PATCHES)
def patch_bin(request, k8s_bin, tmp_path_factory) -> Path:
    """A bin directory with that patch's kube-apiserver, and the layer's etcd and kubectl."""
    apiserver = built(BUILD, f"kube-apiserver {request.param}", request.param)
    here = tmp_path_factory.mktemp(f"bin-{request.param}")
    (here / "kube-apiserver").symlink_to(apiserver / "kube-apiserver")
    for program in ("etcd", "kubectl"):
        (here / program).symlink_to(k8s_bin / program)
    return here


@pytest.fixture(scope="module")
def patch_judged(patch_bin, tmp_path_factory):
    with judging(patch_bin, tmp_path_factory.mktemp("patch")) as j:
        yield j


#: kubernetes#142181's shape: a patch value that is a list of typed Object initializers.
OBJECT_LIST_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
    "metadata": {"name": "object-list"},
    "spec": {
        "failurePolicy": "Ignore", "reinvocationPolicy": "Never",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods"]}]},
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
            "[JSONPatch{op: 'add', path: '/spec/tolerations', value: "
            "[Object.spec.tolerations{key: 'example.com/x', operator: 'Exists'}]}]")}}]}}


def test_the_judge_sees_the_bug_a_list_of_object_initializers_drops_the_request(
        patch_bin, tmp_path_factory):
    cp = ControlPlane(tmp_path_factory.mktemp("bug") / "cp", patch_bin).start()
    try:
        binding = {"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": "MutatingAdmissionPolicyBinding",
                   "metadata": {"name": "object-list"}, "spec": {"policyName": "object-list"}}
        r = install.apply(cp, [OBJECT_LIST_POLICY, binding])
        assert r.returncode == 0, r.stderr
        judge = Judge(cp)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        answers: list[object] = []

        def dropped() -> bool:
            answers.append(judge.create("default", pod))
            return isinstance(answers[-1], str) and answers[-1].startswith(DROPPED)

        # (the policy takes effect a moment after it is written)
        install.wait_until(dropped, "the API server to drop the request", 60)
        assert "reflect.Set" in cp.log("kube-apiserver"), json.dumps(answers[-3:])[:2000]
    finally:
        cp.stop()


def test_policy_and_webhook_agree_on_every_pod_the_policy_claims(patch_judged):
    agreement(patch_judged)


def test_in_an_outage_the_policys_pods_are_created_and_every_other_gpu_pod_waits(
        patch_judged):
    outage(patch_judged)
