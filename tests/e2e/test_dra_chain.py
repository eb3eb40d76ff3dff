"""DRA pods through the real chain: gpupool's decision beside kube-scheduler's allocation.

Real programs: kube-apiserver, kube-controller-manager (its ResourceClaim controller makes
each pod's claims from their templates) and kube-scheduler (its DynamicResources plugin
allocates devices from ResourceSlices, evaluating the CEL selectors with Kubernetes' own CEL
environment) from one Kubernetes module, with the alpha gates for device taints and
DRA-backed extended resources on; kwok as the kubelets; gpupool under gunicorn with its
webhooks from manifests/ and the built-in policy (NVIDIA's DRA classes in the operator pool).

A named test double stands in for the DRA drivers' kubelet plugins, which need a GPU:
``publish_slices`` writes the ResourceSlices NVIDIA's plugin publishes for each node (its
attributes and capacity), and HAMi-DRA's for HAMi's node (its DeviceClass
``hami-core-gpu.project-hami.io``, devices of type ``hami-gpu``). Everything after that,
allocation and binding included, is the real scheduler's. The policy is the built-in one as a
HAMi-DRA cluster runs it (docs/dra.md): HAMi's pool scheduled by the default scheduler,
HAMi's class in HAMi's pool.

For every pod shape the test records what gpupool said at admission (denied, warned that no
node can allocate it, or the nodes that can) and what the scheduler did (bound where, or
Unschedulable), writes both to bench/results/dra-chain.json, and asserts they agree: a pod
gpupool says can be allocated is bound to one of the nodes gpupool named, in its pool; a pod
gpupool says cannot be allocated is not bound; a pod gpupool denies could not have started.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import install
from harness.controlplane import ControlPlane
from harness.gobuild import built
from harness.kit import ROOT
from harness.servers import stop_server

pytestmark = pytest.mark.e2e
FIXTURES = ROOT / "tests" / "fixtures" / "dra"
KWOK = ROOT / "tests" / "tools" / "build-kwok.sh"
RESULTS = ROOT / "bench" / "results" / "dra-chain.json"
NS = "dra"
GATES = "DRADeviceTaints=true,DRAExtendedResource=true"
NO_DEVICES = "has the DRA devices this pod asks for"  # gpupool's warning, in part
#: gpupool's warnings that no node can allocate the pod: no devices, a missing class, or an
#: allocated claim that holds devices where the pod cannot go
NEVER_ALLOCATED = (NO_DEVICES, "the pod stays pending until it does",
                   "allocated claim pins this pod to nodes outside its reach")

#: node -> (pool label or None, [(product, memory)] its DRA driver publishes, device
#: plugin GPUs). hami-dra is a lure: the only node with four GPUs, in HAMi's pool.
NODES: dict[str, tuple[str | None, list[tuple[str, str]], int]] = {
    "dra-a": (None, [("NVIDIA A100-SXM4-80GB", "80Gi")] * 2, 0),
    "dra-b": (None, [("NVIDIA L4", "24Gi")], 0),
    "hami-dra": ("hami", [("NVIDIA H100 80GB HBM3", "80Gi")] * 4, 0),
    "op-dp": (None, [], 2),
    "dra-t": (None, [("NVIDIA T4", "16Gi")], 0),  # its one GPU tainted (maintenance)
    "hami-dra-2": ("hami", [], 0),  # HAMi-DRA's driver publishes its GPUs (HAMI_SLICE)
    "dra-t2": (None, [("NVIDIA A10", "24Gi")] * 2, 0),  # its first GPU tainted only
}
HAMI_DRIVER = "hami-core-gpu.project-hami.io"
HAMI_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
              "metadata": {"name": HAMI_DRIVER},
              "spec": {"selectors": [{"cel": {"expression": (
                  f"device.driver == '{HAMI_DRIVER}' && "
                  f"device.attributes['{HAMI_DRIVER}'].type == 'hami-gpu'")}}]}}
#: Test double for HAMi-DRA's kubelet plugin: its slice for hami-dra-2 (attributes as its
#: driver names them; the consumable capacity it also publishes needs an alpha gate).
HAMI_SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
              "metadata": {"name": f"hami-dra-2-{HAMI_DRIVER}"},
              "spec": {"driver": HAMI_DRIVER, "nodeName": "hami-dra-2",
                       "pool": {"name": "hami-dra-2", "generation": 1,
                                "resourceSliceCount": 1},
                       "devices": [{"name": f"hami-gpu-{i}", "attributes": {
                           "type": {"string": "hami-gpu"},
                           "uuid": {"string": f"GPU-0000000{i}-1111-4000-8000-000000000000"},
                           "productName": {"string": "NVIDIA A10"}},
                           "capacity": {"memory": {"value": "24Gi"}, "cores": {"value": "100"}}}
                           for i in range(2)]}}
MAINTENANCE = [{"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}]
#: node -> (device taints, how many of its GPUs carry them: the first N, or all)
TAINTED: dict[str, tuple[list[dict[str, str]], int | None]] = {
    "dra-t": (MAINTENANCE, None), "dra-t2": (MAINTENANCE, 1)}
#: Claim templates of this test: the tainted T4, asked for with and without a toleration,
#: and a GPU from HAMi-DRA's class.
T4 = {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
    "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T4'"}}]}
EXTRA_TEMPLATES = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                 "metadata": {"name": name, "namespace": "dra"},
                 "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                     **T4, **extra}}]}}}}
                for name, extra in (("t4", {}), ("t4-tolerating", {"tolerations": [
                    {"key": "example.com/maintenance", "operator": "Exists",
                     "effect": "NoSchedule"}]}), ("hami-gpu", {"deviceClassName": HAMI_DRIVER,
                                                               "selectors": []}))]
A10 = {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
    "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A10'"}}]}


def _template(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "dra"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", **request}]}}}}


#: Shapes whose truth the allocator decides against what a model might guess: every A10 on
#: dra-t2 with one of them tainted (allocationMode All takes the tainted one too), a later
#: firstAvailable alternative whose class does not exist (every class is looked up first),
#: and alternatives in two pools (one of them is enough).
EXTRA_TEMPLATES += [
    _template("a10-all", {"exactly": {**A10, "allocationMode": "All"}}),
    _template("a10", {"exactly": A10}),
    _template("gpu-or-ghost", {"firstAvailable": [
        {"name": "full", "deviceClassName": "gpu.nvidia.com"},
        {"name": "ghost", "deviceClassName": "ghost.example.com"}]}),
    _template("hami-or-gpu", {"firstAvailable": [
        {"name": "hami", "deviceClassName": HAMI_DRIVER},
        {"name": "full", "deviceClassName": "gpu.nvidia.com"}]}),
    # Kubernetes' CEL libraries beyond the standard one: cel.bind, and the apiserver's IP,
    # CIDR, URL, lists and sets libraries (which gpupool once left unevaluated: doubt)
    # the claim's constraints: two requests on GPUs of one product (dra-a's two), and an L4
    # with another GPU of its product (dra-b has one L4; distinctAttribute needs the
    # DRAConsumableCapacity gate, which this API server does not enable)
    {**_template("match-two", {"exactly": {"deviceClassName": "gpu.nvidia.com"}}),
     "spec": {"spec": {"devices": {
         "requests": [{"name": r, "exactly": {"deviceClassName": "gpu.nvidia.com"}}
                      for r in ("a", "b")],
         "constraints": [{"requests": ["a", "b"],
                          "matchAttribute": "gpu.nvidia.com/productName"}]}}}},
    {**_template("l4-pair", {"exactly": {"deviceClassName": "gpu.nvidia.com"}}),
     "spec": {"spec": {"devices": {
         "requests": [{"name": "l4", "exactly": {
             "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": (
                 "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'")}}]}},
             {"name": "other", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
         "constraints": [{"matchAttribute": "gpu.nvidia.com/productName"}]}}}},
    _template("k8s-cel-l4", {"exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [
        {"cel": {"expression": "cel.bind(g, device.attributes['gpu.nvidia.com'], "
                               "g.productName.startsWith('NVIDIA L4'))"}},
        {"cel": {"expression": "isIP('10.0.0.1') && cidr('10.0.0.0/8').containsIP('10.1.2.3')"
                               " && ip('10.0.0.1').isGlobalUnicast() && isCIDR('10.0.0.0/8')"
                               " && url('https://example.com:8443/x').getPort() == '8443'"
                               " && [1, 2, 3].isSorted() && sets.contains([1, 2], [2])"}}]}}),
]


def _hami_dra_policy(tmp: Path) -> Path:
    """The built-in policy as a HAMi-DRA cluster runs it (docs/dra.md)."""
    from webhook.files.policyfile import default_policy_text

    policy = yaml.safe_load(default_policy_text())
    (hami,) = [p for p in policy["pools"] if p["name"] == "hami"]
    hami["schedulerName"] = "default-scheduler"
    hami["dra"] = {"deviceClasses": [HAMI_DRIVER]}
    path = tmp / "hami-dra-policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def publish_slices(node: str, gpus: list[tuple[str, str]],
                   tainted: tuple[list[dict[str, str]], int | None] | None = None
                   ) -> dict[str, Any]:
    """Test double for NVIDIA's DRA kubelet plugin: the ResourceSlice it publishes (with
    device taints on the first N GPUs, or all, as a driver marks a GPU under maintenance)."""
    taints, first = tainted or ([], None)
    devices = [{"name": f"gpu-{i}", "attributes": {
        "type": {"string": "gpu"}, "productName": {"string": product},
        "uuid": {"string": f"GPU-{abs(hash((node, i))) % 10**8:08d}-0000-4000-8000-000000000000"},
        "driverVersion": {"version": "560.35.3"}, "index": {"int": i}},
        "capacity": {"memory": {"value": memory}},
        **({"taints": taints} if taints and (first is None or i < first) else {})}
        for i, (product, memory) in enumerate(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}


def _node(name: str, pool: str | None, device_plugin: int) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if pool:
        labels["gpupool.io/pool"] = pool
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    if device_plugin:
        alloc["nvidia.com/gpu"] = str(device_plugin)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": alloc, "capacity": alloc}}


class DRAChain:
    cp: ControlPlane
    server: Any
    objs: list[dict[str, Any]]
    policy: Path

    def kubectl(self, *args: str, **kw: Any) -> Any:
        return self.cp.kubectl(*args, **kw)

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def dra(k8s_bin, tmp_path_factory):
    kwok = built(KWOK, "kwok")
    c = DRAChain()
    tmp = tmp_path_factory.mktemp("dra-chain")
    c.cp = ControlPlane(tmp / "cp", k8s_bin, feature_gates=GATES).start()
    try:
        c.objs = objs = install.prepare(c.cp, tmp)
        classes = [d for d in yaml.safe_load_all((FIXTURES / "nvidia.yaml").read_text())
                   if d and d["kind"] == "DeviceClass"]
        # The scheduler serves nvidia.com/gpu through this class where no device plugin does.
        classes[0]["spec"]["extendedResourceName"] = "nvidia.com/gpu"
        nodes = [_node(n, pool, dp) for n, (pool, _, dp) in NODES.items()]
        slices = [publish_slices(n, gpus, TAINTED.get(n)) for n, (_, gpus, _) in NODES.items()
                  if gpus]
        r = install.apply(c.cp, [*classes, HAMI_CLASS, *nodes, *slices, HAMI_SLICE])
        assert r.returncode == 0, r.stderr
        c.cp.start_kwok(kwok)
        c.cp.start_controller_manager()
        c.policy = _hami_dra_policy(tmp)
        c.server = install.serve(c.cp, tmp, objs, policy=c.policy)
        c.cp.start_scheduler("kube-scheduler", {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "default-scheduler"}]})
        c.kubectl("create", "namespace", NS)
        templates = [d for d in yaml.safe_load_all((FIXTURES / "claims.yaml").read_text())
                     if d and d["metadata"]["name"] != "monitor"]
        for t in templates:
            t["metadata"]["namespace"] = NS
        r = install.apply(c.cp, templates + EXTRA_TEMPLATES)
        assert r.returncode == 0, r.stderr
        install.wait_for_webhooks(c.cp, c.server, NS)

        def ready() -> bool:  # kwok reports Ready; the node controller lifts the taint
            nodes = c.get("nodes")["items"]
            return len(nodes) == len(NODES) and all(
                not n["spec"].get("taints") and any(
                    x["type"] == "Ready" and x["status"] == "True"
                    for x in n.get("status", {}).get("conditions", [])) for n in nodes)
        install.wait_until(ready, "every node Ready and untainted", 90)

        def synced() -> bool:  # gpupool's view has the slices: a probe claim is judged
            probe = _pod("probe", ["huge-gpu"])
            r = install.apply(c.cp, probe, "--dry-run=server")
            return NO_DEVICES in r.stderr

        install.wait_until(synced, "gpupool to see the ResourceSlices", 60)
        yield c
    finally:
        if getattr(c, "server", None):
            stop_server(c.server)
        c.cp.stop()


def _pod(name: str, templates: list[str], *, limits: dict[str, Any] | None = None,
         claims: list[str] = ()) -> dict[str, Any]:
    refs = [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    refs += [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    container: dict[str, Any] = {"name": "main", "image": "cuda"}
    if refs:
        container["resources"] = {"claims": [{"name": r["name"]} for r in refs]}
    if limits:
        container.setdefault("resources", {})["limits"] = limits
    spec: dict[str, Any] = {"containers": [container]}
    if refs:
        spec["resourceClaims"] = refs
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


#: name -> the pod; every shape gpupool classifies
SHAPES: dict[str, dict[str, Any]] = {
    "one-gpu": _pod("one-gpu", ["one-gpu"]),
    "two-gpus": _pod("two-gpus", ["two-gpus"]),
    "all-gpus": _pod("all-gpus", ["all-gpus"]),
    "big-gpu": _pod("big-gpu", ["big-gpu"]),
    "huge-gpu": _pod("huge-gpu", ["huge-gpu"]),
    "mig-or-gpu": _pod("mig-or-gpu", ["mig-or-gpu"]),
    "mig-only": _pod("mig-only", ["mig-only"]),
    "two-claims": _pod("two-claims", ["big-gpu", "one-gpu"]),
    "shared-claim": _pod("shared-claim", [], claims=["shared"]),
    "extended-2": _pod("extended-2", [], limits={"nvidia.com/gpu": 2}),
    "extended-3": _pod("extended-3", [], limits={"nvidia.com/gpu": 3}),
    "implicit": _pod("implicit", [], limits={
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}),
    "t4": _pod("t4", ["t4"]),  # the only T4 is tainted
    "t4-tolerating": _pod("t4-tolerating", ["t4-tolerating"]),
    "hami-claim": _pod("hami-claim", ["hami-gpu"]),  # HAMi-DRA's class: HAMi's pool
    "mixed": _pod("mixed", ["one-gpu", "hami-gpu"]),  # NVIDIA's and HAMi's: no one pool
    "a10-all": _pod("a10-all", ["a10-all"]),
    "a10": _pod("a10", ["a10"]),
    "gpu-or-ghost": _pod("gpu-or-ghost", ["gpu-or-ghost"]),
    "hami-or-gpu": _pod("hami-or-gpu", ["hami-or-gpu"]),
    "k8s-cel-l4": _pod("k8s-cel-l4", ["k8s-cel-l4"]),
    "match-two": _pod("match-two", ["match-two"]),
    "l4-pair": _pod("l4-pair", ["l4-pair"]),
}
#: the shapes HAMi-DRA's class routes to HAMi's pool
HAMI_SHAPES = ("hami-claim", "hami-or-gpu")
#: a claim, not a template: shared by whoever names it
SHARED_CLAIM = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "shared", "namespace": NS},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
                        "expression": "device.attributes['gpu.nvidia.com'].productName"
                                      ".startsWith('NVIDIA L4')"}}]}}]}}}


def _decision(c: DRAChain, pod: dict[str, Any]) -> dict[str, Any]:
    """gpupool's answer as a user sees it: a server-side dry run (warnings and nodes come
    from the same decision the real create gets)."""
    r = install.apply(c.cp, pod, "--dry-run=server", "-o", "json")
    if r.returncode != 0:
        return {"allowed": False, "message": r.stderr.strip()}
    sent = json.loads(r.stdout)
    ann = sent["metadata"].get("annotations") or {}
    return {"allowed": True, "pool": ann.get("gpupool.io/pool"),
            "warned": any(w in r.stderr for w in NEVER_ALLOCATED),
            "warnings": r.stderr.strip(),
            "affinity": sent["spec"].get("affinity")}


def _checked(c: DRAChain, pod: dict[str, Any], tmp: Path) -> list[str]:
    """The nodes ``gpupool check`` against the live cluster says can allocate the pod: the
    offline entry into the same engine, with the cluster's DRA objects listed."""
    f = tmp / f"{pod['metadata']['name']}.yaml"
    f.write_text(yaml.safe_dump(pod))
    r = subprocess.run([sys.executable, "-m", "webhook", "check", "--kubeconfig",
                        str(c.cp.kubeconfig), "--policy", str(c.policy), "-f", str(f),
                        "-o", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    (result,) = json.loads(r.stdout)["results"]
    return [n["node"] for n in result["nodes"] if n.get("note") == "can allocate its DRA claims"]


def _outcome(c: DRAChain, name: str, timeout: float = 120) -> dict[str, Any]:
    """Where the scheduler put the pod, or that it found no node (it retries a pod whose
    claim the controller is still making, so wait for a verdict). (120 s: a fresh-clone CI
    run on two loaded cores once took over 60 s to hear the 1.35 scheduler's verdict on a
    pod with two claims, with gpupool's webhooks unregistered; alone it takes seconds.)"""
    out: dict[str, Any] = {}

    def done() -> bool:
        p = c.get("pod", "-n", NS, name)
        conds = {x["type"]: x for x in p.get("status", {}).get("conditions", [])}
        sched = conds.get("PodScheduled", {})
        out.update(node=p["spec"].get("nodeName"),
                   unschedulable=sched.get("reason") == "Unschedulable",
                   why=sched.get("message", ""))
        return bool(out["node"] or out["unschedulable"])

    install.wait_until(done, f"pod {name} bound or unschedulable", timeout)
    return out


def _delete(c: DRAChain, name: str) -> None:
    """The pod and the claims made for it go: the next shape starts from free devices."""
    c.kubectl("delete", "pod", "-n", NS, name, "--force", "--grace-period=0", "--wait=true",
              "--timeout=60s")

    def freed() -> bool:
        return not [x for x in c.get("resourceclaims", "-n", NS)["items"]
                    if (x.get("status") or {}).get("allocation")]
    install.wait_until(freed, "the pod's claims to be deallocated", 60)


def test_gpupool_and_the_scheduler_agree_on_every_dra_shape(dra, tmp_path):
    """One shape at a time on free devices: what gpupool judges is whether a node could
    ever allocate the pod (docs/dra.md), which is what the scheduler answers for a pod alone."""
    c = dra
    r = install.apply(c.cp, SHARED_CLAIM)
    assert r.returncode == 0, r.stderr
    rows, decisions = [], {}
    for name, pod in SHAPES.items():
        d = decisions[name] = _decision(c, pod)
        able = _checked(c, pod, tmp_path)
        got: dict[str, Any] = {}
        if d["allowed"]:
            r = install.apply(c.cp, pod)
            assert r.returncode == 0, f"{name}: {r.stderr}"
            got = _outcome(c, name)
            _delete(c, name)
        rows.append({"pod": name, "gpupool": "denied" if not d["allowed"] else
                     ("no node can allocate" if d["warned"] else "can allocate"),
                     "nodes that can (gpupool check)": able,
                     "pool": d.get("pool"), "scheduler": got.get("node") or
                     ("Unschedulable" if got.get("unschedulable") else "-"),
                     "why": got.get("why", "")[:200]})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"recorded": time.strftime("%Y-%m-%d"), "pods": rows},
                                  indent=2) + "\n")
    by = {r["pod"]: r for r in rows}
    for row in rows:
        if row["gpupool"] == "denied":
            assert row["scheduler"] == "-", row  # not created; see the test below
            continue
        # NVIDIA's classes route to the operator pool, HAMi-DRA's to HAMi's
        pool = "hami" if row["pod"] in HAMI_SHAPES else "operator"
        assert row["pool"] == pool, row
        if row["gpupool"] == "can allocate":
            nodes = {n for n, (p, _, _) in NODES.items() if (p or "operator") == pool}
            assert row["scheduler"] in nodes, row  # never the other pool's node
            # bound where gpupool said it could be (op-dp: its device plugin serves it)
            assert row["scheduler"] in row["nodes that can (gpupool check)"] or \
                row["scheduler"] == "op-dp", row
        else:
            assert row["scheduler"] == "Unschedulable", row
    # what each shape had to get right
    assert by["big-gpu"]["scheduler"] == "dra-a"  # the CEL quantity selector: 80Gi, not 24Gi
    assert by["two-gpus"]["scheduler"] == "dra-a"
    assert by["shared-claim"]["scheduler"] == "dra-b"  # productName.startsWith('NVIDIA L4')
    assert by["huge-gpu"]["gpupool"] == by["mig-only"]["gpupool"] == "no node can allocate"
    assert by["mig-or-gpu"]["gpupool"] == "can allocate"  # the full-GPU alternative
    # four GPUs exist only on HAMi's node: pinned to its pool, the pod is not placed there
    assert by["extended-3"]["gpupool"] == "no node can allocate"
    assert by["extended-2"]["scheduler"] in ("dra-a", "op-dp")
    # a device taint keeps the T4 from a claim that does not tolerate it, and only from it
    assert by["t4"]["gpupool"] == "no node can allocate"
    assert by["t4-tolerating"]["scheduler"] == "dra-t"
    # the DRA pod carries the pool's node affinity, which keeps it off HAMi's nodes
    assert "gpupool.io/pool" in json.dumps(decisions["one-gpu"]["affinity"])
    assert by["hami-claim"]["scheduler"] == "hami-dra-2"
    assert by["mixed"]["gpupool"] == "denied"
    assert "ExclusiveResourceConflict" in decisions["mixed"]["message"]
    # All takes the tainted A10 too, so no node can allocate it; one A10 fits beside it
    assert by["a10-all"]["gpupool"] == "no node can allocate"
    assert by["a10"]["scheduler"] == "dra-t2"
    # a missing class in any alternative: the scheduler looks every one up first
    assert by["gpu-or-ghost"]["gpupool"] == "no node can allocate"
    assert "ghost.example.com" in by["gpu-or-ghost"]["why"]
    # alternatives in two pools: the first one's pool, where the scheduler takes it
    assert by["hami-or-gpu"]["scheduler"] == "hami-dra-2"
    # Kubernetes' CEL libraries evaluated on both sides: only the L4 matches, on dra-b
    assert by["k8s-cel-l4"]["gpupool"] == "can allocate"
    assert by["k8s-cel-l4"]["nodes that can (gpupool check)"] == ["dra-b"]
    assert by["k8s-cel-l4"]["scheduler"] == "dra-b"
    # the claims' constraints, decided together as the allocator does: two GPUs of one
    # product fit on dra-a alone; an L4 and another L4 fit nowhere (counted request by
    # request, each served by dra-b's one L4, gpupool once said dra-b could)
    assert by["match-two"]["nodes that can (gpupool check)"] == ["dra-a"]
    assert by["match-two"]["scheduler"] == "dra-a"
    assert by["l4-pair"]["gpupool"] == "no node can allocate"
    assert by["l4-pair"]["scheduler"] == "Unschedulable"


def test_a_claim_allocated_already_pins_its_next_pods_as_the_scheduler_does(dra):
    """Issue 35, item 8. A shared claim any NVIDIA GPU satisfies, allocated by the scheduler
    for a first pod placed on dra-b: a second pod pinned to dra-a (whose A100s would satisfy
    the claim's request) is told no node can allocate it, and the real scheduler leaves it
    Unschedulable; a third, unpinned, gpupool places on dra-b alone, where the scheduler
    binds it. Without reading the allocation gpupool would have said dra-a can."""
    c = dra
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "shared-any", "namespace": NS},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com"}}]}}}
    assert install.apply(c.cp, claim).returncode == 0
    holder = _pod("holder", [], claims=["shared-any"])
    holder["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "dra-b"}
    assert install.apply(c.cp, holder).returncode == 0
    try:
        assert _outcome(c, "holder")["node"] == "dra-b"

        def allocated() -> bool:
            got = c.get("resourceclaim", "-n", NS, "shared-any")
            return bool((got.get("status") or {}).get("allocation"))
        install.wait_until(allocated, "the shared claim allocated", 60)
        elsewhere = _pod("elsewhere", [], claims=["shared-any"])
        elsewhere["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "dra-a"}
        d = _decision(c, elsewhere)
        assert d["allowed"] and d["warned"], d
        assert install.apply(c.cp, elsewhere).returncode == 0
        got = _outcome(c, "elsewhere")
        assert got["unschedulable"] and not got["node"], got
        follower = _pod("follower", [], claims=["shared-any"])
        d = _decision(c, follower)
        assert d["allowed"] and not d["warned"], d
        assert install.apply(c.cp, follower).returncode == 0
        assert _outcome(c, "follower")["node"] == "dra-b"
    finally:
        for name in ("follower", "elsewhere", "holder"):
            c.kubectl("delete", "pod", "-n", NS, name, "--force", "--grace-period=0",
                      "--ignore-not-found", "--wait=true", "--timeout=60s")
        c.kubectl("delete", "resourceclaim", "-n", NS, "shared-any", "--ignore-not-found",
                  "--wait=true", "--timeout=60s")


def test_a_selector_failing_on_one_nodes_device_places_the_pod_nowhere(dra, tmp_path):
    """Issue 35, item 4. A selector that A100s pass (dra-a) and that fails at run time on
    the other NVIDIA devices (a missing attribute, read after a false left side of ||):
    the real scheduler's DRA plugin returns the CEL error and the scheduling attempt ends,
    though dra-a could serve the pod. gpupool says no node can allocate it, naming the
    failure; guarded with has(), both place it on dra-a."""
    c = dra
    expr = ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100') || "
            "device.attributes['gpu.nvidia.com'].missingAttr == 'x'")
    guarded = ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100') || "
               "(has(device.attributes['gpu.nvidia.com'].missingAttr) && "
               "device.attributes['gpu.nvidia.com'].missingAttr == 'x')")
    templates = [_template(name, {"exactly": {"deviceClassName": "gpu.nvidia.com",
                                              "selectors": [{"cel": {"expression": e}}]}})
                 for name, e in (("fails-elsewhere", expr), ("guarded", guarded))]
    assert install.apply(c.cp, templates).returncode == 0
    try:
        bad = _pod("fails-elsewhere", ["fails-elsewhere"])
        d = _decision(c, bad)
        assert d["allowed"] and "fails at run time" in d["warnings"], d
        assert install.apply(c.cp, bad).returncode == 0
        seen: dict[str, Any] = {}

        def refused() -> bool:
            p = c.get("pod", "-n", NS, "fails-elsewhere")
            conds = {x["type"]: x for x in p.get("status", {}).get("conditions", [])}
            seen.update(p=p["spec"].get("nodeName"), cond=conds.get("PodScheduled", {}))
            return bool(seen["cond"].get("status") == "False")
        install.wait_until(refused, "the scheduler's verdict on fails-elsewhere", 60)
        assert not seen["p"], seen
        assert "CEL runtime error" in seen["cond"].get("message", ""), seen
        ok = _pod("guarded", ["guarded"])
        d = _decision(c, ok)
        assert d["allowed"] and not d["warned"] and "fails at run time" not in d["warnings"]
        assert _checked(c, ok, tmp_path) == ["dra-a"]
        assert install.apply(c.cp, ok).returncode == 0
        assert _outcome(c, "guarded")["node"] == "dra-a"
    finally:
        for name in ("fails-elsewhere", "guarded"):
            c.kubectl("delete", "pod", "-n", NS, name, "--force", "--grace-period=0",
                      "--ignore-not-found", "--wait=true", "--timeout=60s")


def test_a_pod_mixing_pools_gpupool_denies_cannot_be_allocated(dra):
    """NVIDIA's class and HAMi-DRA's in one pod: gpupool denies it (no one pool serves
    both); without gpupool the scheduler finds no node with both drivers either."""
    got = _without_gpupool(dra, "mixed")
    assert got["unschedulable"] and not got["node"], got


def test_without_gpupool_a_dra_pod_lands_in_hamis_pool(dra):
    """The pinning is what keeps extended-3 pending: without gpupool the scheduler puts it
    on the only node with three free GPUs, HAMi's."""
    assert _without_gpupool(dra, "extended-3")["node"] == "hami-dra"


def _without_gpupool(c: DRAChain, shape: str) -> dict[str, Any]:
    """Where the scheduler puts this shape's pod with gpupool's webhooks unregistered."""
    install.unregister(c.cp, _webhook_objs(c))
    try:
        pod = copy.deepcopy(SHAPES[shape])
        name = pod["metadata"]["name"] = f"{shape}-unrouted"
        r = install.apply(c.cp, pod)
        assert r.returncode == 0, r.stderr
        got = _outcome(c, name)
        _delete(c, name)
        return got
    finally:
        install.register(c.cp, _webhook_objs(c), c.server.url)
        install.wait_for_webhooks(c.cp, c.server, NS)


def test_admin_access_gpupool_denies_could_never_start(dra):
    """A template with adminAccess in a namespace that lost its admin-access label: gpupool
    denies the pod; without gpupool the ResourceClaim controller cannot make its claim."""
    c = dra
    ns = "dra-admin"
    c.kubectl("create", "namespace", ns)
    c.kubectl("label", "namespace", ns, "resource.kubernetes.io/admin-access=true")
    monitor = next(d for d in yaml.safe_load_all((FIXTURES / "claims.yaml").read_text())
                   if d and d["metadata"]["name"] == "monitor")
    monitor["metadata"]["namespace"] = ns
    r = install.apply(c.cp, monitor)
    assert r.returncode == 0, r.stderr
    c.kubectl("label", "namespace", ns, "resource.kubernetes.io/admin-access-")
    pod = copy.deepcopy(_pod("monitor", ["monitor"]))
    pod["metadata"]["namespace"] = ns

    def denied() -> bool:  # gpupool's namespace watch sees the label go
        r = install.apply(c.cp, pod, "--dry-run=server")
        return r.returncode != 0 and "DRAAdminAccessForbidden" in r.stderr
    install.wait_until(denied, "gpupool to deny the admin-access pod", 30)
    # Without gpupool (its webhooks unregistered for this namespace's pods): created, and
    # never scheduled, because its claim cannot be made.
    install.unregister(c.cp, _webhook_objs(c))
    try:
        r = install.apply(c.cp, pod)
        assert r.returncode == 0, r.stderr

        # A negative: its claim is never made, so the scheduler sets no condition to wait
        # for; the window is a fixed one, long enough for the scheduler to have bound it.
        time.sleep(10)
        p = c.get("pod", "-n", ns, "monitor")
        assert not p["spec"].get("nodeName"), "bound although its claim cannot be allocated"
        claims = c.get("resourceclaims", "-n", ns)["items"]
        assert not [x for x in claims if (x.get("status") or {}).get("allocation")]
    finally:
        install.register(c.cp, _webhook_objs(c), c.server.url)
        install.wait_for_webhooks(c.cp, c.server, NS)


def _webhook_objs(c: DRAChain) -> list[dict[str, Any]]:
    return [o for o in c.objs if o["kind"] in install.WEBHOOK_KINDS]


def test_the_dra_docs_block_runs_against_the_cluster(dra, k8s_bin, tmp_path):
    """docs/dra.md's export-and-check block, as written, against this cluster."""
    import os

    from tests.docs import Shell, blocks, path_with, workdir

    (block,) = [b for b in blocks() if b.mode == "e2e" and b.doc.name == "dra.md"]
    shell = Shell(workdir(tmp_path / "docs"), {
        **os.environ, "KUBECONFIG": str(dra.cp.kubeconfig),
        "PATH": path_with(k8s_bin, Path(sys.executable).parent)})
    results = dict(shell.run(block))
    doctor = next(r for cmd, r in results.items() if cmd.startswith("gpupool doctor"))
    assert "DRA devices: gpu.nvidia.com(2)" in doctor.stdout  # dra-a's two A100s
    check = next(r for cmd, r in results.items() if cmd.startswith("gpupool check"))
    assert "ALLOWED Deployment default/trainer  pool=operator" in check.stdout, check.stdout
    dry = next(r for cmd, r in results.items() if "--dry-run=server" in cmd)
    assert dry.returncode == 0, dry.stderr
