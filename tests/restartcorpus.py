"""Running GPU pods whose nodes change under them, each restart judged by the real stack.

Every case is one pod on one node. The node starts in one state (its GPUs, the toolkit's
mode and default kind, the CDI specs on disk, containerd's runtime handlers, the device
plugin's strategy); the pod is admitted by gpupool, bound there, and its container started:
the device plugin's allocate answer is what NVIDIA's plugin gives for that strategy
(k8s-device-plugin v0.19.3 ``internal/plugin/server.go``, ``getAllocateResponse``:
``NVIDIA_VISIBLE_DEVICES`` with the device ids for ``envvar``; ``<kind>=<id>`` CDI names in
``CDIDevices`` for ``cdi-cri`` and in ``cdi.k8s.io/nvidia-device-plugin_<id>`` annotations
for ``cdi-annotations``; HAMi's plugin answers alike), and the start itself must succeed on
the real runtime. The kubelet's checkpoint holding that answer is written by the kubelet's
own code (``tests/e2e/controlplane/kubeletcheckpoint``). Then the node changes as real
clusters change it, gpupool's agent reads the node as it now is (specs, configs, driver,
checkpoint) and publishes it, and ``gpupool scan``'s answer for the pod is taken.

The judge is the restart: the same cached answer, through the node as it now is, on the
real programs (``tests.runtime_oracle``): nvidia-container-runtime and its legacy hook, the
CDI library as containerd injects names. Two steps stay modelled, each as its source says:
containerd creates a container with its sandbox's runtime handler, looked up in its config
each time (containerd v2.2 ``internal/cri/server/container_create.go``,
``GetSandboxRuntime``: "no runtime for ... is configured"), and runc, as containerd's
default handler, reads no ``NVIDIA_VISIBLE_DEVICES``. A third: containerd with CDI off
(``enable_cdi = false``, 1.7's default) applies no CDI name (v1.7
``pkg/cri/server/container_create_linux.go``, CDI devices only ``if c.config.EnableCDI``)
and passes on only the container annotations its handler's ``container_annotations`` match
(``GetPassthroughAnnotations``); the real runtime then decides what it makes of them and
of the container's variables. A container may set ``NVIDIA_VISIBLE_DEVICES`` itself: the
kubelet puts it after the plugin's, so it is the value containerd and the runtime see.

Where the agent does not read the kubelet's checkpoint, what the pod holds is not known:
the answer must be doubt with that reason, never Fine (HAMi's pods carry their scheduler's
record, judged both ways HAMi's plugin hands GPUs).
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from harness.gobuild import built
from harness.kit import ROOT
from harness.layouts import (
    CONTAINERD_SRC,
    device_plugin_spec,
    fake_driver,
    hami_register,
    management_spec,
    nvidia_config,
    nvidia_ctk_spec,
    per_uuid_spec,
)
from tests.runtime_oracle import OracleNode, Verdict
from webhook.api.pluginconfig import Settled
from webhook.engine import (
    NodeInfo,
    PodAnswer,
    Policy,
    Stage,
    Subject,
    decide,
    recheck,
    view_from_objects,
)
from webhook.node.agent import Observer, node_labels

CHECKPOINT_BUILD = ROOT / "tests/e2e/controlplane/kubeletcheckpoint/build.sh"
GPUS = tuple(f"GPU-{uuidlib.UUID(int=0x5EED0000 + i)}" for i in range(6))
MIGS = tuple(f"MIG-{uuidlib.UUID(int=0x313C0000 + i)}" for i in range(4))
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
MGMT = "management.nvidia.com/gpu"
PLUGIN_KIND = "k8s.device-plugin.nvidia.com/gpu"
NVIDIA_HANDLERS = ("nvidia", "nvidia-cdi", "nvidia-legacy")


def kubelet_checkpoint() -> Path:
    return built(CHECKPOINT_BUILD, "the kubelet's checkpoint writer") / "kubelet-checkpoint"


@dataclass(frozen=True)
class State:
    """One node as it stands."""

    gpus: tuple[str, ...] = GPUS[:3]
    mode: str = "cdi"
    kind: str = MGMT
    per_uuid: tuple[str, ...] = ()  # management.nvidia.com/gpu devices per GPU
    plugin_spec: tuple[str, ...] | None = None  # the device plugin's spec (its GPUs)
    ctk: tuple[str, ...] = ()  # nvidia-ctk's spec (kind nvidia.com/gpu)
    strategy: str = "envvar"  # the device plugin's DEVICE_LIST_STRATEGY
    handlers: tuple[str, ...] = NVIDIA_HANDLERS  # containerd's NVIDIA runtime handlers
    default_handler: str = "nvidia"
    label: str = ""  # a label nobody reads
    junk: bool = False  # a file in a spec directory that is no spec
    #: MIG devices the plugin registered (mixed strategy, ``MIG_RESOURCE``); a pod on a node
    #: with some holds one of them
    migs: tuple[str, ...] = ()
    #: containerd's ``enable_cdi`` (false: containerd 1.7's default)
    containerd_cdi: bool = True
    #: the NVIDIA handlers' ``container_annotations`` pass ``cdi.k8s.io/*`` (as
    #: ``nvidia-ctk`` writes them, toolkit v1.20.2 ``containerAnnotationsFromCDIPrefixes``)
    passes_annotations: bool = True

    @property
    def resource(self) -> str:
        return MIG_RESOURCE if self.migs else "nvidia.com/gpu"

    @property
    def devices(self) -> tuple[str, ...]:
        """What the plugin hands out: MIG devices where the GPUs are partitioned."""
        return self.migs or self.gpus


#: How real clusters run their GPU nodes, each a pod could have started on.
STARTS: dict[str, State] = {
    "envvar, legacy mode": State(mode="legacy"),
    "envvar, auto mode": State(mode="auto"),
    "envvar, cdi mode, per-UUID spec": State(per_uuid=GPUS[:3]),
    "envvar, cdi mode, just-in-time kind": State(kind="runtime.nvidia.com/gpu"),
    "envvar, cdi mode, nvidia-ctk spec": State(kind="nvidia.com/gpu", ctk=GPUS[:3]),
    "cdi-cri, plugin spec": State(strategy="cdi-cri", plugin_spec=GPUS[:3]),
    "cdi-annotations, plugin spec": State(strategy="cdi-annotations", plugin_spec=GPUS[:3]),
    "cdi-annotations,cdi-cri, plugin spec, auto mode":
        State(mode="auto", strategy="cdi-annotations,cdi-cri", plugin_spec=GPUS[:3]),
    "MIG, envvar, cdi mode, per-device spec":
        State(gpus=GPUS[:2], migs=MIGS[:2], per_uuid=GPUS[:2] + MIGS[:2]),
    "MIG, envvar, auto mode": State(gpus=GPUS[:2], migs=MIGS[:2], mode="auto"),
    # containerd 1.7 as it ships (enable_cdi = false): the plugin's CDI names reach only the
    # NVIDIA runtime, as annotations, or nobody; a pod's own NVIDIA_VISIBLE_DEVICES may be
    # all its containers get
    "cdi-annotations, containerd CDI off, cdi mode":
        State(strategy="cdi-annotations", plugin_spec=GPUS[:3], containerd_cdi=False),
    "cdi-annotations, containerd CDI off, legacy mode":
        State(mode="legacy", strategy="cdi-annotations", plugin_spec=GPUS[:3],
              containerd_cdi=False),
    "cdi-cri, containerd CDI off, auto mode":
        State(mode="auto", strategy="cdi-cri", plugin_spec=GPUS[:3], containerd_cdi=False),
    "cdi-annotations, containerd CDI off, annotations not passed":
        State(mode="auto", strategy="cdi-annotations", plugin_spec=GPUS[:3],
              containerd_cdi=False, passes_annotations=False),
}


def _regenerated(s: State, gpus: tuple[str, ...], migs: tuple[str, ...] | None = None
                 ) -> State:
    """The specs written again for these GPUs (and MIG devices), by whoever wrote them."""
    migs = s.migs if migs is None else migs
    return dataclasses.replace(
        s, gpus=gpus, migs=migs, per_uuid=gpus + migs if s.per_uuid else (),
        plugin_spec=gpus if s.plugin_spec is not None else None,
        ctk=gpus if s.ctk else ())


def _replaced(s: State, held: tuple[str, ...]) -> State:
    """The first GPU the pod holds (or the one its MIG device is on) replaced by a new card
    (a new UUID, new MIG devices); specs regenerated."""
    if s.migs:
        return _regenerated(s, (GPUS[5], *s.gpus[1:]), MIGS[2:4])
    new = tuple(GPUS[5] if g == held[0] else g for g in s.gpus)
    return _regenerated(s, new)


def _partial(s: State, held: tuple[str, ...]) -> State:
    """A device the pod does not hold drops out of the specs (a partial spec)."""
    other = next((g for g in (*s.devices, *s.gpus) if g not in held), None)
    keep = tuple(g for g in s.devices if g != other)
    return dataclasses.replace(
        s, per_uuid=tuple(g for g in s.per_uuid if g != other),
        plugin_spec=None if s.plugin_spec is None else tuple(
            g for g in s.plugin_spec if g != other),
        ctk=tuple(g for g in s.ctk if g != other)) if keep and other else s


def _switched(s: State) -> State:
    """The device plugin's strategy switched (envvar <-> CDI), its spec following."""
    if s.strategy == "envvar":
        return dataclasses.replace(s, strategy="cdi-annotations,cdi-cri", plugin_spec=s.gpus)
    return dataclasses.replace(s, strategy="envvar", plugin_spec=None)


#: What happens to a node under running pods: (class, how the state changes given the GPUs
#: the pod holds). Classes 1-5 are issue 45's; "neutral" changes break nothing.
CHANGES: dict[str, tuple[str, Callable[[State, tuple[str, ...]], State]]] = {
    "toolkit upgraded to CDI mode (management spec only)": ("1", lambda s, h: dataclasses.replace(
        s, mode="cdi", kind=MGMT, per_uuid=(), ctk=())),
    "held GPU replaced": ("2", _replaced),
    "per-UUID spec regenerated without the held GPU": ("2", lambda s, h: dataclasses.replace(
        s, per_uuid=tuple(g for g in s.per_uuid if g not in h),
        plugin_spec=None if s.plugin_spec is None else tuple(
            g for g in s.plugin_spec if g not in h),
        ctk=tuple(g for g in s.ctk if g not in h))),
    "a GPU the pod does not hold loses its spec": ("3", _partial),
    "GPU added, hand-made spec misses it": ("3", lambda s, h: dataclasses.replace(
        s, gpus=(*s.gpus, GPUS[4]))),
    "device-plugin strategy switched": ("4", lambda s, h: _switched(s)),
    "NRI turned on: NVIDIA handlers dropped, runc the default": ("5", lambda s, h: (
        dataclasses.replace(s, handlers=(), default_handler="runc"))),
    "the device plugin's spec deleted": ("6", lambda s, h: dataclasses.replace(
        s, plugin_spec=None)),
    "MIG re-laid out": ("2", lambda s, h: _regenerated(s, s.gpus, MIGS[2:4]) if s.migs
                        else _regenerated(s, s.gpus)),
    "containerd's CDI turned off (containerd 1.7's default)": ("7", lambda s, h: (
        dataclasses.replace(s, containerd_cdi=False))),
    "containerd's CDI turned on": ("7", lambda s, h: dataclasses.replace(
        s, containerd_cdi=True)),
    "a label": ("neutral", lambda s, h: dataclasses.replace(s, label="team-a")),
    "an unrelated file": ("neutral", lambda s, h: dataclasses.replace(s, junk=True)),
    "specs regenerated identically": ("neutral", lambda s, h: _regenerated(s, s.gpus)),
    "GPU added, specs regenerated": ("neutral", lambda s, h: _regenerated(
        s, (*s.gpus, GPUS[4]))),
}


# ------------------------------------------------------------------ a node on disk


def _containerd(s: State) -> str:
    """The operator's containerd drop-in with the handlers ``s`` keeps (and runc, where it
    is the default)."""
    out, skip = [], False
    prefix = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.'
    for line in CONTAINERD_SRC.read_text().splitlines():
        head = line.strip()
        if head.startswith(prefix):
            name = head[len(prefix):].split("]")[0].split(".")[0]
            skip = name not in s.handlers
        elif head.startswith("[") and not head.startswith(prefix):
            skip = False
        if not skip:
            out.append(line)
    text = "\n".join(out).replace("{{ .toolkitRoot }}", "/usr/local/nvidia")
    if not s.containerd_cdi:
        text = text.replace("enable_cdi = true", "enable_cdi = false")
    if s.passes_annotations:
        text = text.replace('runtime_type = "io.containerd.runc.v2"',
                            'runtime_type = "io.containerd.runc.v2"\n'
                            '          container_annotations = ["cdi.k8s.io/*"]')
    text = text.replace('default_runtime_name = "nvidia"',
                        f'default_runtime_name = "{s.default_handler}"')
    if s.default_handler == "runc":
        text += ('\n        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                 '          runtime_type = "io.containerd.runc.v2"\n')
    return text + "\n"


def write_node(root: Path, s: State) -> dict[str, Path]:
    etc, run, cfg = root / "etc/cdi", root / "var/run/cdi", root / "config"
    for d in (etc, run, cfg):
        d.mkdir(parents=True, exist_ok=True)
    (run / "management.nvidia.com-gpu.yaml").write_text(management_spec(len(s.gpus)))
    if s.per_uuid:
        (etc / "per-uuid.yaml").write_text(per_uuid_spec(uuids=s.per_uuid))
    if s.plugin_spec is not None:
        (run / "k8s.device-plugin.nvidia.com-gpu.json").write_text(
            device_plugin_spec(s.plugin_spec))
    if s.ctk:
        (run / "nvidia.yaml").write_text(nvidia_ctk_spec(s.ctk))
    if s.junk:
        (run / "README.txt").write_text("not a spec\n")
    (cfg / "config.toml").write_text(nvidia_config(s.mode, None if s.kind == "nvidia.com/gpu"
                                                   else s.kind))
    (cfg / "containerd.toml").write_text(_containerd(s))
    return {"etc": etc, "run": run, "config": cfg / "config.toml",
            "containerd": cfg / "containerd.toml",
            "driver": fake_driver(root / "drv", s.gpus)}


# ------------------------------------------------------------------ the pod


@dataclass(frozen=True)
class Allocation:
    """The device plugin's answer to the kubelet's Allocate, as it cached it."""

    ids: tuple[str, ...]
    envs: dict[str, str] = field(default_factory=dict)
    cdi: tuple[str, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def of(strategy: str, ids: tuple[str, ...], response_id: str) -> Allocation:
        names = tuple(f"{PLUGIN_KIND}={i}" for i in ids)
        chosen = {x.strip() for x in strategy.split(",")}
        if chosen <= {"cdi-annotations", "cdi-cri"}:
            return Allocation(ids, cdi=names if "cdi-cri" in chosen else (), annotations={
                f"cdi.k8s.io/nvidia-device-plugin_{response_id}": ",".join(names)}
                if "cdi-annotations" in chosen else {})
        return Allocation(ids, envs={"NVIDIA_VISIBLE_DEVICES": ",".join(ids)})


def write_checkpoint(path: Path, uid: str, container: str, a: Allocation, resource: str,
                     s: State) -> None:
    """The kubelet's checkpoint holding the pod's allocation (written when it was made),
    with the devices the plugin registers on the node as it is now; written by the
    kubelet's code."""
    registered = {"nvidia.com/gpu": list(s.gpus)}
    if s.migs:
        registered = {MIG_RESOURCE: list(s.migs)}
    doc = {"registered": registered, "entries": [{
        "podUID": uid, "container": container, "resource": resource,
        "ids": {"-1": list(a.ids)}, "envs": a.envs, "annotations": a.annotations,
        "cdiDevices": list(a.cdi)}]}
    r = subprocess.run([str(kubelet_checkpoint())], input=json.dumps(doc), text=True,
                       capture_output=True, timeout=60, check=True)
    path.write_text(r.stdout)


# ------------------------------------------------------------------ the judge


def restart(root: Path, paths: dict[str, Path], s: State, a: Allocation,
            runtime_class: str | None, own_env: str | None = None) -> Verdict:
    """The container created again with the same cached answer, on the node as it is.
    ``own_env``: the container's own NVIDIA_VISIBLE_DEVICES; the kubelet hands the device
    plugin's variables first and the container's own after them (``kubelet_pods.go``,
    ``GenerateRunContainerOptions``), so its value is the one every reader sees."""
    handler = runtime_class or s.default_handler
    configured = (*s.handlers, *(("runc",) if s.default_handler == "runc" else ()))
    if handler not in configured:
        return Verdict(False, f'no runtime for "{handler}" is configured',
                       by="rule: containerd GetSandboxRuntime")
    oracle = OracleNode(root, [paths["etc"], paths["run"]], paths["config"],
                        gpus=s.gpus + s.migs)
    nvidia = handler in NVIDIA_HANDLERS
    names = (*a.cdi, *(n for v in a.annotations.values() for n in v.split(",")))
    env = own_env if own_env is not None else a.envs.get("NVIDIA_VISIBLE_DEVICES")
    annotations: dict[str, str] = {}
    if s.containerd_cdi and names:
        injected = oracle.inject(*dict.fromkeys(names), env=(
            () if env is None else (f"NVIDIA_VISIBLE_DEVICES={env}",)))
        if not injected.ok or not nvidia:
            return injected
        return oracle.create_injected(injected, a.annotations)
    if not s.containerd_cdi and nvidia and s.passes_annotations:
        # containerd with CDI off applies no CDI name (v1.7 container_create_linux.go: only
        # ``if c.config.EnableCDI``) and passes on the container annotations the handler's
        # container_annotations match (GetPassthroughAnnotations); the runtime decides
        annotations = a.annotations
    if env is None and not annotations:
        return Verdict(False, "no device reaches the container", by="rule: containerd")
    if not nvidia:
        return Verdict(False, "runc reads no NVIDIA_VISIBLE_DEVICES: no GPU", by="rule: runc")
    v = oracle.legacy(env or "", annotations) if s.mode == "legacy" \
        else oracle.create(env or "", annotations)
    if v.ok and v.spec is not None and not v.devices:
        return Verdict(False, "created without a GPU", by=v.by, spec=v.spec)
    return v


# ------------------------------------------------------------------ the corpus


@dataclass
class Case:
    name: str
    klass: str
    start: State
    after: State
    gpus: int
    runtime_class: str | None
    hami: bool
    agent_reads_checkpoint: bool
    #: the container's own NVIDIA_VISIBLE_DEVICES (None: it sets none)
    own_env: str | None = None
    answer: PodAnswer | None = None
    verdict: Verdict | None = None

    @property
    def runs(self) -> bool:
        return self.verdict is not None and self.verdict.ok


@dataclass(frozen=True)
class Configuration:
    """The agent's options a user chooses, forced on every case; None keeps each case's
    own draw (the draws stay those of the corpus, so each configuration judges the same
    pods)."""

    name: str = "as drawn"
    #: ``agent.kubeletCheckpoint``
    kubelet_checkpoint: bool | None = None
    #: may the agent read the device plugin's pods (``--no-plugin-pods``, RBAC)
    plugin_pods: bool = True


CONFIGURATIONS = (
    Configuration("agent.kubeletCheckpoint: false", kubelet_checkpoint=False),
    Configuration("agent does not read the device plugin's pods", plugin_pods=False),
)


def _node_object(root: Path, name: str, s: State, hami: bool, checkpoint: Path | None,
                 plugin_pods: bool = True) -> dict[str, Any]:
    paths = write_node(root, s)
    pool = "hami" if hami else None
    plugin = Settled(f"{'kube-system/hami' if hami else 'gpu-operator/nvidia'}-device-plugin",
                     "device-plugin", tuple(x.strip() for x in s.strategy.split(",")),
                     "variable DEVICE_LIST_STRATEGY", mig_strategy="mixed" if s.migs else "none")
    observer = Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                        str(paths["containerd"]), driver_gpus_dir=str(paths["driver"]),
                        kubelet_checkpoint=str(checkpoint) if checkpoint else None,
                        plugin_pods=(lambda: (plugin,)) if plugin_pods else None)
    inv = observer.observe()
    labels = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": name,
              **{k: v for k, v in node_labels(inv).items() if v}}
    if s.label:
        labels["team"] = s.label
    ann = {"gpupool.io/cdi-inventory": inv.dumps()}
    if pool:
        labels["gpupool.io/pool"] = pool
        ann["hami.io/node-nvidia-register"] = hami_register(s.gpus)
    held = observer.held()
    if held is not None:
        ann["gpupool.io/held-devices"] = held.dumps()
    return {"apiVersion": "v1", "kind": "Node", "spec": {},
            "metadata": {"name": name, "labels": labels, "annotations": ann}}


def _pod(c: Case, uid: str) -> dict[str, Any]:
    limits: dict[str, Any] = {c.start.resource: c.gpus}
    if c.hami:
        limits["nvidia.com/gpumem"] = 1000
    container: dict[str, Any] = {"name": "main", "image": "cuda",
                                 "resources": {"limits": limits}}
    if c.own_env is not None:
        container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": c.own_env}]
    spec: dict[str, Any] = {"containers": [container]}
    if c.runtime_class:
        spec["runtimeClassName"] = c.runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": c.name, "namespace": "ml", "uid": uid}}


def run_case(c: Case, root: Path, policy: Policy,
             config: Configuration = Configuration()) -> Case:
    """Start the pod, change the node, ask gpupool, restart it on the real stack."""
    if config.kubelet_checkpoint is not None:
        c = dataclasses.replace(c, agent_reads_checkpoint=config.kubelet_checkpoint)
    uid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, c.name))
    held = tuple(c.start.devices[:c.gpus])
    alloc = Allocation.of(c.start.strategy, held, uid[:8])
    before = write_node(root / "before", c.start)
    started = restart(root / "before" / "oracle", before, c.start, alloc, c.runtime_class,
                      c.own_env)
    if not started.ok:
        return c  # it never ran: not a running pod
    checkpoint = root / "kubelet_internal_checkpoint"
    write_checkpoint(checkpoint, uid, "main", alloc, c.start.resource, c.start)
    node_then = _node_object(root / "n0", "gpu-1", c.start, c.hami, checkpoint,
                             config.plugin_pods)
    view = view_from_objects([node_then], policy, {"ml": {}})
    pod = _pod(c, uid)
    m = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace="ml"), view, policy)
    pod = jsonpatch.apply_patch(pod, m.patch)
    pod["spec"]["nodeName"] = "gpu-1"
    pod["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "main", "restartCount": 0, "containerID": "containerd://1",
         "state": {"running": {"startedAt": "2026-12-06T08:00:00Z"}}}]}
    if c.hami:
        pod["metadata"].setdefault("annotations", {})["hami.io/vgpu-devices-allocated"] = \
            "".join(f"{g},NVIDIA,1000,0:" for g in held) + ";"
    write_checkpoint(checkpoint, uid, "main", alloc, c.start.resource, c.after)
    node_now = _node_object(root / "n1", "gpu-1", c.after, c.hami,
                            checkpoint if c.agent_reads_checkpoint else None,
                            config.plugin_pods)
    view.upsert_node(NodeInfo.from_object(node_now))
    c.answer = recheck(pod, view, policy)
    after = write_node(root / "after", c.after)
    c.verdict = restart(root / "after" / "oracle", after, c.after, alloc, c.runtime_class,
                        c.own_env)
    return c


def cases(n: int, seed: int = 45) -> Iterator[Case]:
    """Every start and change once (both pools, with and without a RuntimeClass), then
    random draws up to ``n``; a few with an agent that does not read the checkpoint."""
    rng = random.Random(seed)
    combos = [(s, ch) for s in STARTS for ch in CHANGES]
    picks = list(combos)
    while len(picks) < n:
        picks.append(rng.choice(combos))
    for i, (start, change) in enumerate(picks[:n]):
        klass, how = CHANGES[change]
        s0 = STARTS[start]
        gpus = 2 if rng.random() < 0.3 else 1
        hami = s0.strategy == "envvar" and not s0.migs and rng.random() < 0.5
        held = s0.devices[:gpus]
        # A container that sets NVIDIA_VISIBLE_DEVICES itself: often where containerd drops
        # the plugin's CDI names (it may be all it gets), sometimes elsewhere
        share = 0.0 if hami else 0.8 if not s0.containerd_cdi else \
            0.3 if s0.strategy != "envvar" else 0.1
        own = rng.choice(("all", ",".join(held), "0")) if rng.random() < share else None
        yield Case(f"c{i}-{start}-{change}".replace(" ", "-").replace(",", "")[:200],
                   klass, s0, how(s0, held), gpus,
                   runtime_class="nvidia" if rng.random() < 0.3 else None, hami=hami,
                   agent_reads_checkpoint=rng.random() > 0.1, own_env=own)


def table(done: list[Case]) -> str:
    """Outcomes against the real restart, per class."""
    rows: Counter[tuple[str, str, str]] = Counter()
    for c in done:
        if c.answer is None or c.verdict is None:
            continue
        rows[(c.klass, c.answer.outcome.value, "runs" if c.runs else "fails")] += 1
    return "\n".join(f"class {k:8} {o:18} {r:5} {n}" for (k, o, r), n in sorted(rows.items()))
