"""A seeded corpus of DRA GPU pods, judged by Kubernetes' own allocator.

Each cluster has a pool of nodes running NVIDIA's DRA driver (``gpu.nvidia.com``: whole GPUs
with the attributes and capacity its kubelet plugin publishes, some nodes with MIG placements
as partitionable devices drawing on a shared counter set per GPU, some devices tainted), a
pool running HAMi-DRA (class ``hami-core-gpu.project-hami.io``, which selects devices of type
``hami-gpu``: HAMi-DRA chart ``templates/hami-dra-driver/deviceclass.yaml``; shared by
consumable capacity, as a vGPU driver publishes them), and a device-plugin pool with no
DRA. Some devices are held by claims allocated already.

Every pod goes through gpupool (``review``: mutate, apply, validate). Then ``dra-judge``
(tests/drajudge: ``k8s.io/dynamic-resource-allocation/structured`` v0.35.4, the allocator
kube-scheduler runs) says, for every node of every pool, whether the pod's claims can be
allocated there now (the held devices in use) and once every held device is free. A pod
gpupool admits into a pool none of whose nodes can ever allocate it, silently, is a miss; a
pod it denies that some node can allocate is a false denial; one routed to a pool that can
never serve it while another can is a misroute.

Run a bigger corpus by hand: ``python -m tests.dracorpus --pods 1000 --seed 7``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import random
import subprocess
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from harness.gobuild import built
from harness.kit import ROOT
from webhook.engine import (
    Subject,
    load_policy_text,
    parse_release,
    review,
    view_from_objects,
)

BUILD = ROOT / "tests" / "drajudge" / "build.sh"
NVIDIA, HAMI = "gpu.nvidia.com", "hami-core-gpu.project-hami.io"
GPU_CLASS, MIG_CLASS, HAMI_CLASS = "gpu.nvidia.com", "mig.nvidia.com", HAMI
NS = "ml"
EXTENDED = "nvidia.com/gpu"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{GPU_CLASS}"
#: what a device-plugin node of the operator pool advertises
PLUGIN_GPUS = 4
MODELS = (("NVIDIA A100-SXM4-80GB", "80Gi"), ("NVIDIA H100-80GB-HBM3", "80Gi"),
          ("NVIDIA L4", "24Gi"))
POLICY = """apiVersion: gpupool.io/v1alpha1
kind: PoolPolicy
defaultPool: operator
gpuResources: [nvidia.com/gpu]
pools:
  - name: operator
    schedulerName: default-scheduler
  - name: dra
    labelValues: [dra]
    schedulerName: default-scheduler
    dra: {deviceClasses: [gpu.nvidia.com, mig.nvidia.com]}
  - name: hamidra
    labelValues: [hamidra]
    schedulerName: default-scheduler
    dra: {deviceClasses: [hami-core-gpu.project-hami.io]}
"""
OUTCOMES = ("not a GPU pod to gpupool (no class of a pool)", "fine",
            "waits for devices in use", "waits for devices in use, not said",
            "never allocatable, denied",
            "never allocatable, warned", "never allocatable, admitted silently",
            "false denial", "misroute", "warned it can never be allocated, but it can")
WRONG = ("never allocatable, admitted silently", "false denial", "misroute",
         "waits for devices in use, not said", "warned it can never be allocated, but it can")
#: what gpupool's warnings say of a pod no node of its pool can ever allocate
NEVER = ("stays pending", "publishes DRA devices for this pod")
#: Counted apart: on a node the pod could reach the allocator itself panics (v0.35.4, a nil
#: pointer in checkAvailableCounters for allocationMode All beside partitionable devices):
#: no answer to compare with.
PANICS = "counted apart: the real allocator panics on a node it could reach"


def _uuid(rng: random.Random, prefix: str = "GPU") -> str:
    return f"{prefix}-{uuidlib.UUID(int=rng.getrandbits(128), version=4)}"


def classes() -> list[dict[str, Any]]:
    def cls(name: str, driver: str, kind: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": (
                    f"device.driver == '{driver}' && "
                    f"device.attributes['{driver}'].type == '{kind}'")}}]}}
    hami = cls(HAMI_CLASS, HAMI, "hami-gpu")
    # HAMi-DRA's class serves nvidia.com/gpu by name (KEP-5004), as the cluster has it
    hami["spec"]["extendedResourceName"] = EXTENDED
    return [cls(GPU_CLASS, NVIDIA, "gpu"), cls(MIG_CLASS, NVIDIA, "mig"), hami]


def nvidia_slices(rng: random.Random, node: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One node's slices from NVIDIA's driver, and the names of its devices."""
    model, memory = rng.choice(MODELS)
    count = rng.choice((1, 2, 4, 8))
    mig = model != "NVIDIA L4" and rng.random() < 0.35
    devices: list[dict[str, Any]] = []
    counter_sets: list[dict[str, Any]] = []
    for i in range(count):
        attrs = {"type": {"string": "gpu"}, "uuid": {"string": _uuid(rng)},
                 "productName": {"string": model}, "index": {"int": i},
                 "pcieRoot": {"string": f"pci0000:{i // 4:02x}"}}
        dev: dict[str, Any] = {"name": f"gpu-{i}", "attributes": attrs,
                               "capacity": {"memory": {"value": memory}}}
        if rng.random() < 0.1:
            dev["taints"] = [{"key": "nvidia.com/unhealthy", "value": "xid",
                              "effect": rng.choice(("NoSchedule", "NoExecute"))}]
        if mig:
            # partitionable: the whole GPU and its MIG placements draw on one counter set
            cs = f"gpu-{i}-counters"
            counter_sets.append({"name": cs, "counters": {"slices": {"value": "7"}}})
            dev["consumesCounters"] = [{"counterSet": cs, "counters": {
                "slices": {"value": "7"}}}]
            for p, (profile, slices) in enumerate((("1g.10gb", 1), ("1g.10gb", 1),
                                                   ("3g.40gb", 3), ("3g.40gb", 3))):
                devices.append({"name": f"gpu-{i}-mig-{p}", "attributes": {
                    "type": {"string": "mig"}, "profile": {"string": profile},
                    "parentUUID": attrs["uuid"], "productName": {"string": model},
                    "pcieRoot": attrs["pcieRoot"]},
                    "consumesCounters": [{"counterSet": cs, "counters": {
                        "slices": {"value": str(slices)}}}]})
        devices.insert(len(devices), dev)
    return pool_slices(NVIDIA, node, devices, counter_sets), [d["name"] for d in devices]


def pool_slices(driver: str, node: str, devices: list[dict[str, Any]],
                counter_sets: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A node's pool as a driver publishes it: one slice of devices, and one of the shared
    counters they draw on, where they draw on any."""
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2 if counter_sets else 1}
    out = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node, "pool": pool, "devices": devices}}]
    if counter_sets:
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-{driver}-counters"},
                    "spec": {"driver": driver, "nodeName": node, "pool": pool,
                             "sharedCounters": counter_sets}})
    return out


def hami_slices(rng: random.Random, node: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One node's slice from HAMi-DRA: each GPU shared by consumable memory and cores."""
    model, memory = rng.choice(MODELS)
    devices = [{"name": f"gpu-{i}", "allowMultipleAllocations": True, "attributes": {
        "type": {"string": "hami-gpu"}, "uuid": {"string": _uuid(rng)},
        "productName": {"string": model}, "index": {"int": i}},
        "capacity": {"memory": {"value": memory, "requestPolicy": {
            "default": "1Gi", "validRange": {"min": "1Gi"}}},
            "cores": {"value": "100", "requestPolicy": {
                "default": "10", "validRange": {"min": "1", "max": "100"}}}}}
        for i in range(rng.choice((1, 2, 4)))]
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": f"{node}-{HAMI}"},
             "spec": {"driver": HAMI, "nodeName": node,
                      "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                      "devices": devices}}], [d["name"] for d in devices]


@dataclass
class DraCluster:
    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    held: list[dict[str, Any]]  # claims allocated already
    pools: dict[str, str] = field(default_factory=dict)  # node -> pool
    #: a claim in the pods' namespace allocated already, that pods may share
    shared: dict[str, Any] | None = None


def _held(rng: random.Random, driver: str, node: str, devices: list[str],
          shared: bool) -> dict[str, Any]:
    """A claim allocated already, holding some of a node's devices (a share of them where
    the driver shares them)."""
    taken = rng.sample(devices, k=max(1, len(devices) // 2))
    results = []
    for d in taken:
        r: dict[str, Any] = {"request": "r", "driver": driver, "pool": node, "device": d}
        if shared:
            r["shareID"] = str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
            r["consumedCapacity"] = {"memory": rng.choice(("8Gi", "20Gi", "60Gi")),
                                     "cores": rng.choice(("10", "50", "90"))}
        results.append(r)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"held-{node}", "namespace": "other",
                         "uid": str(uuidlib.UUID(int=rng.getrandbits(128), version=4))},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": HAMI_CLASS if shared else GPU_CLASS}}]}},
            "status": {"allocation": {"devices": {"results": results}, "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{
                    "key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}


def make_cluster(rng: random.Random, index: int) -> DraCluster:
    c = DraCluster([], [], classes(), [])
    for pool in ("dra", "hamidra", "operator"):
        for i in range(rng.choice((2, 3, 4))):
            name = f"c{index}-{pool}-{i}"
            labels = {"kubernetes.io/hostname": name}
            if pool != "operator":
                labels["gpupool.io/pool"] = pool
            status: dict[str, Any] = {"allocatable": {"cpu": "64"}}
            if pool == "operator":
                status["allocatable"]["nvidia.com/gpu"] = "4"
            c.nodes.append({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": labels}, "status": status})
            c.pools[name] = pool
            if pool == "operator":
                continue
            made, devices = (nvidia_slices if pool == "dra" else hami_slices)(rng, name)
            c.slices += made
            if rng.random() < 0.3:
                c.held.append(_held(rng, NVIDIA if pool == "dra" else HAMI, name,
                                    [d for d in devices if "mig" not in d],
                                    shared=pool == "hamidra"))
            elif pool == "dra" and c.shared is None:
                claim = _held(rng, NVIDIA, name, [d for d in devices if "mig" not in d][:1],
                              shared=False)
                claim["metadata"].update(name=f"shared-{index}", namespace=NS)
                c.shared = claim
                c.held.append(claim)
    return c


# ------------------------------------------------------------------ pods


def _request(rng: random.Random, name: str) -> dict[str, Any]:
    """One request of a claim, of the shapes pods ask for."""
    kind = rng.choice(("gpu", "gpu", "gpu", "mig", "hami", "hami", "first", "all", "missing"))
    if kind == "first":
        subs = [_exact(rng, rng.choice(("gpu", "mig", "hami"))) for _ in range(2)]
        if rng.random() < 0.2:
            subs[-1]["deviceClassName"] = "no-such-class"
        return {"name": name, "firstAvailable": [{"name": f"s{i}", **s}
                                                for i, s in enumerate(subs)]}
    if kind == "all":
        out = _exact(rng, "gpu")
        out.pop("count", None)
        out["allocationMode"] = "All"
        return {"name": name, "exactly": out}
    if kind == "missing":
        return {"name": name, "exactly": {"deviceClassName": "no-such-class"}}
    return {"name": name, "exactly": _exact(rng, kind)}


def _exact(rng: random.Random, kind: str) -> dict[str, Any]:
    cls = {"gpu": GPU_CLASS, "mig": MIG_CLASS, "hami": HAMI_CLASS}[kind]
    out: dict[str, Any] = {"deviceClassName": cls, "count": rng.choice((1, 1, 1, 2, 3))}
    roll = rng.random()
    driver = HAMI if kind == "hami" else NVIDIA
    if kind == "mig" and roll < 0.7:
        out["selectors"] = [{"cel": {"expression": (
            f"device.attributes['{driver}'].profile == "
            f"'{rng.choice(('1g.10gb', '3g.40gb', '7g.80gb'))}'")}}]
    elif roll < 0.25:
        out["selectors"] = [{"cel": {"expression": (
            f"device.attributes['{driver}'].productName.contains("
            f"'{rng.choice(('A100', 'H100', 'L4'))}')")}}]
    elif roll < 0.4 and kind != "mig":
        out["selectors"] = [{"cel": {"expression": (
            f"device.capacity['{driver}'].memory.compareTo(quantity("
            f"'{rng.choice(('40Gi', '80Gi'))}')) >= 0")}}]
    if kind == "hami" and rng.random() < 0.7:
        out["capacity"] = {"requests": {"memory": rng.choice(("4Gi", "20Gi", "70Gi")),
                                        "cores": rng.choice(("10", "50", "100"))}}
    if rng.random() < 0.15:
        out["tolerations"] = [{"key": "nvidia.com/unhealthy", "operator": "Exists"}]
    return out


def make_pod(rng: random.Random, i: int, c: DraCluster | None = None
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pod and the claim objects it names (templates, or claims of its own; a claim
    allocated already that it shares), or extended resources a DeviceClass serves."""
    objs: list[dict[str, Any]] = []
    claims_spec = []
    roll = rng.random()
    limits: dict[str, Any] = {}
    if roll < 0.1:  # an extended resource: by device plugin, or the class serving its name
        limits = {rng.choice((EXTENDED, IMPLICIT)): rng.choice((1, 1, 2, 4))}
    elif roll < 0.16 and c is not None and c.shared is not None:
        claims_spec.append({"name": "shared",
                            "resourceClaimName": c.shared["metadata"]["name"]})
    for k in range(0 if limits else rng.choice((0, 1, 1) if claims_spec else (1, 1, 1, 2))):
        requests = [_request(rng, f"r{j}") for j in range(rng.choice((1, 1, 2)))]
        spec: dict[str, Any] = {"devices": {"requests": requests}}
        names = [r["name"] for r in requests]
        roll = rng.random()
        if len(names) > 1 and roll < 0.4:
            attribute = rng.choice(("productName", "pcieRoot"))
            spec["devices"]["constraints"] = [{"requests": names,
                                               "matchAttribute": f"{NVIDIA}/{attribute}"}]
        elif roll < 0.15:
            spec["devices"]["constraints"] = [{"distinctAttribute": f"{NVIDIA}/pcieRoot"}]
        name = f"p{i}-c{k}"
        if rng.random() < 0.5:
            objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                         "metadata": {"name": name, "namespace": NS}, "spec": {"spec": spec}})
            claims_spec.append({"name": f"c{k}", "resourceClaimTemplateName": name})
        else:
            objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                         "metadata": {"name": name, "namespace": NS,
                                      "uid": str(uuidlib.UUID(int=rng.getrandbits(128),
                                                              version=4))},
                         "spec": spec})
            claims_spec.append({"name": f"c{k}", "resourceClaimName": name})
    resources: dict[str, Any] = {"limits": limits} if limits else {
        "claims": [{"name": c["name"]} for c in claims_spec]}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "cuda",
                                            "resources": resources}]}
    if claims_spec:
        spec["resourceClaims"] = claims_spec
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": NS},
           "spec": spec}
    return pod, objs


def pod_claims(pod: dict[str, Any], objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ResourceClaims the pod's claims become (a template's: the claim made from it)
    that are still to be allocated; an extended resource a DeviceClass serves becomes the
    claim the scheduler makes for it (KEP-5004: that class, that many devices)."""
    out = []
    for name, count in pod["spec"]["containers"][0]["resources"].get("limits", {}).items():
        cls = HAMI_CLASS if name == EXTENDED else GPU_CLASS
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": f"{pod['metadata']['name']}-extended",
                                 "namespace": NS, "uid": str(uuidlib.uuid4())},
                    "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                                                       "exactly": {"deviceClassName": cls,
                                                                   "count": count}}]}}})
    for ref in pod["spec"].get("resourceClaims", ()):
        if ref.get("name") == "shared":
            continue  # allocated already: it pins the pod, and asks for nothing more
        if "resourceClaimName" in ref:
            out.append(next(o for o in objs if o["kind"] == "ResourceClaim"
                            and o["metadata"]["name"] == ref["resourceClaimName"]))
        else:
            t = next(o for o in objs if o["kind"] == "ResourceClaimTemplate"
                     and o["metadata"]["name"] == ref["resourceClaimTemplateName"])
            out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": f"{pod['metadata']['name']}-{ref['name']}",
                                     "namespace": NS, "uid": str(uuidlib.uuid4())},
                        "spec": copy.deepcopy(t["spec"]["spec"])})
    return out


# ------------------------------------------------------------------ judging


@functools.lru_cache(maxsize=4)
def _answers(release: str, questions: str) -> list[dict[str, str]]:
    """The allocator's answers, once per release and corpus (both policies ask the same)."""
    return Judge(release).ask(json.loads(questions))


class Judge:
    """The allocator of one Kubernetes release (``RELEASES``), built from its own module."""

    def __init__(self, release: str = "1.35") -> None:
        self.release = release
        self.exe = built(BUILD, f"dra-judge {release}", release) / "dra-judge"

    def ask(self, questions: list[dict[str, Any]]) -> list[dict[str, str]]:
        r = subprocess.run([str(self.exe)], input="".join(json.dumps(q) + "\n"
                                                          for q in questions),
                           capture_output=True, text=True, timeout=600, check=True)
        answers = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(answers) == len(questions), r.stderr[-2000:]
        for a in answers:
            assert "error" not in a, a
        return [a["nodes"] for a in answers]


@dataclass
class Judged:
    pod: dict[str, Any]
    allowed: bool
    reason: str
    message: str
    warnings: list[str]
    pool: str
    now: dict[str, str]  # node -> the allocator's answer, held devices in use
    ever: dict[str, str]  # node -> its answer once every held device is free
    pools: dict[str, str]
    outcome: str = ""

    def ok_in(self, answers: dict[str, str], pool: str | None = None) -> list[str]:
        return [n for n, a in answers.items() if a == "ok"
                and (pool is None or self.pools[n] == pool)]


def classify(j: Judged) -> str:
    if j.reason == "NotGPUPod":
        # only classes no pool names: gpupool stays out, as for any pod
        return OUTCOMES[0]
    if any(a.startswith("panic") for a in (*j.ever.values(), *j.now.values())):
        return PANICS
    fatal = any(a.startswith("error") for a in j.ever.values())
    ever_any = j.ok_in(j.ever) and not fatal
    if not j.allowed:
        return "false denial" if ever_any else "never allocatable, denied"
    if not ever_any:
        dra_warned = any("DRA" in w or "claim" in w or "allocat" in w or "device" in w.lower()
                         for w in j.warnings)
        return "never allocatable, warned" if dra_warned else \
            "never allocatable, admitted silently"
    if not j.ok_in(j.ever, j.pool):
        return "misroute"
    if any(n in w for w in j.warnings for n in NEVER):
        return "warned it can never be allocated, but it can"
    if j.ok_in(j.now, j.pool):
        return "fine"
    return "waits for devices in use" if any("waits for devices in use" in w
                                             for w in j.warnings) else \
        "waits for devices in use, not said"


#: the releases whose allocators judge the corpus, each built from its own module
RELEASES = ("1.35", "1.36", "1.37")


def run(seed: int, pods: int, clusters: int = 10, policy_text: str = POLICY,
        release: str = "1.35") -> list[Judged]:
    """Every pod reviewed by gpupool told ``release``, and judged by that release's
    allocator."""
    rng = random.Random(seed)
    policy = load_policy_text(policy_text)
    made = [make_cluster(rng, i) for i in range(clusters)]
    drawn = [(made[i % clusters], *make_pod(rng, i, made[i % clusters]))
             for i in range(pods)]
    questions = []
    for c, pod, objs in drawn:
        claims = pod_claims(pod, objs)
        base = {"classes": c.classes, "slices": c.slices, "claims": claims,
                "nodes": [n for n in c.nodes if c.pools[n["metadata"]["name"]] != "operator"]}
        questions += [{**base, "allocated": c.held}, {**base, "allocated": []}]
    answers = _answers(release, json.dumps(questions))
    out = []
    for k, (c, pod, objs) in enumerate(drawn):
        view = view_from_objects(c.nodes, policy, {NS: {}, "other": {}},
                                 resources=[*c.classes, *c.slices, *c.held, *objs])
        view.set_release(parse_release(release))
        rv = review(Subject(kind="Pod", group="", operation="CREATE", object=pod,
                            namespace=NS), view, policy)
        final = rv.final
        mutated = jsonpatch.apply_patch(pod, rv.mutation.patch) if rv.mutation.patch else pod
        pool = (mutated["metadata"].get("annotations") or {}).get("gpupool.io/pool", "")
        warnings = [w for d in (rv.mutation, rv.validation) if d is not None
                    for w in d.warnings]
        now, ever = (_beyond_dra(c, pod, a) for a in (answers[2 * k], answers[2 * k + 1]))
        j = Judged(pod, final.allowed, str(final.reason), final.message, warnings, pool,
                   now, ever, c.pools)
        j.outcome = classify(j)
        out.append(j)
    return out


def kind_of(pod: dict[str, Any]) -> str:
    """What the pod asks by: an extended resource (its name), a shared claim, or claims."""
    limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
    if limits:
        return str(next(iter(limits)))
    if any(r.get("name") == "shared" for r in pod["spec"].get("resourceClaims", ())):
        return "shared claim"
    return "claims"


def _beyond_dra(c: DraCluster, pod: dict[str, Any], answers: dict[str, str]
                ) -> dict[str, str]:
    """The allocator's answers, with what it does not decide: a claim the pod shares that is
    allocated already pins it to the node its allocation names (Kubernetes 1.35
    dynamicresources: an allocated claim's nodeSelector filters nodes); the device-plugin
    nodes serve an extended resource by their allocatable (the scheduler's NodeResourcesFit)."""
    out = dict(answers)
    limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
    for n in c.nodes:
        name = n["metadata"]["name"]
        if c.pools[name] == "operator":
            out[name] = "ok" if limits.get(EXTENDED, PLUGIN_GPUS + 1) <= PLUGIN_GPUS else "no"
        elif limits.get(EXTENDED) and out.get(name) == "ok" and c.pools[name] != "hamidra":
            out[name] = "no"
    if any(r.get("name") == "shared" for r in pod["spec"].get("resourceClaims", ())):
        assert c.shared is not None
        pinned = c.shared["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0][
            "matchFields"][0]["values"][0]
        out = {n: (a if n == pinned else "no") for n, a in out.items()}
    return out


def table(judged: list[Judged]) -> str:
    counted = Counter(j.outcome for j in judged)
    width = max(len(o) for o in OUTCOMES) + 2
    lines = [f"{'outcome':<{width}} pods", *(f"{o:<{width}} {counted.get(o, 0)}"
                                           for o in OUTCOMES)]
    if counted.get(PANICS):
        lines.append(f"{PANICS} {counted[PANICS]}")
    lines.append(f"{'total':<{width}} {len(judged)}")
    return "\n".join(lines)


def explain(j: Judged) -> str:
    return (f"{j.outcome}: {json.dumps(j.pod)}\n"
            f"  gpupool: {'allowed' if j.allowed else 'denied'} {j.reason} pool={j.pool}: "
            f"{j.message} {j.warnings}\n  allocator now: {j.now}\n  allocator ever: {j.ever}")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tests.dracorpus")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--clusters", type=int, default=10)
    p.add_argument("--explain", type=int, default=3)
    p.add_argument("--deny", action="store_true", help="the policy's onNoCandidates: deny")
    a = p.parse_args()
    judged = run(a.seed, a.pods, a.clusters,
                 POLICY + ("onNoCandidates: deny\n" if a.deny else ""))
    print(table(judged))
    shown: Counter[str] = Counter()
    for j in judged:
        if j.outcome in WRONG and shown[j.outcome] < a.explain:
            shown[j.outcome] += 1
            print(explain(j))


if __name__ == "__main__":
    main()
