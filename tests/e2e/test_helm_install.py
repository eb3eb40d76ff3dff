"""The chart installed by a real helm into a real kube-apiserver: a routed pod and a denied pod
behave exactly as with the kustomize install, `helm upgrade` with a changed policy reloads it
in the running server without touching the Deployment's pods, and chart-generated
certificates survive an upgrade.

gpupool itself runs on loopback (no kubelet runs pods here): the chart points its webhooks at
it with ``webhook.url`` and trusts its CA through ``certificates.mode=secret``; the policy file
the server reads is written from the chart's ConfigMap, as the kubelet would project it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time

import pytest
import yaml

from harness import helm as helmtool
from harness import install
from harness.controlplane import ControlPlane
from harness.install import webhook_token_kubeconfig
from harness.layouts import hami_register, write_layout
from harness.servers import free_port, generate_certs, start_server, stop_server
from tests.e2e.test_e2e import _pod

pytestmark = pytest.mark.e2e
NS = "gpupool-system"


class Env:
    cp: ControlPlane
    server: object
    policy_file: object
    values: object

    def kubectl(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.cp.kubectl(*args, **kw)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return helmtool.run(*args, "--kubeconfig", str(self.cp.kubeconfig), check=check)

    def sync_policy(self) -> str:
        """What the kubelet does for a ConfigMap volume: the file follows the object."""
        cm = json.loads(self.kubectl("get", "configmap", "-n", NS, "gpupool-policy", "-o",
                                     "json").stdout)
        text = cm["data"]["policy.yaml"]
        tmp = self.policy_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.policy_file)
        return text


@pytest.fixture(scope="module")
def env(k8s_bin, helm, tmp_path_factory):
    e = Env()
    tmp = tmp_path_factory.mktemp("helm-e2e")
    e.cp = ControlPlane(tmp / "cp", k8s_bin).start()
    e.server = None
    try:
        generate_certs(tmp / "certs")
        e.kubectl("create", "namespace", NS)
        e.kubectl("create", "namespace", "ml")
        layout = write_layout(tmp / "layouts" / "broken", "operator-management")
        nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {
                      "name": "hami-1", "labels": {"gpupool.io/pool": "hami",
                                                   "nvidia.com/gpu.present": "true"},
                      "annotations": {"hami.io/node-nvidia-register": hami_register()}}},
                 {"apiVersion": "v1", "kind": "Node", "metadata": {
                      "name": "op-1", "labels": {"nvidia.com/gpu.present": "true"}}}]
        e.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(n) for n in nodes))
        for n in ("hami-1", "op-1"):
            e.kubectl("taint", "node", n, "node.kubernetes.io/not-ready:NoSchedule-")
        subprocess.run([sys.executable, "-m", "webhook", "agent", "--once", "--node-name",
                        "hami-1", "--kubeconfig", str(e.cp.kubeconfig), "--cdi-dir",
                        str(layout["etc"]), "--cdi-dir", str(layout["run"]),
                        "--runtime-config", str(layout["config"]), "--containerd-config",
                        str(layout["containerd"])], check=True, capture_output=True, timeout=60)
        # The chart first (it grants the server's identity its RBAC), pointing at the port
        # the server will listen on; then the server, on the policy the chart installed.
        port = free_port()
        ca = base64.b64encode((tmp / "certs" / "ca.crt").read_bytes()).decode()
        e.values = tmp / "values.yaml"
        e.values.write_text(yaml.safe_dump({
            "webhook": {"url": f"https://127.0.0.1:{port}"},
            "certificates": {"mode": "secret",
                             "secret": {"name": "gpupool-webhook-tls", "caBundle": ca}}}))
        r = e.helm("install", "gpupool", str(helmtool.CHART), "--namespace", NS,
                   "-f", str(e.values))
        assert "gpupool doctor" in r.stdout  # NOTES.txt
        e.policy_file = tmp / "policy.yaml"
        e.sync_policy()
        e.server = start_server(tmp, "--kubeconfig",
                                str(webhook_token_kubeconfig(e.cp, tmp / "wh.kubeconfig")),
                                "--policy", str(e.policy_file), workers=2, port=port)
        install.wait_for_webhooks(e.cp, e.server, "ml")
        yield e
    finally:
        if e.server is not None:
            stop_server(e.server)
        e.cp.stop()


def test_chart_objects_are_installed(env):
    names = env.kubectl("get", "deployment,daemonset,service,configmap,pdb", "-n", NS, "-o",
                        "name").stdout.split()
    assert {"deployment.apps/gpupool-webhook", "daemonset.apps/gpupool-agent",
            "service/gpupool-webhook", "configmap/gpupool-policy",
            "poddisruptionbudget.policy/gpupool-webhook"} <= set(names)
    cfgs = env.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations",
                       "-o", "name").stdout.split()
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/gpupool-mutating" in cfgs


def test_routed_pod_and_denied_pod_as_with_kustomize(env):
    r = env.kubectl("apply", "-f", "-", check=False,
                    input=yaml.safe_dump(_pod("op-pod", {"nvidia.com/gpu": 1})))
    assert r.returncode == 0, r.stderr
    stored = json.loads(env.kubectl("get", "pod", "-n", "ml", "op-pod", "-o", "json").stdout)
    assert stored["spec"]["schedulerName"] == "default-scheduler"
    assert stored["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    terms = stored["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "gpupool.io/pool", "operator": "NotIn", "values": ["hami"]} in \
        terms[0]["matchExpressions"]
    r = env.kubectl("apply", "-f", "-", check=False,
                    input=yaml.safe_dump(_pod("hami-pod", {"nvidia.com/gpumem": 4000})))
    assert r.returncode != 0
    assert "management.nvidia.com/gpu=GPU-" in r.stderr and "hami-1" in r.stderr


def test_upgrade_with_changed_policy_reloads_without_restarting(env, tmp_path):
    dep = json.loads(env.kubectl("get", "deployment", "-n", NS, "gpupool-webhook", "-o",
                                 "json").stdout)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "trainer", "namespace": "ml"},
                  "spec": {"selector": {"matchLabels": {"app": "t"}},
                           "template": {"metadata": {"labels": {"app": "t"}},
                                        "spec": _pod("x", {"nvidia.com/gpumem": 4000})["spec"]}}}
    r = env.kubectl("apply", "--dry-run=server", "-f", "-", check=False,
                    input=yaml.safe_dump(deployment))
    assert r.returncode != 0 and "would be denied" in r.stderr  # workloadTemplates: deny
    values = yaml.safe_load(helmtool.CHART.joinpath("values.yaml").read_text())["policy"]
    extra = tmp_path / "policy.yaml"
    extra.write_text(yaml.safe_dump({"policy": {**values, "workloadTemplates": "warn"}}))
    env.helm("upgrade", "gpupool", str(helmtool.CHART), "--namespace", NS, "-f",
             str(env.values), "-f", str(extra))
    after = json.loads(env.kubectl("get", "deployment", "-n", NS, "gpupool-webhook", "-o",
                                   "json").stdout)
    # No rollout: the pod template, and so the replicas, are untouched by a policy change.
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]
    assert "workloadTemplates: warn" in env.sync_policy()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = env.kubectl("apply", "--dry-run=server", "-f", "-", check=False,
                        input=yaml.safe_dump(deployment))
        if r.returncode == 0:
            break
        time.sleep(0.5)
    assert r.returncode == 0, r.stderr
    assert "would be denied" in r.stderr  # admitted now, with the warning


def test_generated_certificates_survive_an_upgrade(env, tmp_path):
    """Last: the webhooks then trust the chart's CA, which the loopback server does not use."""
    gen = tmp_path / "gen.yaml"
    gen.write_text(yaml.safe_dump({"webhook": {"url": env.server.url, "failurePolicy": {
        "mutatePods": "Ignore", "validatePods": "Ignore"}},
        "certificates": {"mode": "generate"}}))
    env.helm("upgrade", "gpupool", str(helmtool.CHART), "--namespace", NS, "-f", str(gen))

    def state() -> tuple[dict, set[str]]:
        secret = json.loads(env.kubectl("get", "secret", "-n", NS, "gpupool-webhook-tls",
                                        "-o", "json").stdout)["data"]
        bundles = set()
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            for cfg in json.loads(env.kubectl("get", kind, "-o", "json").stdout)["items"]:
                if cfg["metadata"]["name"].startswith("gpupool"):
                    bundles |= {wh["clientConfig"]["caBundle"] for wh in cfg["webhooks"]}
        return secret, bundles

    first, bundles = state()
    assert bundles == {first["caBundle"]}
    env.helm("upgrade", "gpupool", str(helmtool.CHART), "--namespace", NS, "-f", str(gen),
             "--set", "webhook.replicas=2")
    second, bundles_after = state()
    assert second == first and bundles_after == bundles
