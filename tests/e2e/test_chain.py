"""The whole chain, real, from `kubectl create` to the container on the bound node.

Real programs: kube-apiserver, kube-controller-manager and kube-scheduler built from one
Kubernetes module; kwok as every node's kubelet; HAMi's own scheduler (v2.10.0) as HAMi's
chart deploys it: the extender (filter, bind) of a kube-scheduler whose one profile is
`hami-scheduler`, and the `hami-webhook` registration; gpupool under gunicorn with its
webhooks from manifests/; `gpupool agent` publishing each node's inventory; and, for every
pod bound to a GPU node, the real `nvidia-container-runtime` (or the CDI library, for a
device plugin's CDI names) on that node's spec dirs and runtime config, given what the
node's device plugin hands the container: the UUIDs HAMi's bind allocated (HAMi's plugin,
envvar strategy), or the operator plugin's CDI names.

HAMi's chart runs its own kube-scheduler next to the cluster's: extenders in a
KubeSchedulerConfiguration apply to every profile of that process, so the default scheduler
and HAMi's run as two processes here too.
"""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness import install
from harness.controlplane import ControlPlane
from harness.gobuild import built
from harness.hami import HamiScheduler
from harness.kit import ROOT
from harness.layouts import device_plugin_spec, management_spec, per_uuid_spec
from harness.servers import stop_server
from tests import corpus, runtime_oracle
from tests.conftest import report
from webhook.engine import load_policy_text

pytestmark = pytest.mark.e2e
RESULTS = ROOT / "bench" / "results"
KWOK = ROOT / "tests" / "tools" / "build-kwok.sh"
DP_SPEC = "k8s.device-plugin.nvidia.com-gpu.json"
PODS = 60
SEED = 13
ALLOCATED = "hami.io/vgpu-devices-allocated"  # written by HAMi's bind


def _gpu_node(rng: random.Random, name: str, pool: str, *, per_uuid: bool) -> corpus.NodeSetup:
    """A node of the seed's kind: the operator's management spec in /var/run/cdi, the NVIDIA
    runtime in cdi mode; HAMi's plugin hands UUIDs (envvar), the operator's CDI names."""
    gpus = tuple(corpus._uuid(rng) for _ in range(4))
    plugin = "envvar" if pool == "hami" else "cdi"
    specs = [("run", "management.nvidia.com-gpu.yaml", management_spec())]
    if per_uuid:
        specs.append(("run", "per-uuid.yaml", per_uuid_spec(corpus.MGMT_KIND, gpus)))
    if plugin == "cdi":
        specs.append(("run", DP_SPEC, device_plugin_spec(gpus)))
    what = [f"pool {pool}", f"plugin {plugin}", "mode cdi",
            "per-UUID spec" if per_uuid else "no per-UUID spec"]
    return corpus.NodeSetup(name, pool, plugin, "cdi", corpus.MGMT_KIND, gpus,
                            (corpus.TYPES[1],) * 4, specs, True, False, what)


def _status(gpus: int) -> dict[str, Any]:
    res = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus:
        res["nvidia.com/gpu"] = str(gpus)
    return {"capacity": res, "allocatable": res}


@dataclasses.dataclass
class Created:
    pod: dict[str, Any]
    ok: bool
    error: str
    sent: float  # wall clock just before the create was sent


@dataclasses.dataclass
class Landed:
    name: str
    node: str | None  # None: not bound (pending)
    scheduler: str
    bound_by: str  # the scheduler that reported binding it ("" for spec.nodeName)
    pool: str | None  # gpupool's decision, from its annotation
    failure: str  # the runtime's error on the bound node; "" when the container is created
    bound_after: float | None  # seconds from create to bound


class Chain:
    cp: ControlPlane
    tmp: Path
    objs: list[dict]
    server: Any
    hami: HamiScheduler
    nodes: dict[str, corpus.NodeSetup]
    paths: dict[str, dict[str, Path]]
    cluster: corpus.Cluster

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        return self.cp.kubectl(*args, **kw)

    def agent(self, node: str) -> None:
        install.agent(self.cp, node, self.paths[node])

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def create_all(self, pods: list[dict]) -> list[Created]:
        def one(pod: dict) -> Created:
            sent = time.time()
            r = install.apply(self.cp, pod)
            return Created(pod, r.returncode == 0, r.stderr.strip(), sent)
        with ThreadPoolExecutor(6) as pool:
            return list(pool.map(one, pods))

    def clear(self, namespace: str) -> None:
        """Free the nodes: the workloads and pods of an earlier scenario go."""
        for ns in (namespace, f"{namespace}-hami"):
            self.kubectl("delete", "deployment,job,pod", "--all", "-n", ns, "--force",
                         "--grace-period=0", "--wait=true", "--timeout=60s")

    def settle(self, namespace: str, timeout: float = 240) -> list[dict]:
        """Wait until every pod is bound, or its scheduler has said it cannot be."""
        def pending(p: dict) -> bool:
            if p["spec"].get("nodeName"):
                return False
            conds = {c["type"]: c for c in p.get("status", {}).get("conditions", [])}
            return conds.get("PodScheduled", {}).get("reason") != "Unschedulable"
        items: list[dict] = []

        def done() -> bool:
            items[:] = self.get("pods", "-n", namespace)["items"]
            return not any(pending(p) for p in items)
        install.wait_until(done, f"the pods in {namespace} to be bound or unschedulable",
                           timeout)
        return items

    def handed(self, pod: dict, node: corpus.NodeSetup) -> list[str]:
        """What the node's device plugin hands each GPU container: the UUIDs HAMi's bind
        allocated (HAMi's plugin reads them from the pod), or, for the operator's plugin,
        any of the node's GPUs (each is checked)."""
        if node.pool == "hami":
            ann = (pod["metadata"].get("annotations") or {}).get(ALLOCATED, "")
            return [u for ctr in ann.split(";") for dev in ctr.split(":") if dev
                    for u in [dev.split(",")[0]] if u]
        return list(node.gpus)

    def land(self, namespace: str, created: dict[str, Created]) -> list[Landed]:
        """Every GPU pod of the namespace once settled: where it was bound, by which
        scheduler, and whether the runtime creates its container there."""
        pods = self.settle(namespace)
        events = self.get("events", "-n", namespace)["items"]
        bound: dict[str, tuple[str, float]] = {}
        for ev in events:
            if ev.get("reason") == "Scheduled":
                at = ev.get("eventTime") or ev.get("firstTimestamp")
                bound[ev["involvedObject"]["name"]] = (
                    ev.get("reportingComponent") or ev.get("source", {}).get("component", ""),
                    _ts(at))
        out = []
        for p in pods:
            name, spec = p["metadata"]["name"], p["spec"]
            gpu = any(k.startswith("nvidia.com/") for c in spec["containers"]
                      for k in (c.get("resources", {}).get("limits") or {}))
            if not gpu:
                continue
            node_name = spec.get("nodeName")
            failure = ""
            node = self.nodes.get(node_name or "")
            if node is not None:
                rc = spec.get("runtimeClassName")
                for gpu_id in self.handed(p, node):
                    v = corpus.runs(self.cluster, node, rc, gpu_id)
                    if not v.ok:
                        failure = v.error
                        break
            by, at = bound.get(name, ("", None))
            sent = created[name].sent if name in created else None
            out.append(Landed(name, node_name, spec.get("schedulerName", ""), by,
                              (p["metadata"].get("annotations") or {}).get("gpupool.io/pool"),
                              failure, at - sent if at and sent else None))
        return out


def _ts(text: str | None) -> float | None:
    import datetime as dt

    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def chain(k8s_bin, helm, tmp_path_factory):
    kwok = built(KWOK, "kwok")
    runtime_oracle.binaries()
    c = Chain()
    c.tmp = tmp_path_factory.mktemp("chain")
    c.cp = ControlPlane(c.tmp / "cp", k8s_bin).start()
    try:
        c.objs = install.prepare(c.cp, c.tmp)
        rng = random.Random(SEED)
        setups = [_gpu_node(rng, "hami-ok-1", "hami", per_uuid=True),
                  _gpu_node(rng, "hami-ok-2", "hami", per_uuid=True),
                  _gpu_node(rng, "hami-broken-1", "hami", per_uuid=False),
                  _gpu_node(rng, "op-1", "operator", per_uuid=False),
                  _gpu_node(rng, "op-2", "operator", per_uuid=False)]
        c.nodes = {n.name: n for n in setups}
        c.paths, objects, oracles = {}, [], {}
        for n in setups:
            c.paths[n.name] = corpus.write_node(c.tmp / "nodes" / n.name, n)
            obj = corpus.node_object(dataclasses.replace(n, agent=False), c.paths[n.name])
            obj["status"] = _status(int(obj["status"]["allocatable"]["nvidia.com/gpu"]))
            objects.append(obj)
            oracles.update(corpus.node_oracles(c.tmp / "oracle", n, c.paths[n.name]))
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "cpu-1", "labels": {"kubernetes.io/hostname": "cpu-1"}},
            "status": _status(0)})
        # The runtime classes the GPU Operator installs (the seeded pods use two of them).
        objects += [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": h}, "handler": h}
                    for h in ("nvidia", "nvidia-cdi", "nvidia-legacy")]
        policy = load_policy_text((ROOT / "manifests/base/policy.yaml").read_text())
        c.cluster = corpus.Cluster(policy, "default", setups, objects, oracles, c.tmp / "oracle")
        r = install.apply(c.cp, objects)
        assert r.returncode == 0, r.stderr
        for n in setups:
            c.agent(n.name)
        c.cp.start_kwok(kwok)
        c.cp.start_controller_manager()
        c.server = install.serve(c.cp, c.tmp, c.objs)
        c.hami = HamiScheduler(c.tmp / "certs/tls.crt", c.tmp / "certs/tls.key",
                               c.tmp / "hami-scheduler.log").start(
            helm, c.cp.token_kubeconfig("hami-scheduler", c.tmp / "hami-scheduler.kubeconfig"),
            c.tmp, c.cp.token_kubeconfig("hami-device-plugin",
                                         c.tmp / "hami-device-plugin.kubeconfig"))
        c.cp.start_scheduler("kube-scheduler", {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "default-scheduler"}]})
        c.cp.start_scheduler("hami-kube-scheduler",
                             c.hami.kube_scheduler_config(helm, c.tmp, c.cp.kubeconfig))
        ca_bundle = (c.tmp / "certs/caBundle").read_text().strip()
        r = install.apply(c.cp, c.hami.configuration(helm, ca_bundle, c.tmp))
        assert r.returncode == 0, r.stderr
        for ns in ("ml", "raw"):
            c.kubectl("create", "namespace", ns)
            c.kubectl("create", "namespace", f"{ns}-hami")
            c.kubectl("label", "namespace", f"{ns}-hami", "gpupool.io/pool=hami")
        install.wait_for_webhooks(c.cp, c.server, "ml")

        def ready() -> bool:  # kwok reports Ready; the node controller lifts the taint
            nodes = c.get("nodes")["items"]
            return len(nodes) == 6 and all(
                not n["spec"].get("taints") and any(
                    x["type"] == "Ready" and x["status"] == "True"
                    for x in n.get("status", {}).get("conditions", [])) for n in nodes)
        install.wait_until(ready, "every node Ready and untainted", 90)
        yield c
    finally:
        if getattr(c, "server", None):
            stop_server(c.server)
        if getattr(c, "hami", None):
            c.hami.stop()
        c.cp.stop()


def _workload(namespace: str, gpu_nodes: list[corpus.NodeSetup]
              ) -> tuple[list[dict], list[dict]]:
    """The seeded pod shapes of the corpus (HAMi resources, plain nvidia.com/gpu, pinned by
    nodeName, selector, affinity or pool label, HAMi's GPU annotations, runtime classes),
    plain pods in a namespace labelled for a pool, and a Deployment and a Job whose pods
    kube-controller-manager creates."""
    rng = random.Random(SEED)
    pods = []
    for i in range(PODS):
        # (the chain's shapes: no MIG, NRI or own NVIDIA_VISIBLE_DEVICES pods)
        pod = corpus.make_pod(rng, i, gpu_nodes, mig=False, nri=False, own_env=False)
        pod["metadata"]["namespace"] = namespace
        pods.append(pod)
    ctr = {"name": "c", "image": "cuda"}
    out = []
    out.append({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "in-labelled-ns", "namespace": f"{namespace}-hami"},
                "spec": {"containers": [{**ctr, "resources": {
                    "limits": {"nvidia.com/gpu": 1}}}]}})
    template = {"metadata": {"labels": {"app": "train"}},
                "spec": {"containers": [{**ctr, "resources": {
                    "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}}}]}}
    out.append({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "train", "namespace": namespace},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "train"}},
                         "template": template}})
    out.append({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "infer", "namespace": namespace},
                "spec": {"template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{**ctr, "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}})
    return out, pods


def _denial(err: str) -> str:
    return err.split("denied the request:", 1)[-1].strip()


def _is_gpupool_denial(err: str) -> bool:
    return 'gpupool.io" denied the request' in err


def _run(chain: Chain, namespace: str) -> tuple[list[Created], list[Landed]]:
    """The workloads first, until their controllers' pods are placed (so that the seeded
    pods, which fill the nodes, cannot crowd them out), then the seeded pods."""
    workloads, pods = _workload(namespace, list(chain.nodes.values()))
    created = chain.create_all(workloads)

    def placed() -> bool:
        items = chain.get("pods", "-n", namespace)["items"]
        return len(items) == 3 and all(p["spec"].get("nodeName") for p in items)
    install.wait_until(placed, f"the Deployment's and the Job's pods in {namespace}", 120)
    created += chain.create_all(pods)
    by_name = {c.pod["metadata"]["name"]: c for c in created}
    landed = chain.land(namespace, by_name) + chain.land(f"{namespace}-hami", by_name)
    return created, landed


def _summary(created: list[Created], landed: list[Landed]) -> dict[str, int]:
    bound = [x for x in landed if x.node]
    return {"GPU objects created": len(created),
            "denied by gpupool": sum(_is_gpupool_denial(c.error) for c in created),
            "denied by HAMi's webhook": sum('vgpu.hami.io" denied' in c.error for c in created),
            "GPU pods bound": len(bound),
            "pending (no node fits)": sum(1 for x in landed if not x.node),
            "bound to a HAMi node": sum(1 for x in bound if x.node.startswith("hami-")),
            "bound to a broken HAMi node": sum(1 for x in bound if x.node == "hami-broken-1"),
            "bound to an operator node": sum(1 for x in bound if x.node.startswith("op-")),
            "late CDI failures (real runtime)": sum(1 for x in bound if x.failure)}


SUMMARIES: dict[str, dict[str, int]] = {}
TIMES: dict[str, list[float]] = {}
LATENCY: dict[str, dict[str, float]] = {}


def test_admitted_gpu_pods_bound_in_their_pool_and_their_containers_created(chain):
    created, landed = _run(chain, "ml")
    SUMMARIES["with gpupool"] = _summary(created, landed)
    assert [c.error for c in created if c.pod["kind"] != "Pod" and not c.ok] == []
    LATENCY.update(_webhook_latency(chain.cp.metrics()))
    failures = [(x.name, x.node, x.failure) for x in landed if x.node and x.failure]
    assert failures == [], "late CDI failures in the real chain"
    scheduler = {"hami": "hami-scheduler", "operator": "default-scheduler"}
    bound = [x for x in landed if x.node]
    for x in bound:
        node = chain.nodes.get(x.node)
        assert node is not None, f"{x.name} bound to {x.node}, not a GPU node"
        assert x.pool == node.pool, f"{x.name} of pool {x.pool} bound to {x.node}"
        assert x.scheduler == scheduler[node.pool], x
        assert x.bound_by in (x.scheduler, ""), x  # "" : spec.nodeName, no scheduler
    pools = {chain.nodes[x.node].pool for x in bound}
    assert pools == {"hami", "operator"}, SUMMARIES
    names = [x.name for x in bound]
    # The Deployment's and the Job's pods, created by kube-controller-manager.
    assert sum(n.startswith("train-") for n in names) == 2, names
    assert sum(n.startswith("infer-") for n in names) == 1, names
    assert {x.pool for x in bound if x.name == "in-labelled-ns"} == {"hami"}
    for c in created:
        if not c.ok:
            assert _is_gpupool_denial(c.error) or 'vgpu.hami.io" denied' in c.error, c.error
        if _is_gpupool_denial(c.error):
            dry = install.apply(chain.cp, c.pod, "--dry-run=server")
            # The same answer at dry-run.
            assert dry.returncode != 0 and _denial(dry.stderr) == _denial(c.error)
            if "CDIDevice" in c.error:
                assert any(n in c.error for n in chain.nodes), c.error  # names the node
                assert "management.nvidia.com/gpu=GPU-" in c.error  # and the device
    assert SUMMARIES["with gpupool"]["denied by gpupool"] > 0
    TIMES["with gpupool"] = [x.bound_after for x in bound if x.bound_after is not None
                             and x.bound_by]


def test_a_node_broken_after_admission_gets_no_new_pods(chain):
    chain.clear("ml")
    (chain.paths["hami-ok-2"]["run"] / "per-uuid.yaml").unlink()
    chain.agent("hami-ok-2")
    labels = chain.get("node", "hami-ok-2")["metadata"]["labels"]
    assert labels["resolve.gpupool.io/detected"] == "false"
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"late-{i}", "namespace": "ml"},
             "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {
                 "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}]}}
            for i in range(6)]
    created = chain.create_all(pods)
    assert all(c.ok for c in created), [c.error for c in created]
    landed = [x for x in chain.land("ml", {}) if x.name.startswith("late-")]
    assert landed and all(x.node for x in landed), landed
    assert "hami-ok-2" not in {x.node for x in landed}
    assert [x for x in landed if x.failure] == []


def test_a_gpu_cordoned_on_hami_is_doubt_and_no_pod_lands_on_it(chain):
    """A HAMi node where one GPU resolves and the three others, lacking their CDI devices,
    are cordoned (hami.io/device-cordon). HAMi v2.10's scheduler reads the cordon only when it
    next re-registers the node's GPUs (an earlier version of this test, which trusted the
    cordon, saw it hand out a GPU cordoned 20 s before), so gpupool takes the cordon as
    doubt: pods pinned to the node are admitted with a warning instead of denied, and the
    node's steering label keeps them off it; none starts on a GPU that fails."""
    name = "hami-ok-1"
    node, run = chain.nodes[name], chain.paths[name]["run"]
    chain.clear("ml")
    (run / "per-uuid.yaml").write_text(per_uuid_spec(corpus.MGMT_KIND, node.gpus[:1]))
    chain.agent(name)
    assert chain.get("node", name)["metadata"]["labels"]["resolve.gpupool.io/detected"] == \
        "false"

    def pods(prefix: str) -> list[dict]:
        return [{"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{prefix}-{i}", "namespace": "ml"},
                 "spec": {"nodeSelector": {"kubernetes.io/hostname": name},
                          "containers": [{"name": "c", "image": "cuda", "resources": {
                              "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}]}}
                for i in range(4)]
    try:
        refused = chain.create_all(pods("uncordoned"))
        assert refused and not any(c.ok for c in refused)
        assert all("CDIDeviceMissing" in c.error for c in refused), refused[0].error
        chain.kubectl("annotate", "node", name,
                      f"hami.io/device-cordon={','.join(node.gpus[1:])}", "--overwrite")

        def admitted() -> bool:  # once gpupool's node watch has the annotation
            r = chain.kubectl("create", "--dry-run=server", "-f", "-",
                              input=json.dumps(pods("probe")[0]), check=False)
            return r.returncode == 0
        install.wait_until(admitted, "gpupool to see the cordon", 30)
        created = chain.create_all(pods("cordoned"))
        assert all(c.ok for c in created), [c.error for c in created]
        landed = [x for x in chain.land("ml", {}) if x.name.startswith("cordoned-")]
        assert len(landed) == 4 and not any(x.node for x in landed), landed
    finally:
        chain.clear("ml")
        chain.kubectl("annotate", "node", name, "hami.io/device-cordon-")
        (run / "per-uuid.yaml").write_text(per_uuid_spec(corpus.MGMT_KIND, node.gpus))
        chain.agent(name)


def test_the_fix_names_only_runtime_classes_the_cluster_has(chain):
    """gpupool watches RuntimeClasses: once nvidia-legacy is deleted (as the GPU Operator does
    when it injects devices through NRI), denials stop suggesting it."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fix", "namespace": "ml"},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": "hami-broken-1"},
                    "containers": [{"name": "c", "image": "cuda", "resources": {
                        "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}]}}
    suggested = "runtimeClassName nvidia-legacy"

    def denial() -> str:
        r = chain.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod),
                          check=False)
        assert r.returncode != 0 and "CDIDeviceMissing" in r.stderr, r.stderr
        return r.stderr
    assert suggested in denial()
    legacy = chain.get("runtimeclass", "nvidia-legacy")
    chain.kubectl("delete", "runtimeclass", "nvidia-legacy")
    try:
        install.wait_until(lambda: suggested not in denial(),
                           "denials to stop naming the deleted RuntimeClass", 30)
        assert "nvidia-ctk cdi generate" in denial()
    finally:
        chain.kubectl("create", "-f", "-", input=json.dumps(
            {k: legacy[k] for k in ("apiVersion", "kind", "handler")}
            | {"metadata": {"name": "nvidia-legacy"}}))
    install.wait_until(lambda: suggested in denial(), "the RuntimeClass to be back", 30)


def test_an_nri_node_where_envvar_gpus_never_arrive(chain):
    """A HAMi node set up as the GPU Operator sets nodes up when it injects devices through
    NRI: containerd's default handler stays runc, which never reads NVIDIA_VISIBLE_DEVICES.
    Its CDI specs are complete, so nothing is "unresolvable": a HAMi pod in the envvar
    strategy would simply start without its GPU. gpupool denies pods pinned there, naming
    the node's setup, and keeps the others off it; without gpupool, HAMi's scheduler binds
    such a pod there and kwok reports it Running."""
    name, other = "hami-ok-1", "hami-ok-2"
    cfg = chain.paths[name]["containerd"]
    original = cfg.read_text()
    assert 'default_runtime_name = "nvidia"' in original
    chain.clear("ml")
    cfg.write_text(original.replace('default_runtime_name = "nvidia"',
                                    'default_runtime_name = "runc"'))
    chain.agent(name)
    # The other good HAMi node, broken by an earlier test, fixed for this one.
    spare = chain.paths[other]["run"] / "per-uuid.yaml"
    spare.write_text(per_uuid_spec(corpus.MGMT_KIND, chain.nodes[other].gpus))
    chain.agent(other)
    labels = chain.get("node", name)["metadata"]["labels"]
    assert labels["resolve.gpupool.io/visible-devices"] == "false"

    def pod(pod_name: str, namespace: str, pinned: bool) -> dict:
        spec: dict = {"containers": [{"name": "c", "image": "cuda", "resources": {
            "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}]}
        if pinned:
            spec["nodeSelector"] = {"kubernetes.io/hostname": name}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": namespace}, "spec": spec}
    try:
        def denied() -> str:  # once gpupool's node watch has the new inventory
            r = chain.kubectl("create", "--dry-run=server", "-f", "-",
                              input=json.dumps(pod("nri-probe", "ml", True)), check=False)
            return r.stderr if r.returncode else ""
        install.wait_until(lambda: "GPUNotDelivered" in denied(),
                           "gpupool to see the node's runc default handler", 30)
        message = denied()
        assert name in message and "default handler runc" in message, message
        assert "unresolvable" not in message
        free = chain.create_all([pod(f"nri-free-{i}", "ml", False) for i in range(4)])
        assert all(c.ok for c in free), [c.error for c in free]
        landed = [x for x in chain.land("ml", {}) if x.name.startswith("nri-free-")]
        assert landed and {x.node for x in landed if x.node} <= {other}, landed
        # Without gpupool: bound to the node by HAMi's scheduler, and Running.
        chain.clear("ml")
        install.unregister(chain.cp, chain.objs)
        try:
            def gpupool_gone() -> bool:
                r = install.apply(chain.cp, pod("nri-gone", "raw", False), "--dry-run=server",
                                  "-o", "json")
                return r.returncode == 0 and "gpupool.io/pool" not in r.stdout
            install.wait_until(gpupool_gone, "gpupool's webhooks to be gone")
            r = install.apply(chain.cp, pod("nri-raw", "raw", True))
            assert r.returncode == 0, r.stderr

            def running() -> bool:
                got = chain.get("pod", "-n", "raw", "nri-raw")
                return got["spec"].get("nodeName") == name and \
                    got.get("status", {}).get("phase") == "Running"
            install.wait_until(running, "the unrouted pod to run on the NRI node", 60)
        finally:
            chain.kubectl("delete", "pod", "-n", "raw", "nri-raw", "--force",
                          "--grace-period=0", check=False)
            install.register(chain.cp, chain.objs, chain.server.url)
            install.wait_for_webhooks(chain.cp, chain.server, "ml")
    finally:
        chain.clear("ml")
        cfg.write_text(original)
        chain.agent(name)
        spare.unlink()
        chain.agent(other)


def test_without_gpupool_the_seed_failure_reaches_the_node(chain):
    chain.clear("ml")
    install.unregister(chain.cp, chain.objs)
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "raw"},
             "spec": {"containers": [{"name": "c", "image": "cuda",
                                      "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}

    def gone() -> bool:
        r = install.apply(chain.cp, probe, "--dry-run=server", "-o", "json")
        return r.returncode == 0 and "gpupool.io/pool" not in r.stdout
    install.wait_until(gone, "gpupool's webhooks to be gone")
    created, landed = _run(chain, "raw")
    SUMMARIES["without gpupool"] = _summary(created, landed)
    failures = [x for x in landed if x.node and x.failure]
    assert failures, SUMMARIES
    assert any("unresolvable CDI devices management.nvidia.com/gpu=GPU-" in x.failure
               for x in failures), [x.failure for x in failures]
    assert {x.scheduler for x in landed} == {"hami-scheduler"}  # HAMi's webhook took all
    TIMES["without gpupool"] = [x.bound_after for x in landed
                                if x.node and x.bound_after is not None and x.bound_by]
    _record()


def test_with_every_replica_down_the_api_server_still_routes(chain):
    """Routing in the API server (``--routing-mode auto``): gpupool installs its compiled
    policy, then every replica stops, and validation is set to ``Ignore`` (the outage choice
    docs/install.md describes). The chain's workloads are created: each GPU pod the policy
    routes is created, sent to its pool's scheduler, bound on its pool's nodes, and its
    containers created there (the real runtime); the pods only the webhook can route are
    refused by its ``failurePolicy: Fail``, never created unrouted."""
    if chain.server is not None:
        stop_server(chain.server)
    server = install.serve(chain.cp, chain.tmp, chain.objs, extra=["--routing-mode", "auto"])
    chain.server = server

    install.wait_until(lambda: all(install.routing_installed(chain.cp)),
                       "gpupool to install its routing policy", 60)
    facts = json.loads(chain.get("mutatingadmissionpolicy", "gpupool-routing")["metadata"][
        "annotations"]["gpupool.io/routing-facts"])
    stop_server(server)
    chain.server = None
    install.validation_fails_open(chain.cp)
    for ns in ("down", "down-hami"):
        chain.kubectl("create", "namespace", ns)
    chain.kubectl("label", "namespace", "down-hami", "gpupool.io/pool=hami")
    workloads, pods = _workload("down", list(chain.nodes.values()))
    created = chain.create_all(workloads + pods)
    by_name = {c.pod["metadata"]["name"]: c for c in created}
    refused = [c for c in created if not c.ok]
    assert all('failed calling webhook "mutate.gpupool.io"' in c.error for c in refused), \
        [c.error for c in refused if 'failed calling webhook "mutate.gpupool.io"'
         not in c.error][:3]
    # The Deployment's and the Job's pods (kube-controller-manager creates them) too, where
    # their pool is one the policy routes.
    expected = 2 * ("hami" not in facts["steeredByName"]) + \
        ("operator" not in facts["steeredByName"])
    install.wait_until(lambda: len([p for p in chain.get("pods", "-n", "down")["items"]
                                    if p["metadata"].get("ownerReferences")]) >= expected,
                       "the workloads' pods", 60)
    landed = chain.land("down", by_name) + chain.land("down-hami", by_name)
    scheduler = {"hami": "hami-scheduler", "operator": "default-scheduler"}
    routed = [x for x in landed if x.pool is not None]
    bound = [x for x in routed if x.node]
    outside = [x for x in bound if (n := chain.nodes.get(x.node or "")) is None
               or n.pool != x.pool]
    failures = [x for x in bound if x.failure]
    SUMMARIES["every gpupool replica down (routing in the API server)"] = {
        "GPU objects created": len(created) - len(refused),
        "refused (the webhook's pods)": len(refused),
        "GPU pods routed by the API server": len(routed),
        "GPU pods bound": len(bound),
        "bound outside their pool": len(outside),
        "late CDI failures (real runtime)": len(failures)}
    assert routed and len(routed) == len(landed), [x.name for x in landed if x.pool is None]
    assert bound and not outside and not failures, (outside, failures)
    for x in routed:
        assert x.scheduler == scheduler[x.pool], x
        assert x.bound_by in (x.scheduler, ""), x
    # The policy's pods as the webhook alone would have written them: gpupool back, in
    # webhook mode (which takes the policy away), each pod sent again under another name.
    # (Validation off: the mutation is compared, and the outage let these pods skip it.)
    chain.kubectl("delete", "validatingwebhookconfiguration", "gpupool-validating")
    mutating = [o for o in chain.objs if o["kind"] != "ValidatingWebhookConfiguration"]
    chain.server = install.serve(chain.cp, chain.tmp, mutating,
                                 extra=["--routing-mode", "webhook"])
    install.wait_until(lambda: chain.kubectl("get", "mutatingadmissionpolicy",
                                             "gpupool-routing", check=False).returncode != 0,
                       "the routing policy to be gone", 60)
    install.wait_for_webhooks(chain.cp, chain.server, "down")
    compared = 0
    for c in created:
        if not c.ok or c.pod["kind"] != "Pod":
            continue
        ns, name = c.pod["metadata"]["namespace"], c.pod["metadata"]["name"]
        again = json.loads(json.dumps(c.pod))
        again["metadata"]["name"] = f"{name}-again"
        r = install.apply(chain.cp, again, "--dry-run=server", "-o", "json")
        assert r.returncode == 0, r.stderr
        by_webhook = json.loads(r.stdout)
        by_policy = chain.get("pod", name, "-n", ns)
        for obj in (by_webhook, by_policy):
            obj["metadata"].pop("name")
        assert _routed_fields(by_policy) == _routed_fields(by_webhook), name
        compared += 1
    assert compared >= 10, compared
    down = SUMMARIES["every gpupool replica down (routing in the API server)"]
    report("the chain with every gpupool replica down, routing in the API server",
           "\n".join(f"{k:<36} {v:>6}" for k, v in down.items()))
    if {"with gpupool", "without gpupool"} <= set(SUMMARIES):
        _record()


#: labels HAMi's scheduler sets on a pod it binds (HAMi v2.10 ``pkg/util/util.go``, the
#: ``AssignedNodeAnnotations`` key written as a label with the node's name)
_BOUND_LABELS = frozenset({"hami.io/vgpu-node"})


def _routed_fields(pod: dict[str, Any]) -> dict[str, Any]:
    """What gpupool's mutation writes, wherever it lives in a stored pod (binding adds HAMi's
    allocation annotations and the node, which neither gpupool's mutation nor its policy
    writes)."""
    meta, spec = pod["metadata"], pod["spec"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _BOUND_LABELS}
    return {"labels": labels,
            "pool": (meta.get("annotations") or {}).get("gpupool.io/pool"),
            "schedulerName": spec.get("schedulerName"), "affinity": spec.get("affinity"),
            "runtimeClassName": spec.get("runtimeClassName"),
            "env": [c.get("env") for c in spec["containers"]]}


def _webhook_latency(metrics: str) -> dict[str, dict[str, float]]:
    """Per webhook: calls, mean and p99 (interpolated in the API server's buckets)."""
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    prefix = "apiserver_admission_webhook_admission_duration_seconds"
    for line in metrics.splitlines():
        if not line.startswith(prefix) or 'operation="CREATE"' not in line:
            continue
        series, value = line.rsplit(" ", 1)
        name = series.split('name="', 1)[1].split('"', 1)[0]
        if series.startswith(prefix + "_bucket"):
            le = series.split('le="', 1)[1].split('"', 1)[0]
            b = buckets.setdefault(name, {})
            bound = float("inf") if le == "+Inf" else float(le)
            b[bound] = b.get(bound, 0) + float(value)
        elif series.startswith(prefix + "_sum"):
            sums[name] = sums.get(name, 0) + float(value)
        elif series.startswith(prefix + "_count"):
            counts[name] = counts.get(name, 0) + float(value)
    out = {}
    for name, b in buckets.items():
        total, lo, p99 = counts.get(name, 0), 0.0, 0.0
        prev = 0.0
        for le in sorted(b):
            if b[le] >= 0.99 * total:
                hi = le if le != float("inf") else lo
                p99 = lo + (hi - lo) * ((0.99 * total - prev) / max(b[le] - prev, 1))
                break
            lo, prev = le, b[le]
        out[name] = {"calls": total, "mean_ms": 1000 * sums.get(name, 0) / max(total, 1),
                     "p99_ms": 1000 * p99}
    return out


def _record() -> None:
    rows = list(SUMMARIES["with gpupool"])
    table = "\n".join(f"{k:<36} {SUMMARIES['with gpupool'][k]:>6} "
                      f"{SUMMARIES['without gpupool'][k]:>8}" for k in rows)
    times = {k: {"bound": len(v), "median_s": statistics.median(v) if v else None}
             for k, v in TIMES.items()}
    hami = LATENCY.get("vgpu.hami.io", {})
    lines = [f"{'':<36} {'with':>6} {'without':>8}", table, "",
             "webhook latency seen by the API server (same pod creations):"]
    for name, row in sorted(LATENCY.items()):
        ratio = (f" p99 {row['p99_ms'] / hami['p99_ms']:.2f}x HAMi's, mean "
                 f"{row['mean_ms'] / hami['mean_ms']:.2f}x" if hami.get("p99_ms") else "")
        lines.append(f"  {name:<28} {row['calls']:>5.0f} calls  mean {row['mean_ms']:.2f} ms"
                     f"  p99 {row['p99_ms']:.2f} ms{ratio}")
    lines.append(f"create to bound (median): {json.dumps(times)}")
    report("the whole chain, with and without gpupool", "\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "chain.json").write_text(json.dumps(
        {"summaries": SUMMARIES, "webhook_latency": LATENCY, "create_to_bound": times},
        indent=2))
