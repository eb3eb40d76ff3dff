"""Delivery ways, steering labels and the affinity that keeps pods off nodes where their GPUs
won't resolve; candidates narrowed by what a node's GPUs can serve; folds kept current."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import jsonpatch
import pytest

from harness.kit import gpu_pod, hold
from harness.layouts import (
    UUIDS,
    device_plugin_spec,
    fake_driver,
    hami_register,
    per_uuid_spec,
    write_layout,
)
from webhook.api import delivery
from webhook.api.inventory import Inventory, RuntimeInfo
from webhook.api.pluginconfig import Settled
from webhook.engine.admission import admit
from webhook.engine.core.decision import Reason
from webhook.engine.core.policy import PolicyError, load_policy_text
from webhook.engine.view.cluster import view_from_objects
from webhook.engine.view.nodes import NodeInfo
from webhook.files.policyfile import default_policy_text
from webhook.node.agent import Observer, node_labels

DETECTED = delivery.LABELS[delivery.DETECT]
#: ``agent_node``'s default: the device plugin the node's layout implies, learned from its pod
#: as the agent learns it (a CDI strategy beside its spec, else envvar)
IMPLIED = "implied by the layout"


def implied_plugins(layout: str, pool: str | None, name: str) -> tuple[Settled, ...]:
    """What the agent learns from the plugin pod a node of this layout runs: HAMi's chart's
    (envvar, its default) on HAMi's nodes; elsewhere the GPU Operator's, in its CDI
    strategies where the layout has the plugin's spec, else in envvar."""
    from tests.plugincases import operator_learned

    if pool != "hami" and layout == "device-plugin":
        return operator_learned("cdi-annotations,cdi-cri", name)
    if pool == "hami":
        return (Settled(f"kube-system/hami-device-plugin-{name}", "device-plugin",
                        ("envvar",), "variable DEVICE_LIST_STRATEGY",
                        deployed_by="HAMi's chart"),)
    return operator_learned("envvar", name)


def agent_node(tmp_path, name: str, pool: str | None, layout: str, *,
               per_uuid: bool | tuple[str, ...] = False, register: bool = True,
               agent: bool = True, allocatable: int | None = None,
               types: tuple[str, ...] = (), cordon: str | None = None,
               default_runtime: str | None = None, envvar_unprivileged: bool = True,
               default_kind: str | None = None, mode: str | None = None,
               mig: dict[str, tuple[str, ...]] | None = None,
               plugins: tuple[Settled, ...] | str | None = IMPLIED,
               held: dict[str, tuple[str, ...]] | None = None,
               containerd: Callable[[str], str] | None = None,
               specs: Callable[[Path], None] | None = None,
               runtime_version: str | None = None) -> dict:
    """A node as gpupool's agent publishes it (inventory annotation and steering labels);
    ``per_uuid``: a per-UUID spec for every GPU, or for those listed; ``mig``: the MIG
    devices the kubelet's checkpoint lists, per resource; ``plugins``: what the agent
    learned from the device-plugin pods there (None: it did not look); ``held``: pod UID ->
    the GPUs it holds there, as the agent publishes them from the kubelet's checkpoint
    (handed the way the layout's plugin hands them: CDI names beside its spec outside
    HAMi's pool, else UUIDs in NVIDIA_VISIBLE_DEVICES); ``containerd``: an edit of
    containerd's config; ``specs``: an edit of the spec directory the layout writes to
    (/var/run/cdi); ``runtime_version``: the Node's ``status.nodeInfo.containerRuntimeVersion``."""
    if plugins == IMPLIED:
        plugins = implied_plugins(layout, pool, name)
    assert not isinstance(plugins, str)
    labels = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": name}
    if pool:
        labels["gpupool.io/pool"] = pool
    ann = {}
    if register:
        reg = json.loads(hami_register())
        for i, t in enumerate(types):
            reg[i]["type"] = t
        ann["hami.io/node-nvidia-register"] = json.dumps(reg)
    if agent:
        paths = write_layout(tmp_path / name, layout)
        if default_runtime:  # containerd's default handler, as the node's config sets it
            text = paths["containerd"].read_text()
            paths["containerd"].write_text(text.replace('default_runtime_name = "nvidia"',
                                                        f'default_runtime_name = '
                                                        f'"{default_runtime}"'))
        if containerd is not None:
            paths["containerd"].write_text(containerd(paths["containerd"].read_text()))
        if mode:  # the runtime's nvidia-container-runtime.mode
            text = paths["config"].read_text()
            assert 'mode = "cdi"' in text
            paths["config"].write_text(text.replace('mode = "cdi"', f'mode = "{mode}"', 1))
        if default_kind:  # the runtime's modes.cdi.default-kind
            text = paths["config"].read_text()
            assert 'default-kind = "management.nvidia.com/gpu"' in text
            paths["config"].write_text(text.replace('default-kind = "management.nvidia.com/gpu"',
                                                    f'default-kind = "{default_kind}"'))
        if not envvar_unprivileged:  # the toolkit's switch, as its installer writes it
            text = paths["config"].read_text()
            key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
            assert f"{key} = true" in text or f"#{key} = true" in text
            paths["config"].write_text(text.replace(f"#{key} = true", f"{key} = false")
                                       .replace(f"{key} = true", f"{key} = false"))
        if specs is not None:
            specs(paths["run"])
        if per_uuid:
            (paths["run"] / "per-uuid.yaml").write_text(
                per_uuid_spec() if per_uuid is True else per_uuid_spec(uuids=per_uuid))
        checkpoint = None
        if mig is not None:
            checkpoint = tmp_path / name / "kubelet_internal_checkpoint"
            checkpoint.write_text(json.dumps({"Data": {
                "PodDeviceEntries": [], "RegisteredDevices": {
                    r: list(ids) for r, ids in mig.items()}}, "Checksum": 1}))
        inv = Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                       str(paths["containerd"]),
                       driver_gpus_dir=str(fake_driver(tmp_path / name / "drv")),
                       kubelet_checkpoint=str(checkpoint) if checkpoint else None,
                       plugin_pods=None if plugins is None else lambda: plugins).observe()
        ann["gpupool.io/cdi-inventory"] = inv.dumps()
        labels.update({k: v for k, v in node_labels(inv).items() if v})
    if cordon is not None:
        ann["hami.io/device-cordon"] = cordon
    out = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": labels, "annotations": ann}, "spec": {}}
    for uid, uuids in (held or {}).items():
        if pool != "hami" and layout == "device-plugin":
            hold(out, uid, uuids, container="c", cdi=[f"{delivery.DEVICE_PLUGIN_KIND}={u}"
                                                      for u in uuids])
        else:
            hold(out, uid, uuids, container="c", visible=",".join(uuids))
    if allocatable is not None:
        out["status"] = {"allocatable": {"nvidia.com/gpu": str(allocatable)}}
    if runtime_version is not None:
        out.setdefault("status", {})["nodeInfo"] = {"containerRuntimeVersion": runtime_version}
    return out


def decide(nodes, pod, policy_text: str | None = None):
    """Both stages of ``pod`` against these Nodes (and any other objects among them: a
    ClusterPolicy, DRA objects)."""
    policy = load_policy_text(policy_text or default_policy_text())
    others = [o for o in nodes if o.get("kind", "Node") != "Node"]
    view = view_from_objects([o for o in nodes if o.get("kind", "Node") == "Node"], policy,
                             resources=others or None)
    subject = admit.Subject(kind="Pod", object=pod, namespace="default")
    return admit.review(subject, view, policy), view, policy


def hami_pod(**spec):
    return gpu_pod("h", limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, **spec)


def hami_bound(pod: dict, node: str, uuids: tuple[str, ...] = (UUIDS[0],)) -> dict:
    """The pod as HAMi's scheduler leaves it once placed and started: bound, its first
    container's GPUs recorded in ``hami.io/vgpu-devices-allocated`` (HAMi v2.10
    ``EncodePodSingleDevice``), running. (What the kubelet cached for it is on the node:
    ``agent_node(held=...)``.)"""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["metadata"].setdefault("annotations", {})["hami.io/vgpu-devices-allocated"] = \
        "".join(f"{u},NVIDIA,1000,0:" for u in uuids) + ";"
    out["status"] = {"phase": "Running"}
    return out


def terms(pod: dict, patch: list) -> list[dict]:
    out = jsonpatch.apply_patch(pod, patch)
    return out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


# ------------------------------------------------------------------ the ways


def _inv(mode: str | None, kinds: dict, default_kind: str | None = None) -> Inventory:
    return Inventory(kinds={k: frozenset(v) for k, v in kinds.items()},
                     runtime=RuntimeInfo(mode=mode, default_kind=default_kind,
                                         handlers={"nvidia-cdi": "cdi",
                                                   "nvidia-legacy": "legacy"}))


MGMT = "management.nvidia.com/gpu"


@pytest.mark.parametrize("mode,kinds,rc,way,ok", [
    ("cdi", {MGMT: ["all"]}, None, delivery.VISIBLE_DEVICES, False),  # the seed's failure
    ("cdi", {MGMT: ["all", *UUIDS]}, None, delivery.VISIBLE_DEVICES, True),
    ("auto", {MGMT: ["all"]}, None, delivery.VISIBLE_DEVICES, True),  # jit-cdi
    ("legacy", {}, None, delivery.VISIBLE_DEVICES, True),
    (None, {}, None, delivery.VISIBLE_DEVICES, None),  # mode unknown: cannot tell
    ("auto", {MGMT: ["all"]}, "nvidia-cdi", delivery.VISIBLE_DEVICES, False),
    ("cdi", {MGMT: ["all"]}, "nvidia-legacy", delivery.VISIBLE_DEVICES, True),
    # The device plugin's names go through containerd whatever the mode or RuntimeClass.
    ("auto", {}, None, delivery.CDI_DEVICES, False),
    ("legacy", {delivery.DEVICE_PLUGIN_KIND: UUIDS}, "nvidia-legacy", delivery.CDI_DEVICES,
     True),
    ("auto", {delivery.DEVICE_PLUGIN_KIND: UUIDS[:1]}, None, delivery.CDI_DEVICES, False),
    # detect: the plugin's spec is there, so its names are what the container gets.
    ("cdi", {MGMT: ["all"], delivery.DEVICE_PLUGIN_KIND: UUIDS}, None, delivery.DETECT, True),
    ("cdi", {MGMT: ["all"]}, None, delivery.DETECT, False),
])
def test_resolve_follows_the_way_mode_and_runtime_class(mode, kinds, rc, way, ok):
    r = delivery.resolve(_inv(mode, kinds, MGMT), way, UUIDS, rc)
    assert r.ok is ok
    if ok is False:
        assert r.missing and all("=GPU-" in m for m in r.missing)


def test_steering_labels_say_true_false_or_nothing():
    broken = _inv("cdi", {MGMT: ["all"], delivery.DEVICE_PLUGIN_KIND: UUIDS}, MGMT)
    assert delivery.steering_labels(broken, UUIDS) == {
        DETECTED: "true", delivery.LABELS[delivery.CDI_DEVICES]: "true",
        delivery.LABELS[delivery.VISIBLE_DEVICES]: "false"}
    assert delivery.steering_labels(broken, ()) == {}  # GPUs unknown: no claim
    assert delivery.steering_labels(_inv(None, {}), UUIDS) == {
        delivery.LABELS[delivery.CDI_DEVICES]: "false"}  # the visible way cannot be told


# ------------------------------------------------------------------ steering


@pytest.fixture
def pool(tmp_path):
    return [agent_node(tmp_path, "hami-broken", "hami", "operator-management"),
            agent_node(tmp_path, "hami-fixed", "hami", "operator-management", per_uuid=True)]


def test_routed_pod_is_steered_off_the_broken_node_and_reinvocation_is_idempotent(pool):
    assert pool[0]["metadata"]["labels"][DETECTED] == "false"
    assert pool[1]["metadata"]["labels"][DETECTED] == "true"
    pod = hami_pod(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": ["hami-broken"]}]},
            {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In",
                                   "values": ["true"]}]}]}}})
    rv, view, policy = decide(pool, pod)
    assert rv.final.allowed and not rv.final.warnings  # steered: nothing left to warn about
    steer = {"key": DETECTED, "operator": "NotIn", "values": ["false"]}
    got = terms(pod, rv.mutation.patch)
    assert all(steer in t["matchExpressions"] for t in got)  # in every term
    again = admit.decide(admit.Stage.MUTATE, admit.Subject(
        kind="Pod", object=jsonpatch.apply_patch(pod, rv.mutation.patch),
        namespace="default"), view, policy)
    assert again.patch == ()


def test_require_inventory_admits_only_nodes_that_said_true(pool, tmp_path):
    text = default_policy_text() + "requireInventory: true\n"
    nodes = [*pool, agent_node(tmp_path, "hami-silent", "hami", "x", agent=False)]
    rv, _, _ = decide(nodes, hami_pod(), text)
    assert {"key": DETECTED, "operator": "In", "values": ["true"]} in \
        terms(hami_pod(), rv.mutation.patch)[0]["matchExpressions"]
    rv, _, _ = decide(nodes[2:], hami_pod(), text)  # only the silent node is left
    assert not rv.final.allowed and rv.final.reason == Reason.INVENTORY_MISSING


def test_a_pool_whose_every_node_is_broken_is_denied_not_left_pending(pool):
    rv, _, _ = decide(pool[:1], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "hami-broken" in rv.final.message


def test_a_pod_picking_its_gpus_is_steered_by_node_name(pool):
    pod = hami_pod()
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": UUIDS[0]}
    rv, _, _ = decide(pool, pod)
    assert rv.final.allowed
    got = terms(pod, rv.mutation.patch)[0]
    assert got["matchFields"] == [{"key": "metadata.name", "operator": "NotIn",
                                   "values": ["hami-broken"]}]
    assert not any(e["key"].startswith(delivery.LABEL_PREFIX) for e in got["matchExpressions"])


def test_runtime_class_without_cdi_and_steer_off_add_nothing(pool):
    rv, _, _ = decide(pool, hami_pod(runtimeClassName="nvidia-legacy"))
    assert not any(e["key"].startswith(delivery.LABEL_PREFIX)
                   for e in terms(hami_pod(), rv.mutation.patch)[0]["matchExpressions"])
    text = default_policy_text().replace("    cdi:\n      delivery: detect\n",
                                         "    cdi:\n      delivery: detect\n      steer: false\n")
    rv, _, _ = decide(pool, hami_pod(), text)
    assert not any(e["key"].startswith(delivery.LABEL_PREFIX)
                   for e in terms(hami_pod(), rv.mutation.patch)[0]["matchExpressions"])
    assert rv.final.allowed and rv.final.warnings  # unsteered: the broken node is a risk


# ------------------------------------------------------------------ candidates


def test_nodes_without_enough_gpus_or_allocatable_are_not_candidates(tmp_path):
    # The only node with enough GPUs is broken: the small fixed one cannot take the pod.
    small = agent_node(tmp_path, "op-small", None, "device-plugin", register=False,
                       allocatable=1)
    big = agent_node(tmp_path, "op-big", None, "operator-management", register=False,
                     allocatable=8)
    pod = gpu_pod("g", limits={"nvidia.com/gpu": 2})
    rv, _, _ = decide([small, big], pod)
    assert not rv.final.allowed and "op-big" in rv.final.message
    rv, _, _ = decide([small], pod)  # nothing can take it: a warning, as for autoscaling
    assert rv.final.allowed and any("has the GPUs" in w for w in rv.final.warnings)


def test_gpu_type_annotations_narrow_like_hami(tmp_path):
    t4 = agent_node(tmp_path, "hami-t4", "hami", "operator-management",
                    types=("NVIDIA-Tesla T4", "NVIDIA-Tesla T4"))
    a100 = agent_node(tmp_path, "hami-a100", "hami", "operator-management", per_uuid=True,
                      types=("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"))
    pod = hami_pod()
    pod["metadata"]["annotations"] = {"nvidia.com/use-gputype": "a100"}  # case-insensitive
    rv, _, _ = decide([t4, a100], pod)
    assert rv.final.allowed and not rv.final.warnings
    pod["metadata"]["annotations"] = {"nvidia.com/use-gputype": "T4"}
    rv, _, _ = decide([t4, a100], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    pod["metadata"]["annotations"] = {"nvidia.com/use-gputype": "H100"}
    rv, _, _ = decide([t4, a100], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_UUID_UNAVAILABLE


def test_device_plugin_names_checked_in_auto_mode(tmp_path):
    """containerd resolves the plugin's CDI names whatever the runtime's mode: a node in auto
    mode whose plugin spec is stale fails, and is caught."""
    paths = write_layout(tmp_path / "n", "device-plugin")
    (paths["run"] / "k8s.device-plugin.nvidia.com-gpu.json").write_text(
        device_plugin_spec(("GPU-00000000-0000-0000-0000-000000000009",)))
    paths["config"].write_text(paths["config"].read_text().replace('mode = "cdi"',
                                                                   'mode = "auto"'))
    inv = Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                   str(paths["containerd"]),
                   driver_gpus_dir=str(fake_driver(tmp_path / "drv"))).observe()
    assert inv.runtime.mode == "auto"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "op-1", "labels": {"nvidia.com/gpu.present": "true"},
        "annotations": {"gpupool.io/cdi-inventory": inv.dumps()}}}
    text = default_policy_text().replace(
        "  - name: operator\n    schedulerName: default-scheduler\n",
        "  - name: operator\n    schedulerName: default-scheduler\n").replace(
        "UUIDs in NVIDIA_VISIBLE_DEVICES without.\n    cdi:\n      delivery: detect",
        "UUIDs in NVIDIA_VISIBLE_DEVICES without.\n    cdi:\n      delivery: cdiDevices")
    rv, _, _ = decide([node], gpu_pod("g", limits={"nvidia.com/gpu": 1}), text)
    assert not rv.final.allowed
    assert f"k8s.device-plugin.nvidia.com/gpu={UUIDS[0]}" in rv.final.message
    assert "whatever the runtime's mode" in rv.final.message


# ------------------------------------------------------------------ folds


def test_kept_decisions_follow_node_changes_exactly(pool, tmp_path):
    """The per-shape folds are updated node by node: after every change the decision equals
    the one a fresh view gives."""
    policy = load_policy_text(default_policy_text())
    view = view_from_objects(pool, policy)
    pod = hami_pod()
    states = [pool,
              [pool[0], agent_node(tmp_path / "b", "hami-fixed", "hami",
                                   "operator-management")],  # the good node breaks
              [agent_node(tmp_path / "c", "hami-broken", "hami", "operator-management",
                          per_uuid=True), pool[1]],  # and is fixed; the other back
              [pool[1]]]  # a node leaves
    admit.review_pod(pod, "default", view, policy)
    current = {n["metadata"]["name"] for n in pool}
    for nodes in states[1:]:
        names = {n["metadata"]["name"] for n in nodes}
        for gone in current - names:
            view.delete_node(gone)
        for n in nodes:
            view.upsert_node(NodeInfo.from_object(copy.deepcopy(n)))
        current = names
        kept = admit.review_pod(pod, "default", view, policy)
        fresh = admit.review_pod(pod, "default", view_from_objects(nodes, policy), policy)
        assert (kept.allowed, kept.reason, kept.message, kept.warnings) == \
            (fresh.allowed, fresh.reason, fresh.message, fresh.warnings)


# ------------------------------------------------------------------ policy


def test_policy_delivery_and_the_first_version_fields():
    base = default_policy_text()
    p = load_policy_text(base)
    assert p.by_name["hami"].cdi.delivery == delivery.DETECT and not p.require_inventory
    old = base.replace("    cdi:\n      delivery: detect\n", "    cdi:\n      require: perGPU\n"
                       "      kind: runtimeDefault\n      when: runtimeUsesCDI\n", 1)
    assert load_policy_text(old).by_name["hami"].cdi.delivery == delivery.VISIBLE_DEVICES
    old = base.replace("    cdi:\n      delivery: detect\n", "    cdi:\n      require: anyDevice\n"
                       "      kind: k8s.device-plugin.nvidia.com/gpu\n", 1)
    assert load_policy_text(old).by_name["hami"].cdi.delivery == delivery.CDI_DEVICES
    mixed = base.replace("      delivery: detect\n", "      delivery: detect\n"
                         "      require: perGPU\n", 1)
    with pytest.raises(PolicyError, match="delivery replaces require"):
        load_policy_text(mixed)
    with pytest.raises(PolicyError, match="delivery: 'sometimes' is not one of"):
        load_policy_text(base.replace("delivery: detect", "delivery: sometimes", 1))


@pytest.mark.parametrize("require_inventory", [False, True])
def test_steering_the_decision_and_doctor_name_the_same_failing_nodes(tmp_path,
                                                                      require_inventory):
    """One answer to "which nodes would fail this pod": the nodes steering excludes by name
    are the nodes the unsteered pod's validation reports, and doctor marks them alike."""
    from webhook.cli.doctor import diagnose

    nodes = [agent_node(tmp_path, "hami-broken", "hami", "operator-management"),
             agent_node(tmp_path, "hami-fixed", "hami", "operator-management", per_uuid=True),
             agent_node(tmp_path, "hami-silent", "hami", "operator-management", agent=False)]
    text = default_policy_text()
    if require_inventory:
        text = text.replace("defaultPool:", "requireInventory: true\ndefaultPool:", 1)
    policy = load_policy_text(text)
    view = view_from_objects(nodes, policy)
    pod = hami_pod()
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": ",".join(UUIDS[:2])}
    mutation = admit.decide(admit.Stage.MUTATE, admit.Subject(kind="Pod", object=pod,
                                                              namespace="default"), view, policy)
    routed = jsonpatch.apply_patch(pod, mutation.patch)
    required = routed["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    excluded = next(e["values"] for t in required for e in t.get("matchFields", ()))
    unsteered = copy.deepcopy(routed)  # routed to its pool, not kept off any node
    for t in unsteered["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
        t.pop("matchFields")
    validation = admit.decide(admit.Stage.VALIDATE, admit.Subject(
        kind="Pod", object=unsteered, namespace="default"), view, policy)
    reported = {f.node: f for f in validation.nodes}
    failing = {n for n, f in reported.items() if f.missing or require_inventory}
    assert sorted(failing) == excluded
    assert excluded == (["hami-broken", "hami-silent"] if require_inventory else ["hami-broken"])
    rows = {r.node: r.state for r in diagnose(view, policy)}
    assert rows["hami-broken"] == "missing" and rows["hami-fixed"] == "ok"
    assert rows["hami-silent"].startswith("unknown")


# ------------------------------------------------------------------ HAMi's device cordon


def test_a_gpu_that_fails_only_while_cordoned_is_doubt_not_proof(tmp_path):
    """HAMi's scheduler reads hami.io/device-cordon only when it next re-registers a node's
    GPUs, so a cordoned GPU may still be handed out: a node failing only through cordoned
    GPUs is unknown (a warning, and the steering label still keeps pods off it), never
    fine; and a cordon never hides an uncordoned GPU that fails."""
    from webhook.cli.doctor import diagnose

    half = agent_node(tmp_path, "hami-half", "hami", "operator-management",
                      per_uuid=UUIDS[:1])  # only the first GPU resolves
    rv, _, _ = decide([half], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert UUIDS[1] in rv.final.message
    cordoned = agent_node(tmp_path / "c", "hami-half", "hami", "operator-management",
                          per_uuid=UUIDS[:1], cordon=f" {UUIDS[1]} ,, ")  # HAMi trims
    rv, view, policy = decide([cordoned], hami_pod())
    assert rv.final.allowed and any("not verified" in w for w in rv.final.warnings)
    assert "only GPUs cordoned by hami.io/device-cordon" in rv.validation.message
    assert {"key": DETECTED, "operator": "NotIn", "values": ["false"]} in \
        terms(hami_pod(), rv.mutation.patch)[0]["matchExpressions"]  # still kept off it
    assert diagnose(view, policy)[0].state.startswith(
        "unknown: only GPUs cordoned by hami.io/device-cordon lack their CDI devices")
    wrong = agent_node(tmp_path / "w", "hami-half", "hami", "operator-management",
                       per_uuid=UUIDS[:1], cordon=UUIDS[0])  # the good GPU cordoned
    rv, _, _ = decide([wrong], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING


def test_a_gpu_that_fails_only_while_cordoned_is_steered_off_by_name_too(tmp_path):
    """A pod steered node by node (here: it narrows to GPUs by UUID) is kept off a node that
    fails only through cordoned GPUs, as the label keeps the others off: HAMi's scheduler
    may still hand such a GPU out until the node registers again."""
    cordoned = agent_node(tmp_path / "c", "hami-half", "hami", "operator-management",
                          per_uuid=UUIDS[:1], cordon=UUIDS[1])
    good = agent_node(tmp_path / "g", "hami-good", "hami", "operator-management",
                      per_uuid=True)
    pod = hami_pod()
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": ",".join(UUIDS)}
    rv, _, _ = decide([cordoned, good], pod)
    assert rv.final.allowed, rv.final.to_json()
    names = [f for t in terms(pod, rv.mutation.patch) for f in t.get("matchFields", [])]
    assert {"key": "metadata.name", "operator": "NotIn", "values": ["hami-half"]} in names


def test_a_cordon_on_a_device_plugin_pool_changes_nothing(tmp_path):
    """Only HAMi's scheduler reads the cordon: an operator-pool pod is judged on every GPU."""
    node = agent_node(tmp_path, "op-1", None, "operator-management", register=False,
                      cordon=",".join(UUIDS))
    rv, _, _ = decide([node], gpu_pod("g", limits={"nvidia.com/gpu": 1}))
    rv2, _, _ = decide([agent_node(tmp_path / "b", "op-1", None, "operator-management",
                                   register=False)], gpu_pod("g", limits={"nvidia.com/gpu": 1}))
    assert (rv.final.allowed, rv.final.reason) == (rv2.final.allowed, rv2.final.reason)


def test_junk_in_the_cordon_annotation_cordons_nothing():
    from webhook.engine.stacks import hami

    assert hami.cordoned(None) == frozenset() and hami.cordoned(42) == frozenset()
    assert hami.cordoned(" , ,") == frozenset()
    assert hami.cordoned("GPU-a, GPU-b,") == {"GPU-a", "GPU-b"}


# ------------------------------------------------------------------ RuntimeClasses


def _decide_with_classes(nodes, pod, classes):
    policy = load_policy_text(default_policy_text())
    view = view_from_objects(nodes, policy, runtime_classes=classes)
    return admit.review_pod(pod, "default", view, policy)


def test_the_fix_names_a_runtime_class_only_if_the_cluster_has_it(pool):
    """The GPU Operator deletes its RuntimeClasses when it injects devices through NRI: a fix
    telling users to run the pod with nvidia-legacy would send them to a class that is gone."""
    suggested = "run the pod with runtimeClassName nvidia-legacy"
    unknown = _decide_with_classes(pool[:1], hami_pod(), None)  # classes not known
    assert not unknown.allowed and suggested in unknown.message
    present = _decide_with_classes(pool[:1], hami_pod(), {"nvidia-legacy": "nvidia-legacy"})
    assert suggested in present.message
    gone = _decide_with_classes(pool[:1], hami_pod(), {"nvidia": "nvidia"})
    assert not gone.allowed and "runtimeClassName" not in gone.message
    assert "nvidia-ctk cdi generate" in gone.message  # the fix that still applies


def test_a_runtime_class_is_judged_by_the_handler_it_names(pool):
    """A class named otherwise than its handler: the node runs the pod with the handler's
    mode (here nvidia-legacy, no CDI), so the pod runs on the broken node too."""
    pod = hami_pod(runtimeClassName="gpu-legacy")
    by_name = _decide_with_classes(pool[:1], pod, None)  # taken to name a handler: none
    assert not by_name.allowed and by_name.reason == Reason.CDI_DEVICE_MISSING
    by_handler = _decide_with_classes(pool[:1], pod, {"gpu-legacy": "nvidia-legacy"})
    assert by_handler.allowed and not by_handler.warnings


def test_runtime_classes_are_read_from_a_cluster_file(tmp_path):
    from webhook.files.snapshot import load_cluster_file

    f = tmp_path / "cluster.yaml"
    f.write_text("apiVersion: v1\nkind: List\nitems:\n"
                 "- {apiVersion: v1, kind: Node, metadata: {name: n1}}\n"
                 "- {apiVersion: node.k8s.io/v1, kind: RuntimeClass, metadata: {name: rc1},"
                 " handler: h1}\n")
    snap = load_cluster_file(str(f))
    assert [n["metadata"]["name"] for n in snap.nodes] == ["n1"]
    assert snap.runtime_classes == {"rc1": "h1"}
    f.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    assert load_cluster_file(str(f)).runtime_classes is None  # none in the file: unknown


# ------------------------------------------------------------------ GPUs never delivered


def test_unprivileged_containers_get_no_gpu_where_the_toolkit_ignores_their_envvar(tmp_path):
    """accept-nvidia-visible-devices-envvar-when-unprivileged = false: the runtime ignores
    NVIDIA_VISIBLE_DEVICES of an unprivileged container, in CDI mode too, so a HAMi pod in the
    envvar strategy would run without its GPU: denied, with the switch and the fix named. A
    privileged container (or one with CAP_SYS_ADMIN) still gets it, and is not steered off."""
    strict = agent_node(tmp_path, "hami-strict", "hami", "operator-management",
                        per_uuid=True, envvar_unprivileged=False)
    inv = json.loads(strict["metadata"]["annotations"]["gpupool.io/cdi-inventory"])
    assert inv["runtime"]["acceptEnvvarUnprivileged"] is False
    assert strict["metadata"]["labels"][delivery.LABELS[delivery.VISIBLE_DEVICES]] == "false"
    rv, _, _ = decide([strict], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged is false" in \
        rv.final.message
    assert "= true in the NVIDIA runtime's config.toml" in rv.final.message
    for ctx in ({"privileged": True}, {"capabilities": {"add": ["SYS_ADMIN"]}}):
        pod = hami_pod()
        pod["spec"]["containers"][0]["securityContext"] = ctx
        rv, _, _ = decide([strict], pod)
        assert rv.final.allowed and not rv.final.warnings, (ctx, rv.final.to_json())
        assert "resolve.gpupool.io" not in json.dumps(rv.mutation.patch)
    # the same node with the toolkit's default: the unprivileged pod runs
    normal = agent_node(tmp_path / "n", "hami-normal", "hami", "operator-management",
                        per_uuid=True)
    rv, _, _ = decide([normal], hami_pod())
    assert rv.final.allowed and not rv.final.warnings



def test_envvar_gpus_under_a_default_handler_other_than_nvidia_never_arrive(tmp_path):
    """Only the NVIDIA runtime reads NVIDIA_VISIBLE_DEVICES. Where containerd's default
    handler is runc (the GPU Operator injecting devices through NRI), a HAMi pod in the
    envvar strategy would reach Running with no GPU: denied, with the fix; a pod naming the
    NVIDIA runtime's class is fine, and so is a device plugin in a CDI strategy."""
    from tests.plugincases import operator_learned
    from webhook.cli.doctor import diagnose

    runc = agent_node(tmp_path, "hami-nri", "hami", "operator-management", per_uuid=True,
                      default_runtime="runc")
    assert runc["metadata"]["labels"][delivery.LABELS[delivery.VISIBLE_DEVICES]] == "false"
    rv, view, policy = decide([runc], hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    assert "start without their GPUs" in rv.final.message
    assert "CDI strategy" in rv.final.message and "unresolvable" not in rv.final.message
    (row,) = diagnose(view, policy)
    assert row.state == "missing" and "CDI strategy" in row.fix
    rv, _, _ = decide([runc], hami_pod(runtimeClassName="nvidia"))
    assert rv.final.allowed and not rv.final.warnings  # the NVIDIA handler reads it
    plugin = agent_node(tmp_path / "p", "op-nri", None, "device-plugin", register=False,
                        default_runtime="runc",
                        plugins=operator_learned("cdi-annotations,cdi-cri"))
    rv, _, _ = decide([plugin], gpu_pod("g", limits={"nvidia.com/gpu": 1}))
    assert rv.final.allowed and not rv.final.warnings  # CDI names: containerd delivers them


def test_a_gpu_pod_in_a_user_namespace_is_denied_unless_the_policy_warns(tmp_path):
    """hostUsers: false: the toolkit's hooks fail in a user namespace on every GPU node
    (NVIDIA/nvidia-container-toolkit#648). Denied by default, warned with onUserNamespace:
    warn; a pod without GPUs is untouched."""
    node = agent_node(tmp_path, "hami-ok", "hami", "operator-management", per_uuid=True)
    rv, _, _ = decide([node], hami_pod(hostUsers=False))
    assert not rv.final.allowed and rv.final.reason == Reason.USER_NAMESPACE_UNSUPPORTED
    assert "hostUsers: false" in rv.final.message and "#648" in rv.final.message
    rv, _, _ = decide([node], hami_pod(hostUsers=False),
                      default_policy_text() + "onUserNamespace: warn\n")
    assert rv.final.allowed and any("#648" in w for w in rv.final.warnings)
    rv, _, _ = decide([node], hami_pod(hostUsers=True))
    assert rv.final.allowed and not rv.final.warnings
    plain = gpu_pod("c", limits={"cpu": "1"}, hostUsers=False)
    rv, _, _ = decide([node], plain)
    assert rv.final.allowed and rv.final.reason in (Reason.NOT_GPU_POD, Reason.ACCESS_VOIDED)
    assert not any("#648" in w for w in rv.final.warnings)


def test_the_just_in_time_kind_needs_no_spec_file(tmp_path):
    """In cdi mode with default-kind runtime.nvidia.com/gpu the runtime generates each GPU's
    device when the container is created (toolkit internal/modifier/cdi.go): a HAMi pod
    there needs no per-UUID spec, and denying it would turn away a pod that runs."""
    jit = agent_node(tmp_path, "hami-jit", "hami", "operator-management",
                     default_kind=delivery.JIT_KIND)
    assert jit["metadata"]["labels"][delivery.LABELS[delivery.VISIBLE_DEVICES]] == "true"
    rv, _, _ = decide([jit], hami_pod())
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    # the same node with the operator's kind and no per-UUID spec: the seed failure
    rv, _, _ = decide([agent_node(tmp_path / "m", "hami-m", "hami", "operator-management")],
                      hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING


def test_mig_pods_are_fine_where_no_name_can_be_missing(tmp_path):
    """A MIG pod gets MIG devices, which the node's GPU list does not name: judging it by
    the node's whole GPUs could turn away a pod that runs (tests/unit/engine/test_mig.py
    judges them device by device). Where no name can be missing it is fine."""
    mig = gpu_pod("m", limits={"nvidia.com/mig-1g.10gb": 1})
    jit = agent_node(tmp_path / "j", "op-jit", None, "operator-management", register=False,
                     default_kind=delivery.JIT_KIND)
    rv, _, _ = decide([jit], mig)
    assert rv.final.allowed and not rv.final.warnings


# ------------------------------------------------------------------ learned from the plugin's pod

ONE_POOL = """apiVersion: gpupool.io/v1alpha1
kind: PoolPolicy
defaultPool: gpu
gpuResources: [nvidia.com/gpu]
pools:
  - name: gpu
    schedulerName: default-scheduler
    cdi: {delivery: detect}
"""


def _plugin(*strategies: str, unknown: str = "") -> Settled:
    return Settled("nvidia-device-plugin/nvdp-x", "nvidia-device-plugin-ctr",
                   strategies or None, "config file /config/config.yaml" if strategies else "",
                   unknown)


@pytest.mark.parametrize("plugins, label, allowed", [
    # the disk alone: no device-plugin spec, so envvar, and the UUIDs resolve
    (None, "true", True),
    # the plugin's pod says CDI names: a spec was never written, every GPU fails
    ((_plugin("cdi-cri"),), "false", False),
    ((_plugin("envvar"),), "true", True),
    # not known from the pod: back to the disk, and the inventory says why
    ((_plugin(unknown="DEVICE_LIST_STRATEGY comes from valueFrom"),), "true", True),
    # plugins that disagree decide nothing either
    ((_plugin("envvar"), _plugin("cdi-annotations")), "true", True),
])
def test_the_strategy_learned_from_the_plugins_pod_decides_detect(tmp_path, plugins, label,
                                                                  allowed):
    node = agent_node(tmp_path, "n1", None, "operator-management", per_uuid=True,
                      register=False, allocatable=2, plugins=plugins)
    assert node["metadata"]["labels"][DETECTED] == label
    rv, _, _ = decide([node], gpu_pod("p", limits={"nvidia.com/gpu": 1}), ONE_POOL)
    assert rv.final.allowed is allowed, rv.final.message
    if not allowed:
        assert rv.final.reason == Reason.CDI_DEVICE_MISSING
        assert "k8s.device-plugin.nvidia.com/gpu=GPU-" in rv.final.message


def test_an_unknown_plugin_is_named_where_the_disk_is_only_an_inference(tmp_path):
    """The disk says CDI names (a plugin spec), the pod cannot say: doubt naming what is
    unknown, never a denial."""
    node = agent_node(tmp_path, "n1", None, "device-plugin", register=True, allocatable=2,
                      plugins=(_plugin(unknown="envFrom a Secret may set "
                                               "DEVICE_LIST_STRATEGY"),))
    rv, _, _ = decide([node], gpu_pod("p", limits={"nvidia.com/gpu": 1}), ONE_POOL)
    assert rv.final.allowed
    assert any("not verified" in w and "(n1)" in w for w in rv.final.warnings), \
        rv.final.warnings
    said = " ".join(d.message for d in (rv.mutation, rv.validation) if d is not None)
    assert "n1: how the device plugin hands GPUs is only inferred" in said
    assert "from its pod: nvidia-device-plugin/nvdp-x (nvidia-device-plugin-ctr): unknown, " \
        "envFrom a Secret may set DEVICE_LIST_STRATEGY" in said


def test_a_single_pool_policy_finds_its_nodes(tmp_path):
    """One pool and no pool label: the pod's only required term is gpupool's steering, and
    without it the pod could go anywhere (it once found no candidate at all)."""
    good = agent_node(tmp_path, "good", None, "operator-management", per_uuid=True,
                      register=False, allocatable=2)
    bad = agent_node(tmp_path, "bad", None, "operator-management", register=False,
                     allocatable=2)
    rv, _, _ = decide([good, bad], gpu_pod("p", limits={"nvidia.com/gpu": 1}), ONE_POOL)
    assert rv.final.allowed and not rv.final.warnings, rv.final.warnings
    rv, _, _ = decide([bad], gpu_pod("p", limits={"nvidia.com/gpu": 1}), ONE_POOL)
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
