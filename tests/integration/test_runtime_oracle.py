"""The real-runtime oracle's own cases, and gpupool's decisions checked against it.

The oracle (tests/runtime_oracle.py) is the real nvidia-container-runtime and the real CDI
library. Each node layout is the one gpupool's own agent scans; gpupool must allow a pod
exactly when the real stack would create its container with every GPU the device plugin could
hand it."""

from __future__ import annotations

import pytest

from harness.layouts import UUIDS, hami_register, nvidia_config, per_uuid_spec, write_layout
from tests.runtime_oracle import OracleNode
from tests.unit.engine.test_cdi import HAMI_POD, OPERATOR_POD, check, inventory, node

SEED_ERROR = f"unresolvable CDI devices management.nvidia.com/gpu={UUIDS[0]}"


def oracle_for(tmp_path, layout: str, *, per_uuid: bool = False,
               mode: str | None = None) -> tuple[OracleNode, dict]:
    paths = write_layout(tmp_path / "node", layout)
    if per_uuid:
        (paths["run"] / "management.nvidia.com-gpu-uuid.yaml").write_text(per_uuid_spec())
    if mode is not None:
        paths["config"].write_text(nvidia_config(mode, "management.nvidia.com/gpu"))
    return OracleNode(tmp_path / "oracle", [paths["etc"], paths["run"]], paths["config"],
                      gpus=UUIDS), paths


def test_seed_case_fails_with_the_real_error_text(tmp_path):
    oracle, _ = oracle_for(tmp_path, "operator-management")
    v = oracle.create(UUIDS[0])
    assert not v.ok and v.by == "nvidia-container-runtime"
    assert SEED_ERROR in v.error


def test_per_uuid_management_spec_resolves(tmp_path):
    oracle, _ = oracle_for(tmp_path, "operator-management", per_uuid=True)
    for uuid in UUIDS:
        v = oracle.create(uuid)
        assert v.ok, v.error
        assert v.spec["linux"]["devices"], "the CDI device's node was injected"


def test_legacy_mode_touches_no_cdi(tmp_path):
    oracle, _ = oracle_for(tmp_path, "operator-management", mode="legacy")
    v = oracle.create(UUIDS[0])
    assert v.ok, v.error
    assert not v.spec["linux"].get("devices")  # no CDI device injected
    assert [h["path"] for h in v.spec["hooks"]["prestart"]] == \
        ["/usr/bin/nvidia-container-runtime-hook"]


def test_device_plugin_cdi_names_are_resolved_by_the_library(tmp_path):
    oracle, _ = oracle_for(tmp_path, "device-plugin")
    assert oracle.inject(f"k8s.device-plugin.nvidia.com/gpu={UUIDS[0]}").ok
    stale = "GPU-00000000-0000-0000-0000-000000000000"
    v = oracle.inject(f"k8s.device-plugin.nvidia.com/gpu={stale}")
    assert not v.ok
    assert v.error == f"unresolvable CDI devices k8s.device-plugin.nvidia.com/gpu={stale}"


def test_auto_mode_uses_the_written_down_rule(tmp_path):
    oracle, _ = oracle_for(tmp_path, "operator-management", mode="auto")
    assert oracle.create(UUIDS[0]).ok and oracle.create(UUIDS[0]).by.startswith("rule:")
    assert not oracle.create("GPU-00000000-0000-0000-0000-000000000000").ok


@pytest.mark.parametrize("layout,per_uuid", [("operator-management", False),
                                             ("operator-management", True),
                                             ("nvidia-ctk", False)])
def test_gpupool_agrees_with_the_real_runtime_on_hami_pods(tmp_path, layout, per_uuid):
    """A HAMi pod on a one-node HAMi pool: HAMi's plugin hands a GPU by UUID (envvar)."""
    oracle, _ = oracle_for(tmp_path / "o", layout, per_uuid=per_uuid)
    runs_everywhere = all(oracle.create(u).ok for u in UUIDS)
    extra = per_uuid_spec() if per_uuid else None
    inv = inventory(tmp_path / "g", layout, extra)
    _, out = check(tmp_path, [node("hami-1", "hami", inv, register=hami_register())],
                   HAMI_POD)
    assert out[0]["pool"] == "hami"
    assert out[0]["allowed"] == runs_everywhere, (layout, per_uuid, out[0]["message"])


def test_gpupool_agrees_with_the_library_on_operator_pods(tmp_path):
    """An operator-pool pod on a device-plugin node: the plugin hands CDI names."""
    oracle, _ = oracle_for(tmp_path / "o", "device-plugin")
    runs = all(oracle.inject(f"k8s.device-plugin.nvidia.com/gpu={u}").ok for u in UUIDS)
    inv = inventory(tmp_path / "g", "device-plugin")
    _, out = check(tmp_path, [node("op-1", None, inv)], OPERATOR_POD)
    assert out[0]["pool"] == "operator" and out[0]["allowed"] == runs is True


def test_stale_per_uuid_spec_is_caught_with_the_driver_gpus(tmp_path):
    """The spec names GPUs this node no longer has (a board was swapped) and HAMi's register
    annotation is absent. Without the driver's list gpupool could only trust the spec's own
    names and admitted the pod; the real runtime fails for every GPU the node really has."""
    from harness.layouts import fake_driver
    from webhook.node.agent import Observer

    stale = ("GPU-11111111-2222-3333-4444-555555555555",
             "GPU-66666666-7777-8888-9999-000000000000")
    paths = write_layout(tmp_path / "node", "operator-management")
    (paths["run"] / "management.nvidia.com-gpu-uuid.yaml").write_text(
        per_uuid_spec(uuids=stale))
    oracle = OracleNode(tmp_path / "oracle", [paths["etc"], paths["run"]], paths["config"],
                        gpus=UUIDS)
    verdicts = [oracle.create(u) for u in UUIDS]
    assert not any(v.ok for v in verdicts)
    assert "unresolvable CDI devices management.nvidia.com/gpu=GPU-59ab" in verdicts[0].error
    inv = Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                   str(paths["containerd"]),
                   driver_gpus_dir=str(fake_driver(tmp_path / "drv"))).observe().dumps()
    _, out = check(tmp_path, [node("hami-1", "hami", inv)], HAMI_POD)
    assert out[0]["allowed"] is False
    assert f"management.nvidia.com/gpu={UUIDS[0]}" in out[0]["message"]


def test_cdi_repair_sets_a_class_under_which_the_real_runtime_creates_the_container(
        tmp_path):
    """cdi.repair on HAMi's pool: the seed's broken node (only management.nvidia.com/gpu=all,
    runtime in cdi mode), the GPU Operator's RuntimeClasses in the cluster. The HAMi pod is
    admitted with runtimeClassName nvidia-legacy instead of denied; the real runtime under
    that handler's mode creates its container, where under the default handler it fails
    with the seed error. A second pass adds nothing (reinvocation)."""
    import jsonpatch

    from tests.unit.engine.test_steering import agent_node, hami_pod
    from webhook.engine import (
        Reason,
        Stage,
        Subject,
        decide_pod,
        load_policy_text,
        review,
        review_pod,
        view_from_objects,
    )
    from webhook.files.policyfile import default_policy_text

    text = default_policy_text().replace("    cdi:\n      delivery: detect\n",
                                         "    cdi:\n      delivery: detect\n      repair: true\n",
                                         1)
    policy = load_policy_text(text)
    assert policy.by_name["hami"].cdi.repair
    broken = agent_node(tmp_path / "n", "hami-broken", "hami", "operator-management")
    classes = {h: h for h in ("nvidia", "nvidia-cdi", "nvidia-legacy")}
    view = view_from_objects([broken], policy, runtime_classes=classes)
    rv = review(Subject(kind="Pod", object=hami_pod(), namespace="default"),
                      view, policy)
    final = rv.final
    assert final.allowed and final.reason == Reason.REPAIRED, final.to_json()
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia-legacy"} in \
        final.patch
    assert any("runtimeClassName nvidia-legacy set" in w for w in final.warnings)
    repaired = jsonpatch.apply_patch(hami_pod(), final.patch)
    again = decide_pod(Stage.MUTATE, repaired, "default", view, policy)
    assert again.allowed and again.patch == () and again.reason == Reason.ROUTED
    # the real runtime: the default handler fails the pod, the class's handler does not
    oracle, _ = oracle_for(tmp_path / "default", "operator-management")
    assert SEED_ERROR in oracle.create(UUIDS[0]).error
    legacy, _ = oracle_for(tmp_path / "legacy", "operator-management", mode="legacy")
    for uuid in UUIDS:
        assert legacy.create(uuid).ok
    # no proof, no repair: the cluster's classes unknown, or the class missing
    for known in (None, {"nvidia": "nvidia"}):
        v = view_from_objects([broken], policy, runtime_classes=known)
        d = review_pod(hami_pod(), "default", v, policy)
        assert not d.allowed and d.reason == Reason.CDI_DEVICE_MISSING


def test_the_real_runtime_ignores_an_unprivileged_envvar_when_told_to(tmp_path):
    """accept-nvidia-visible-devices-envvar-when-unprivileged = false, the GPU's CDI device
    defined: the real runtime creates the (unprivileged) container without any device, a
    container that starts without its GPU. gpupool denies that pod on that node
    (GPUNotDelivered); with the toolkit's default the runtime injects the device and gpupool
    allows it."""
    from tests.unit.engine.test_steering import agent_node, decide, hami_pod
    from webhook.engine import Reason

    key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
    oracle, paths = oracle_for(tmp_path / "on", "operator-management", per_uuid=True)
    assert oracle.create(UUIDS[0]).ok and oracle.create(UUIDS[0]).devices
    strict, paths = oracle_for(tmp_path / "off", "operator-management", per_uuid=True)
    text = paths["config"].read_text()
    paths["config"].write_text(text.replace(f"{key} = true", f"{key} = false"))
    strict = OracleNode(tmp_path / "off-oracle", [paths["etc"], paths["run"]],
                        paths["config"], gpus=UUIDS)
    v = strict.create(UUIDS[0])
    assert v.ok and not v.devices, v.spec  # created, and without its GPU
    node = agent_node(tmp_path / "n", "hami-strict", "hami", "operator-management",
                      per_uuid=True, envvar_unprivileged=False)
    rv, _, _ = decide([node], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    node = agent_node(tmp_path / "m", "hami-ok", "hami", "operator-management", per_uuid=True)
    rv, _, _ = decide([node], hami_pod())
    assert rv.final.allowed


def test_the_nri_fix_applied_the_pod_runs(tmp_path):
    """On a node whose containerd default handler is runc (the GPU Operator's NRI setup), a
    HAMi envvar pod is denied with the fix: HAMi's chart value
    devicePlugin.deviceListStrategy=cdi-annotations. Applied (the plugin writes its spec and
    hands CDI names), gpupool allows the pod and the real CDI library, which containerd runs
    whatever the handler, resolves every GPU it could be handed."""
    from tests.unit.engine.test_steering import agent_node, decide, hami_pod
    from webhook.engine import Reason

    before = agent_node(tmp_path / "a", "hami-nri", "hami", "operator-management",
                        default_runtime="runc", plugins=None)
    rv, _, _ = decide([before], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    assert "devicePlugin.deviceListStrategy=cdi-annotations" in rv.final.message
    after = agent_node(tmp_path / "b", "hami-nri", "hami", "device-plugin",
                       default_runtime="runc", plugins=None)  # its pod not read
    # the fix as applied: HAMi's DaemonSet says cdi-annotations, and its plugin wrote its spec
    from tests.unit.engine.test_hamiplugin import daemonset

    plugin = daemonset("cdi-annotations", selector={"gpupool.io/pool": "hami"})
    rv, _, _ = decide([after, plugin], hami_pod())
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    # with only the spec on disk to go by, the way is an inference: doubt, not a pass
    rv, _, _ = decide([after], hami_pod())
    assert rv.final.allowed and rv.final.warnings
    oracle, _ = oracle_for(tmp_path / "o", "device-plugin")
    for uuid in UUIDS:
        v = oracle.inject(f"k8s.device-plugin.nvidia.com/gpu={uuid}")
        assert v.ok and v.by == "cdi library", v.error


@pytest.mark.parametrize("spec", ["fresh", "stale", "partial"])
def test_gpupool_agrees_with_the_real_runtime_on_mig_pods(tmp_path, spec):
    """The device plugin hands a MIG pod one of the MIG devices it registered; the real
    runtime in cdi mode resolves NVIDIA_VISIBLE_DEVICES=MIG-<uuid> against the node's specs.
    gpupool (reading the registered devices from the kubelet's checkpoint) admits the pod
    exactly when every one of them is created."""
    from tests.unit.engine.test_mig import BEFORE, mig_node, mig_pod
    from tests.unit.engine.test_steering import decide
    from tests.unit.node.test_kubelet import MIGS

    names = {"fresh": MIGS, "stale": BEFORE, "partial": MIGS[:1]}[spec]
    node = mig_node(tmp_path, "op-mig", names)
    paths = tmp_path / "op-mig"
    oracle = OracleNode(tmp_path / "oracle", [paths / "etc/cdi", paths / "var/run/cdi"],
                        paths / "config/config.toml", gpus=UUIDS)
    verdicts = {m: oracle.create(m) for m in MIGS}
    assert all(v.by == "nvidia-container-runtime" for v in verdicts.values())
    runs = all(v.ok and v.devices for v in verdicts.values())
    rv, _, _ = decide([node], mig_pod())
    assert rv.final.allowed == runs, (verdicts, rv.final.to_json())
    for m, v in verdicts.items():
        if not v.ok:
            assert f"unresolvable CDI devices management.nvidia.com/gpu={m}" in v.error
            assert m in rv.final.message


@pytest.mark.parametrize("spec", ["fresh", "stale", "whole GPUs"])
def test_gpupool_agrees_with_the_real_runtime_under_the_single_mig_strategy(tmp_path, spec):
    """The NVIDIA device plugin's single strategy: a plain nvidia.com/gpu pod is handed a MIG
    device (the kubelet's checkpoint lists MIG ids under nvidia.com/gpu). The real runtime
    resolves NVIDIA_VISIBLE_DEVICES=MIG-<uuid>; gpupool admits exactly when it creates the
    container with each, never judging the parent GPUs' UUIDs (issue 34, item 6)."""
    from harness.kit import gpu_pod
    from tests.unit.engine.test_mig import BEFORE, single_node
    from tests.unit.engine.test_steering import decide
    from tests.unit.node.test_kubelet import MIGS

    names = {"fresh": MIGS, "stale": BEFORE, "whole GPUs": True}[spec]
    node = single_node(tmp_path, "op-single", names)
    paths = tmp_path / "op-single"
    oracle = OracleNode(tmp_path / "oracle", [paths / "etc/cdi", paths / "var/run/cdi"],
                        paths / "config/config.toml", gpus=UUIDS)
    verdicts = {m: oracle.create(m) for m in MIGS}
    runs = all(v.ok and v.devices for v in verdicts.values())
    rv, _, _ = decide([node], gpu_pod("p", limits={"nvidia.com/gpu": 1}))
    assert rv.final.allowed == runs, (verdicts, rv.final.to_json())
    assert runs == (spec == "fresh")  # both sides met
    for m, v in verdicts.items():
        if not v.ok:
            assert f"unresolvable CDI devices management.nvidia.com/gpu={m}" in v.error
            assert m in rv.final.message


def test_a_mig_device_hami_creates_at_allocation_is_in_no_spec(tmp_path):
    """HAMi's MIG mode hands the container a MIG device it has just created. The real
    runtime in cdi mode cannot resolve it from the node's specs (written before), and
    gpupool denies the pod; the fix it names, hami-core mode for that GPU, hands the GPU's
    own UUID, which the per-UUID spec defines, and the real runtime creates the container."""
    from tests.corpus import created_mig
    from tests.unit.engine.test_mig import hami_mig_node
    from tests.unit.engine.test_steering import decide, hami_pod
    from webhook.engine import Reason

    node = hami_mig_node(tmp_path, "hami-mig")
    paths = tmp_path / "hami-mig"
    oracle = OracleNode(tmp_path / "oracle", [paths / "etc/cdi", paths / "var/run/cdi"],
                        paths / "config/config.toml", gpus=UUIDS)
    v = oracle.create(created_mig(UUIDS[0]))
    assert not v.ok and v.by == "nvidia-container-runtime"
    assert f"unresolvable CDI devices management.nvidia.com/gpu={created_mig(UUIDS[0])}" \
        in v.error
    rv, _, _ = decide([node], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "hami-core mode" in rv.final.message
    v = oracle.create(UUIDS[0])  # hami-core: the GPU itself
    assert v.ok and v.devices, v.error


def own_pod(value: str) -> dict:
    """A GPU pod whose container sets NVIDIA_VISIBLE_DEVICES=value itself."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "own", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {
                "limits": {"nvidia.com/gpu": 1}}, "env": [
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]}]}}


OWN_VALUES = ("all", "void", UUIDS[0], f"{UUIDS[0]},{UUIDS[1]}", "0",
              "management.nvidia.com/gpu=all", "nvidia.com/gpu=all",
              f"management.nvidia.com/gpu={UUIDS[0]}", f"nvidia.com/gpu={UUIDS[1]}")


@pytest.mark.parametrize("layout, mode", [("operator-management", None), ("fixed", None),
                                          ("nvidia-ctk", None), ("fixed", "auto")])
def test_gpupool_agrees_with_the_real_runtime_on_a_pods_own_visible_devices(tmp_path, layout,
                                                                            mode):
    """A GPU container that sets NVIDIA_VISIBLE_DEVICES itself overrides the device plugin's
    value (the kubelet appends the container's variables after the plugin's; the runtime
    keeps the last). The real runtime resolves that value: bare names with the default
    kind, fully qualified ones as they are (and in auto mode through CDI), void as no
    device. gpupool admits the pod exactly when the real runtime creates the container
    with a device."""
    from tests.unit.engine.test_steering import agent_node, decide

    base = "operator-management" if layout == "fixed" else layout
    node = agent_node(tmp_path, "op-1", None, base, register=False,
                      per_uuid=layout == "fixed", mode=mode)
    paths = tmp_path / "op-1"
    oracle = OracleNode(tmp_path / "oracle", [paths / "etc/cdi", paths / "var/run/cdi"],
                        paths / "config/config.toml", gpus=UUIDS)
    judged = 0
    for value in OWN_VALUES:
        if mode == "auto" and "=" not in value:
            continue  # auto mode's bare names go to just-in-time CDI, which needs NVML
        v = oracle.create(value)
        assert v.by == "nvidia-container-runtime", v
        runs = v.ok and bool(v.devices)
        final = decide([node], own_pod(value))[0].final
        assert final.allowed == runs and not (final.allowed and final.warnings), \
            (layout, mode, value, v, final.to_json())
        judged += 1
    assert judged >= 4


@pytest.mark.parametrize("strategy", ["cdi-annotations", "cdi-cri"])
def test_a_pods_own_visible_devices_decide_nothing_where_the_plugin_hands_cdi_names(
        tmp_path, strategy):
    """Where the device plugin hands CDI names, containerd injects them with the real CDI
    library over the container's own environment (the plugin's spec sets
    NVIDIA_VISIBLE_DEVICES=void), then the real runtime creates the container, reading the
    pod's CDI annotations first under ``cdi-annotations``. Whatever value the container set,
    gpupool admits the pod exactly when that container is created with a device."""
    from tests.unit.engine.test_steering import agent_node, decide

    node = agent_node(tmp_path, "dp-1", None, "device-plugin", register=False)
    paths = tmp_path / "dp-1"
    oracle = OracleNode(tmp_path / "oracle", [paths / "etc/cdi", paths / "var/run/cdi"],
                        paths / "config/config.toml", gpus=UUIDS)
    name = f"k8s.device-plugin.nvidia.com/gpu={UUIDS[0]}"
    annotations = {"cdi.k8s.io/nvidia-device-plugin_0": name} \
        if strategy == "cdi-annotations" else {}
    for value in OWN_VALUES:
        injected = oracle.inject(name, env=(f"NVIDIA_VISIBLE_DEVICES={value}",))
        assert injected.ok, injected
        v = oracle.create_injected(injected, annotations)
        assert v.by == "nvidia-container-runtime"
        runs = v.ok and bool(v.devices)
        final = decide([node], own_pod(value))[0].final
        assert final.allowed == runs, (strategy, value, v, final.to_json())


def test_hamis_plugin_on_an_operator_node_is_judged_by_what_it_hands(tmp_path):
    """HAMi's DaemonSet selects nodes by its own nodeSelector, so it can run on an operator-pool
    node. Set to cdi-annotations there, it hands CDI names the node's specs do not define
    (its own spec was never written): the real CDI library refuses them, and gpupool denies;
    where it does not run, the plugin's UUIDs go to the runtime, which resolves them, and
    gpupool admits."""
    from harness.kit import gpu_pod
    from tests.unit.engine.test_hamiplugin import daemonset
    from tests.unit.engine.test_steering import agent_node, decide

    node = agent_node(tmp_path, "op-1", None, "operator-management", per_uuid=True,
                      register=False, plugins=None)  # what runs there: its DaemonSet says
    node["metadata"]["labels"]["gpu"] = "on"  # HAMi's chart's selector
    paths = tmp_path / "op-1"
    oracle = OracleNode(tmp_path / "oracle", [paths / "etc/cdi", paths / "var/run/cdi"],
                        paths / "config/config.toml", gpus=UUIDS)
    pod = gpu_pod("g", limits={"nvidia.com/gpu": 1})
    cdi_names = oracle.inject(*(f"k8s.device-plugin.nvidia.com/gpu={u}" for u in UUIDS))
    rv, _, _ = decide([node, daemonset("cdi-annotations")], pod)
    assert not cdi_names.ok, cdi_names  # the library cannot resolve them
    assert rv.final.allowed == cdi_names.ok, rv.final.to_json()
    envvar = [oracle.create(u) for u in UUIDS]
    node["metadata"]["labels"]["gpu"] = "off"  # the DaemonSet does not run here
    rv, _, _ = decide([node, daemonset("cdi-annotations")], pod)
    runs = all(v.ok and v.devices for v in envvar)
    assert runs and rv.final.allowed, (envvar, rv.final.to_json())
