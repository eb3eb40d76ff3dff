"""MIG pods judged device by device: the device plugin hands a MIG pod ids of the MIG devices
it registered (``MIG-<uuid>``), which the agent reads from the kubelet's checkpoint
(``Inventory.mig``). A spec written before a MIG reconfiguration (nvidia-cdi-refresh does not
follow it) names devices that no longer exist and lacks the new ones."""

from __future__ import annotations

from harness.kit import gpu_pod
from tests.unit.engine.test_steering import agent_node, decide, terms
from tests.unit.node.test_kubelet import MIG_RESOURCE, MIGS
from webhook.engine.core.decision import Reason

BEFORE = ("MIG-0a1b2c3d-0000-5000-8000-0000000000a1",)  # the layout before reconfiguration


def mig_pod() -> dict:
    return gpu_pod("m", limits={MIG_RESOURCE: 1})


def mig_node(tmp_path, name: str, spec: tuple[str, ...]) -> dict:
    """An operator node in cdi mode (default kind management.nvidia.com/gpu) whose per-device
    spec names ``spec``, and whose plugin registered ``MIGS``."""
    return agent_node(tmp_path, name, None, "operator-management", register=False,
                      per_uuid=spec, mig={MIG_RESOURCE: MIGS})


def test_a_spec_that_names_every_registered_mig_device_admits(tmp_path):
    rv, _, _ = decide([mig_node(tmp_path, "op-mig", MIGS)], mig_pod())
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()


def test_a_spec_from_before_a_mig_reconfiguration_is_caught(tmp_path):
    rv, _, _ = decide([mig_node(tmp_path, "op-mig", BEFORE)], mig_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert f"op-mig lacks management.nvidia.com/gpu={MIGS[0]}" in rv.final.message
    # one device of two still there: the plugin may hand either (the other fails)
    rv, _, _ = decide([mig_node(tmp_path / "p", "op-mig", MIGS[:1])], mig_pod())
    assert not rv.final.allowed and MIGS[1] in rv.final.message


def test_unpinned_mig_pods_are_kept_off_the_stale_node_by_name(tmp_path):
    """The agent's labels speak of whole GPUs; a MIG pod is judged by its MIG devices."""
    stale, fresh = mig_node(tmp_path, "op-stale", BEFORE), mig_node(tmp_path, "op-fresh", MIGS)
    pod = mig_pod()
    rv, _, _ = decide([stale, fresh], pod)
    assert rv.final.allowed, rv.final.to_json()
    fields = [e for t in terms(pod, rv.mutation.patch) for e in t.get("matchFields", [])]
    assert fields == [{"key": "metadata.name", "operator": "NotIn", "values": ["op-stale"]}]
    labels = [e["key"] for t in terms(pod, rv.mutation.patch) for e in t["matchExpressions"]]
    assert not any(k.startswith("resolve.gpupool.io/") for k in labels), labels


def test_a_node_whose_kubelet_lists_no_such_device_is_doubt(tmp_path):
    node = agent_node(tmp_path, "op-mig", None, "operator-management", register=False,
                      per_uuid=MIGS, mig={"nvidia.com/mig-3g.40gb": MIGS})
    rv, _, _ = decide([node], mig_pod())
    assert rv.final.allowed and rv.final.warnings
    assert "lists no nvidia.com/mig-1g.10gb device" in rv.final.nodes[0].note


def test_without_the_kubelet_list_a_kind_with_no_mig_name_at_all_still_fails(tmp_path):
    """The plugin's id for a MIG device is MIG-<uuid> (or <gpu>:<mig>): where the default
    kind defines no such name, whichever device it hands out cannot resolve. Where it defines
    some, which one the pod gets is not known: doubt."""
    node = agent_node(tmp_path, "op-mgmt", None, "operator-management", register=False)
    rv, _, _ = decide([node], mig_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "defines any MIG device of kind management.nvidia.com/gpu" in rv.final.message
    named = agent_node(tmp_path / "n", "op-named", None, "operator-management",
                       register=False, per_uuid=BEFORE)
    rv, _, _ = decide([named], mig_pod())
    assert rv.final.allowed and rv.final.warnings
    assert "kubelet's device checkpoint" in rv.final.nodes[0].note


# ------------------------------------------------------------------ HAMi's MIG mode


def hami_mig_node(tmp_path, name: str, pool: str | None = "hami", **kw) -> dict:
    """A HAMi node whose first GPU HAMi runs in MIG mode; every GPU has its per-UUID CDI
    device (so in hami-core mode every pod would run)."""
    import json

    from harness.layouts import UUIDS

    node = agent_node(tmp_path, name, pool, "operator-management", per_uuid=True, **kw)
    reg = json.loads(node["metadata"]["annotations"]["hami.io/node-nvidia-register"])
    assert reg[0]["id"] == UUIDS[0]
    reg[0]["mode"] = "mig"
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = json.dumps(reg)
    return node


def test_hami_mig_mode_gpus_fail_wherever_cdi_names_are_looked_up(tmp_path):
    from harness.layouts import UUIDS
    from tests.unit.engine.test_steering import hami_pod
    from webhook.api import delivery

    rv, _, _ = decide([hami_mig_node(tmp_path, "hami-mig")], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert f"HAMi runs GPU(s) {UUIDS[0]} in MIG mode" in rv.final.message
    assert "hami-core mode" in rv.final.message  # the fix
    # a pod HAMi's annotations keep off that GPU runs
    away = hami_pod()
    away["metadata"]["annotations"] = {"nvidia.com/nouse-gpuuuid": UUIDS[0]}
    rv, _, _ = decide([hami_mig_node(tmp_path / "a", "hami-mig")], away)
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    # a runtime that generates devices just in time takes the created MIG device as well
    jit = hami_mig_node(tmp_path / "j", "hami-jit", default_kind=delivery.JIT_KIND)
    rv, _, _ = decide([jit], hami_pod())
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()


def test_the_nodes_plugin_decides_not_the_pods_scheduler(tmp_path):
    """HAMi's device plugin in MIG mode creates a MIG instance at each allocation and hands
    its UUID (HAMi v2.10 ``GetContainerDeviceStrArray`` -> ``migMgr.EnsureAllocation``),
    whoever scheduled the pod: a plain nvidia.com/gpu pod the default scheduler sends to such
    a node in its own pool fails there as a HAMi pod does (the real runtime says so:
    tests/integration/test_runtime_oracle.py)."""
    from harness.layouts import UUIDS

    mixed = hami_mig_node(tmp_path, "op-hami-mig", pool=None)
    assert mixed["metadata"]["labels"].get("gpupool.io/pool") is None  # the operator pool
    pinned = gpu_pod("plain", limits={"nvidia.com/gpu": 1}, nodeName="op-hami-mig")
    rv, _, _ = decide([mixed], pinned)
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING, \
        rv.final.to_json()
    assert f"HAMi runs GPU(s) {UUIDS[0]} in MIG mode" in rv.final.message
    # unpinned, it is kept off that node by name, onto one that delivers
    fine = agent_node(tmp_path / "f", "op-fine", None, "operator-management", per_uuid=True,
                      register=False)
    pod = gpu_pod("plain", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([hami_mig_node(tmp_path / "m", "op-hami-mig", pool=None), fine], pod)
    assert rv.final.allowed, rv.final.to_json()
    fields = [e for t in terms(pod, rv.mutation.patch) for e in t.get("matchFields", [])]
    assert fields == [{"key": "metadata.name", "operator": "NotIn", "values": ["op-hami-mig"]}]


def test_the_register_annotations_mode_in_both_formats():
    from webhook.engine.stacks.hami import parse_register

    assert parse_register('[{"id": "GPU-a", "mode": "mig"}]')[0].mode == "mig"
    csv = "GPU-a,10,40960,100,NVIDIA-A100,0,true,0,mig:GPU-b,10,40960,100,NVIDIA-A100,0,true,1:"
    assert [g.mode for g in parse_register(csv)] == ["mig", ""]


def test_pods_are_kept_off_a_node_where_hami_runs_a_gpu_in_mig_mode_by_name(tmp_path):
    """The agent's label cannot know HAMi's MIG mode (it is in HAMi's register annotation):
    with such a node in the cluster, HAMi pods are judged node by node."""
    from tests.unit.engine.test_steering import hami_pod

    mig, fine = hami_mig_node(tmp_path, "hami-mig"), agent_node(
        tmp_path / "f", "hami-fine", "hami", "operator-management", per_uuid=True)
    assert mig["metadata"]["labels"]["resolve.gpupool.io/visible-devices"] == "true"
    pod = hami_pod()
    rv, _, _ = decide([mig, fine], pod)
    assert rv.final.allowed, rv.final.to_json()
    fields = [e for t in terms(pod, rv.mutation.patch) for e in t.get("matchFields", [])]
    assert fields == [{"key": "metadata.name", "operator": "NotIn", "values": ["hami-mig"]}]


def test_doctor_lists_a_nodes_mig_devices_and_flags_those_that_fail(tmp_path):
    import json

    import yaml

    from tests.unit.cli.test_check_dra import run

    nodes = [mig_node(tmp_path, "op-fresh", MIGS), mig_node(tmp_path, "op-stale", BEFORE)]
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump_all(nodes))
    r = run("doctor", "--cluster", str(f), "-o", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {row["node"]: row for row in json.loads(r.stdout)["nodes"]}
    assert rows["op-fresh"]["mig_devices"] == {MIG_RESOURCE: 2}
    assert rows["op-fresh"]["hazards"] == []
    (hazard,) = rows["op-stale"]["hazards"]
    assert hazard.startswith(f"{MIG_RESOURCE}: its MIG devices fail here "
                             f"(management.nvidia.com/gpu={MIGS[0]}")
    assert "fix: define a CDI device" in hazard
    r = run("doctor", "--cluster", str(f))
    assert f"MIG devices: {MIG_RESOURCE}(2)" in r.stdout


# ------------------------------------------------------------------ the single strategy


def single_node(tmp_path, name: str, spec: tuple[str, ...] | bool) -> dict:
    """An operator node whose NVIDIA device plugin runs the ``single`` MIG strategy: it
    registers its MIG devices as ``nvidia.com/gpu`` (k8s-device-plugin
    ``internal/lm/mig-strategy.go``), and the kubelet's checkpoint lists them so."""
    return agent_node(tmp_path, name, None, "operator-management", register=False,
                      per_uuid=spec, mig={"nvidia.com/gpu": MIGS})


def test_the_single_strategy_hands_mig_devices_as_nvidia_com_gpu(tmp_path):
    """Issue 34, item 6: a plain nvidia.com/gpu pod gets a MIG device there; judging the
    parent GPUs' UUIDs admitted pods that fail with unresolvable ...=MIG-<uuid>."""
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([single_node(tmp_path / "a", "op-single", MIGS)], pod)
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    # a spec naming the whole GPUs only (as before MIG was enabled): every MIG device fails
    rv, _, _ = decide([single_node(tmp_path / "b", "op-single", True)], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert f"management.nvidia.com/gpu={MIGS[0]}" in rv.final.message
    # a spec from before a reconfiguration
    rv, _, _ = decide([single_node(tmp_path / "c", "op-single", BEFORE)], pod)
    assert not rv.final.allowed and MIGS[1] in rv.final.message


# ------------------------------------------- the single strategy without the kubelet's list


def _operator_single(tmp_path, name: str, labels: dict[str, str]) -> dict:
    """A GPU Operator node whose plugin pod says ``MIG_STRATEGY=single`` (the ClusterPolicy's
    default, on every node, MIG or not) and hands CDI names; the agent does not read the
    kubelet's checkpoint (``agent.kubeletCheckpoint: false``); the spec names the whole
    GPUs, as on a node whose GPUs have MIG disabled."""
    import random

    from tests.plugincases import operator_pod
    from webhook.api.pluginconfig import settle_pods

    case = operator_pod(random.Random(7), name, "cdi-annotations,cdi-cri", "single", "v26.3.0")
    learned = settle_pods([case.pod], case.labels,
                          lambda ns, n: case.config_maps.get((ns, n)))
    assert learned[0].mig_strategy == "single"
    node = agent_node(tmp_path, name, None, "device-plugin", register=False, plugins=learned)
    node["metadata"]["labels"].update(labels)
    return node


#: GFD's labels under the single strategy (k8s-device-plugin v0.19.3
#: internal/lm/mig-strategy_test.go): the plain model where no GPU has MIG enabled, the
#: model and the profile where they do.
GFD_WHOLE = {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "true",
             "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
GFD_MIG = {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "true",
           "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
           "nvidia.com/gpu.slices.ci": "1", "nvidia.com/gpu.slices.gi": "1"}


def test_the_single_strategy_on_gpus_without_mig_hands_whole_gpus(tmp_path):
    """Issue 64, item 1: the strategy is not the mode. Where the node's labels say MIG is
    off (GFD's plain product, the MIG manager's all-disabled layout applied, or no
    MIG-capable GPU), nvidia.com/gpu is whole GPUs, judged by their UUIDs."""
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    for i, labels in enumerate((GFD_WHOLE, {"nvidia.com/mig.capable": "false"},
                                {"nvidia.com/mig.config": "all-disabled",
                                 "nvidia.com/mig.config.state": "success"})):
        rv, _, _ = decide([_operator_single(tmp_path / str(i), "op-1", labels)], pod)
        assert rv.final.allowed and not rv.final.warnings, (labels, rv.final.to_json())


def test_the_single_strategy_where_the_labels_do_not_say_is_doubt_not_a_denial(tmp_path):
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    for i, labels in enumerate(({}, {"nvidia.com/mig.config": "all-1g.5gb",
                                     "nvidia.com/mig.config.state": "pending"})):
        rv, _, _ = decide([_operator_single(tmp_path / str(i), "op-1", labels)], pod)
        assert rv.final.allowed, rv.final.to_json()
        assert rv.final.warnings, "doubt is said"
        (node,) = rv.final.nodes
        assert "runs the single MIG strategy" in node.note and "say which" in node.note


def test_the_single_strategy_on_mig_enabled_gpus_is_mig_devices(tmp_path):
    """Where GFD labels the profile, nvidia.com/gpu is MIG devices: a spec naming only the
    whole GPUs defines none of them."""
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([_operator_single(tmp_path, "op-1", GFD_MIG)], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "MIG device" in rv.final.message
