"""The device plugin's strategy learned from its pod, through a real kube-apiserver.

NVIDIA's standalone device-plugin chart as it deploys with ``config.map``: config-manager
picks one of a ConfigMap's configs by the node's ``nvidia.com/device-plugin.config`` label,
and the plugin reads its strategy from that file. Nothing on the node's disk says so (the
plugin wrote no CDI spec), no ClusterPolicy or HAMi DaemonSet exists, so ``delivery: detect``
alone would read the node as an envvar one. The real ``gpupool agent`` lists the pods on its
node and reads the ConfigMap; ``gpupool check`` against the live cluster then judges the GPU
pod as the plugin will hand it GPUs, and follows the label when it changes. What the plugin
runs with is the plugin's own programs' answer: its config-manager, run against the same API
server, and its NewConfig reading the file that picks.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from harness import install
from harness.controlplane import ControlPlane
from harness.gobuild import built
from harness.kit import ROOT
from harness.layouts import fake_driver, per_uuid_spec, write_layout
from tests.plugincases import BUILD as PLUGIN_JUDGE
from tests.plugincases import OPERATOR_NS, OPERATOR_RELEASES, Judge, operator_pod
from tests.unit.engine.test_steering import ONE_POOL as POLICY

NODE = "gpu-1"
NS = "nvidia-device-plugin"
CONFIGS = {"cdi": "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n",
           "envvar": "version: v1\nflags:\n  plugin:\n    deviceListStrategy: envvar\n"}


def _plugin_pod() -> dict:
    image = "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
    manager_env = [{"name": "NODE_LABEL", "value": "nvidia.com/device-plugin.config"},
                   {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
                   {"name": "CONFIG_FILE_DST", "value": "/config/config.yaml"},
                   {"name": "DEFAULT_CONFIG", "value": "envvar"}]
    mounts = [{"name": "available-configs", "mountPath": "/available-configs"},
              {"name": "config", "mountPath": "/config"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nvdp-gpu-1", "namespace": NS,
                         "labels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
            "spec": {"nodeName": NODE,
                     "initContainers": [{"name": "init", "image": image,
                                         "command": ["config-manager"], "env": manager_env,
                                         "volumeMounts": mounts}],
                     "containers": [{"name": "nvidia-device-plugin-ctr", "image": image,
                                     "command": ["nvidia-device-plugin"],
                                     "env": [{"name": "CONFIG_FILE",
                                              "value": "/config/config.yaml"}],
                                     "volumeMounts": [mounts[1]]}],
                     "volumes": [{"name": "available-configs",
                                  "configMap": {"name": "nvdp-configs"}},
                                 {"name": "config", "emptyDir": {}}]}}


@pytest.fixture(scope="module")
def cluster(k8s_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pluginpods")
    cp = ControlPlane(tmp / "cp", k8s_bin).start()
    try:
        layout = write_layout(tmp / "layout", "operator-management")
        # the GPUs by UUID under the management kind: envvar resolves; the plugin's own CDI
        # names (k8s.device-plugin.nvidia.com/gpu=GPU-...) are defined by no spec
        (layout["run"] / "management.nvidia.com-gpu-uuid.yaml").write_text(per_uuid_spec())
        layout["driver"] = fake_driver(tmp / "driver")
        res = {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": NODE, "labels": {"nvidia.com/gpu.present": "true",
                                     "nvidia.com/device-plugin.config": "cdi",
                                     "kubernetes.io/hostname": NODE}},
            "status": {"capacity": res, "allocatable": res}}
        cp.kubectl("create", "namespace", NS)
        for obj in (node, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": "nvdp-configs", "namespace": NS}, "data": CONFIGS}, _plugin_pod()):
            r = install.apply(cp, obj)
            assert r.returncode == 0, r.stderr
        # no node controller to lift the taint a new node starts with, and no kubelet: the
        # node's allocatable GPUs are set as its kubelet would report them
        cp.kubectl("taint", "node", NODE, "node.kubernetes.io/not-ready:NoSchedule-",
                   check=False)
        cp.kubectl("patch", "node", NODE, "--subresource=status", "--type=merge", "-p",
                   json.dumps({"status": {"capacity": res, "allocatable": res}}))
        (tmp / "policy.yaml").write_text(POLICY)
        (tmp / "pod.yaml").write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}))
        yield cp, tmp, layout
    finally:
        cp.stop()


def _what_the_plugin_runs_with(cp: ControlPlane, tmp, pod: dict) -> list[str]:
    """The truth, from the plugin's own programs: its config-manager (built from
    k8s-device-plugin v0.19.3 cmd/config-manager) run against this API server with the
    pod's config-manager settings, writing the config it picks; then its own NewConfig
    (plugin-judge) reading that file as the plugin container would."""
    bin_dir = built(PLUGIN_JUDGE, "plugin-judge")
    src, dst = tmp / "available-configs", tmp / "config" / "config.yaml"
    src.mkdir(exist_ok=True)
    dst.parent.mkdir(exist_ok=True)
    dst.unlink(missing_ok=True)
    for name, text in CONFIGS.items():
        (src / name).write_text(text)
    init = pod["spec"]["initContainers"][0]
    env = {e["name"]: e["value"] for e in init["env"]}
    # Run as the chart's sidecar runs it (ONESHOT false): its first pass takes the default
    # before its node informer has reported the label (SyncableConfig.Get returns at once
    # on the first call, which is the init container's whole run), its second the label's
    # config; it then waits for the next change, so it is stopped there.
    log = tmp / "config-manager.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(bin_dir / "config-manager")], stdout=out, stderr=subprocess.STDOUT,
            env={**env, "ONESHOT": "false", "SEND_SIGNAL": "false", "NODE_NAME": NODE,
                 "KUBECONFIG": str(cp.kubeconfig), "CONFIG_FILE_SRCDIR": str(src),
                 "CONFIG_FILE_DST": str(dst)})
        try:
            install.wait_until(lambda: log.read_text().count("Waiting for change") >= 3,
                               "config-manager's pass on the node's label", 30)
        finally:
            proc.kill()
            proc.wait()
    (answer,) = Judge(bin_dir).ask([{"args": [], "env": {"CONFIG_FILE": "/config/config.yaml"},
                                     "config": dst.read_text()}])
    return answer["strategies"]


def _inventory(cp: ControlPlane) -> dict:
    n = json.loads(cp.kubectl("get", "node", NODE, "-o", "json").stdout)
    return json.loads(n["metadata"]["annotations"]["gpupool.io/cdi-inventory"])


def _check(cp: ControlPlane, tmp) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", "check", "-f", str(tmp / "pod.yaml"),
                           "--policy", str(tmp / "policy.yaml"), "--kubeconfig",
                           str(cp.kubeconfig), "-o", "json"],
                          capture_output=True, text=True, timeout=120)


def test_the_agent_learns_the_strategy_config_manager_picks_and_check_follows_it(cluster):
    cp, tmp, layout = cluster
    install.agent(cp, NODE, layout)
    (plugin,) = _inventory(cp)["plugins"]
    assert plugin == {"pod": f"{NS}/nvdp-gpu-1", "container": "nvidia-device-plugin-ctr",
                      "deployedBy": "NVIDIA's device-plugin chart",
                      "strategies": ["cdi-cri"], "source": "config file /config/config.yaml"}
    assert plugin["strategies"] == _what_the_plugin_runs_with(cp, tmp, _plugin_pod())
    r = _check(cp, tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "CDIDeviceMissing" in r.stdout and "k8s.device-plugin.nvidia.com/gpu=GPU-" in r.stdout
    doctor = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--policy",
                             str(tmp / "policy.yaml"), "--kubeconfig", str(cp.kubeconfig)],
                            capture_output=True, text=True, timeout=120)
    assert f"device plugin: {NS}/nvdp-gpu-1 (nvidia-device-plugin-ctr, deployed by NVIDIA's " \
        "device-plugin chart): cdi-cri (config file /config/config.yaml)" in doctor.stdout, \
        doctor.stdout + doctor.stderr
    # the node relabelled to the envvar config: the plugin hands UUIDs, which resolve
    cp.kubectl("label", "node", NODE, "nvidia.com/device-plugin.config=envvar", "--overwrite")
    install.agent(cp, NODE, layout)
    assert _inventory(cp)["plugins"][0]["strategies"] == ["envvar"] == \
        _what_the_plugin_runs_with(cp, tmp, _plugin_pod())
    r = _check(cp, tmp)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("release", OPERATOR_RELEASES)
def test_the_gpu_operators_own_plugin_pod_is_learned_and_printed_as_published(cluster,
                                                                                release):
    """Issue 46, items 1 and 2: the GPU Operator's plugin, as its real DaemonSet template and
    entrypoint ConfigMap at each release run it (``/bin/sh -c /bin/entrypoint.sh``), served
    by the API server. The real agent learns its strategy from the pod (the plugin's own
    NewConfig, given what the entrypoint execs it with, is the judge); what
    ``agent --once --print`` shows is what it publishes; doctor says who deployed it."""
    import random

    cp, tmp, _ = cluster
    name = f"gpu-op-{release.replace('.', '-')}"
    layout = write_layout(tmp / name, "device-plugin")
    layout["driver"] = fake_driver(tmp / name / "driver")
    res = {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"nvidia.com/gpu.present": "true",
                                 "nvidia.com/gpu.deploy.device-plugin": "true",
                                 "kubernetes.io/hostname": name}},
            "status": {"capacity": res, "allocatable": res}}
    case = operator_pod(random.Random(release), name, "cdi-annotations,cdi-cri", "single",
                        release)
    pod = case.pod
    pod["metadata"].pop("ownerReferences")  # no DaemonSet here to own it
    cp.kubectl("create", "namespace", OPERATOR_NS, check=False)
    cp.kubectl("create", "serviceaccount", "nvidia-device-plugin", "-n", OPERATOR_NS,
               check=False)
    config_maps = [{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": cm, "namespace": ns}, "data": data}
                   for (ns, cm), data in case.config_maps.items()]
    for obj in (node, *config_maps, pod):
        r = install.apply(cp, obj)
        assert r.returncode == 0, r.stderr
    for k, v in case.labels.items():
        cp.kubectl("label", "node", name, f"{k}={v}", "--overwrite")
    (real,) = Judge(built(PLUGIN_JUDGE, "plugin-judge")).ask([case.request])
    printed = subprocess.run(
        [sys.executable, "-m", "webhook", "agent", "--once", "--print", "--node-name", name,
         "--kubeconfig", str(cp.kubeconfig), "--cdi-dir", str(layout["etc"]),
         "--cdi-dir", str(layout["run"]), "--runtime-config", str(layout["config"]),
         "--containerd-config", str(layout["containerd"]),
         "--driver-gpus-dir", str(layout["driver"])],
        capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    (plugin,) = json.loads(printed.stdout)["plugins"]
    assert plugin["deployedBy"] == "the GPU Operator", plugin
    assert plugin["container"] == "nvidia-device-plugin"
    assert plugin["strategies"] == real["strategies"] == ["cdi-annotations", "cdi-cri"]
    assert plugin["migStrategy"] == real["migStrategy"] == "single"
    install.agent(cp, name, layout)
    n = json.loads(cp.kubectl("get", "node", name, "-o", "json").stdout)
    published = json.loads(n["metadata"]["annotations"]["gpupool.io/cdi-inventory"])
    assert published["plugins"] == [plugin]
    doctor = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--policy",
                             str(tmp / "policy.yaml"), "--kubeconfig", str(cp.kubeconfig)],
                            capture_output=True, text=True, timeout=120)
    assert f"device plugin: {OPERATOR_NS}/{pod['metadata']['name']} (nvidia-device-plugin, " \
        "deployed by the GPU Operator): cdi-annotations,cdi-cri (variable " \
        "DEVICE_LIST_STRATEGY), MIG strategy single" in doctor.stdout, doctor.stdout
    cp.kubectl("delete", "node", name)
    cp.kubectl("delete", "pod", "-n", OPERATOR_NS, pod["metadata"]["name"], "--wait=false")


def test_without_the_plugins_objects_readable_the_node_says_what_is_unknown(cluster):
    """The ConfigMap gone: config-manager has nothing to pick, the plugin never starts; the
    inventory says so, naming the ConfigMap, and nothing is denied for it."""
    cp, tmp, layout = cluster
    cp.kubectl("delete", "configmap", "nvdp-configs", "-n", NS)
    install.agent(cp, NODE, layout)
    (plugin,) = _inventory(cp)["plugins"]
    assert "strategies" not in plugin and "nvdp-configs" in plugin["unknown"], plugin
    assert _check(cp, tmp).returncode == 0


def test_the_agents_role_lets_it_read_pods_and_configmaps_and_nothing_more(cluster):
    """The kustomize base's ClusterRole for the agent, asked of the real authorizer."""
    cp, _, _ = cluster
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text())
            if d and d["metadata"]["name"] == "gpupool-agent"]
    for d in docs:
        for s in d.get("subjects") or ():
            s["namespace"] = "gpupool-system"
        assert install.apply(cp, d).returncode == 0
    who = "--as=system:serviceaccount:gpupool-system:gpupool-agent"

    def can(*what: str) -> bool:
        return cp.kubectl("auth", "can-i", *what, who, check=False).stdout.strip() == "yes"
    assert can("list", "pods", "-A") and can("get", "configmaps", "-n", NS)
    assert can("patch", "nodes")
    assert not can("get", "secrets", "-n", NS) and not can("list", "configmaps", "-A")
    assert not can("delete", "pods", "-n", NS) and not can("watch", "pods", "-A")
