"""GPU containers that set NVIDIA_VISIBLE_DEVICES themselves (``delivery.resolve_own``):
their value overrides the device plugin's. The real runtime's verdicts on the same values
are in tests/integration/test_runtime_oracle.py; here, the cases around them."""

from __future__ import annotations

from harness.kit import gpu_pod
from harness.layouts import UUIDS
from tests.unit.engine.test_steering import agent_node, decide, terms
from webhook.api import delivery
from webhook.engine.core.decision import Reason


def own(value: str | None = None, *, value_from: bool = False, second: bool = False) -> dict:
    pod = gpu_pod("own", limits={"nvidia.com/gpu": 1})
    env = {"name": "NVIDIA_VISIBLE_DEVICES"}
    if value_from:
        env["valueFrom"] = {"configMapKeyRef": {"name": "cm", "key": "devices"}}
    else:
        env["value"] = value
    pod["spec"]["containers"][0]["env"] = [env]
    if second:  # a second GPU container that leaves the plugin's value alone
        pod["spec"]["containers"].append({"name": "d", "image": "cuda", "resources": {
            "limits": {"nvidia.com/gpu": 1}}})
    return pod


def test_a_name_the_node_lacks_fails_and_the_fix_is_named(tmp_path):
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False,
                      per_uuid=True)
    rv, _, _ = decide([node], own("nvidia.com/gpu=all"))
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "op-1 lacks nvidia.com/gpu=all" in rv.final.message
    assert "remove NVIDIA_VISIBLE_DEVICES from the pod's GPU containers" in rv.final.message
    rv, _, _ = decide([node], own("void"))
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED


def test_the_plugins_value_still_counts_for_containers_that_do_not_override_it(tmp_path):
    """'all' resolves on a management-only node, but the second container gets the
    plugin's UUIDs, which do not."""
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False)
    assert decide([node], own("all"))[0].final.allowed
    rv, _, _ = decide([node], own("all", second=True))
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING


def test_a_value_from_a_reference_cannot_be_known_and_changes_nothing(tmp_path):
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False,
                      per_uuid=True)
    rv, _, _ = decide([node], own(value_from=True))
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()


def test_the_just_in_time_kind_names_the_nodes_own_gpus(tmp_path):
    node = agent_node(tmp_path, "op-jit", None, "operator-management", register=False,
                      default_kind=delivery.JIT_KIND)
    for value in ("all", "0", UUIDS[1], f"{delivery.JIT_KIND}={UUIDS[0]}"):
        assert decide([node], own(value))[0].final.allowed, value
    rv, _, _ = decide([node], own("GPU-00000000-0000-0000-0000-000000000000"))
    assert not rv.final.allowed  # not a GPU the node has


def test_such_pods_are_steered_node_by_node(tmp_path):
    bad = agent_node(tmp_path, "op-bad", None, "operator-management", register=False)
    good = agent_node(tmp_path / "g", "op-good", None, "nvidia-ctk", register=False)
    pod = own("nvidia.com/gpu=all")
    rv, _, _ = decide([bad, good], pod)
    assert rv.final.allowed, rv.final.to_json()
    fields = [e for t in terms(pod, rv.mutation.patch) for e in t.get("matchFields", [])]
    assert fields == [{"key": "metadata.name", "operator": "NotIn", "values": ["op-bad"]}]
