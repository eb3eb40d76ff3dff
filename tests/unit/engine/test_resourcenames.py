"""Resource names that look like GPU resources but that nothing serves: named, with the name
they likely meant, never mistaken for a pod without GPUs in silence; and names the cluster
does serve left alone."""

from __future__ import annotations

import pytest

from tests.unit.engine.test_steering import decide
from webhook.engine.core.decision import Reason
from webhook.files.policyfile import default_policy_text


def _node(name: str, **allocatable: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "nvidia.com/gpu.present": "true"}}, "status": {"allocatable": allocatable,
                                                     "capacity": allocatable}}


NODES = [_node("op-1", **{"nvidia.com/gpu": "8"}),
         _node("mig-1", **{"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-3g.20gb": "2"})]


def _pod(name: str, limits: dict[str, int]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": limits}}]}}


DENY = default_policy_text().replace("defaultPool:", "onUnknownGPUResource: deny\ndefaultPool:")


@pytest.mark.parametrize(("asked", "meant"), [
    ("nvidia.com/gpus", "nvidia.com/gpu"),
    ("nvidia.com/GPU", "nvidia.com/gpu"),
    ("nvdia.com/gpu", "nvidia.com/gpu"),
    ("nivdia.com/gpu", "nvidia.com/gpu"),
])
def test_a_misspelt_gpu_resource_is_warned_with_the_name_it_meant(asked, meant):
    final = decide(NODES, _pod("p", {asked: 1}))[0].final
    assert final.allowed and not final.gpu
    assert f"gpupool: no node serves {asked} (did you mean {meant}?)" in final.warnings[0]
    denied = decide(NODES, _pod("p", {asked: 1}), DENY)[0].final
    assert not denied.allowed and denied.reason == Reason.UNKNOWN_GPU_RESOURCE
    assert f"asks for {asked} (did you mean {meant}?)" in denied.statement
    assert "onUnknownGPUResource: warn" in denied.statement


def test_a_misspelt_hami_resource_beside_a_gpu_is_named():
    final = decide(NODES, _pod("p", {"nvidia.com/gpu": 1, "nvidia.com/gpumemory": 3000}))[0].final
    assert final.allowed and final.gpu
    assert any("nvidia.com/gpumemory (did you mean nvidia.com/gpumem?)" in w
               for w in final.warnings), final.warnings


def test_an_unknown_mig_profile_is_named_as_unknown_not_as_a_missing_cdi_device():
    final = decide(NODES, _pod("p", {"nvidia.com/mig-1g.5gbb": 1}))[0].final
    assert final.allowed
    assert any("nvidia.com/mig-1g.5gbb (did you mean nvidia.com/mig-1g.5gb?)" in w
               for w in final.warnings), final.warnings
    denied = decide(NODES, _pod("p", {"nvidia.com/mig-1g.5gbb": 1}), DENY)[0].final
    assert denied.reason == Reason.UNKNOWN_GPU_RESOURCE
    assert "a MIG profile no node advertises" in denied.statement


def test_names_the_cluster_serves_and_other_vendors_are_left_alone():
    served = [*NODES, _node("odd-1", **{"nvidia.com/gpus": "1"})]
    for nodes, limits in ((served, {"nvidia.com/gpus": 1}),
                          (NODES, {"nvidia.com/mig-3g.20gb": 1}),
                          (NODES, {"amd.com/gpu": 1}),
                          (NODES, {"nvidia.com/gpumem": 1000, "nvidia.com/gpu": 1}),
                          (NODES, {"example.com/fpga": 1})):
        final = decide(nodes, _pod("p", limits), DENY)[0].final
        assert final.reason != Reason.UNKNOWN_GPU_RESOURCE, limits
        assert not any("no node serves" in w for w in final.warnings), (limits, final.warnings)


def test_a_device_class_extended_resource_is_served():
    klass = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": "gpu.example.com"},
             "spec": {"extendedResourceName": "nvidia.com/gpu-dra"}}
    final = decide([*NODES, klass], _pod("p", {"nvidia.com/gpu-dra": 1}), DENY)[0].final
    assert final.reason != Reason.UNKNOWN_GPU_RESOURCE
