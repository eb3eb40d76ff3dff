"""A seeded corpus of clusters and GPU pods, judged by the real container stack.

Each cluster is a handful of GPU nodes drawn from the setups platform teams really run (the
operator's management-only spec, fixed per-UUID specs, the full ``nvidia.com/gpu`` spec,
device-plugin specs present, missing, partial or stale, specs in ``/etc/cdi`` or
``/var/run/cdi``, broken files, one device in two files of a directory; runtime modes cdi,
auto, legacy or none; NVIDIA's and HAMi's device plugins with their envvar and CDI strategies,
each run by a device-plugin pod deployed one of the ways teams deploy it; MIG devices under
the mixed and the single strategy; HAMi GPUs in MIG mode or cordoned after HAMi last
registered them; the GPU Operator's NRI plugin, some nodes with containerd's default runtime
left at runc; taints; nodes without gpupool's agent). Every node's inventory and steering
labels come from gpupool's own agent code scanning that node's files and its plugin's pod.

Every pod goes through gpupool (``admit.review``: mutate, apply, validate). Then, on every
node the pod can land on (this module's own model of the scheduler: nodeName, nodeSelector,
required affinity, taints, GPU count or allocatable, HAMi's annotations) and for every GPU the
device plugin could hand it there, the real programs say whether the container would be
created with it (``tests.runtime_oracle``). ``table`` prints the outcomes.

Where the truth comes from, per class:

- the device plugin's strategy and MIG strategy: the plugin's own ``NewConfig``
  (``plugin-judge``, k8s-device-plugin v0.19.3);
- CDI names a plugin hands: the CDI library (v1.1.2), as containerd injects them;
- ``NVIDIA_VISIBLE_DEVICES`` in ``cdi`` mode, and the unprivileged-envvar switch there:
  nvidia-container-runtime (toolkit v1.20.2), with a stub runc that keeps the spec;
- the ``legacy`` mode: the real ``nvidia-container-runtime-hook``; which devices the cli then
  mounts follows libnvidia-container ``src/cli/common.c`` ``select_devices`` (commit
  1aea987), since it needs the driver;
- ``auto`` mode and the just-in-time kind: NVML is needed, so the toolkit's rule
  (``internal/modifier/cdi.go``, ``newJitCDIModifier``): the node's own GPUs resolve;
- ``nvidia.cdi.k8s.io`` annotations: NVIDIA's NRI plugin through containerd/nri;
- runc as containerd's default runtime: it reads no ``NVIDIA_VISIBLE_DEVICES``;
- which GPUs a plugin may hand: HAMi's annotations (``pkg/device/devices.go``), HAMi's
  cordon read at registration only (v2.10 ``pkg/scheduler/scheduler.go``, ``register``), the
  MIG strategies (k8s-device-plugin ``internal/lm/mig-strategy.go``): modelled here.

Run a bigger corpus by hand: ``python -m tests.corpus --pods 3000 --seed 7``.
"""
from __future__ import annotations

import argparse
import json
import random
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from harness.gobuild import built
from harness.layouts import (
    CONTAINERD_SRC,
    device_plugin_spec,
    fake_driver,
    management_spec,
    nvidia_config,
    nvidia_ctk_spec,
    per_uuid_spec,
)
from tests import pendingpod
from tests.plugincases import BUILD as PLUGIN_JUDGE_BUILD
from tests.plugincases import Judge, PluginPod, plugin_pod
from tests.runtime_oracle import OracleNode, Verdict
from tests.stacknames import DEVICE_PLUGIN_DEPLOY_LABEL as DEPLOY_LABEL
from tests.stacknames import NRI_DOMAIN as DOMAIN
from tests.stacknames import NRI_NAMESPACES_ENV as NAMESPACES_ENV
from tests.stacknames import TOOLKIT_DEPLOY_LABEL as TOOLKIT_LABEL
from webhook.api.pluginconfig import settle_pods
from webhook.engine import (
    Policy,
    Reason,
    Subject,
    annotation_requests,
    load_policy_text,
    review,
    view_from_objects,
    without_steering,
)
from webhook.node.agent import Observer, node_labels

DP_KIND = "k8s.device-plugin.nvidia.com/gpu"
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
MGMT_KIND = "management.nvidia.com/gpu"
TYPES = ("NVIDIA-Tesla T4", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3")
TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
#: Denials the oracle judges: would the pod have run on a node it could reach?
CDI_REASONS = {Reason.CDI_DEVICE_MISSING, Reason.INVENTORY_MISSING,
               Reason.GPU_UUID_UNAVAILABLE, Reason.NO_CANDIDATE_NODES,
               Reason.GPU_NOT_DELIVERED, Reason.UNKNOWN_DEVICE, Reason.GPU_NOT_ACCOUNTED,
               Reason.NOT_BOUND_BY_HAMI}
OUTCOMES = ("fine", "potential late failure", "certain late failure", "false denial",
            "denied correctly")


# ------------------------------------------------------------------ nodes


@dataclass
class NodeSetup:
    name: str
    pool: str  # hami | operator
    plugin: str  # envvar | cdi (the device plugin's DEVICE_LIST_STRATEGY)
    mode: str | None  # the NVIDIA runtime's mode; None: the key is absent
    default_kind: str | None
    gpus: tuple[str, ...]
    types: tuple[str, ...]
    specs: list[tuple[str, str, str]]  # (etc|run, file name, text)
    agent: bool
    tainted: bool
    what: list[str] = field(default_factory=list)  # the setup, in words, for failure reports
    #: the toolkit's accept-nvidia-visible-devices-envvar-when-unprivileged
    envvar_unprivileged: bool = True
    #: the MIG devices its device plugin registered for ``MIG_RESOURCE``
    mig: tuple[str, ...] = ()
    #: the agent reads them from the kubelet's checkpoint
    reads_kubelet: bool = True
    #: GPUs HAMi runs in MIG mode (it creates the MIG device it hands out)
    hami_mig: tuple[str, ...] = ()
    #: the device-plugin pod running there (tests.plugincases), and whether the agent can
    #: learn from it: "yes", "no access" (the agent not allowed to list pods), "valueFrom"
    #: (its strategy comes from a reference the agent does not follow)
    plugin_pod: PluginPod | None = None
    learns: str = "no access"
    #: GPUs listed in hami.io/device-cordon since HAMi's scheduler last registered the node:
    #: it may still hand them out (HAMi v2.10 pkg/scheduler/scheduler.go, register)
    cordoned: tuple[str, ...] = ()
    #: the device plugin's MIG strategy where it registered MIG devices: "mixed" (as
    #: ``nvidia.com/mig-<profile>``) or "single" (as ``nvidia.com/gpu``,
    #: k8s-device-plugin internal/lm/mig-strategy.go)
    mig_strategy: str = "mixed"
    #: containerd's default runtime: "nvidia", or "runc" as the GPU Operator's NRI setup
    #: leaves it (its NRI plugin injects CDI devices; NVIDIA_VISIBLE_DEVICES reaches nothing)
    default_runtime: str = "nvidia"
    #: HAMi's device plugin runs here, whatever the pool (its DaemonSet's selector lands here)
    hami_plugin: bool = False
    #: containerd's ``enable_cdi`` (false: containerd 1.7 as it ships); its NVIDIA handlers
    #: pass ``cdi.k8s.io/*`` annotations on, as ``nvidia-ctk`` configures them
    containerd_cdi: bool = True
    #: the strategies the device plugin really runs with (its own code's answer)
    strategies: tuple[str, ...] = ()


def _uuid(rng: random.Random) -> str:
    return f"GPU-{uuidlib.UUID(int=rng.getrandbits(128), version=4)}"


def make_node(rng: random.Random, name: str, pool: str, plugin: str) -> NodeSetup:
    gpus = tuple(_uuid(rng) for _ in range(rng.choice((1, 2, 2, 4))))
    types = tuple(rng.choice(TYPES) for _ in gpus)
    mode = rng.choice(("cdi", "cdi", "cdi", "auto", "legacy", None))
    kind = rng.choice((MGMT_KIND, MGMT_KIND, None, MGMT_KIND, MGMT_KIND, None, JIT_KIND))
    what = [f"pool {pool}", f"plugin {plugin}", f"mode {mode}", f"default kind {kind}"]
    specs: list[tuple[str, str, str]] = [("run", "management.nvidia.com-gpu.yaml",
                                          management_spec(len(gpus)))]
    # What defines the GPUs by UUID for NVIDIA_VISIBLE_DEVICES in cdi mode.
    uuid_spec = rng.choice(("none", "none", "management", "management", "nvidia-ctk",
                            "partial", "stale", "etc", "broken", "duplicate"))
    what.append(f"uuid spec {uuid_spec}")
    target = kind or "nvidia.com/gpu"
    if uuid_spec == "management":
        specs.append(("run", "per-uuid.yaml", per_uuid_spec(target, gpus)))
    elif uuid_spec == "nvidia-ctk":
        specs.append(("run", "nvidia.yaml", nvidia_ctk_spec(gpus)))
    elif uuid_spec == "partial":
        specs.append(("run", "per-uuid.yaml", per_uuid_spec(target, gpus[:1])))
    elif uuid_spec == "stale":
        specs.append(("run", "per-uuid.yaml", per_uuid_spec(target, (_uuid(rng),))))
    elif uuid_spec == "etc":
        specs.append(("etc", "per-uuid.yaml", per_uuid_spec(target, gpus)))
    elif uuid_spec == "broken":  # the right content, cut off mid-file
        specs.append(("run", "per-uuid.yaml", per_uuid_spec(target, gpus)[:-40] + ": ]["))
    elif uuid_spec == "duplicate":  # the first GPU in two files of one directory
        specs.append(("run", "per-uuid.yaml", per_uuid_spec(target, gpus)))
        specs.append(("run", "per-uuid-copy.yaml", per_uuid_spec(target, gpus[:1])))
    # What the device plugin's CDI strategies write.
    dp = rng.choice(("present", "present", "missing", "partial", "stale")) \
        if plugin == "cdi" else rng.choice(("absent", "absent", "absent", "present"))
    what.append(f"device-plugin spec {dp}")
    if dp == "present":
        specs.append(("run", "k8s.device-plugin.nvidia.com-gpu.json", device_plugin_spec(gpus)))
    elif dp == "partial":
        specs.append(("run", "k8s.device-plugin.nvidia.com-gpu.json",
                      device_plugin_spec(gpus[:1])))
    elif dp == "stale":
        specs.append(("run", "k8s.device-plugin.nvidia.com-gpu.json",
                      device_plugin_spec((_uuid(rng),))))
    # MIG (operator nodes, mixed strategy): the devices the plugin registers now, and the CDI
    # names a spec gives them: current, from before a MIG reconfiguration, or none.
    mig: tuple[str, ...] = ()
    if pool == "operator" and rng.random() < 0.25:
        mig = tuple(_mig(rng) for _ in range(rng.choice((1, 2, 4))))
        named = rng.choice(("fresh", "fresh", "stale", "none"))
        what.append(f"MIG devices {len(mig)}, MIG names {named}")
        names = mig if named == "fresh" else (_mig(rng),) if named == "stale" else ()
        if names:
            specs.append(("run", "per-mig.yaml", per_uuid_spec(target, names)))
            for i, (where, fname, _text) in enumerate(specs):
                if fname.startswith("k8s.device-plugin") and dp != "missing":
                    # the plugin's own spec names the MIG devices it knew when it wrote it
                    shown = gpus if dp == "present" else gpus[:1] if dp == "partial" else ()
                    specs[i] = (where, fname, device_plugin_spec(
                        (*shown, *names) if dp != "stale" else (_uuid(rng),)))
    hami_mig = (gpus[0],) if pool == "hami" and rng.random() < 0.15 else ()
    if hami_mig:
        what.append("HAMi MIG mode on its first GPU")
    # (new nodes before the agent's DaemonSet pod starts there, or where it crash-loops)
    agent = rng.random() > 0.01
    tainted = rng.random() < 0.15
    # The toolkit told to ignore unprivileged containers' NVIDIA_VISIBLE_DEVICES.
    strict = rng.random() < 0.1
    if not agent:
        what.append("no agent")
    if tainted:
        what.append("tainted")
    if strict:
        what.append(f"{ENVVAR_KEY} = false")
    reads_kubelet = rng.random() > 0.1
    # (their own generator: the draws above stay as they were)
    more = random.Random(f"{name}/{gpus[0]}")
    cordoned = (gpus[-1],) if pool == "hami" and more.random() < 0.15 else ()
    if cordoned:
        what.append(f"GPU {cordoned[0]} cordoned after HAMi last registered the node")
    single = bool(mig) and more.random() < 0.4
    if single:
        what.append("MIG strategy single: MIG devices registered as nvidia.com/gpu")
    return NodeSetup(name, pool, plugin, mode, kind, gpus, types, specs, agent, tainted, what,
                     envvar_unprivileged=not strict, mig=mig, reads_kubelet=reads_kubelet,
                     hami_mig=hami_mig, cordoned=cordoned,
                     mig_strategy="single" if single else "mixed")


def created_mig(gpu: str) -> str:
    """The MIG device HAMi creates on a MIG-mode GPU when it allocates it."""
    return f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, gpu)}"


def _mig(rng: random.Random) -> str:
    return f"MIG-{uuidlib.UUID(int=rng.getrandbits(128), version=4)}"


ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
#: Verdicts of the legacy mode: the real hook, and the cli's device selection as its source
#: has it (tests.runtime_oracle.OracleNode.legacy)
HOOK = "nvidia-container-runtime-hook"
#: The kind the runtime generates just in time, without a spec file.
JIT_KIND = "runtime.nvidia.com/gpu"


def _config(mode: str | None, kind: str | None, envvar_unprivileged: bool = True) -> str:
    text = nvidia_config(mode or "auto", kind)
    if not envvar_unprivileged:
        assert f"{ENVVAR_KEY} = true" in text
        text = text.replace(f"{ENVVAR_KEY} = true", f"{ENVVAR_KEY} = false")
    if mode is None:
        text = text.replace('mode = "auto"', "")
    return text


def write_node(root: Path, n: NodeSetup) -> dict[str, Path]:
    etc, run, cfg = root / "etc/cdi", root / "var/run/cdi", root / "config"
    for d in (etc, run, cfg):
        d.mkdir(parents=True, exist_ok=True)
    for where, fname, text in n.specs:
        ((etc if where == "etc" else run) / fname).write_text(text)
    (cfg / "config.toml").write_text(_config(n.mode, n.default_kind, n.envvar_unprivileged))
    containerd = CONTAINERD_SRC.read_text().replace("{{ .toolkitRoot }}", "/usr/local/nvidia")
    if not n.containerd_cdi:
        containerd = containerd.replace("enable_cdi = true", "enable_cdi = false").replace(
            'runtime_type = "io.containerd.runc.v2"',
            'runtime_type = "io.containerd.runc.v2"\n'
            '          container_annotations = ["cdi.k8s.io/*"]')
    if n.default_runtime != "nvidia":
        assert 'default_runtime_name = "nvidia"' in containerd
        containerd = containerd.replace('default_runtime_name = "nvidia"',
                                        f'default_runtime_name = "{n.default_runtime}"')
    (cfg / "containerd.toml").write_text(containerd)
    # The kubelet's device-manager checkpoint (its struct: Kubernetes
    # pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go).
    registered = {"nvidia.com/gpu": list(n.mig)} if n.mig_strategy == "single" else {
        "nvidia.com/gpu": list(n.gpus), **({MIG_RESOURCE: list(n.mig)} if n.mig else {})}
    (cfg / "kubelet_internal_checkpoint").write_text(json.dumps({"Data": {
        "PodDeviceEntries": [], "RegisteredDevices": registered}, "Checksum": 0}))
    return {"etc": etc, "run": run, "config": cfg / "config.toml",
            "containerd": cfg / "containerd.toml",
            "kubelet": cfg / "kubelet_internal_checkpoint",
            "driver": fake_driver(root / "driver", n.gpus)}


def gfd_labels(n: NodeSetup) -> dict[str, str]:
    """The MIG labels GPU feature discovery puts on the node (k8s-device-plugin v0.19.3
    internal/lm: ``nvml.go`` mig.capable, ``migStrategyLabeler``, and under the single
    strategy the product with its MIG profile where the GPUs have MIG enabled,
    ``mig-strategy.go``), on the nine nodes in ten where it runs (its own generator: the
    corpus's draws stay as they were)."""
    if random.Random(f"{n.name}/gfd").random() < 0.1:
        return {}
    labels = {"nvidia.com/mig.capable": "true" if n.mig else "false",
              "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    if n.mig:
        labels["nvidia.com/mig.strategy"] = n.mig_strategy
        if n.mig_strategy == "single":
            labels.update({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                           "nvidia.com/gpu.slices.gi": "1", "nvidia.com/gpu.slices.ci": "1"})
    return labels


def node_object(n: NodeSetup, paths: dict[str, Path]) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": n.name, "nvidia.com/gpu.present": "true"}
    if n.pool == "hami":
        labels["gpupool.io/pool"] = "hami"
    annotations = {}
    if n.pool == "hami":
        annotations["hami.io/node-nvidia-register"] = json.dumps(
            [{"id": u, "count": 10, "devmem": 40960, "devcore": 100, "type": t, "numa": 0,
              "health": True, "index": i, "mode": "mig" if u in n.hami_mig else "hami-core"}
             for i, (u, t) in enumerate(zip(n.gpus, n.types, strict=True))])
    if n.agent:
        pp = n.plugin_pod
        learned = None if pp is None or n.learns == "no access" else settle_pods(
            [pp.pod], pp.labels, lambda ns, name: pp.config_maps.get((ns, name)))
        inv = Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                       str(paths["containerd"]), driver_gpus_dir=str(paths["driver"]),
                       kubelet_checkpoint=str(paths["kubelet"]) if n.reads_kubelet else None,
                       plugin_pods=None if learned is None else lambda: learned).observe()
        annotations["gpupool.io/cdi-inventory"] = inv.dumps()
        labels.update({k: v for k, v in node_labels(inv).items() if v is not None})
    if n.cordoned:
        annotations["hami.io/device-cordon"] = ",".join(n.cordoned)
    labels.update(gfd_labels(n))
    count = len(_gpu_devices(n)) * (10 if n.pool == "hami" else 1)
    mixed = n.mig and n.mig_strategy == "mixed"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "labels": labels, "annotations": annotations},
            "spec": {"taints": [TAINT] if n.tainted else []},
            "status": {"allocatable": {"nvidia.com/gpu": str(count), "cpu": "64",
                                       **({MIG_RESOURCE: str(len(n.mig))} if mixed else {})}}}


def _gpu_devices(n: NodeSetup) -> tuple[str, ...]:
    """What the device plugin registers as ``nvidia.com/gpu``: the GPUs, or their MIG
    devices under the single strategy."""
    return n.mig if n.mig_strategy == "single" else n.gpus


# ------------------------------------------------------------------ pods


def make_pod(rng: random.Random, i: int, nodes: list[NodeSetup], *, mig: bool = True,
             nri: bool = True, own_env: bool = True) -> dict[str, Any]:
    """One seeded pod; ``mig``/``nri``/``own_env``: may it ask for MIG devices, name CDI
    devices for the NRI plugin, or set NVIDIA_VISIBLE_DEVICES itself (without them, the
    draws are those of the corpus before them)."""
    hami = rng.random() < 0.6
    k = rng.choice((1, 1, 1, 2, 3))
    limits: dict[str, Any] = {"nvidia.com/gpu": k}
    if hami and rng.random() < 0.7:
        limits["nvidia.com/gpumem"] = 4000
    asks_mig = mig and not hami and rng.random() < 0.2
    if asks_mig:
        limits = {MIG_RESOURCE: 1}
    containers = [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]
    if rng.random() < 0.2 and not asks_mig:
        containers.append({"name": "side", "image": "cuda",
                           "resources": {"limits": {"nvidia.com/gpu": 1}}})
    spec: dict[str, Any] = {"containers": containers}
    meta: dict[str, Any] = {"name": f"p{i}", "namespace": "ml", "annotations": {},
                            "labels": {}}
    pool_nodes = [n for n in nodes if (n.pool == "hami") == hami and (n.mig or not asks_mig)] \
        or [n for n in nodes if (n.pool == "hami") == hami] or nodes
    target = rng.choice(pool_nodes)
    pin = rng.choice(("none", "none", "none", "nodeName", "selector", "affinity", "label"))
    if pin == "nodeName":
        spec["nodeName"] = target.name
    elif pin == "selector":
        spec["nodeSelector"] = {"kubernetes.io/hostname": target.name}
    elif pin == "affinity":
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In",
                 "values": sorted({target.name, rng.choice(pool_nodes).name})}]}]}}}
    elif pin == "label":
        meta["labels"]["gpupool.io/pool"] = "hami" if hami else "operator"
    if hami:
        roll = rng.random()
        if roll < 0.12:
            meta["annotations"]["nvidia.com/use-gpuuuid"] = rng.choice(
                [*target.gpus, _uuid(rng)])
        elif roll < 0.2:
            meta["annotations"]["nvidia.com/nouse-gpuuuid"] = target.gpus[0]
        elif roll < 0.3:
            meta["annotations"]["nvidia.com/use-gputype"] = rng.choice(("A100", "H100", "T4"))
        elif roll < 0.36:
            meta["annotations"]["nvidia.com/nouse-gputype"] = rng.choice(("T4", "A100"))
    if nri and rng.random() < 0.15:
        # CDI devices named for the GPU Operator's NRI plugin (read only where it runs).
        gpu = rng.choice(target.gpus)
        key = rng.choice(("/container.main", "/container.main", "/pod", "", "/container.side"))
        meta["annotations"][DOMAIN + key] = rng.choice((
            f"{MGMT_KIND}=all", f"{MGMT_KIND}=all", f"{MGMT_KIND}={gpu}", f"{DP_KIND}={gpu}",
            f"{DP_KIND}={gpu}", "nvidia.com/gpu=all", f"{MGMT_KIND}=all,{DP_KIND}={gpu}"))
    if own_env and not asks_mig and rng.random() < 0.08:
        # The main container sets NVIDIA_VISIBLE_DEVICES itself (it overrides the plugin's).
        gpu = target.gpus[0]
        containers[0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": rng.choice((
            "all", "void", gpu, "0", f"{MGMT_KIND}=all", "nvidia.com/gpu=all",
            f"{MGMT_KIND}={gpu}"))}]
    rc = rng.choice((None, None, None, None, "nvidia-cdi", "nvidia-legacy"))
    if rc:
        spec["runtimeClassName"] = rc
    if rng.random() < 0.3:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists",
                                "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# ------------------------------------------------------------------ the scheduler, as a model


def _expr_ok(e: dict, labels: dict[str, str]) -> bool:
    key, op, values = e["key"], e["operator"], e.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not generated")


def _type_ok(t: str, ann: dict[str, str]) -> bool:
    """HAMi's CheckType (pkg/device/devices.go): case-insensitive substring match."""
    def hit(value: str) -> bool:
        return any(x.strip() and x.strip().upper() in t.upper() for x in value.split(","))
    if ann.get("nvidia.com/use-gputype") and not hit(ann["nvidia.com/use-gputype"]):
        return False
    return not (ann.get("nvidia.com/nouse-gputype") and hit(ann["nvidia.com/nouse-gputype"]))


def plugin_gpus(pod: dict, n: NodeSetup) -> tuple[str, ...]:
    """The GPUs (or MIG devices) this node's device plugin could hand the pod."""
    if _asks_mig(pod):
        return n.mig if n.mig_strategy == "mixed" else ()
    if n.pool != "hami":
        return _gpu_devices(n)
    ann = pod["metadata"].get("annotations") or {}
    use = [u for u in (ann.get("nvidia.com/use-gpuuuid") or "").split(",") if u]
    nouse = [u for u in (ann.get("nvidia.com/nouse-gpuuuid") or "").split(",") if u]
    return tuple(u for u, t in zip(n.gpus, n.types, strict=True)
                 if (not use or u in use) and u not in nouse and _type_ok(t, ann))


def _asks_mig(pod: dict) -> bool:
    return any(MIG_RESOURCE in c["resources"]["limits"] for c in pod["spec"]["containers"])


def reachable(pod: dict, n: NodeSetup, labels: dict[str, str]) -> bool:
    spec = pod["spec"]
    hami_sched = spec.get("schedulerName") == "hami-scheduler"
    if spec.get("nodeName"):
        if spec["nodeName"] != n.name:
            return False
    elif n.tainted and not any(t.get("key") == "dedicated" for t in spec.get("tolerations", [])):
        return False
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms")
    if terms and not any(
            all(_expr_ok(e, labels) for e in t.get("matchExpressions", []))
            and all(_expr_ok(e, {"metadata.name": n.name}) for e in t.get("matchFields", []))
            for t in terms):
        return False
    if _asks_mig(pod):  # counted against the MIG resource's allocatable
        return not hami_sched and n.mig_strategy == "mixed" and sum(
            c["resources"]["limits"].get(MIG_RESOURCE, 0) for c in spec["containers"]
        ) <= len(n.mig)
    counts = [c["resources"]["limits"].get("nvidia.com/gpu", 0) for c in spec["containers"]]
    if n.pool == "hami" and (hami_sched or spec.get("nodeName")):
        # HAMi's filter picks enough GPUs its annotations allow per container; a pod bound by
        # nodeName without them never gets its devices (not a CDI failure).
        return (hami_sched or bool(spec.get("nodeName"))) and \
            max(counts) <= len(plugin_gpus(pod, n))
    if hami_sched:
        return False
    # The kubelet and the default scheduler count the resource against allocatable.
    return sum(counts) <= len(_gpu_devices(n)) * (10 if n.pool == "hami" else 1)


# ------------------------------------------------------------------ the corpus


@dataclass
class Cluster:
    policy: Policy
    policy_name: str
    nodes: list[NodeSetup]
    objects: list[dict]
    oracles: dict[tuple[str, str | None], OracleNode]
    root: Path
    #: namespaces the GPU Operator's NRI plugin gives management devices (None: no plugin)
    nri_allowed: tuple[str, ...] | None = None

    def labels(self, name: str) -> dict[str, str]:
        return next(o["metadata"]["labels"] for o in self.objects
                    if o["metadata"]["name"] == name)


POLICY = """apiVersion: gpupool.io/v1alpha1
kind: PoolPolicy
defaultPool: operator
gpuResources: [nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/mig-*]
requireInventory: {require}
pools:
  - name: hami
    labelValues: [hami]
    schedulerName: hami-scheduler
    exclusiveResources: [nvidia.com/gpumem]
    exclusiveAnnotations: [nvidia.com/use-gpuuuid, nvidia.com/nouse-gpuuuid,
                           nvidia.com/use-gputype, nvidia.com/nouse-gputype]
    cdi: {{delivery: {hami}}}
  - name: operator
    schedulerName: default-scheduler
    cdi: {{delivery: {operator}}}
"""


@dataclass(frozen=True)
class Configuration:
    """Settings a user chooses for the whole cluster (the chart's values, the agent's
    options), forced on every node; None keeps each node's own draw. The draws themselves
    stay those of the corpus, so each configuration judges the same pods."""

    name: str = "as drawn"
    #: ``agent.kubeletCheckpoint``: does the agent read the kubelet's device checkpoint
    kubelet_checkpoint: bool | None = None
    #: may the agent read the device plugin's pods (``--no-plugin-pods``, or RBAC taken away)
    plugin_pods: bool | None = None
    #: containerd's ``enable_cdi`` on every node (false: containerd 1.7 as it ships; the GPU
    #: Operator's NRI setup, which needs its CDI, is then not drawn)
    containerd_cdi: bool | None = None


#: Every such setting, each a run of its own (``tests/integration/test_corpus.py``).
CONFIGURATIONS = (
    Configuration("agent.kubeletCheckpoint: false", kubelet_checkpoint=False),
    Configuration("agent does not read the device plugin's pods", plugin_pods=False),
    Configuration("neither", kubelet_checkpoint=False, plugin_pods=False),
    Configuration("containerd 1.7 as it ships: CDI off", containerd_cdi=False),
)


def make_cluster(rng: random.Random, root: Path, index: int,
                 config: Configuration = Configuration()) -> Cluster:
    plugins = {"hami": rng.choice(("envvar", "envvar", "cdi")),
               "operator": rng.choice(("cdi", "cdi", "envvar"))}
    pinned = rng.random() < 0.5
    require = rng.random() < 0.25
    # Half the detect clusters have their plugins' configuration in view (the GPU
    # Operator's ClusterPolicy, HAMi's device-plugin DaemonSet): each plugin's strategy is
    # then known on the nodes it runs on (docs/cdi-inventory.md).
    with_policy = not pinned and rng.random() < 0.5
    # Most of those run the operator's NRI plugin; some allow the pods' namespace management
    # devices through the toolkit's env.
    nri_allowed = (("gpu-operator", "ml") if rng.random() < 0.3 else ("gpu-operator",)) \
        if with_policy and rng.random() < 0.7 else None
    way = {"envvar": "visibleDevices", "cdi": "cdiDevices"}
    text = POLICY.format(require=str(require).lower(),
                         hami=way[plugins["hami"]] if pinned else "detect",
                         operator=way[plugins["operator"]] if pinned else "detect")
    nodes = [make_node(rng, f"c{index}-{pool}-{i}", pool, plugins[pool])
             for pool in ("hami", "operator") for i in range(rng.choice((2, 3, 4)))]
    # HAMi's DaemonSet selects its chart's default label, gpu=on, which some operator nodes
    # carry too: HAMi's plugin runs there, in HAMi's strategy, the operator's is turned off
    # (issue 34, item 4). (Their own generator, seeded by the cluster: the rest of the
    # corpus draws as before.)
    if with_policy:
        for n in nodes:
            if n.pool == "operator" and random.Random(f"{n.name}/hami").random() < 0.2:
                n.hami_plugin, n.plugin = True, plugins["hami"]
                n.what.append(f"HAMi's plugin runs here ({plugins['hami']}), not the operator's")
    _run_plugin_pods(random.Random(f"{index}/{nodes[0].gpus[0]}"), nodes)
    for n in nodes:
        if config.kubelet_checkpoint is not None:
            n.reads_kubelet = config.kubelet_checkpoint
        if config.plugin_pods is False:
            n.learns = "no access"
        if config.containerd_cdi is not None:
            n.containerd_cdi = config.containerd_cdi
    objects, oracles = [], {}
    for n in nodes:
        # where the operator runs its toolkit (every operator node, some of HAMi's)
        toolkit = with_policy and (n.pool == "operator" or rng.random() < 0.5)
        if nri_allowed and toolkit and random.Random(f"{n.name}/runc").random() < 0.4 \
                and n.containerd_cdi:
            n.default_runtime = "runc"
            n.what.append("containerd's default runtime runc (NRI injects CDI devices)")
        paths = write_node(root / n.name / "node", n)
        obj = node_object(n, paths)
        if with_policy:  # where the operator runs its device plugin (HAMi's: not)
            hami_here = n.pool == "hami" or n.hami_plugin
            obj["metadata"]["labels"][DEPLOY_LABEL] = str(not hami_here).lower()
            if hami_here:
                obj["metadata"]["labels"]["gpu"] = "on"
            obj["metadata"]["labels"][TOOLKIT_LABEL] = str(toolkit).lower()
        objects.append(obj)
        oracles.update(node_oracles(root, n, paths))
    if with_policy:
        cp: dict[str, Any] = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                              "metadata": {"name": "cluster-policy"},
                              "spec": {"cdi": {"enabled": plugins["operator"] == "cdi"}}}
        if nri_allowed:  # (NRI needs CDI on; the plugin's strategy is then set apart)
            cp["spec"]["cdi"].update(enabled=True, nriPluginEnabled=True)
            if plugins["operator"] == "envvar":
                cp["spec"]["devicePlugin"] = {"env": [{"name": "DEVICE_LIST_STRATEGY",
                                                       "value": "envvar"}]}
            cp["spec"]["toolkit"] = {"env": [{"name": NAMESPACES_ENV,
                                              "value": ",".join(nri_allowed[1:])}]}
            cp["status"] = {"namespace": nri_allowed[0]}
        objects.append(cp)
        # HAMi's device-plugin DaemonSet, as its chart labels it and selects its nodes
        # (devicePlugin.nvidiaNodeSelector, gpu: "on").
        objects.append({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {
            "name": "hami-device-plugin", "namespace": "kube-system",
            "labels": {"app.kubernetes.io/component": "hami-device-plugin"}},
            "spec": {"template": {"spec": {
                "nodeSelector": {"gpu": "on"},
                "containers": [{"name": "device-plugin", "env": [{
                    "name": "DEVICE_LIST_STRATEGY",
                    "value": "cdi-annotations" if plugins["hami"] == "cdi" else "envvar"}]}]}}}})
    name = (f"{'pinned' if pinned else 'detect'}{', requireInventory' if require else ''}"
            f"{', ClusterPolicy and HAMi DaemonSet' if with_policy else ''}"
            f"{', NRI' if nri_allowed else ''}")
    return Cluster(load_policy_text(text), name, nodes, objects, oracles, root, nri_allowed)


_CDI_STRATEGIES = ("cdi-annotations", "cdi-cri")


def _run_plugin_pods(rng: random.Random, nodes: list[NodeSetup]) -> None:
    """Each node's device-plugin pod, deployed one of the ways teams deploy it
    (tests.plugincases), meant for the node's strategy. What the plugin really runs with is
    the plugin's own code's answer (``plugin-judge``), and that is the node's truth."""
    for n in nodes:
        meant = rng.choice(_CDI_STRATEGIES) if n.plugin == "cdi" else "envvar"
        mig = n.mig_strategy if n.mig else rng.choice((None, "none"))
        # The GPU Operator's own DaemonSet is how most clusters run the plugin on their
        # operator nodes (issue 46): its real template, started through its entrypoint.
        way = "operator" if n.pool == "operator" and not n.hami_plugin \
            and rng.random() < 0.7 else None
        n.plugin_pod = plugin_pod(rng, n.name, corners=False, strategy=meant, mig=mig,
                                  way=way)
        roll = rng.random()
        # (the chart grants the agent its read access: "no access" is a cluster that took it
        # away, or runs the agent with --no-plugin-pods)
        n.learns = "no access" if roll < 0.04 else "valueFrom" if roll < 0.07 else "yes"
        if n.learns == "valueFrom":
            # its strategy from a reference the agent does not follow; the plugin reads the
            # value it points to
            c = n.plugin_pod.pod["spec"]["containers"][0]
            c["env"] = [e for e in c.get("env") or () if e["name"] != "DEVICE_LIST_STRATEGY"]
            c["env"].append({"name": "DEVICE_LIST_STRATEGY", "valueFrom": {"configMapKeyRef": {
                "name": "plugin-env", "key": "strategy"}}})
            req = n.plugin_pod.request
            req["env"] = {**req["env"], "DEVICE_LIST_STRATEGY": meant}
        n.what.append(f"{n.plugin_pod.what}, agent learns: {n.learns}")
    answers = Judge(built(PLUGIN_JUDGE_BUILD, "plugin-judge")).ask(
        [n.plugin_pod.request for n in nodes if n.plugin_pod is not None])
    for n, real in zip(nodes, answers, strict=True):
        assert "error" not in real, (n.what, real)  # (corners=False: every plugin starts)
        cdi = set(real["strategies"]) <= set(_CDI_STRATEGIES)
        assert cdi or real["strategies"] == ["envvar"], real
        n.plugin = "cdi" if cdi else "envvar"
        n.strategies = tuple(real["strategies"])
        assert real["migStrategy"] == (n.mig_strategy if n.mig else "none"), (n.what, real)


def node_oracles(root: Path, n: NodeSetup, paths: dict[str, Path]
                 ) -> dict[tuple[str, str | None], OracleNode]:
    """The real runtime on this node, for its default handler and the two runtime classes
    the GPU Operator installs (nvidia-cdi, nvidia-legacy)."""
    out = {}
    for handler, mode in (("", n.mode), ("nvidia-cdi", "cdi"), ("nvidia-legacy", "legacy")):
        cfg = root / n.name / f"config-{handler or 'default'}.toml"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(_config(mode, n.default_kind, n.envvar_unprivileged))
        out[(n.name, handler or None)] = OracleNode(
            root / n.name / f"oracle-{handler or 'default'}", [paths["etc"], paths["run"]],
            cfg, gpus=n.gpus + n.mig + tuple(created_mig(u) for u in n.hami_mig))
    return out


_verdicts: dict[tuple[str, str | None, str, str], Verdict] = {}


def runs(cluster: Cluster, n: NodeSetup, rc: str | None, gpu: str) -> Verdict:
    """Would a container handed this GPU by the node's device plugin be created?"""
    key = (str(cluster.root / n.name), rc, n.plugin, gpu)
    if key not in _verdicts:
        if n.plugin == "cdi" and not n.containerd_cdi:
            _verdicts[key] = cdi_off_runs(cluster, n, rc, [gpu], None)
        elif n.plugin == "cdi":
            # containerd injects the plugin's CDI names whatever the runtime handler.
            _verdicts[key] = cluster.oracles[(n.name, None)].inject(f"{DP_KIND}={gpu}")
        else:
            handler = rc if rc in ("nvidia-cdi", "nvidia-legacy") else None
            oracle = cluster.oracles[(n.name, handler)]
            if handler is None and n.default_runtime == "runc":
                _verdicts[key] = RUNC
                return RUNC
            v = oracle.legacy(gpu) if oracle.mode == "legacy" else oracle.create(gpu)
            if v.ok and v.by.startswith(HOOK) and not v.devices:
                # The real hook mounted nothing (it ignored the variable): no GPU.
                v = Verdict(False, "the legacy hook mounted no device (started without its "
                                   "GPU)", by=v.by, spec=v.spec)
            elif v.ok and v.by == "nvidia-container-runtime" and oracle.mode == "cdi" \
                    and not v.devices:
                # Created, with nothing injected: the container starts without its GPU.
                v = Verdict(False, "created without any device: NVIDIA_VISIBLE_DEVICES was "
                                   "ignored (started without its GPU)", spec=v.spec)
            elif v.ok and not n.envvar_unprivileged and not v.by.startswith(HOOK) and not (
                    v.by == "nvidia-container-runtime" and oracle.mode == "cdi"):
                # Where the oracle does not run the variable through the runtime's CDI path
                # or the legacy hook (just-in-time CDI needs NVML) it is read with the same
                # rule
                # (toolkit v1.20.2 internal/config/image/cuda_image.go VisibleDevices, used
                # by cmd/nvidia-container-runtime-hook/container_config.go).
                v = Verdict(False, f"{ENVVAR_KEY} = false: an unprivileged container's "
                                   "NVIDIA_VISIBLE_DEVICES is ignored",
                            by="rule: the toolkit ignores it (internal/config/image)")
            _verdicts[key] = v
    return _verdicts[key]


@dataclass
class Judged:
    pod: dict
    cluster: Cluster
    allowed: bool
    reason: str
    message: str
    outcome: str
    nodes: dict[str, bool] = field(default_factory=dict)  # reachable node -> would run
    admitted: dict | None = None  # the pod as stored, after gpupool's mutation
    apart: str = ""  # counted apart: why
    note: str = ""  # within its outcome, what kind of it (shown under the outcome's line)
    #: the nodes it could reach without gpupool's steering
    reach: list[str] = field(default_factory=list)
    #: what gpupool told the user besides the message: its warnings, and each node's note
    texts: list[str] = field(default_factory=list)


#: Fine, and pending: every node the pod can reach fails it, some only in doubt (a way only
#: inferred, MIG names unread): steering keeps it pending, with a warning, not failing.
STEERED_PENDING = "pending: every node it reaches fails it, steered off them all"
#: A GPU arrived, but not the one accounted for (``misaccounted``): two pods can then share a
#: card HAMi (or the kubelet) believes split.
MISACCOUNTED = "a GPU arrived, but not the one accounted for"
#: Denied as ``requireInventory`` asks: only nodes whose devices no agent can vouch for
#: would run it (no inventory, or MIG devices the agent does not read).
REQUIRED_INVENTORY = "requireInventory: it would run only on nodes it cannot verify"
#: Fine, and pending: it asks for more than any node it can reach has (not a CDI matter).
NO_NODE_PENDING = "pending: no node it reaches has what it asks for"


def hami_serves(n: NodeSetup) -> bool:
    """HAMi's device plugin serves the node's GPUs: a node of HAMi's pool (its plugin
    registered the GPUs there), or one its DaemonSet's selector reaches."""
    return n.pool == "hami" or n.hami_plugin


def hami_refuses(pod: dict, n: NodeSetup) -> bool:
    """Does HAMi's plugin on this node refuse the pod's Allocate? Asked of HAMi's own code
    (``tests.pendingpod``) with the pod as it stands when the kubelet allocates for it: bound
    by HAMi's scheduler or by the default one. (A pod for HAMi's scheduler that names its
    node itself is refused at creation by HAMi's own webhook, which the corpus does not run:
    it is judged as HAMi's scheduler's.)"""
    if not hami_serves(n) or not any(
            c["resources"]["limits"].get("nvidia.com/gpu") for c in pod["spec"]["containers"]):
        return False  # (its plugin serves nvidia.com/gpu: a MIG resource is not its)
    by_hami = pod["spec"].get("schedulerName") == "hami-scheduler"
    return "error" in pendingpod.allocates(pendingpod.as_bound(pod, n.name, by_hami), n.name)


def node_runs(cluster: Cluster, pod: dict, n: NodeSetup) -> bool:
    if hami_refuses(pod, n):
        return False
    rc = pod["spec"].get("runtimeClassName")
    gpus = plugin_gpus(pod, n)
    # No GPU the plugin may hand it: the container does not get its devices at all.
    # On a GPU HAMi runs in MIG mode the container gets the MIG device HAMi creates.
    handed = [created_mig(g) if g in n.hami_mig else g for g in gpus]
    own = _own_value(pod)
    if own is not None and n.plugin == "cdi" and not n.containerd_cdi:
        # the main container's value beside the plugin's names as the runtime gets them;
        # the plugin's names alone for the containers that leave the variable alone
        others = len(pod["spec"]["containers"]) > 1
        return bool(gpus) and cdi_off_runs(cluster, n, rc, handed, own).ok and \
            annotated_runs(cluster, pod, n) and (
                not others or all(runs(cluster, n, rc, g).ok for g in handed))
    if own is not None and n.plugin == "cdi":
        # containerd injects the plugin's CDI names over the container's own environment,
        # then the runtime creates it: the real CDI library and runtime say what arrives.
        return bool(gpus) and all(runs(cluster, n, rc, g).ok for g in handed) and \
            injected_own_runs(cluster, n, rc, handed, own) and annotated_runs(cluster, pod, n)
    if own is not None:
        # The main container's own value is what the runtime resolves for it; the plugin's
        # devices still count for the containers that leave the variable alone.
        others = len(pod["spec"]["containers"]) > 1
        return bool(gpus) and own_runs(cluster, n, rc, own) and annotated_runs(
            cluster, pod, n) and (not others or all(runs(cluster, n, rc, g).ok
                                                    for g in handed))
    if _under_runc(pod, n) and accounted_arrives(cluster, pod, n):
        return annotated_runs(cluster, pod, n)  # the accounted GPU arrives through NRI
    return bool(gpus) and all(runs(cluster, n, rc, g).ok for g in handed) and \
        annotated_runs(cluster, pod, n)


def _own_value(pod: dict) -> str | None:
    for e in pod["spec"]["containers"][0].get("env") or ():
        if e["name"] == "NVIDIA_VISIBLE_DEVICES":
            return str(e["value"])
    return None


def own_runs(cluster: Cluster, n: NodeSetup, rc: str | None, value: str) -> bool:
    """Is a container that sets NVIDIA_VISIBLE_DEVICES=value itself created, with a GPU
    where it gets none otherwise (the plugin's envvar strategy; a CDI strategy's nodes are
    ``injected_own_runs``')?"""
    handler = rc if rc in ("nvidia-cdi", "nvidia-legacy") else None
    oracle = cluster.oracles[(n.name, handler)]
    v = runs_value(cluster, n, handler, value)
    if v.by.startswith(HOOK):  # the real hook read the variable; the cli's rule mounted
        return v.ok and bool(v.devices)
    if not n.envvar_unprivileged and not (v.by == "nvidia-container-runtime"
                                          and oracle.mode == "cdi"):
        # The variable is ignored (the toolkit's rule, as in ``runs``): nothing arrives.
        return False
    if not v.ok:
        return False
    if all(x.strip() in ("", "void", "none") for x in value.split(",")):
        return False  # asks for no device: it starts without a GPU
    return bool(v.devices) or oracle.mode != "cdi" or v.by != "nvidia-container-runtime"


def injected_own_runs(cluster: Cluster, n: NodeSetup, rc: str | None, handed: list[str],
                      value: str) -> bool:
    """A container that sets NVIDIA_VISIBLE_DEVICES=value itself on a node whose plugin hands
    CDI names: containerd injects those names with the real CDI library over the container's
    environment (the spec's own edits apply over it), then the real runtime creates it. Is it
    created with a device?"""
    handler = rc if rc in ("nvidia-cdi", "nvidia-legacy") else None
    key = (str(cluster.root / n.name), handler, "own-injected", value, *handed)
    if key not in _verdicts:
        oracle = cluster.oracles[(n.name, handler)]
        injected = oracle.inject(*(f"{DP_KIND}={g}" for g in handed),
                                 env=(f"NVIDIA_VISIBLE_DEVICES={value}",))
        _verdicts[key] = oracle.create_injected(injected, {}) if injected.ok else injected
    v = _verdicts[key]
    return v.ok and bool(v.devices)


def cdi_off_runs(cluster: Cluster, n: NodeSetup, rc: str | None, handed: list[str],
                 own: str | None) -> Verdict:
    """A container handed these GPUs by a CDI strategy on a node whose containerd has CDI
    off: containerd applies no CDI name (v1.7 ``container_create_linux.go``, only ``if
    c.config.EnableCDI``) and passes the plugin's ``cdi.k8s.io/`` annotations to the NVIDIA
    handlers (their ``container_annotations``, ``GetPassthroughAnnotations``); the real
    runtime decides what it makes of them and of the container's own variable. Created with
    a GPU?"""
    handler = rc if rc in ("nvidia-cdi", "nvidia-legacy") else None
    if handler is None and n.default_runtime == "runc":
        return RUNC
    key = (str(cluster.root / n.name), handler, "cdi-off", own or "", *handed)
    if key in _verdicts:
        return _verdicts[key]
    oracle = cluster.oracles[(n.name, handler)]
    annotations = {"cdi.k8s.io/nvidia-device-plugin_0": ",".join(
        f"{DP_KIND}={g}" for g in handed)} if "cdi-annotations" in n.strategies else {}
    if own is not None and (not annotations or oracle.mode == "legacy"):
        # nothing resolves the names (cdi-cri, or a mode that drops annotations): the
        # container's own value is what the runtime reads
        ok = own_runs(cluster, n, rc, own)
        v = Verdict(ok, "" if ok else "its own NVIDIA_VISIBLE_DEVICES brings no GPU",
                    by="nvidia-container-runtime (own value)")
    elif not annotations:
        v = Verdict(False, "containerd's CDI is off: the plugin's cdi-cri names are dropped "
                           "(started without its GPU)", by="rule: containerd")
    else:
        v = oracle.legacy(own or "", annotations) if oracle.mode == "legacy" else \
            oracle.create(own or "", annotations)
        if v.ok and not v.devices:
            v = Verdict(False, "created without any device: the CDI annotations were not "
                               "resolved (started without its GPU)", by=v.by, spec=v.spec)
    _verdicts[key] = v
    return v


#: runc, containerd's default runtime on such a node, reads no NVIDIA_VISIBLE_DEVICES: only
#: NVIDIA's runtime (or its hook) turns it into devices (toolkit v1.20.2
#: internal/config/image/cuda_image.go is read by nvidia-container-runtime alone).
RUNC = Verdict(False, "containerd's default runtime is runc, which reads no "
                      "NVIDIA_VISIBLE_DEVICES (started without its GPU)", by="runc")


def runs_value(cluster: Cluster, n: NodeSetup, handler: str | None, value: str) -> Verdict:
    key = (str(cluster.root / n.name), handler, "own", value)
    if handler is None and n.default_runtime == "runc":
        return RUNC
    if key not in _verdicts:
        oracle = cluster.oracles[(n.name, handler)]
        _verdicts[key] = oracle.legacy(value) if oracle.mode == "legacy" else \
            oracle.create(value)
    return _verdicts[key]


_nri_verdicts: dict[tuple[str, ...], Verdict] = {}


def _nri(cluster: Cluster, pod: dict, n: NodeSetup) -> dict[str, Verdict]:
    """Per container its ``nvidia.cdi.k8s.io`` annotations name devices for, what NVIDIA's
    NRI plugin does with them on this node (the real plugin); empty where it does not run."""
    ann = pod["metadata"].get("annotations") or {}
    if cluster.nri_allowed is None or cluster.labels(n.name).get(TOOLKIT_LABEL) != "true":
        return {}
    names = [c["name"] for c in pod["spec"]["containers"]]
    out = {}
    for container, _ in annotation_requests(ann, names):
        mine = {k: v for k, v in ann.items() if k.startswith(DOMAIN)}
        key = (str(cluster.root / n.name), container, json.dumps(mine, sort_keys=True),
               *cluster.nri_allowed)
        if key not in _nri_verdicts:
            _nri_verdicts[key] = cluster.oracles[(n.name, None)].nri(
                "ml", mine, container, cluster.nri_allowed)
        out[container] = _nri_verdicts[key]
    return out


def annotated_runs(cluster: Cluster, pod: dict, n: NodeSetup) -> bool:
    """Where the GPU Operator's NRI plugin runs: is every container created, with the devices
    its ``nvidia.cdi.k8s.io`` annotation names (the real plugin says)?"""
    # not created, or created without its devices
    return all(v.ok and v.devices for v in _nri(cluster, pod, n).values())


def _gpu_containers(pod: dict) -> list[str]:
    return [c["name"] for c in pod["spec"]["containers"]
            if any(r.startswith("nvidia.com/") for r in c["resources"]["limits"])]


def _under_runc(pod: dict, n: NodeSetup) -> bool:
    """The device plugin's GPUs, handed as NVIDIA_VISIBLE_DEVICES, reach nothing: the node's
    default runtime is runc and the pod names no NVIDIA class."""
    return n.plugin == "envvar" and n.default_runtime == "runc" and \
        pod["spec"].get("runtimeClassName") not in ("nvidia-cdi", "nvidia-legacy")


def accounted_arrives(cluster: Cluster, pod: dict, n: NodeSetup) -> bool:
    """Under runc, the NRI plugin (the real plugin says) injects into every GPU container
    the device node of every GPU the device plugin could account for the pod (each GPU's
    minor number as the node's driver lists it: ``harness.layouts.fake_driver``), so the
    accounted one arrives, whichever it is (issue 46, item 4)."""
    gpus = plugin_gpus(pod, n)
    if not gpus or any(g not in n.gpus or g in n.hami_mig for g in gpus):
        return False  # a MIG device is no GPU's device node
    want = {f"/dev/nvidia{n.gpus.index(g)}" for g in gpus}
    verdicts = _nri(cluster, pod, n)
    return all(c in verdicts and verdicts[c].ok
               and want <= {d.get("path") for d in verdicts[c].devices}
               for c in _gpu_containers(pod))


def misaccounted(cluster: Cluster, pod: dict, n: NodeSetup) -> bool:
    """A GPU arrives, but not surely the one accounted for: the device plugin's GPU (handed
    as NVIDIA_VISIBLE_DEVICES) never reaches a GPU container under runc, while the NRI
    plugin injects the devices its annotation names (the real plugin says) into that
    container, and they do not hold every GPU it could have accounted for."""
    if not _under_runc(pod, n) or accounted_arrives(cluster, pod, n):
        return False
    injected = {c for c, v in _nri(cluster, pod, n).items() if v.ok and v.devices}
    return bool(injected) and any(c in injected for c in _gpu_containers(pod))


def judge(cluster: Cluster, pod: dict) -> Judged:
    view = view_from_objects([o for o in cluster.objects if o["kind"] == "Node"],
                             cluster.policy, {"ml": {}},
                             resources=[o for o in cluster.objects if o["kind"] != "Node"])
    subject = Subject(kind="Pod", group="", operation="CREATE", object=pod,
                            namespace="ml")
    rv = review(subject, view, cluster.policy)
    final = rv.final
    mutated = pod
    if rv.mutation.patch:
        mutated = jsonpatch.apply_patch(pod, rv.mutation.patch)
    j = Judged(pod, cluster, final.allowed, str(final.reason), final.message, "",
               admitted=mutated, texts=[*final.warnings, *(f.note for f in final.nodes)])
    unsteered = _without_steering(mutated)
    j.reach = [n.name for n in cluster.nodes
               if reachable(unsteered, n, cluster.labels(n.name))]
    if final.allowed:
        where = {n.name: node_runs(cluster, mutated, n) for n in cluster.nodes
                 if reachable(mutated, n, cluster.labels(n.name))}
        j.nodes = where
        failing = [name for name, ok in where.items() if not ok]
        if not where:
            routed = _without_steering(mutated)
            before = {n.name: node_runs(cluster, routed, n) for n in cluster.nodes
                      if reachable(routed, n, cluster.labels(n.name))}
            j.nodes = before
            if any(before.values()):
                j.outcome = "false denial"  # steered off every node, one of which would run
            elif before:
                j.outcome, j.note = "fine", STEERED_PENDING
            else:
                j.outcome, j.note = "fine", NO_NODE_PENDING
        elif not failing:
            j.outcome = "fine"
        else:
            j.outcome = ("certain late failure" if len(failing) == len(where)
                         else "potential late failure")
            if all(misaccounted(cluster, mutated, _setup(cluster, f)) for f in failing):
                j.note = MISACCOUNTED
            if all(not _setup(cluster, f).agent for f in failing):
                j.apart = "fails only on nodes without inventory"
            elif all(not _setup(cluster, f).agent or not _setup(cluster, f).reads_kubelet
                     for f in failing) and (_asks_mig(mutated) or all(
                    _setup(cluster, f).mig_strategy == "single" for f in failing)):
                j.apart = "fails only on nodes whose MIG devices the agent does not read"
            elif cluster.policy_name.startswith("detect") and all(
                    _misdetected(cluster, _setup(cluster, f)) or not _setup(cluster, f).agent
                    for f in failing):
                j.apart = MISREAD
        return j
    if final.reason not in CDI_REASONS:
        j.outcome, j.apart = "denied correctly", f"denied for routing ({final.reason})"
        return j
    # Where would it have gone, routed but not steered?
    routed = _without_steering(mutated)
    where = {n.name: node_runs(cluster, routed, n) for n in cluster.nodes
             if reachable(routed, n, cluster.labels(n.name))}
    j.nodes = where
    good = [name for name, ok in where.items() if ok]
    j.outcome = "false denial" if good else "denied correctly"
    if not good and where and all(misaccounted(cluster, routed, _setup(cluster, w))
                                  for w in where):
        j.note = MISACCOUNTED
    if good and cluster.policy.require_inventory and all(
            _unverifiable(_setup(cluster, g), routed) for g in good):
        # what the policy asks for: verified nodes or none
        j.outcome, j.note = "denied correctly", REQUIRED_INVENTORY
    elif good and cluster.policy_name.startswith("detect") and all(
            _misdetected(cluster, _setup(cluster, g)) for g in good):
        j.apart = MISREAD
    return j


def _unverifiable(n: NodeSetup, pod: dict) -> bool:
    """What no agent can vouch for on this node: everything where none runs, and the MIG
    devices the plugin hands where the agent does not read the kubelet's checkpoint (the
    only list of them), and, where containerd's CDI is off, a CDI strategy's delivery where
    the agent cannot learn the strategy from the plugin's pod (``cdi-cri`` names are then
    lost, annotations reach the runtime). ``requireInventory`` asks for verified nodes or
    none."""
    return not n.agent or (not n.reads_kubelet and (
        _asks_mig(pod) or (n.mig_strategy == "single" and bool(n.mig)))) or (
        not n.containerd_cdi and n.plugin == "cdi" and n.learns != "yes")


#: Counted apart: ``detect`` reads the disk where the plugin's pod cannot tell the agent its
#: strategy (the agent not allowed to list pods, or a strategy from valueFrom), and the disk
#: misleads it (a CDI strategy that wrote no spec, a spec left over from an earlier setup).
MISREAD = "delivery: detect misreads the plugin's strategy where its pod does not say"


def _setup(cluster: Cluster, name: str) -> NodeSetup:
    return next(n for n in cluster.nodes if n.name == name)


def _misdetected(cluster: Cluster, n: NodeSetup) -> bool:
    """What ``delivery: detect`` cannot see: a plugin in a CDI strategy that wrote no spec,
    or one in envvar that left a spec from an earlier configuration behind. (Not where the
    plugin's configuration is in view: the operator's ClusterPolicy, HAMi's DaemonSet.)"""
    if "ClusterPolicy" in cluster.policy_name or n.learns == "yes":
        return False
    has_spec = any(f.startswith("k8s.device-plugin") for _, f, _ in n.specs)
    return (n.plugin == "cdi") != has_spec


def _without_steering(pod: dict) -> dict:
    return {**pod, "spec": dict(without_steering(pod["spec"]))}


def run(root: Path, seed: int, pods: int, clusters: int = 6,
        config: Configuration = Configuration()) -> list[Judged]:
    rng = random.Random(seed)
    made = [make_cluster(rng, root / f"cluster{i}", i, config) for i in range(clusters)]
    out = []
    for i in range(pods):
        c = made[i % clusters]
        out.append(judge(c, make_pod(rng, i, c.nodes)))
    return out


def table(judged: list[Judged]) -> str:
    counted = Counter(j.outcome for j in judged if not j.apart)
    apart = Counter(f"{j.outcome}: {j.apart}" for j in judged if j.apart)
    width = max(len(x) for x in (*OUTCOMES, *apart, *(f"  of which {j.note}" for j in judged
                                                      if j.note))) + 2
    notes = Counter((j.outcome, j.note) for j in judged if j.note and not j.apart)
    lines = [f"{'outcome':<{width}} pods"]
    for o in OUTCOMES:
        lines.append(f"{o:<{width}} {counted.get(o, 0)}")
        lines += [f"  of which {note:<{width - 11}} {n}"
                  for (out, note), n in sorted(notes.items()) if out == o]
    if apart:
        lines.append("counted apart:")
        lines += [f"  {k:<{width - 2}} {v}" for k, v in sorted(apart.items())]
    lines.append(f"{'total':<{width}} {len(judged)}")
    lines.append("by class (issue 34): pods that meet it, and their outcomes")
    for label, outcomes in by_class(judged).items():
        lines.append(f"  {label:<{width - 2}} {sum(outcomes.values())}  "
                     + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items())))
    lines.append("by setting: pods every node they reach runs with it, and their outcomes")
    for label, outcomes in by_setting(judged).items():
        lines.append(f"  {label:<{width - 2}} {sum(outcomes.values())}  "
                     + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items())))
    return "\n".join(lines)


def settings(n: NodeSetup) -> tuple[str, ...]:
    """What a user chose for this node: the agent's options, and how the device plugin is
    deployed (the GPU Operator, HAMi's chart, NVIDIA's chart by its variable, flag, config
    file or config-manager)."""
    deployed = n.plugin_pod.what.split(" ")[1] if n.plugin_pod else "none"
    return (f"kubelet checkpoint {'read' if n.reads_kubelet else 'not read'}",
            f"plugin's pod {'read' if n.learns == 'yes' else n.learns}",
            f"plugin deployed by {deployed}",
            f"containerd CDI {'on' if n.containerd_cdi else 'off'}")


def by_setting(judged: list[Judged]) -> dict[str, Counter[str]]:
    """Outcomes per setting, for pods whose every reachable node has that setting (a pod
    that reaches nodes set differently counts under none of those)."""
    out: dict[str, Counter[str]] = {}
    for j in judged:
        reach = [_setup(j.cluster, n) for n in j.reach]
        if not reach:
            continue
        common = set(settings(reach[0])).intersection(*(settings(n) for n in reach[1:]))
        for label in common:
            out.setdefault(label, Counter())[
                j.outcome if not j.apart else "counted apart"] += 1
    return dict(sorted(out.items()))


def _disk_misleads(n: NodeSetup) -> bool:
    return (n.plugin == "cdi") != any(f.startswith("k8s.device-plugin") for _, f, _ in n.specs)


def _no_objects(j: Judged) -> bool:
    return j.cluster.policy_name.startswith("detect") and "ClusterPolicy" not in \
        j.cluster.policy_name


#: Issue 34's classes: which pods meet each (a node it can reach, or what it sets itself).
CLASSES: tuple[tuple[str, Any], ...] = (
    ("1 a HAMi GPU cordoned after registration",
     lambda j, ns: any(n.cordoned for n in ns)),
    ("2 own NVIDIA_VISIBLE_DEVICES, plugin hands CDI names",
     lambda j, ns: _own_value(j.pod) is not None and any(n.plugin == "cdi" for n in ns)),
    ("3 NRI annotations beside an envvar plugin",
     lambda j, ns: any(k.startswith(DOMAIN) for k in j.pod["metadata"]["annotations"])
     and j.cluster.nri_allowed is not None and any(n.plugin == "envvar" for n in ns)),
    ("4 HAMi's plugin outside HAMi's pool", lambda j, ns: any(n.hami_plugin for n in ns)),
    ("5 strategy learned from the plugin's pod, disk misleads",
     lambda j, ns: _no_objects(j) and any(n.learns == "yes" and _disk_misleads(n)
                                           for n in ns)),
    ("6 MIG devices, single strategy", lambda j, ns: any(n.mig_strategy == "single"
                                                          and n.mig for n in ns)),
    ("7 strategy only inferred (its pod does not say)",
     lambda j, ns: _no_objects(j) and any(n.learns != "yes" for n in ns)),
    ("8 own NVIDIA_VISIBLE_DEVICES, legacy mode",
     lambda j, ns: _own_value(j.pod) is not None and (
         j.pod["spec"].get("runtimeClassName") == "nvidia-legacy"
         or any(n.mode == "legacy" for n in ns))),
)


def by_class(judged: list[Judged]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for label, meets in CLASSES:
        out[label] = Counter(j.outcome if not j.apart else "counted apart" for j in judged
                             if meets(j, [_setup(j.cluster, n) for n in j.reach]))
    return out


def explain(j: Judged) -> str:
    nodes = "; ".join(f"{name} ({', '.join(_setup(j.cluster, name).what)}): "
                      f"{'runs' if ok else 'fails'}" for name, ok in j.nodes.items())
    return (f"{j.outcome} [{j.cluster.policy_name}] {json.dumps(j.pod)}\n"
            f"  gpupool: {'allowed' if j.allowed else 'denied'} {j.reason}: {j.message}\n"
            f"  nodes: {nodes}")


def main() -> None:
    import tempfile

    p = argparse.ArgumentParser(prog="python -m tests.corpus")
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--pods", type=int, default=2000)
    p.add_argument("--clusters", type=int, default=20)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        judged = run(Path(tmp), a.seed, a.pods, a.clusters)
        print(table(judged))
        for j in judged:
            if j.outcome in OUTCOMES[1:4] and not j.apart:
                print(explain(j))


if __name__ == "__main__":
    main()
