"""``gpupool scan`` against a real kube-apiserver: two replicas elect a leader on a real
Lease; GPU pods created through gpupool's real webhook, placed by a real kube-scheduler
named and leader-elected as HAMi's chart runs HAMi's, and run by kwok as the node's kubelet,
and one pod created while the webhook was bypassed, are re-checked as the node changes (its
inventory published by the real agent), as that scheduler stops, and as the scan's leader
dies. Reports go into the real PolicyReport CRD (Kyverno's own file), Events into the real
API.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from harness import install
from harness.controlplane import ControlPlane
from harness.gobuild import built
from harness.kit import ROOT, UPSTREAM
from harness.layouts import UUIDS, fake_driver, hami_register, write_layout
from harness.servers import free_port, stop_server
from tests.restartcorpus import kubelet_checkpoint
from tests.runtime_oracle import OracleNode

pytestmark = pytest.mark.e2e
NS = "ml"
KWOK = ROOT / "tests" / "tools" / "build-kwok.sh"
SCAN_NS = "gpupool-system"


class Scan:
    def __init__(self, cp: ControlPlane, tmp: Path, name: str, *extra: str) -> None:
        self.name, self.port = name, free_port()
        self.log = tmp / f"{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "scan", "--kubeconfig", str(cp.kubeconfig),
             "--namespace", SCAN_NS, "--identity", name, "--listen", f"127.0.0.1:{self.port}",
             "--lease-duration", "3",
             "--scheduler-lease", "hami-scheduler=kube-system/hami-scheduler", *extra],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)

    def get(self, path: str) -> requests.Response:
        return requests.get(f"http://127.0.0.1:{self.port}{path}", timeout=5)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Env:
    cp: ControlPlane
    tmp: Path
    layouts: dict[str, dict[str, Path]]
    driver: Path
    checkpoint: Path
    scans: list[Scan]

    def kubectl(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.cp.kubectl(*args, **kw)

    def agent(self, node: str, layout: str) -> None:
        """A real agent run, with the device-plugin pod it learns the strategy from and the
        kubelet's checkpoint of the pods started there."""
        paths = {**self.layouts[layout], "driver": self.driver, "checkpoint": self.checkpoint}
        install.device_plugin(self.cp, node, install.layout_strategy(paths))
        install.agent(self.cp, node, paths)

    def report(self, ns: str = NS, kind: str = "policyreports.wgpolicyk8s.io") -> dict | None:
        r = self.kubectl("get", kind, "gpupool-gpu-pods", "-n", ns, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def results(self, **kw) -> dict[str, dict]:
        doc = self.report(**kw) or {}
        return {r["resources"][0]["name"]: r for r in doc.get("results") or ()}

    def wait_result(self, pod: str, rule: str, timeout: float = 60, **kw) -> dict:
        found: dict = {}

        def seen() -> bool:
            found.update(self.results(**kw))
            return found.get(pod, {}).get("rule") == rule
        try:
            install.wait_until(seen, f"{pod}: {rule} in the report", timeout)
        except AssertionError:
            raise AssertionError(f"{pod} not {rule}: {json.dumps(found.get(pod), indent=1)}\n"
                                 + "\n".join(s.log.read_text()[-2000:] for s in self.scans)
                                 ) from None
        return found[pod]

    def events(self, name: str) -> list[dict]:
        out = self.kubectl("get", "events", "-n", NS, "-o", "json",
                           "--field-selector", f"involvedObject.name={name}").stdout
        return [e for e in json.loads(out)["items"]
                if e.get("reportingComponent") == "gpupool.io/scan"]


#: the GPU train holds: the device plugin handed it this one
HELD = UUIDS[1]
SCHEDULER_POD = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "hami-scheduler-0", "namespace": "kube-system",
                              "labels": {"app.kubernetes.io/component": "hami-scheduler"}},
                 "spec": {"nodeName": "hami-1", "containers": [
                     {"name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler"}]}}


def _pod(name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"limits": {
                "nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}], **spec}}


@pytest.fixture(scope="module")
def env(k8s_bin, tmp_path_factory):
    e = Env()
    e.tmp = tmp_path_factory.mktemp("scan")
    e.scans = []
    e.cp = ControlPlane(e.tmp / "cp", k8s_bin).start()
    server = None
    try:
        objs = install.prepare(e.cp, e.tmp)
        # the node before the GPU Operator's upgrade: its toolkit in legacy mode, no CDI;
        # after it: CDI mode with the operator's management spec alone (the seed's clash)
        broken = write_layout(e.tmp / "layouts" / "broken", "operator-management")
        fixed = write_layout(e.tmp / "layouts" / "fixed", "operator-management")
        fixed["config"].write_text(fixed["config"].read_text().replace(
            'mode = "cdi"', 'mode = "legacy"', 1))
        e.layouts = {"broken": broken, "fixed": fixed}
        e.driver = fake_driver(e.tmp / "driver")
        e.checkpoint = e.tmp / "kubelet" / "kubelet_internal_checkpoint"
        e.checkpoint.parent.mkdir()
        res = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "20",
               "nvidia.com/gpumem": "150000"}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "hami-1", "labels": {"gpupool.io/pool": "hami", "gpu": "on",
                                         "nvidia.com/gpu.present": "true",
                                         "kubernetes.io/hostname": "hami-1"},
            "annotations": {"hami.io/node-nvidia-register": hami_register()}},
            "status": {"capacity": res, "allocatable": res}}
        assert install.apply(e.cp, node).returncode == 0
        e.agent("hami-1", "fixed")
        e.cp.start_kwok(built(KWOK, "kwok"))  # the node's kubelet: Ready, bound pods Running

        def ready() -> bool:
            n = json.loads(e.kubectl("get", "node", "hami-1", "-o", "json").stdout)
            return any(c["type"] == "Ready" and c["status"] == "True"
                       for c in n.get("status", {}).get("conditions", []))
        install.wait_until(ready, "hami-1 Ready", 60)
        # no node controller here to lift the taint a new node starts with
        e.kubectl("taint", "node", "hami-1", "node.kubernetes.io/not-ready:NoSchedule-",
                  check=False)
        e.cp.create_crd(UPSTREAM / "crds/wgpolicyk8s.io_policyreports.yaml")
        e.kubectl("create", "namespace", NS)
        # created while gpupool's webhooks were not registered (failurePolicy Ignore, an
        # outage): the API server defaults its scheduler, nothing routes it
        assert install.apply(e.cp, _pod("bypassed")).returncode == 0
        server = install.serve(e.cp, e.tmp, objs)
        install.wait_for_webhooks(e.cp, server, NS)
        # HAMi's scheduler as its chart runs it: kube-scheduler with leader election on a
        # Lease named after the scheduler
        e.cp.start_scheduler("hami-scheduler", {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "hami-scheduler"}]},
            lease=("kube-system", "hami-scheduler"))
        # ...and its pod, as HAMi's chart labels it (kwok runs it: Ready), which the scan
        # looks for too; the process above does the scheduling
        assert install.apply(e.cp, SCHEDULER_POD).returncode == 0
        assert install.apply(e.cp, _pod("train")).returncode == 0

        def running() -> bool:
            p = json.loads(e.kubectl("get", "pod", "train", "-n", NS, "-o", "json").stdout)
            return p["spec"].get("nodeName") == "hami-1" and \
                p.get("status", {}).get("phase") == "Running"
        install.wait_until(running, "train placed on hami-1 by the scheduler and Running", 60)
        # kwok runs no device plugin: the kubelet's checkpoint for train, as the kubelet's
        # own code writes it with HAMi's plugin's answer (envvar: the GPU's UUID), which the
        # agent then publishes
        uid = e.kubectl("get", "pod", "train", "-n", NS, "-o",
                        "jsonpath={.metadata.uid}").stdout.strip()
        e.checkpoint.write_text(subprocess.run(
            [str(kubelet_checkpoint())], text=True, capture_output=True, check=True,
            input=json.dumps({"registered": {"nvidia.com/gpu": list(UUIDS)}, "entries": [{
                "podUID": uid, "container": "c", "resource": "nvidia.com/gpu",
                "ids": {"-1": [f"{HELD}::0"]},
                "envs": {"NVIDIA_VISIBLE_DEVICES": HELD}}]})).stdout)
        e.agent("hami-1", "fixed")
        e.scans = [Scan(e.cp, e.tmp, "scan-a"), Scan(e.cp, e.tmp, "scan-b")]
        yield e
    finally:
        for s in e.scans:
            s.stop(signal.SIGKILL)
        if server is not None:
            stop_server(server)
        e.cp.stop()


def _leader(e: Env) -> Scan:
    lease = json.loads(e.kubectl("get", "lease", "gpupool-scan", "-n", SCAN_NS,
                                 "-o", "json").stdout)
    return next(s for s in e.scans if s.name == lease["spec"]["holderIdentity"])


def test_pods_admitted_are_fine_and_the_bypassed_one_is_misrouted(env):
    misrouted = env.wait_result("bypassed", "Misrouted")
    assert misrouted["result"] == "fail" and misrouted["properties"]["reason"] == \
        "SchedulerMismatch"
    assert env.wait_result("train", "Fine")["properties"]["node"] == "hami-1"
    [ev] = env.events("bypassed")
    assert ev["reason"] == "SchedulerMismatch" and ev["type"] == "Warning"
    assert env.events("train") == []
    leader = _leader(env)
    follower = next(s for s in env.scans if s is not leader)
    assert "gpupool_scan_leader 1.0" in leader.get("/metrics").text
    assert "gpupool_scan_leader 0.0" in follower.get("/metrics").text
    # ready once its own view, pod listing and first scan are done: a standby takes over warm
    install.wait_until(lambda: follower.get("/readyz").status_code == 200,
                       f"the standby ready: {follower.get('/readyz?verbose').text}", 30)
    assert "[+]reports ok" in leader.get("/readyz?verbose").text


def test_a_stopped_hami_scheduler_leaves_its_pending_pods_waiting(env):
    # stopped as a Deployment scaled to zero stops it: its process and its pod go
    env.cp.kill("hami-scheduler.yaml")
    env.kubectl("delete", "pod", "-n", "kube-system", "hami-scheduler-0", "--force",
                "--grace-period=0")
    assert install.apply(env.cp, _pod("waiting")).returncode == 0  # admitted, routed
    r = env.wait_result("waiting", "SchedulerNotRunning", timeout=45)
    assert "hami-scheduler" in r["message"]
    assert "no Ready pod matches kube-system/app.kubernetes.io/component=hami-scheduler" \
        in r["message"]  # at once; its Lease lapses within its duration
    r = env.wait_result("waiting", "SchedulerNotRunning", timeout=30)
    install.wait_until(lambda: "Lease kube-system/hami-scheduler" in
                       env.results()["waiting"]["message"], "the Lease lapsed too", 30)
    assert env.results()["train"]["rule"] == "Fine"  # bound: it waits for no scheduler
    # one Event per answer: its pod gone, then its Lease lapsed too
    assert {e["reason"] for e in env.events("waiting")} == {"SchedulerNotRunning"}


def test_the_toolkit_moved_to_cdi_fails_the_running_envvar_pod_before_it_restarts(env):
    """The seed's story after the fact: train started while the toolkit ran legacy mode,
    handed its GPU's UUID in NVIDIA_VISIBLE_DEVICES; the GPU Operator's upgrade moves the
    toolkit to CDI mode with the management spec alone. The kubelet will hand the restarted
    container that same UUID, which no spec defines now: the report names the pod before
    any restart, and the real runtime then refuses the restart exactly so."""
    start = time.monotonic()
    env.agent("hami-1", "broken")  # the seed's clash, after the fact
    r = env.wait_result("train", "FailsOnRestart", timeout=30)
    took = time.monotonic() - start
    assert r["properties"]["reason"] == "CDIDeviceMissing" and r["severity"] == "high"
    device = f"management.nvidia.com/gpu={HELD}"
    assert r["properties"]["missing"] == device  # the GPU it holds, not the node's others
    assert "kubelet cached it" in r["message"]
    assert "hami-1" in r["properties"]["changedBy"]
    [ev] = env.events("train")
    assert ev["reason"] == "CDIDeviceMissing" and "hami-1" in ev["message"]
    metrics = _leader(env).get("/metrics").text
    assert ('gpupool_scan_pods_at_risk{outcome="FailsOnRestart",pool="hami",'
            'reason="CDIDeviceMissing"} 1.0') in metrics
    print(f"reported {took:.1f}s after the agent published the node's new specs")
    # the restart, through the real nvidia-container-runtime on that node's specs and
    # runtime config, with the answer the kubelet cached: refused, naming the very device
    # the report says is missing; under the config before the upgrade it ran
    broken, fixed = env.layouts["broken"], env.layouts["fixed"]
    v = OracleNode(env.tmp / "restart", [broken["etc"], broken["run"]], broken["config"],
                   gpus=UUIDS).create(HELD)
    assert not v.ok and v.by == "nvidia-container-runtime", v
    assert f"unresolvable CDI devices {device}" in v.error
    before = OracleNode(env.tmp / "started", [fixed["etc"], fixed["run"]], fixed["config"],
                        gpus=UUIDS).legacy(HELD)
    assert before.ok and before.devices, before
    # doctor lists the same pods at risk per node, from the same engine entry
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--kubeconfig",
                        str(env.cp.kubeconfig), "-o", "json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    risky = {(p["name"], p["node"], p["outcome"], p["reason"]) for p in doc["podsAtRisk"]}
    assert ("train", "hami-1", "FailsOnRestart", "CDIDeviceMissing") in risky
    assert ("bypassed", None, "Misrouted", "SchedulerMismatch") in risky
    assert doc["totals"]["pods_at_risk"] == len(risky)


def test_a_steady_cluster_costs_no_write(env):
    env.wait_result("train", "FailsOnRestart")
    before = env.report()["metadata"]["resourceVersion"]
    events = len(env.events("train"))
    time.sleep(6)  # six rounds of both replicas, two Lease periods
    assert env.report()["metadata"]["resourceVersion"] == before
    assert len(env.events("train")) == events


def test_the_standby_takes_over_when_the_leader_dies_and_reports_stay_whole(env):
    env.wait_result("train", "FailsOnRestart")
    leader = _leader(env)
    standby = next(s for s in env.scans if s is not leader)
    whole = set(env.results())
    leader.stop(signal.SIGKILL)
    install.wait_until(lambda: _leader(env) is standby, "the standby leads", timeout=20)
    assert "gpupool_scan_leader 1.0" in standby.get("/metrics").text
    assert set(env.results()) == whole
    env.agent("hami-1", "fixed")  # the new leader reports the node's repair
    assert env.wait_result("train", "Fine", timeout=30)["result"] == "pass"
    assert set(env.results()) == whole
    report = env.report()
    assert report["summary"]["fail"] == 2 and report["summary"]["pass"] == 1  # bypassed, waiting


def test_a_missing_crd_turns_off_reports_alone_until_it_is_installed(env):
    other = Scan(env.cp, env.tmp, "scan-openreports", "--report-api", "openreports",
                 "--lease-name", "gpupool-scan-openreports")
    env.scans.append(other)
    kind = "reports.openreports.io"

    def says_missing() -> bool:
        try:
            text = other.get("/readyz?verbose").text
        except requests.RequestException:
            return False
        return "[-]reports failed: the Report CRD (reports.openreports.io) is not installed" \
            in text
    install.wait_until(says_missing, "readyz names the missing CRD", timeout=40)
    assert other.get("/readyz").status_code == 200  # the scan itself works
    assert 'gpupool_scan_output_available{output="reports"} 0.0' in other.get("/metrics").text
    env.cp.create_crd(UPSTREAM / "crds/openreports.io_reports.yaml")
    install.wait_until(lambda: env.report(kind=kind) is not None, "the Report written",
                       timeout=60)
    assert set(env.results(kind=kind)) == {"bypassed", "train", "waiting"}
    assert 'gpupool_scan_output_available{output="reports"} 1.0' in other.get("/metrics").text


def test_gpus_advertised_twice_get_an_event_on_the_node_and_a_gauge(env):
    """The operator's device plugin scheduled onto HAMi's node (its deploy label true) beside
    HAMi's registration: the node's GPUs go out twice."""
    env.kubectl("label", "node", "hami-1", "nvidia.com/gpu.deploy.device-plugin=true",
                "--overwrite")
    try:
        def evented() -> list[dict]:
            out = env.kubectl("get", "events", "-n", "default", "-o", "json",
                              "--field-selector", "involvedObject.name=hami-1").stdout
            return [e for e in json.loads(out)["items"]
                    if e.get("reason") == "GPUsAdvertisedTwice"]
        install.wait_until(lambda: bool(evented()), "an Event on hami-1", 30)
        [ev] = evented()
        assert ev["involvedObject"]["kind"] == "Node" and ev["type"] == "Warning"
        assert "HAMi's device plugin" in ev["message"] and "=false" in ev["message"]
        # (another replica group may have written that Event first: the leader's own gauge)
        install.wait_until(lambda: "gpupool_scan_nodes_gpus_advertised_twice 1.0" in
                           _leader(env).get("/metrics").text, "the leader's gauge", 30)
    finally:
        env.kubectl("label", "node", "hami-1", "nvidia.com/gpu.deploy.device-plugin-")


def test_writes_the_api_server_refuses_are_made_once_it_accepts_them(env):
    """A ValidatingAdmissionPolicy (the API server's own) refuses every change to the
    reports: the scan counts the refusals, says so on /readyz, loses nothing, and the report
    catches up with the first write the API server accepts."""
    env.wait_result("train", "Fine")
    vap = {"apiVersion": "admissionregistration.k8s.io/v1",
           "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": "freeze-reports"},
           "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [{
               "apiGroups": ["wgpolicyk8s.io"], "apiVersions": ["*"],
               "operations": ["CREATE", "UPDATE", "DELETE"],
               "resources": ["policyreports"]}]},
               "validations": [{"expression": "false",
                                "message": "reports are frozen for maintenance"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": "freeze-reports"},
               "spec": {"policyName": "freeze-reports", "validationActions": ["Deny"]}}
    assert install.apply(env.cp, [vap, binding]).returncode == 0
    leader = _leader(env)
    try:
        probe = {**env.report(), "results": []}  # the policy is in force once this fails
        probe["metadata"] = {k: v for k, v in probe["metadata"].items()
                             if k in ("name", "namespace")}
        install.wait_until(lambda: install.apply(env.cp, probe, "--dry-run=server")
                           .returncode != 0, "the policy in force", 30)
        env.agent("hami-1", "broken")

        def refused() -> bool:
            m = re.search(r'^gpupool_scan_writes_total\{output="policyreports",'
                          r'result="failed"\} (\S+)$', leader.get("/metrics").text, re.M)
            return m is not None and float(m.group(1)) > 0
        install.wait_until(refused, "a refused write counted", 30)
        assert env.results()["train"]["rule"] == "Fine"  # not written, not lost
        assert "[-]reports failed" in leader.get("/readyz?verbose").text
        assert leader.get("/readyz").status_code == 200
    finally:
        env.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                    "freeze-reports", "--ignore-not-found")
    assert env.wait_result("train", "FailsOnRestart", timeout=60)["result"] == "fail"
    env.agent("hami-1", "fixed")
    env.wait_result("train", "Fine")
