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


def test_a_value_from_a_reference_is_doubt_where_the_plugins_own_would_fail(tmp_path):
    """Where the plugin's UUIDs fail, a value from valueFrom replaces them with one that
    cannot be known: a warning naming the node, never a denial; steered off where another
    node takes the pod."""
    bad = agent_node(tmp_path, "op-1", None, "operator-management", register=False)
    rv, _, _ = decide([bad], own(value_from=True))
    assert rv.final.allowed and any("(op-1)" in w for w in rv.final.warnings), \
        rv.final.to_json()
    assert "valueFrom" in rv.validation.message
    good = agent_node(tmp_path, "op-2", None, "operator-management", register=False,
                      per_uuid=True)
    pod = own(value_from=True)
    rv, _, _ = decide([bad, good], pod)
    assert rv.final.allowed
    (term,) = terms(pod, rv.mutation.patch)
    assert {"key": "metadata.name", "operator": "NotIn", "values": ["op-1"]} in \
        term["matchFields"]


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


def test_the_legacy_hook_reads_a_pods_own_value_as_nvidia_container_cli_selects(tmp_path):
    """Issue 34, item 8. Under the legacy hook the toolkit takes the first all/none/void/empty
    name as the whole answer (toolkit v1.20.2 internal/config/image/devices.go,
    NewVisibleDevices); other names go to nvidia-container-cli --device=, which takes whole
    GPU or MIG UUIDs (case-insensitive), PCI bus ids, GPU indices and <gpu>:<mig> indices,
    and fails the container on anything else (libnvidia-container src/cli/common.c,
    select_devices: '<name>: unknown device'). The cli needs the driver: modelled, cited."""
    node = agent_node(tmp_path, "op-legacy", None, "operator-management", register=False,
                      mode="legacy")
    for value in ("all", "0", "1", UUIDS[1], UUIDS[0].lower(), f"0,{UUIDS[1]}",
                  f"{UUIDS[0]},all", ",0"):
        rv, _, _ = decide([node], own(value))
        assert rv.final.allowed and not rv.final.warnings, (value, rv.final.to_json())
    for value in ("none", "void", "all,none"[4:], "none,all"):
        rv, _, _ = decide([node], own(value))
        assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED, value
    for value, bad in (("2", "2"), ("GPU-00000000-0000-0000-0000-000000000000",
                                    "GPU-00000000-0000-0000-0000-000000000000"),
                       (UUIDS[0][:12], UUIDS[0][:12]),  # a prefix: whole UUIDs only
                       ("nvidia.com/gpu=all", "nvidia.com/gpu=all"), (f"0,{'x'}", "x")):
        rv, _, _ = decide([node], own(value))
        assert not rv.final.allowed and rv.final.reason == Reason.UNKNOWN_DEVICE, value
        assert f"'{bad}: unknown device'" in rv.final.message
    # what the inventory cannot tell (a PCI bus id, a MIG index or MIG UUID with no MIG
    # device listed): doubt, not a denial
    for value in ("0000:17:00.0", "0:1", "MIG-0a1b2c3d-0000-5000-8000-000000000001"):
        rv, _, _ = decide([node], own(value))
        assert rv.final.allowed and rv.final.warnings, value
