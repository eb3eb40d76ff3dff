"""The failure of domain.md, end to end through `gpupool check --cluster`: node inventories
published by the real agent from real layouts, HAMi's real example pods."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.kit import UPSTREAM, gpu_pod, load_docs
from harness.layouts import UUIDS, hami_register, per_uuid_spec, write_layout
from tests.unit.engine.test_steering import implied_plugins
from webhook.cli.doctor import diagnose
from webhook.engine.admission import admit
from webhook.engine.core.decision import Reason
from webhook.engine.core.policy import load_policy_text
from webhook.engine.view.cluster import view_from_objects
from webhook.files.policyfile import default_policy_text
from webhook.node.agent import Observer

HAMI_POD = UPSTREAM / "pods/hami/nvidia/default_use.yaml"  # gpumem + gpucores: HAMi's pool
OPERATOR_POD = UPSTREAM / "pods/hami/nvidia/default_use_legacy.yaml"  # whole GPUs: operator


def inventory(root: Path, layout: str, extra: str | None = None) -> str:
    """The agent's inventory of a node of this layout, with what it learns from the device
    plugin's pod there (``implied_plugins``: its CDI strategies beside its spec, else
    envvar)."""
    paths = write_layout(root, layout)
    if extra:
        (paths["run"] / "management.nvidia.com-gpu-uuid.yaml").write_text(extra)
    learned = implied_plugins(layout, None, root.name)
    return Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                    str(paths["containerd"]), plugin_pods=lambda: learned).observe().dumps()


def node(name: str, pool: str | None, inv: str | None, *, register: str | None = None,
         taints: list | None = None) -> dict:
    labels = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": name}
    if pool:
        labels["gpupool.io/pool"] = pool
    ann = {}
    if inv is not None:
        ann["gpupool.io/cdi-inventory"] = inv
    if register is not None:
        ann["hami.io/node-nvidia-register"] = register
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": ann},
            "spec": {"taints": taints or []}}


@pytest.fixture
def broken_cluster(tmp_path) -> list[dict]:
    """The domain.md cluster: operator CDI everywhere, HAMi on some nodes."""
    mgmt = inventory(tmp_path / "h", "operator-management")
    plugin = inventory(tmp_path / "o", "device-plugin")
    return [node("hami-1", "hami", mgmt, register=hami_register()),
            node("hami-2", "hami", mgmt, register=hami_register()),
            node("op-1", None, plugin), node("op-2", None, plugin)]


def check(tmp_path: Path, nodes: list[dict], *pods: Path, policy: str | None = None):
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                                         "items": nodes}))
    args = [sys.executable, "-m", "webhook", "check", "--cluster", str(tmp_path / "nodes.yaml"),
            "-o", "json"]
    for p in pods:
        args += ["-f", str(p)]
    if policy:
        (tmp_path / "policy.yaml").write_text(policy)
        args += ["--policy", str(tmp_path / "policy.yaml")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)["results"]


def test_domain_failure_is_denied_naming_the_missing_device(tmp_path, broken_cluster):
    code, (res,) = check(tmp_path, broken_cluster, HAMI_POD)
    assert code == 1 and not res["allowed"] and res["reason"] == "CDIDeviceMissing"
    msg = res["message"]
    assert f"management.nvidia.com/gpu={UUIDS[0]}" in msg
    assert "hami-1" in msg and "hami-2" in msg and "pod default/gpu-pod" in msg
    assert "nvidia-ctk cdi generate --vendor=management.nvidia.com --class=gpu" in msg
    assert "runtimeClassName nvidia-legacy" in msg
    assert {n["node"] for n in res["nodes"]} == {"hami-1", "hami-2"}


def test_same_pod_allowed_once_per_uuid_spec_exists(tmp_path, broken_cluster):
    fixed = inventory(tmp_path / "fixed", "operator-management", per_uuid_spec())
    nodes = [node("hami-1", "hami", fixed, register=hami_register()),
             node("hami-2", "hami", fixed, register=hami_register()), *broken_cluster[2:]]
    code, (res,) = check(tmp_path, nodes, HAMI_POD)
    assert code == 0 and res["allowed"] and res["pool"] == "hami" and res["warnings"] == []


def test_operator_pool_pods_unaffected(tmp_path, broken_cluster):
    code, results = check(tmp_path, broken_cluster, OPERATOR_POD,
                          UPSTREAM / "pods/nvidia/gpu-operator-tests-gpu-pod.yaml")
    assert code == 0
    assert all(r["allowed"] and r["pool"] == "operator" and not r["warnings"] for r in results)


def test_some_candidates_lacking_only_warns(tmp_path, broken_cluster):
    fixed = inventory(tmp_path / "fixed", "operator-management", per_uuid_spec())
    nodes = [broken_cluster[0], node("hami-3", "hami", fixed, register=hami_register()),
             *broken_cluster[2:]]
    code, (res,) = check(tmp_path, nodes, HAMI_POD)
    assert code == 0 and res["allowed"]
    assert any("1 of 2 candidate nodes" in w for w in res["warnings"])


def test_nvidia_ctk_full_spec_node_is_fine(tmp_path):
    nodes = [node("hami-1", "hami", inventory(tmp_path, "nvidia-ctk"), register=hami_register())]
    code, (res,) = check(tmp_path, nodes, HAMI_POD)
    assert code == 0 and res["allowed"]


def test_legacy_csv_register_supplies_uuids(tmp_path):
    csv = ":".join(f"{u},10,15360,100,NVIDIA-Tesla T4,0,true" for u in UUIDS) + ":"
    nodes = [node("hami-1", "hami", inventory(tmp_path, "operator-management"), register=csv)]
    code, (res,) = check(tmp_path, nodes, HAMI_POD)
    assert code == 1 and f"management.nvidia.com/gpu={UUIDS[1]}" in res["message"]


# ------------------------------------------------------------------ in-process cases


@pytest.fixture
def policy_text():
    return default_policy_text()


def _decide(nodes, pod, policy_text=None, ns="default"):
    policy = load_policy_text(policy_text or default_policy_text())
    view = view_from_objects(nodes, policy)
    return admit.review_pod(pod, ns, view, policy)


def hami_pod(**spec):
    return gpu_pod("h", limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, **spec)


def test_legacy_runtime_class_needs_no_cdi(tmp_path, broken_cluster):
    d = _decide(broken_cluster, hami_pod(runtimeClassName="nvidia-legacy"))
    assert d.allowed and d.pool == "hami"


def test_nvidia_cdi_runtime_class_on_legacy_node_still_checked(tmp_path):
    paths = write_layout(tmp_path, "operator-management")
    cfg = paths["config"]
    cfg.write_text(cfg.read_text().replace('mode = "cdi"', 'mode = "legacy"'))
    inv = Observer([str(paths["run"])], str(cfg), str(paths["containerd"])).observe().dumps()
    nodes = [node("hami-1", "hami", inv, register=hami_register())]
    assert _decide(nodes, hami_pod()).allowed  # legacy mode: env var, no CDI
    d = _decide(nodes, hami_pod(runtimeClassName="nvidia-cdi"))
    assert not d.allowed and d.reason == Reason.CDI_DEVICE_MISSING


def test_missing_inventory_warns_by_default_and_denies_when_asked(broken_cluster):
    nodes = [node("hami-1", "hami", None, register=hami_register())]
    d = _decide(nodes, hami_pod())
    assert d.allowed and any("not verified on" in w for w in d.warnings)
    strict = default_policy_text() + "onMissingInventory: deny\n"
    d = _decide(nodes, hami_pod(), strict)
    assert not d.allowed and d.reason == Reason.INVENTORY_MISSING


def test_corrupt_inventory_on_one_node_is_a_warning_not_a_crash(broken_cluster):
    nodes = [node("hami-1", "hami", "{not json", register=hami_register())]
    d = _decide(nodes, hami_pod())
    assert d.allowed and d.nodes[0].note.startswith("gpupool.io/cdi-inventory: not valid JSON")


def test_no_candidates_is_a_policy_setting(broken_cluster):
    tainted = [node("hami-1", "hami", broken_cluster[0]["metadata"]["annotations"][
        "gpupool.io/cdi-inventory"], register=hami_register(),
        taints=[{"key": "maintenance", "effect": "NoSchedule"}])]
    d = _decide(tainted, hami_pod())
    assert d.allowed and any("no candidate node" in w for w in d.warnings)
    d = _decide(tainted, hami_pod(), default_policy_text() + "onNoCandidates: deny\n")
    assert not d.allowed and d.reason == Reason.NO_CANDIDATE_NODES
    # Tolerating the taint makes the node a candidate again, and then the CDI gap shows.
    d = _decide(tainted, hami_pod(tolerations=[{"key": "maintenance", "operator": "Exists"}]))
    assert not d.allowed and d.reason == Reason.CDI_DEVICE_MISSING


def test_candidates_follow_selector_affinity_and_match_fields(tmp_path, broken_cluster):
    fixed = inventory(tmp_path / "fixed", "operator-management", per_uuid_spec())
    nodes = [*broken_cluster[:2], node("hami-ok", "hami", fixed, register=hami_register())]
    assert _decide(nodes, hami_pod()).allowed  # one good candidate: allowed with warning
    pinned = hami_pod(nodeSelector={"kubernetes.io/hostname": "hami-1"})
    assert _decide(nodes, pinned).reason == Reason.CDI_DEVICE_MISSING
    fields = hami_pod(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                              "values": ["hami-ok"]}]}]}}})
    assert _decide(nodes, fields).reason == Reason.CDI_DEVICE_MISSING
    assert _decide(nodes, hami_pod(nodeName="hami-ok")).allowed


def test_use_gpuuuid_needs_those_gpus(tmp_path):
    fixed = inventory(tmp_path, "operator-management", per_uuid_spec())
    nodes = [node("hami-1", "hami", fixed, register=hami_register())]
    pod = hami_pod()
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": UUIDS[1]}
    assert _decide(nodes, pod).allowed
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": "GPU-00000000-0000-0000-0000-0"}
    d = _decide(nodes, pod)
    assert not d.allowed and d.reason == Reason.GPU_UUID_UNAVAILABLE


def test_upstream_uuid_example_routes_to_hami_and_is_checked(broken_cluster):
    (pod,) = load_docs(UPSTREAM / "pods/hami/nvidia/specify_uuid_to_use.yaml")
    d = _decide(broken_cluster, pod)
    assert d.pool == "hami" and not d.allowed


def test_doctor_rows(tmp_path, broken_cluster):
    policy = load_policy_text(default_policy_text())
    rows = {r.node: r for r in diagnose(view_from_objects(broken_cluster, policy), policy)}
    assert rows["hami-1"].state == "missing" and rows["hami-1"].hami_gpus == 2
    assert rows["hami-1"].cdi_kinds == {"management.nvidia.com/gpu": 1}
    assert rows["hami-1"].mode == "cdi"
    assert rows["hami-1"].default_kind == "management.nvidia.com/gpu"
    assert f"management.nvidia.com/gpu={UUIDS[0]}" in rows["hami-1"].missing
    assert "nvidia-ctk cdi generate" in rows["hami-1"].fix
    assert rows["op-1"].state == "ok" and rows["op-1"].scheduler == "default-scheduler"
    (tmp_path / "n.yaml").write_text(yaml.safe_dump({"kind": "List", "apiVersion": "v1",
                                                     "items": broken_cluster}))
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--cluster",
                        str(tmp_path / "n.yaml")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    # each distinct fix once, with the nodes it applies to
    assert re.search(r"^fix for \d+ node\(s\) \([^)]*hami-1[^)]*\): define a CDI device per GPU "
                     r"UUID", r.stdout, re.M), r.stdout


def test_unreadable_hami_register_is_reported_not_fatal(tmp_path):
    policy = load_policy_text(default_policy_text())
    nodes = [node("hami-1", "hami", inventory(tmp_path, "operator-management"),
                  register="GPU-1,10:not,a,record")]
    view = view_from_objects(nodes, policy)
    assert view.node("hami-1").gpus == ()
    d = admit.review_pod(hami_pod(), "default", view, policy)
    assert d.allowed and any("not verified on" in w or "lack" in w for w in d.warnings)
    (row,) = diagnose(view, policy)
    assert any("hami.io/node-nvidia-register: CSV record 0 has 2 fields" in e
               for e in row.errors)
