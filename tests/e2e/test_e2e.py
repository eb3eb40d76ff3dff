"""End to end: a real kube-apiserver, real kubectl, gpupool's webhook configurations rendered
from manifests/, gpupool under gunicorn on loopback, nodes whose CDI inventory a real
`gpupool agent` published, and HAMi's real webhook (v2.10.0, built from its sources) registered
by HAMi's own chart as `hami-webhook`."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness import install
from harness.controlplane import ControlPlane, release
from harness.hami import HamiWebhook
from harness.kit import ROOT, UPSTREAM
from harness.layouts import UUIDS, fake_driver, hami_register, per_uuid_spec, write_layout
from harness.servers import stop_server

pytestmark = pytest.mark.e2e
RESULTS = ROOT / "bench" / "results"


class Env:
    cp: ControlPlane
    server: object
    certs: Path
    hami: HamiWebhook
    layouts: dict[str, dict[str, Path]]
    driver: Path
    tmp: Path

    def kubectl(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.cp.kubectl(*args, **kw)

    def apply(self, objs: list[dict] | dict, *extra: str) -> subprocess.CompletedProcess:
        return install.apply(self.cp, objs, *extra)

    def agent(self, node: str, layout: str, plugin: bool = True) -> None:
        """A real agent run for ``node``: its files as ``layout`` has them, and (``plugin``)
        the device-plugin pod it learns the node's strategy from, as the layout implies."""
        paths = {**self.layouts[layout], "driver": self.driver}
        install.device_plugin(self.cp, node, install.layout_strategy(paths) if plugin
                              else None)
        # The node's GPUs as the NVIDIA driver lists them are played by files.
        install.agent(self.cp, node, paths)


@pytest.fixture(scope="module")
def env(k8s_bin, helm, tmp_path_factory):
    e = Env()
    e.tmp = tmp_path_factory.mktemp("e2e")
    e.cp = ControlPlane(e.tmp / "cp", k8s_bin).start()
    try:
        objs = install.prepare(e.cp, e.tmp)
        e.certs = e.tmp / "certs"
        e.layouts = {name: write_layout(e.tmp / "layouts" / name, name)
                     for name in ("operator-management", "device-plugin")}
        fixed = write_layout(e.tmp / "layouts" / "fixed", "operator-management")
        (fixed["run"] / "management.nvidia.com-gpu-uuid.yaml").write_text(per_uuid_spec())
        e.layouts["fixed"] = fixed
        e.driver = fake_driver(e.tmp / "driver")
        nodes = [
            {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": "hami-1", "labels": {"gpupool.io/pool": "hami", "gpu": "on",
                                             "nvidia.com/gpu.present": "true"},
                "annotations": {"hami.io/node-nvidia-register": hami_register()}}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": "op-1", "labels": {"nvidia.com/gpu.present": "true"}}}]
        # The runtime classes the GPU Operator installs (without NRI injection).
        nodes += [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                   "metadata": {"name": h}, "handler": h}
                  for h in ("nvidia", "nvidia-cdi", "nvidia-legacy")]
        assert e.apply(nodes).returncode == 0
        # TaintNodesByCondition marks new nodes not-ready; no kubelet will ever clear it here.
        for n in ("hami-1", "op-1"):
            e.kubectl("taint", "node", n, "node.kubernetes.io/not-ready:NoSchedule-")
        e.agent("hami-1", "operator-management")
        e.agent("op-1", "device-plugin")
        # The GPU Operator's CRD (its chart's own file): gpupool follows ClusterPolicies.
        e.cp.create_crd(UPSTREAM / "crds/nvidia.com_clusterpolicies.yaml")
        e.server = install.serve(e.cp, e.tmp, objs)
        e.hami = HamiWebhook(e.certs / "tls.crt", e.certs / "tls.key",
                             e.tmp / "hami-webhook.log").start()
        ca_bundle = (e.certs / "caBundle").read_text().strip()
        r = e.apply(e.hami.configuration(helm, ca_bundle, e.tmp))
        assert r.returncode == 0, r.stderr
        e.kubectl("create", "namespace", "ml")
        install.wait_for_webhooks(e.cp, e.server, "ml")
        yield e
    finally:
        if getattr(e, "server", None):
            stop_server(e.server)
        if getattr(e, "hami", None):
            e.hami.stop()
        e.cp.stop()


def _pod(name: str, limits: dict, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": limits}}], **spec}}


def _get(e: Env, kind: str, name: str, ns: str = "ml") -> dict:
    return json.loads(e.kubectl("get", kind, name, "-n", ns, "-o", "json").stdout)


def _terms(pod: dict) -> list:
    return pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_operator_pod_routed_despite_hami_webhook(env):
    (pod,) = [d for d in yaml.safe_load_all(
        (UPSTREAM / "pods/nvidia/gpu-operator-tests-gpu-pod.yaml").read_text()) if d]
    pod["metadata"]["namespace"] = "ml"
    r = env.apply(pod)
    assert r.returncode == 0, r.stderr
    stored = _get(env, "pod", pod["metadata"]["name"])
    assert stored["spec"]["schedulerName"] == "default-scheduler"
    assert stored["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert stored["metadata"]["annotations"]["gpupool.io/pool"] == "operator"
    assert {"key": "gpupool.io/pool", "operator": "NotIn", "values": ["hami"]} in \
        _terms(stored)[0]["matchExpressions"]
    # HAMi's webhook never even saw it: its objectSelector skipped the labelled pod.
    assert pod["metadata"]["name"] not in env.hami.seen


def test_non_gpu_pod_untouched(env):
    """Not routed; its container, which asks for no GPU and can reach GPU nodes whose
    runtime would hand it GPUs from NVIDIA_VISIBLE_DEVICES, gets the variable voided by
    the grant check (access.gpupool.io, docs/security.md), and nothing else."""
    r = env.apply(_pod("cpu-only", {"cpu": "100m"}))
    assert r.returncode == 0, r.stderr
    stored = _get(env, "pod", "cpu-only")
    assert "affinity" not in stored["spec"]
    assert "gpupool.io/pool" not in (stored["metadata"].get("annotations") or {})
    assert stored["spec"]["schedulerName"] == "default-scheduler"
    assert stored["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert "NVIDIA_VISIBLE_DEVICES=void set" in r.stderr  # the warning kubectl shows


def test_access_through_the_real_api_server(env):
    """Issue 47, one pod of each kind through the real API server: a GPU pod's sidecar
    voided, its GPU container untouched; HAMi's opt-out label taken off a pod of HAMi's
    pool, so HAMi's own webhook sees it; HAMi's allocation annotations refused on create,
    and on an update by anyone but HAMi's scheduler."""
    sidecar = _pod("with-sidecar", {"nvidia.com/gpu": 1})
    sidecar["spec"]["containers"].append({"name": "log", "image": "nvidia/cuda"})
    r = env.apply(sidecar)
    assert r.returncode == 0, r.stderr
    stored = _get(env, "pod", "with-sidecar")
    assert "env" not in stored["spec"]["containers"][0]
    assert stored["spec"]["containers"][1]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    # (pinned to no node: admitted with onNoCandidates' warning, whatever hami-1's devices)
    hami = _pod("hami-labelled", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
                nodeSelector={"kubernetes.io/hostname": "nowhere"})
    hami["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    r = env.apply(hami)
    assert r.returncode == 0, r.stderr
    stored = _get(env, "pod", "hami-labelled")
    assert "hami.io/webhook" not in (stored["metadata"].get("labels") or {})
    assert stored["spec"]["schedulerName"] == "hami-scheduler"
    assert "hami-labelled" in env.hami.seen  # HAMi's webhook was not turned off for it
    forged = _pod("forged", {"nvidia.com/gpu": 1})
    forged["metadata"]["annotations"] = {"hami.io/vgpu-devices-allocated":
                                         f"{UUIDS[0]},NVIDIA,1000,10:;"}
    r = env.apply(forged)
    assert r.returncode != 0 and "ForgedAllocation" in r.stderr, r.stderr
    r = env.apply(_pod("to-forge", {"cpu": "100m"}))
    assert r.returncode == 0, r.stderr
    key = f"hami.io/vgpu-devices-allocated={UUIDS[0]},NVIDIA,1000,10:;"
    r = env.kubectl("annotate", "pod", "to-forge", "-n", "ml", key, check=False)
    assert r.returncode != 0, r.stdout
    assert 'admission webhook "scheduler-state.gpupool.io" denied' in r.stderr, r.stderr
    assert "ForgedAllocation" in r.stderr
    r = env.kubectl("annotate", "pod", "to-forge", "-n", "ml", "team=ml", check=False)
    assert r.returncode == 0, r.stderr  # an ordinary update: no call at all
    scheduler = env.cp.token_kubeconfig("hami-scheduler", env.tmp / "hami-scheduler.kubeconfig")
    r = subprocess.run([str(env.cp.bin / "kubectl"), f"--kubeconfig={scheduler}", "annotate",
                        "pod", "to-forge", "-n", "ml", key], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr  # HAMi's scheduler writes them


def test_hami_pod_on_management_only_nodes_denied_with_device_named(env):
    r = env.apply(_pod("vllm", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}))
    assert r.returncode != 0
    assert 'admission webhook "validate-pods.gpupool.io" denied the request' in r.stderr
    assert f"management.nvidia.com/gpu={UUIDS[0]}" in r.stderr and "hami-1" in r.stderr
    assert env.kubectl("get", "pod", "vllm", "-n", "ml", check=False).returncode != 0


def test_dry_run_deployment_fails_with_same_message_and_is_audited(env):
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "vllm", "namespace": "ml"},
              "spec": {"selector": {"matchLabels": {"app": "vllm"}}, "template": {
                  "metadata": {"labels": {"app": "vllm"}},
                  "spec": _pod("x", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000})["spec"]}}}
    r = env.apply(deploy, "--dry-run=server")
    assert r.returncode != 0
    assert "validate-workloads.gpupool.io" in r.stderr and "CDIDeviceMissing" in r.stderr
    assert f"management.nvidia.com/gpu={UUIDS[0]}" in r.stderr
    assert env.kubectl("get", "deployment", "vllm", "-n", "ml", check=False).returncode != 0
    records = [json.loads(line) for line in
               (env.tmp / "gpupool-audit.log").read_text().splitlines()]
    dry = [x for x in records if x["kind"] == "Deployment" and x["name"] == "vllm"]
    assert dry and all(x["dryRun"] for x in dry) and dry[0]["reason"] == "CDIDeviceMissing"
    # The API server's own audit log carries gpupool's audit annotations.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = [json.loads(line) for line in env.cp.audit_log.read_text().splitlines()]
        hits = [ev for ev in events if ev.get("objectRef", {}).get("resource") == "deployments"
                and "validate-workloads.gpupool.io/reason" in (ev.get("annotations") or {})]
        if hits:
            break
        time.sleep(0.5)
    assert hits, "no audit event with gpupool's annotations"
    ann = hits[-1]["annotations"]
    assert ann["validate-workloads.gpupool.io/reason"] == "CDIDeviceMissing"
    assert ann["validate-workloads.gpupool.io/decision"] == "denied"
    assert ann["validate-workloads.gpupool.io/pool"] == "hami"


def test_hami_pod_admitted_once_per_uuid_spec_published(env):
    env.agent("hami-1", "fixed")  # a real agent run: per-UUID specs now exist on hami-1
    deadline = time.monotonic() + 30
    while True:  # the webhook's node cache follows through its watch
        r = env.apply(_pod("vllm-2", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}))
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.returncode == 0, r.stderr
    stored = _get(env, "pod", "vllm-2")
    assert stored["spec"]["schedulerName"] == "hami-scheduler"
    assert "hami.io/webhook" not in (stored["metadata"].get("labels") or {})
    assert {"key": "gpupool.io/pool", "operator": "In", "values": ["hami"]} in \
        _terms(stored)[0]["matchExpressions"]
    assert "vllm-2" in env.hami.seen  # HAMi's webhook did see its own pool's pod
    env.agent("hami-1", "operator-management")  # back to broken for later tests


def _pool_expressions(pod: dict) -> list:
    return [x for t in _terms(pod) for x in t.get("matchExpressions", [])
            if x["key"] == "gpupool.io/pool"]


def test_hami_webhook_mutations_kept_and_checked_on_the_final_pod(env):
    """Webhook order with HAMi's real webhook: gpupool routes first, HAMi mutates its own
    pool's pods (a default GPU count, exclusive cores), gpupool is called again and changes
    nothing twice, and its validation judges the pod as HAMi left it."""
    env.agent("hami-1", "fixed")
    try:
        deadline = time.monotonic() + 30
        while True:
            r = env.apply(_pod("share", {"nvidia.com/gpumem": 2000}))
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.returncode == 0, r.stderr
        share = _get(env, "pod", "share")
        limits = share["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1"  # HAMi's defaultGPUNum, added by HAMi
        assert share["spec"]["schedulerName"] == "hami-scheduler"
        assert _pool_expressions(share) == [
            {"key": "gpupool.io/pool", "operator": "In", "values": ["hami"]}]  # once
        r = env.apply(_pod("whole", {"nvidia.com/gpu": 1},
                           nodeSelector={"gpupool.io/pool": "hami"}))
        assert r.returncode == 0, r.stderr
        whole = _get(env, "pod", "whole")
        assert whole["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpucores"] == "100"  # HAMi: a whole GPU gets exclusive cores
        assert len(_pool_expressions(whole)) == 1
        assert {"share", "whole"} <= env.hami.seen
    finally:
        env.agent("hami-1", "operator-management")
    # The same HAMi-mutated shape on the broken node: gpupool's validation still holds.
    deadline = time.monotonic() + 30
    while True:
        r = env.apply(_pod("share-2", {"nvidia.com/gpumem": 2000}))
        if r.returncode != 0 or time.monotonic() > deadline:
            break
        env.kubectl("delete", "pod", "share-2", "-n", "ml", "--wait=false", check=False)
        time.sleep(0.5)
    assert r.returncode != 0 and "validate-pods.gpupool.io" in r.stderr
    assert f"management.nvidia.com/gpu={UUIDS[0]}" in r.stderr


def test_doctor_against_the_live_cluster(env):
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--kubeconfig",
                        str(env.cp.kubeconfig), "-o", "json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.stderr  # hami-1 lacks devices: a finding
    rows = {row["node"]: row for row in json.loads(r.stdout)["nodes"]}
    assert rows["hami-1"]["state"] == "missing" and rows["hami-1"]["hami_gpus"] == 2
    assert f"management.nvidia.com/gpu={UUIDS[0]}" in rows["hami-1"]["missing"]
    assert rows["op-1"]["state"] == "ok" and rows["op-1"]["pool"] == "operator"
    # the release read from the real API server's /version, the one this chain runs
    assert json.loads(r.stdout)["kubernetes"] == {
        "release": release(), "source": "discovered", "supported": True, "note": ""}
    # ...as the webhook's own watch read it, each of its workers
    assert f"Kubernetes {release()}: DRA allocation decided as its scheduler decides it" in \
        env.server.log.read_text()
    # The same through real kubectl as a plugin, with kubectl's own flags.
    import os

    env_ = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                   f"{os.environ['PATH']}", "KUBECONFIG": ""}
    r = subprocess.run([str(env.cp.bin / "kubectl"), "gpupool", "doctor", "--kubeconfig",
                        str(env.cp.kubeconfig), "--context", "e2e", "-o", "yaml"],
                       capture_output=True, text=True, timeout=60, env=env_)
    assert r.returncode == 1, r.stderr
    assert {n["node"] for n in yaml.safe_load(r.stdout)["nodes"]} == set(rows)
    r = subprocess.run([str(env.cp.bin / "kubectl"), "gpupool", "doctor", "--kubeconfig",
                        str(env.cp.kubeconfig), "--context", "prod"],
                       capture_output=True, text=True, timeout=60, env=env_)
    assert r.returncode == 2 and r.stderr.startswith("kubectl gpupool: error: kubeconfig")
    assert "prod" in r.stderr



# Before test_webhook_down_non_gpu_admitted_gpu_refused, which stops gpupool.
def test_hami_coexistence_docs_block_runs_against_the_cluster(env, k8s_bin):
    """docs/hami-coexistence.md's checklist, as written, against this cluster with gpupool
    serving: doctor and check on the nodes it exports, and a server-side dry run."""
    import os

    from tests.docs import Shell, blocks, path_with, workdir

    (block,) = [b for b in blocks() if b.mode == "e2e" and b.doc.name == "hami-coexistence.md"]
    shell = Shell(workdir(env.tmp / "docs"), {
        **os.environ, "KUBECONFIG": str(env.cp.kubeconfig),
        "PATH": path_with(k8s_bin, Path(sys.executable).parent)})
    results = dict(shell.run(block))
    doctor = next(r for cmd, r in results.items() if cmd.startswith("gpupool doctor"))
    # each distinct fix once, with the nodes it applies to
    assert re.search(r"^fix for \d+ node\(s\) \([^)]*hami-1[^)]*\): define a CDI device per GPU "
                     r"UUID", doctor.stdout, re.M), doctor.stdout
    check = next(r for cmd, r in results.items() if cmd.startswith("gpupool check"))
    dry = next(r for cmd, r in results.items() if "--dry-run=server" in cmd)
    # The offline answer and the API server's agree, whatever state earlier tests left
    # hami-1 in: the Job's HAMi pods are denied by both or by neither.
    denied_offline = "DENIED  Job default/finetune" in check.stdout
    assert (dry.returncode == 1) == denied_offline, (check.stdout, dry.stderr)
    if denied_offline:
        assert "denied the request" in dry.stderr and "management.nvidia.com/gpu=GPU-" in \
            dry.stderr
    assert "ALLOWED Deployment default/inference" in check.stdout
    # check reading the live cluster answers as check reading its export.
    live = subprocess.run([sys.executable, "-m", "webhook", "check", "-f", str(ROOT / "docs/"
                           "examples/workloads.yaml"), "--kubeconfig", str(env.cp.kubeconfig),
                           "--context", "e2e"], capture_output=True, text=True, timeout=60)
    assert live.returncode == check.returncode
    assert live.stdout == check.stdout

AGENT = ["--as=system:serviceaccount:gpupool-system:gpupool-agent",
         "--as-group=system:serviceaccounts", "--as-group=system:serviceaccounts:gpupool-system"]


def _as_agent_on(node: str) -> list[str]:
    return [*AGENT, f"--as-user-extra=authentication.kubernetes.io/node-name={node}"]


def test_agent_identity_limited_to_own_node_and_inventory(env):
    ok = env.kubectl("annotate", "node", "hami-1", "--overwrite",
                     'gpupool.io/cdi-inventory={"schemaVersion":1}', *_as_agent_on("hami-1"),
                     check=False)
    assert ok.returncode == 0, ok.stderr
    other = env.kubectl("annotate", "node", "op-1", "--overwrite",
                        'gpupool.io/cdi-inventory={"schemaVersion":1}', *_as_agent_on("hami-1"),
                        check=False)
    assert other.returncode != 0 and "only update the node it runs on" in other.stderr
    key = env.kubectl("annotate", "node", "hami-1", "example.com/x=y", *_as_agent_on("hami-1"),
                      check=False)
    assert key.returncode != 0 and "only change the gpupool.io/cdi-inventory" in key.stderr
    label = env.kubectl("label", "node", "hami-1", "gpupool.io/pool=operator", "--overwrite",
                        *_as_agent_on("hami-1"), check=False)
    assert label.returncode != 0 and "only set its resolve.gpupool.io/" in label.stderr
    odd = env.kubectl("label", "node", "hami-1", f"{STEER}=maybe", "--overwrite",
                      *_as_agent_on("hami-1"), check=False)
    assert odd.returncode != 0 and "true or false" in odd.stderr
    steer = env.kubectl("label", "node", "hami-1", f"{STEER}=true", "--overwrite",
                        *_as_agent_on("hami-1"), check=False)
    assert steer.returncode == 0, steer.stderr
    # a value op-1 does not have: kubectl 1.37 sends nothing for a label already set
    held = env.kubectl("get", "node", "op-1", "-o", "json").stdout
    other_value = "false" if json.loads(held)["metadata"]["labels"].get(STEER) == "true" \
        else "true"
    foreign = env.kubectl("label", "node", "op-1", f"{STEER}={other_value}", "--overwrite",
                          *_as_agent_on("hami-1"), check=False)
    assert foreign.returncode != 0 and "only update the node it runs on" in foreign.stderr
    spec = env.kubectl("taint", "node", "hami-1", "x=y:NoSchedule", *_as_agent_on("hami-1"),
                       check=False)
    assert spec.returncode != 0 and "spec" in spec.stderr
    delete = env.kubectl("delete", "node", "op-1", *_as_agent_on("op-1"), check=False)
    assert delete.returncode != 0 and "forbidden" in delete.stderr.lower()
    env.agent("hami-1", "operator-management")  # restore the published inventory


STEER = "resolve.gpupool.io/detected"
HAMI_LIMITS = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}  # routed to the HAMi pool


def _nodes_matching(env, term: dict) -> set[str]:
    """The nodes a required node-affinity term selects, evaluated by the API server itself."""
    selector = ",".join(f"{e['key']} {e['operator'].lower()} ({','.join(e['values'])})"
                        for e in term["matchExpressions"])
    out = env.kubectl("get", "nodes", "-l", selector, "-o", "name").stdout.split()
    return {n.removeprefix("node/") for n in out}


def test_steering_keeps_pods_off_a_broken_node_until_it_is_fixed(env):
    """One broken and one fixed node in the HAMi pool: the routed pod's stored affinity
    excludes the broken node; when that node's agent sees a per-UUID spec, its label flips
    and a new pod's affinity no longer excludes it."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "hami-2", "labels": {"gpupool.io/pool": "hami", "gpu": "on",
                                     "nvidia.com/gpu.present": "true"},
        "annotations": {"hami.io/node-nvidia-register": hami_register()}}}
    assert env.apply(node).returncode == 0
    env.kubectl("taint", "node", "hami-2", "node.kubernetes.io/not-ready:NoSchedule-",
                check=False)
    try:
        env.agent("hami-2", "fixed")
        env.agent("hami-1", "operator-management")
        labels = {n: _get(env, "node", n)["metadata"]["labels"].get(STEER)
                  for n in ("hami-1", "hami-2")}
        assert labels == {"hami-1": "false", "hami-2": "true"}
        deadline = time.monotonic() + 30
        while True:  # the webhook's node cache follows through its watch
            r = env.apply(_pod("steered-1", HAMI_LIMITS))
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.returncode == 0, r.stderr
        term = _terms(_get(env, "pod", "steered-1"))[0]
        assert {"key": STEER, "operator": "NotIn", "values": ["false"]} in \
            term["matchExpressions"]
        assert _nodes_matching(env, term) == {"hami-2"}
        env.agent("hami-1", "fixed")
        assert _get(env, "node", "hami-1")["metadata"]["labels"][STEER] == "true"
        assert env.apply(_pod("steered-2", HAMI_LIMITS)).returncode == 0
        assert _nodes_matching(env, _terms(_get(env, "pod", "steered-2"))[0]) == \
            {"hami-1", "hami-2"}
    finally:
        env.agent("hami-1", "operator-management")
        env.kubectl("delete", "node", "hami-2", "--wait=false", check=False)
        env.kubectl("delete", "pod", "steered-1", "steered-2", "-n", "ml", "--wait=false",
                    check=False)


def _until(check, what: str, seconds: float = 30):
    """Poll ``check()`` (the webhook's caches follow the API server through watches)."""
    deadline = time.monotonic() + seconds
    while True:
        r = check()
        if r or time.monotonic() > deadline:
            assert r, what
            return r
        time.sleep(0.5)


def test_the_gpu_operators_nri_plugin_is_followed_through_its_cluster_policy(env):
    """The operator's sample ClusterPolicy, switched to NRI injection, in the real CRD: a pod
    outside the operator's namespace naming the management device in its
    nvidia.cdi.k8s.io annotation would start without it (the plugin drops it), so gpupool
    denies it at dry run; the fix gpupool names (the namespace in the toolkit's
    NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES) admits it."""
    cp = yaml.safe_load((UPSTREAM / "runtime-config/gpu-operator-sample-clusterpolicy.yaml")
                        .read_text())
    cp["spec"]["cdi"] = {"enabled": True, "nriPluginEnabled": True}
    env.kubectl("create", "namespace", "team-a")
    env.kubectl("label", "node", "op-1", "nvidia.com/gpu.deploy.container-toolkit=true")
    assert env.apply(cp).returncode == 0
    name = cp["metadata"]["name"]
    try:
        env.kubectl("patch", "clusterpolicy", name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"state": "ready",
                                                 "namespace": "gpu-operator"}}))
        pod = _pod("dcgm-like", {"nvidia.com/gpu": 1})
        pod["metadata"].update(namespace="team-a", annotations={
            "nvidia.cdi.k8s.io/container.c": "management.nvidia.com/gpu=all"})

        def denied():
            r = env.apply(pod, "--dry-run=server")
            return r if r.returncode != 0 and "GPUNotDelivered" in r.stderr else None
        r = _until(denied, "the ClusterPolicy's NRI plugin never reached gpupool")
        assert "namespace team-a" in r.stderr and "op-1" in r.stderr, r.stderr
        assert "add namespace team-a to NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES" in r.stderr
        cp["spec"]["toolkit"] = {"enabled": True, "env": [
            {"name": "NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES", "value": "team-a"}]}
        assert env.apply(cp).returncode == 0
        _until(lambda: env.apply(pod, "--dry-run=server").returncode == 0,
               "the fix applied, the pod is still denied")
    finally:
        env.kubectl("delete", "clusterpolicy", name, "--wait=true")
        env.kubectl("label", "node", "op-1", "nvidia.com/gpu.deploy.container-toolkit-")


def test_hamis_device_plugin_daemonset_is_followed(env):
    """HAMi's device-plugin DaemonSet in the real API server, as its chart labels it: set to
    cdi-annotations, the plugin hands CDI names that hami-1's specs lack (on disk it looks
    like envvar, which its per-UUID spec serves), so a HAMi pod is denied at dry run with
    those names; deleted, the node is read from its disk again."""
    from tests.unit.engine.test_hamiplugin import daemonset

    env.agent("hami-1", "fixed", plugin=False)  # (its plugin's pod, read, would decide)
    pod = _pod("vllm-ds", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000})
    try:
        _until(lambda: env.apply(pod, "--dry-run=server").returncode == 0,
               "the per-UUID spec never admitted the HAMi pod")
        ds = daemonset("cdi-annotations")
        ds["spec"]["selector"] = {"matchLabels": {"app": "hami-device-plugin"}}
        ds["spec"]["template"]["metadata"] = {"labels": {"app": "hami-device-plugin"}}
        ds["spec"]["template"]["spec"]["containers"][0]["image"] = "hami:v2.10.0"
        assert env.apply(ds).returncode == 0

        def denied():
            r = env.apply(pod, "--dry-run=server")
            return r if r.returncode != 0 and "CDIDeviceMissing" in r.stderr else None
        r = _until(denied, "HAMi's DaemonSet never reached gpupool")
        assert "hami-1 lacks k8s.device-plugin.nvidia.com/gpu=GPU-" in r.stderr, r.stderr
        env.kubectl("delete", "daemonset", "hami-device-plugin", "-n", "kube-system",
                    "--wait=true")
        _until(lambda: env.apply(pod, "--dry-run=server").returncode == 0,
               "the DaemonSet deleted, the pod is still denied")
    finally:
        env.kubectl("delete", "daemonset", "hami-device-plugin", "-n", "kube-system",
                    "--ignore-not-found")
        env.agent("hami-1", "operator-management")


def test_apiserver_webhook_latency_recorded(env):
    for i in range(30):
        env.apply(_pod(f"batch-{i}", {"nvidia.com/gpu": 1}))
    metrics = env.cp.metrics()
    rows = {}
    for line in metrics.splitlines():
        if line.startswith("apiserver_admission_webhook_admission_duration_seconds_") and \
                "gpupool" in line:
            series, value = line.rsplit(" ", 1)
            rows[series] = float(value)
    assert rows, "the API server recorded no gpupool webhook latency"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "e2e-webhook-latency.json").write_text(json.dumps(
        {"what": "apiserver_admission_webhook_admission_duration_seconds, 30 GPU pod creates",
         "series": rows}, indent=2))


def _gauge(env: Env, name: str) -> float:
    import requests

    text = requests.get(f"{env.server.url}/metrics", verify=env.server.ca, timeout=10).text
    line = next(x for x in text.splitlines() if x.startswith(name + " "))
    return float(line.split()[1])


def _direct(env: Env, pod: dict) -> dict:
    """Ask gpupool directly (the API server may be down): what would it decide now?"""
    import requests

    from harness.kit import review

    r = requests.post(f"{env.server.url}/validate", verify=env.server.ca, timeout=10,
                      data=json.dumps(review(pod, namespace="ml")),
                      headers={"Content-Type": "application/json"})
    return r.json()["response"]


def test_watch_cut_relists_and_staleness_is_visible(env):
    pod = _pod("probe", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000},
               schedulerName="hami-scheduler", affinity={"nodeAffinity": {
                   "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                       {"matchExpressions": [{"key": "gpupool.io/pool", "operator": "In",
                                              "values": ["hami"]}]}]}}})
    deadline = time.monotonic() + 30  # the previous test restored hami-1's inventory
    while _direct(env, pod)["allowed"] is not False:  # hami-1 lacks its per-UUID devices
        assert time.monotonic() < deadline
        time.sleep(0.3)
    relists = _gauge(env, "gpupool_cache_relists")
    # Every node change so far arrived through the watch: one initial list, no relist.
    assert relists == 1
    env.cp.stop_apiserver()
    try:
        # The cache keeps deciding, and says how stale it is.
        _until(lambda: _gauge(env, "gpupool_cache_staleness_seconds") >= 5,
               "the staleness gauge to pass 5 s")
        assert _direct(env, pod)["allowed"] is False
    finally:
        env.cp.start_apiserver()
    env.agent("hami-1", "fixed")  # a change made after the outage
    deadline = time.monotonic() + 90
    while _direct(env, pod)["allowed"] is not True:
        assert time.monotonic() < deadline, "the cache never caught up after the outage"
        time.sleep(0.5)
    # Every worker keeps its own cache and answers /metrics for itself; each reflector retries
    # on its own backoff. Wait until the answering worker shows a relist and fresh caches.
    def recovered() -> bool:
        return (_gauge(env, "gpupool_cache_relists") > relists
                and _gauge(env, "gpupool_cache_staleness_seconds") < 30)

    while not all(recovered() for _ in range(4)):
        assert time.monotonic() < deadline + 60, "relist/staleness never recovered"
        time.sleep(0.5)
    env.agent("hami-1", "operator-management")


def test_webhook_down_non_gpu_admitted_gpu_refused(env):
    stop_server(env.server)
    r = env.apply(_pod("cpu-while-down", {"cpu": "100m"}))
    # matchConditions: only the grant check sees it, which fails open (docs/security.md)
    assert r.returncode == 0, r.stderr
    stored = _get(env, "pod", "cpu-while-down")
    assert "env" not in stored["spec"]["containers"][0]  # the fail-open case, as documented
    r = env.apply(_pod("gpu-while-down", {"nvidia.com/gpu": 1}))
    assert r.returncode != 0 and 'failed calling webhook "mutate.gpupool.io"' in r.stderr


def test_caBundle_is_the_generated_one(env):
    cfg = json.loads(env.kubectl("get", "mutatingwebhookconfiguration", "gpupool-mutating",
                                 "-o", "json").stdout)
    served = base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"])
    assert served == (env.certs / "ca.crt").read_bytes()

