"""gpupool against NVIDIA's NRI plugin itself: the devices a pod names in its
``nvidia.cdi.k8s.io`` annotations, on a node where the GPU Operator runs the plugin.

The judge is ``nri-inject`` (tests/runtime_oracle.py): the toolkit's plugin, built from
nvidia-container-toolkit v1.20.2, registered with containerd/nri's runtime side over a real
socket, one CreateContainer round trip, and its adjustment applied with NRI's spec generator
and the CDI library as containerd v2.2 applies it. A container the plugin leaves without the
devices its annotation names starts without them: that is a failure too."""

from __future__ import annotations

import json

import pytest

from harness.kit import gpu_pod
from harness.layouts import UUIDS
from tests.runtime_oracle import OracleNode
from tests.stacknames import MANAGEMENT_KIND as MANAGEMENT
from tests.stacknames import NRI_DOMAIN as DOMAIN
from tests.unit.engine.test_nri import cluster_policy, operator_node
from webhook.engine import Reason, Review, Subject, load_policy_text, review, view_from_objects
from webhook.files.policyfile import default_policy_text

ALL = f"{MANAGEMENT}=all"
DP = "k8s.device-plugin.nvidia.com/gpu"
OPERATOR_NS = "gpu-operator"


def decide(node: dict, cp: dict, pod: dict, namespace: str) -> Review:
    policy = load_policy_text(default_policy_text())
    view = view_from_objects([node], policy, resources=[cp])
    pod["metadata"]["namespace"] = namespace
    return review(Subject(kind="Pod", object=pod, namespace=namespace), view,
                        policy)


CASES = [
    # (namespace, extra allowed namespaces, annotation key suffix, value, gpupool's reason)
    ("team-a", None, "/container.c", ALL, Reason.GPU_NOT_DELIVERED),
    ("team-a", "team-a", "/container.c", ALL, None),  # the fix gpupool names, applied
    (OPERATOR_NS, None, "/pod", ALL, None),  # the toolkit's own namespace
    ("team-a", None, "", ALL, Reason.GPU_NOT_DELIVERED),  # the bare key counts as well
    ("team-a", "team-a", "/pod", f"{ALL},{MANAGEMENT}={UUIDS[0]}", Reason.CDI_DEVICE_MISSING),
    ("team-a", None, "/container.c", f"{DP}={UUIDS[0]}", None),  # not management: any ns
    ("team-a", None, "/container.c", f"{DP}={UUIDS[0]}, {DP}={UUIDS[1]}",  # no trimming
     Reason.CDI_DEVICE_MISSING),
    ("team-a", None, "/container.c", f"{DP}={UUIDS[0]},{ALL}", Reason.GPU_NOT_DELIVERED),
    ("team-a", None, "/container.c", "nvidia.com/gpu=all", Reason.CDI_DEVICE_MISSING),
    ("team-a", None, "/container.other", ALL, None),  # another container's: not this one's
]


@pytest.mark.parametrize("namespace, extra, suffix, value, reason", CASES)
def test_gpupool_agrees_with_the_real_nri_plugin(tmp_path, namespace, extra, suffix, value,
                                                 reason):
    node = operator_node(tmp_path)
    inv = json.loads(node["metadata"]["annotations"]["gpupool.io/cdi-inventory"])
    spec_dirs = [tmp_path / "op-1" / "etc/cdi", tmp_path / "op-1" / "var/run/cdi"]
    assert all(d.is_dir() for d in spec_dirs) and inv["kinds"][DP]
    oracle = OracleNode(tmp_path / "oracle", spec_dirs, None)
    allowed = (OPERATOR_NS, *([extra] if extra else []))
    annotations = {DOMAIN + suffix: value}
    v = oracle.nri(namespace, annotations, "c", allowed)
    names_it = suffix in ("", "/pod", "/container.c")
    runs = v.ok and (bool(v.devices) or not names_it)

    pod = gpu_pod("mon")
    pod["metadata"]["annotations"] = annotations
    rv = decide(node, cluster_policy(extra=extra), pod, namespace)
    assert rv.final.allowed == runs, (v, rv.final.to_json())
    assert (rv.final.reason if not rv.final.allowed else None) == reason, rv.final.to_json()
    if not v.ok:
        assert "unresolvable CDI devices" in v.error and "op-1 lacks" in rv.final.message
    if rv.final.allowed:
        assert not rv.final.warnings, rv.final.to_json()
    if reason is Reason.GPU_NOT_DELIVERED:
        assert "not in one of the allowed namespaces" in v.error  # the plugin's own log line
        assert f"namespace {namespace}" in rv.final.message


@pytest.mark.parametrize("namespace, extra", [("team-a", "team-a"), ("team-a", None)])
@pytest.mark.parametrize("value", ["all", "one", "both"])
def test_a_gpu_that_arrives_but_not_the_one_hami_accounted_for(tmp_path, namespace, extra,
                                                               value):
    """HAMi's envvar pod on a node of the GPU Operator's NRI setup (containerd's default
    runtime is runc: NVIDIA_VISIBLE_DEVICES, which only NVIDIA's runtime reads, reaches
    nothing, as modelled in webhook/api/delivery.py), annotated for the NRI plugin. The real
    plugin decides what arrives: where it injects the device nodes of every GPU HAMi could
    account for (the driver's minor numbers), the accounted one arrives and the pod starts
    as accounted (issue 46, item 4); where it injects only some, a GPU arrives that HAMi
    may not have accounted for (GPUNotAccounted); where it drops the annotation (namespace
    not allowed), nothing arrives (GPUNotDelivered)."""
    from harness.layouts import UUIDS
    from tests.stacknames import TOOLKIT_DEPLOY_LABEL
    from tests.unit.engine.test_steering import agent_node, hami_pod

    node = agent_node(tmp_path, "hami-nri", "hami", "operator-management",
                      default_runtime="runc", per_uuid=True)
    node["metadata"]["labels"][TOOLKIT_DEPLOY_LABEL] = "true"
    spec_dirs = [tmp_path / "hami-nri" / "etc/cdi", tmp_path / "hami-nri" / "var/run/cdi"]
    oracle = OracleNode(tmp_path / "oracle", spec_dirs, None)
    names = {"all": ALL, "one": f"{MANAGEMENT}={UUIDS[0]}",
             "both": ",".join(f"{MANAGEMENT}={u}" for u in UUIDS)}[value]
    annotations = {DOMAIN + "/pod": names}
    v = oracle.nri(namespace, annotations, "h", (OPERATOR_NS, *([extra] if extra else [])))
    pod = hami_pod()
    pod["metadata"]["annotations"] = annotations
    rv = decide(node, cluster_policy(extra=extra), pod, namespace)
    # the driver's word on each GPU's device node (harness.layouts.fake_driver, Device Minor)
    accounted = {f"/dev/nvidia{i}" for i in range(len(UUIDS))}
    injected = {d["path"] for d in v.devices} if v.ok else set()
    if injected >= accounted:
        assert rv.final.allowed and not rv.final.warnings, (v, rv.final.to_json())
    elif injected:
        assert rv.final.reason == Reason.GPU_NOT_ACCOUNTED, rv.final.to_json()
    else:
        assert rv.final.reason == Reason.GPU_NOT_DELIVERED, (v, rv.final.to_json())
    assert bool(extra) == bool(injected)  # both sides met
