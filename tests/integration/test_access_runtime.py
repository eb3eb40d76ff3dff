"""No container gets a GPU it was not granted, judged by the real runtime (issue 47).

Pods of every kind (no GPU asked and the variable set, an image that sets it, a GPU pod's
sidecar and init container, NRI annotations, HAMi's scheduler-owned annotations, an exempt
namespace, plain GPU pods) are admitted by gpupool into a cluster of node setups: the GPU
Operator's CDI mode (its management spec), nvidia-ctk's spec, the legacy hook, the toolkit's
switch that ignores unprivileged containers' variable, runc as containerd's default, a
tainted node. Then each container without a grant, as admitted, is created on every node its
pod can reach by the real nvidia-container-runtime with a low-level runtime that records what
it receives (tests/runtime_oracle.py): the recorder says whether a GPU device arrived. Where
the oracle cannot run the real program the cited rule stands in: jit-cdi (needs NVML) for
``auto`` mode, libnvidia-container's device selection for the legacy hook, runc reading no
variable at all."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import jsonpatch

from harness.kit import gpu_pod
from harness.layouts import UUIDS
from tests.runtime_oracle import OracleNode, Verdict
from tests.unit.engine.test_nri import DOMAIN, TOOLKIT_LABEL, cluster_policy
from tests.unit.engine.test_steering import agent_node, hami_pod
from webhook.engine import (
    Reason,
    Subject,
    load_policy_text,
    review,
    view_from_objects,
)
from webhook.files.policyfile import default_policy_text

VAR = "NVIDIA_VISIBLE_DEVICES"
CUDA = "nvidia/cuda:12.4.1-base-ubuntu22.04"  # its image sets ENV NVIDIA_VISIBLE_DEVICES=all
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpumem")

#: node name -> (layout, what agent_node is told)
SETUPS = {
    "op-cdi": ("operator-management", {}),
    "ctk-cdi": ("nvidia-ctk", {}),
    "op-legacy": ("operator-management", {"mode": "legacy"}),
    "op-strict": ("operator-management", {"envvar_unprivileged": False}),
    "op-nri": ("device-plugin", {"default_runtime": "runc"}),
    "op-tainted": ("operator-management", {}),
}


def _nodes(tmp_path: Path) -> tuple[list[dict], dict[str, OracleNode]]:
    nodes, oracles = [], {}
    for name, (layout, kw) in SETUPS.items():
        node = agent_node(tmp_path, name, None, layout, register=False, **kw)
        if name == "op-tainted":
            node["spec"]["taints"] = [TAINT]
        if name == "op-nri":
            node["metadata"]["labels"][TOOLKIT_LABEL] = "true"
        nodes.append(node)
        base = tmp_path / name
        oracles[name] = OracleNode(tmp_path / "oracle" / name,
                                   [base / "etc/cdi", base / "var/run/cdi"],
                                   base / "config/config.toml", gpus=UUIDS)
    return nodes, oracles


def _pods() -> list[tuple[str, str, dict]]:
    """(what, namespace, pod)."""
    out = []
    env_all = gpu_pod("env-all", limits={"cpu": "1"})
    env_all["spec"]["containers"][0]["env"] = [{"name": VAR, "value": "all"}]
    out.append(("no GPU asked, the variable set", "ml", env_all))
    image = gpu_pod("image", limits={"cpu": "1"})
    image["spec"]["containers"][0]["image"] = CUDA
    out.append(("no GPU asked, the image sets it", "ml", image))
    index = gpu_pod("index", limits={"cpu": "1"})
    index["spec"]["containers"][0]["env"] = [{"name": VAR, "value": "0"}]
    out.append(("no GPU asked, a GPU by index", "ml", index))
    sidecar = gpu_pod("sidecar", limits={"nvidia.com/gpu": 1})
    sidecar["spec"]["containers"].append({"name": "log", "image": CUDA})
    out.append(("a GPU pod's sidecar", "ml", sidecar))
    init = hami_pod()
    init["metadata"]["name"] = "init"
    init["spec"]["initContainers"] = [{"name": "prep", "image": "busybox",
                                       "env": [{"name": VAR, "value": "all"}]}]
    out.append(("a HAMi pod's init container", "ml", init))
    tolerant = copy.deepcopy(image)
    tolerant["metadata"]["name"] = "tolerant"
    tolerant["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    out.append(("no GPU asked, tolerating the GPU taint", "ml", tolerant))
    nri_pod = gpu_pod("nri", limits={"cpu": "1"})
    nri_pod["metadata"]["annotations"] = {
        f"{DOMAIN}/pod": f"k8s.device-plugin.nvidia.com/gpu={UUIDS[0]}"}
    out.append(("no GPU asked, an NRI annotation", "ml", nri_pod))
    forged = hami_pod()
    forged["metadata"]["name"] = "forged"
    forged["metadata"]["annotations"] = {"hami.io/vgpu-devices-allocated": f"{UUIDS[0]},"
                                         "NVIDIA,1000,10:;", "hami.io/bind-phase": "success"}
    out.append(("HAMi's allocation forged", "ml", forged))
    exempt = copy.deepcopy(env_all)
    exempt["metadata"]["name"] = "dcgm"
    out.append(("an exempt namespace's monitor", "gpu-operator", exempt))
    for i, limits in enumerate(({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1,
                                                        "nvidia.com/gpumem": 1000})):
        plain = gpu_pod(f"gpu-{i}", limits=limits)
        plain["spec"]["containers"][0]["env"] = [{"name": "EPOCHS", "value": "3"}]
        out.append(("a plain GPU pod", "ml", plain))
    return out


def _asks_gpu(c: dict) -> bool:
    res = c.get("resources") or {}
    return any(r in GPU_RESOURCES for key in ("limits", "requests") for r in res.get(key, {}))


def _value(c: dict) -> str | None:
    """NVIDIA_VISIBLE_DEVICES as the runtime gets it: the container's own last value (the
    kubelet's after the image's, and the runtime keeps the last), else its image's."""
    own = [e for e in c.get("env") or () if e.get("name") == VAR]
    if own:
        return str(own[-1].get("value", ""))
    return "all" if c.get("image", "").startswith("nvidia/cuda") else None


def _receives_gpu(node: str, oracle: OracleNode, value: str) -> tuple[bool, Verdict | None]:
    if SETUPS[node][1].get("default_runtime") == "runc":
        # runc reads no NVIDIA_VISIBLE_DEVICES: only NVIDIA's runtime does (toolkit v1.20.2
        # internal/config/image/cuda_image.go is read by nvidia-container-runtime alone)
        return False, None
    v = oracle.legacy(value) if oracle.mode == "legacy" else oracle.create(value)
    if v.by.startswith("rule: jit-cdi"):
        return v.ok and value.strip() not in ("", "void", "none"), v
    gpus = [d for d in v.devices if str(d.get("path", "")).removeprefix("/dev/nvidia")
            .isdigit() or str(d.get("path", "")).startswith(("GPU-", "MIG-"))]
    return v.ok and bool(gpus), v


def test_no_container_gets_a_gpu_it_was_not_granted(tmp_path):
    nodes, oracles = _nodes(tmp_path)
    policy = load_policy_text(default_policy_text())
    objects = [*nodes, cluster_policy()]
    view = view_from_objects(nodes, policy, {"ml": {}, "gpu-operator": {}},
                             resources=[cluster_policy()])
    infos = [n["metadata"]["name"] for n in objects if n.get("kind", "Node") == "Node"]
    seen: Counter[str] = Counter()
    wrong = []
    for what, ns, pod in _pods():
        pod["metadata"]["namespace"] = ns
        rv = review(Subject(kind="Pod", object=pod, namespace=ns), view, policy)
        final = rv.final
        if what == "HAMi's allocation forged":
            assert not final.allowed and final.reason == Reason.FORGED_ALLOCATION
            seen["forged, denied"] += 1
            continue
        if what == "no GPU asked, an NRI annotation":
            assert not final.allowed and final.reason == Reason.GPU_NOT_GRANTED, final.message
            seen["NRI annotation, denied"] += 1
            continue
        assert final.allowed, (what, final.message)
        admitted = jsonpatch.apply_patch(pod, final.patch) if final.patch else pod
        # the scheduler's taint filter (no pod here has a selector or an affinity of its
        # own, and every node is in the operator's pool)
        tolerates = any(t.get("key") == TAINT["key"] for t in
                        admitted["spec"].get("tolerations") or ())
        reach = [n for n in infos if n != "op-tainted" or tolerates]
        assert reach, what
        for field in ("initContainers", "containers"):
            for i, c in enumerate(admitted["spec"].get(field) or ()):
                if _asks_gpu(c):
                    # a granted container's environment is the user's, untouched
                    assert c.get("env") == pod["spec"][field][i].get("env"), (what, c)
                    continue
                value = _value(c)
                if value is None:
                    continue
                for node in reach:
                    got, v = _receives_gpu(node, oracles[node], value)
                    seen[f"{node}: {'GPU' if got else 'none'}"] += 1
                    if got and ns not in policy.access.exempt_namespaces:
                        wrong.append((what, c["name"], node, value, v))
                    if ns in policy.access.exempt_namespaces:
                        seen[f"exempt, {'GPU' if got else 'none'}"] += 1
    assert not wrong, wrong[:5]
    # not vacuous: the real runtime handed GPUs where nothing voided the variable (an exempt
    # namespace), the void reached every honouring setup, and the other setups were met
    assert seen["exempt, GPU"] and seen["forged, denied"] and seen["NRI annotation, denied"]
    for node in ("op-cdi", "ctk-cdi", "op-legacy", "op-strict", "op-nri"):
        assert seen[f"{node}: none"], (node, seen)
    assert seen["op-tainted: none"]  # reached only by the pod that tolerates it


def test_without_gpupool_those_containers_would_get_gpus(tmp_path):
    """The judge's other side, on the same nodes: the containers gpupool voided get GPUs
    from the real runtime when left as the user wrote them."""
    _, oracles = _nodes(tmp_path)
    for node in ("op-cdi", "ctk-cdi", "op-legacy"):
        got, v = _receives_gpu(node, oracles[node], "all")
        assert got, (node, v)
    got, v = _receives_gpu("op-strict", oracles["op-strict"], "all")
    assert not got, v  # the toolkit's switch: no void needed there
