"""Device-plugin pods as teams deploy them, and the plugin's own code as their judge.

``plugin_pod`` draws one NVIDIA (or HAMi) device-plugin pod: the standalone chart (strategy in
a variable, or in a config file from a ConfigMap, picked by config-manager), the GPU Operator's
own DaemonSet (``operator_pod``: its real template and entrypoint ConfigMap from
tests/fixtures/upstream/gpu-operator, with the changes its controller makes), flags, HAMi's
chart (a variable, its own config file), and the corners:
a strategy list, an empty or unknown strategy, a config file that is missing, does not parse
or has another version. ``judge`` asks ``plugin-judge`` (tests/pluginjudge: the plugin's
``NewConfig`` and CLI library) what the plugin settles on, from the same arguments,
environment and file text the pod gives it.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.kit import ROOT, UPSTREAM

BUILD = ROOT / "tests" / "pluginjudge" / "build.sh"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
_STRATEGIES = ("envvar", "cdi-annotations", "cdi-cri", "envvar,cdi-annotations",
               "cdi-annotations,cdi-cri")
_CORNERS = ("", "bogus", " cdi-cri", "volume-mounts")


@dataclass
class PluginPod:
    pod: dict[str, Any]
    config_maps: dict[tuple[str, str], dict[str, str]]
    labels: dict[str, str]
    #: what the plugin process is given: (args after its command, env, config file text)
    request: dict[str, Any]
    what: str


def _config(rng: random.Random, strategy: str, corners: bool = True) -> str:
    shape = rng.choice(("string", "list", "absent", "absent-flags"))
    if shape.startswith("absent") and strategy != "envvar" and not corners:
        shape = "string"  # (only envvar can be meant by saying nothing)
    if shape == "string":
        body = f"flags:\n  plugin:\n    deviceListStrategy: {strategy}\n"
    elif shape == "list":
        body = "flags:\n  plugin:\n    deviceListStrategy: [" + ", ".join(
            strategy.split(",")) + "]\n"
    elif shape == "absent":
        body = "flags:\n  migStrategy: none\n"
    else:
        body = ("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                "      replicas: 2\n")
    return ("version: v1\n" if rng.random() < 0.7 else "") + body


def plugin_pod(rng: random.Random, name: str, *, corners: bool = True,
               strategy: str | None = None, mig: str | None = "draw",
               way: str | None = None) -> PluginPod:
    """One device-plugin pod on node ``name``. ``strategy``: the strategy its deployer
    meant (drawn when None); ``mig``: the MIG strategy it is given (None: none given, the
    plugin's default; "draw": drawn); ``corners`` adds the setups a plugin refuses;
    ``way``: how it is deployed (drawn when None)."""
    if mig == "draw":
        mig = rng.choice((None, None, "none", "single", "mixed",
                          *(("bogus",) if corners else ())))
    meant = strategy or rng.choice(_STRATEGIES)
    if corners and rng.random() < 0.08:
        meant = rng.choice(_CORNERS)
    way = way or rng.choice(("env", "env", "flag", "config", "config-manager", "hami",
                             "default", "operator", "operator"))
    if way == "operator":
        return operator_pod(rng, name, meant, mig)
    if way == "default" and meant != "envvar" and not corners:
        way = "env"  # (only envvar can be meant by saying nothing)
    ns = "nvidia-device-plugin"
    container: dict[str, Any] = {"name": "nvidia-device-plugin-ctr",
                                 "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"}
    spec: dict[str, Any] = {"containers": [container], "volumes": []}
    config_maps: dict[tuple[str, str], dict[str, str]] = {}
    labels: dict[str, str] = {}
    args: list[str] = []
    env: dict[str, str] = {}
    text: str | None = None
    if way == "env":
        env["DEVICE_LIST_STRATEGY"] = meant
    elif way == "flag":
        container["command"] = ["nvidia-device-plugin"]
        parts = meant.split(",")
        if rng.random() < 0.5 or len(parts) == 1:
            args = [rng.choice(("--device-list-strategy=", "-device-list-strategy="))
                    + meant]
        else:
            args = [a for p in parts for a in ("--device-list-strategy", p)]
        if rng.random() < 0.3:
            args.insert(0, "--mig-strategy=none")
        container["args"] = args
    elif way == "hami":
        ns = "kube-system"
        container.update(name="device-plugin", image="projecthami/hami:v2.7.0",
                         command=["nvidia-device-plugin", "--config-file=/device-config.yaml",
                                  "--mig-strategy=none"])
        args = container["command"][1:]
        env["DEVICE_LIST_STRATEGY"] = meant
        container["volumeMounts"] = [{"name": "device-config",
                                      "mountPath": "/device-config.yaml",
                                      "subPath": "device-config.yaml"}]
        spec["volumes"].append({"name": "device-config",
                                "configMap": {"name": "hami-device-plugin"}})
        text = "nvidia:\n  resourceCountName: nvidia.com/gpu\n  defaultMemory: 0\n"
        config_maps[(ns, "hami-device-plugin")] = {"device-config.yaml": text}
    elif way in ("config", "config-manager"):
        text = _config(rng, meant, corners)
        if corners and rng.random() < 0.1:
            text = rng.choice(("version: v2\n", "flags: [\n", "flags:\n  plugin:\n    "
                               "deviceListStrategy: {a: b}\n"))
        missing = corners and rng.random() < 0.05
        if way == "config":
            env["CONFIG_FILE"] = "/config/config.yaml"
            container["volumeMounts"] = [{"name": "config", "mountPath": "/config"}]
            spec["volumes"].append({"name": "config", "configMap": {"name": "dp-config"}})
            config_maps[(ns, "dp-config")] = {} if missing else {"config.yaml": text}
        else:  # the standalone chart with config.map: config-manager picks one by label
            container["volumeMounts"] = [{"name": "config", "mountPath": "/config"}]
            env["CONFIG_FILE"] = "/config/config.yaml"
            spec["volumes"] += [{"name": "config", "emptyDir": {}},
                                {"name": "available-configs",
                                 "configMap": {"name": "dp-configs"}}]
            manager = {"name": "nvidia-device-plugin-init",
                       "image": container["image"], "command": ["config-manager"],
                       "env": [{"name": "ONESHOT", "value": "true"},
                               {"name": "NODE_LABEL", "value": CONFIG_LABEL},
                               {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
                               {"name": "CONFIG_FILE_DST", "value": "/config/config.yaml"},
                               {"name": "DEFAULT_CONFIG", "value": "default"},
                               {"name": "FALLBACK_STRATEGIES", "value": "named,single"}],
                       "volumeMounts": [{"name": "available-configs",
                                         "mountPath": "/available-configs"},
                                        {"name": "config", "mountPath": "/config"}]}
            spec["initContainers"] = [manager]
            other = _config(rng, rng.choice(_STRATEGIES))
            if rng.random() < 0.5:
                labels[CONFIG_LABEL] = "picked"
                configs = {"default": other, "picked": text}
            else:
                configs = {"default": text, "other": other}
            if missing:
                configs.pop(labels.get(CONFIG_LABEL, "default"))
                text = None
            config_maps[(ns, "dp-configs")] = configs
        if missing and way == "config":
            text = None
    if mig is not None:
        if way in ("flag", "hami"):
            args[:] = [a for a in args if not a.startswith("--mig-strategy")]
            args.append(f"--mig-strategy={mig}")
            container["command" if way == "hami" else "args"] = (
                ["nvidia-device-plugin", *args] if way == "hami" else args)
        else:
            env["MIG_STRATEGY"] = mig
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"device-plugin-{name}", "namespace": ns},
           "spec": {"nodeName": name, **spec}, "status": {"phase": "Running"}}
    request: dict[str, Any] = {"args": args, "env": env}
    if text is not None:
        request["config"] = text
    if way in ("config", "config-manager") and text is None:
        # the path it names holds nothing
        request["env"] = {**env, "CONFIG_FILE": "/nonexistent/config.yaml"}
    return PluginPod(pod, config_maps, labels, request, f"plugin {way} {meant!r}")


OPERATOR_RELEASES = ("v25.10.0", "v26.3.0", "v26.7.0")
OPERATOR_NS = "gpu-operator"
ENTRYPOINT_CM = "nvidia-device-plugin-entrypoint"
#: What the operator's validator writes to driver-ready, which the entrypoint sources with
#: ``set -o allexport`` (gpu-operator v26.3.0 cmd/nvidia-validator/main.go, lines 917-921).
DRIVER_READY = {"IS_HOST_DRIVER": "true", "NVIDIA_DRIVER_ROOT": "/",
                "DRIVER_ROOT_CTR_PATH": "/host", "NVIDIA_DEV_ROOT": "/",
                "DEV_ROOT_CTR_PATH": "/host"}


def _set_env(c: dict[str, Any], name: str, value: str) -> None:
    """The operator's ``setContainerEnv``: replace the value in place, else append."""
    for e in c.setdefault("env", []):
        if e["name"] == name:
            e.clear()
            e.update(name=name, value=value)
            return
    c["env"].append({"name": name, "value": value})


def operator_pod(rng: random.Random, name: str, meant: str, mig: str | None,
                 release: str | None = None) -> PluginPod:
    """The device-plugin pod the GPU Operator runs on node ``name``: its own DaemonSet
    template and entrypoint ConfigMap at one of the releases teams run, with what its
    controller changes (gpu-operator v26.3.0 controllers/object_controls.go,
    ``TransformDevicePlugin``): the image; with CDI on, ``transformDevicePluginCtrForCDI``'s
    ``DEVICE_LIST_STRATEGY=cdi-annotations,cdi-cri``; a strategy the ClusterPolicy's
    ``devicePlugin.env`` sets over both; ``applyMIGConfiguration``'s ``MIG_STRATEGY``; and
    ``handleDevicePluginConfig``: without a custom config its config-manager containers
    removed, with one ``CONFIG_FILE`` and config-manager picking the file by node label."""
    release = release or rng.choice(OPERATOR_RELEASES)
    base = UPSTREAM / "gpu-operator" / release
    ds = yaml.safe_load((base / "state-device-plugin-0500_daemonset.yaml").read_text())
    entry = yaml.safe_load((base / "state-device-plugin-0400_configmap.yaml").read_text())
    template = copy.deepcopy(ds["spec"]["template"])
    spec = template["spec"]
    image = "nvcr.io/nvidia/k8s-device-plugin:v0.18.1"
    for c in (*spec.get("initContainers", ()), *spec["containers"]):
        if "FILLED" in str(c.get("image")):
            c["image"] = image
    main = next(c for c in spec["containers"] if c["name"] == "nvidia-device-plugin")
    if meant == "cdi-annotations,cdi-cri" or (meant != "envvar" and rng.random() < 0.5):
        _set_env(main, "CDI_ENABLED", "true")
        _set_env(main, "DEVICE_LIST_STRATEGY", "cdi-annotations,cdi-cri")
        _set_env(main, "CDI_ANNOTATION_PREFIX", "cdi.k8s.io/")
        _set_env(main, "NVIDIA_CDI_HOOK_PATH", "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    if meant not in ("envvar", "cdi-annotations,cdi-cri") or rng.random() < 0.2:
        _set_env(main, "DEVICE_LIST_STRATEGY", meant)  # the ClusterPolicy's devicePlugin.env
    if mig is None:
        _set_env(main, "NVIDIA_MIG_MONITOR_DEVICES", "all")
    else:
        _set_env(main, "MIG_STRATEGY", mig)
        if mig != "none":
            _set_env(main, "NVIDIA_MIG_MONITOR_DEVICES", "all")
    config_maps: dict[tuple[str, str], dict[str, str]] = {
        (OPERATOR_NS, ENTRYPOINT_CM): {str(k): str(v) for k, v in entry["data"].items()}}
    labels: dict[str, str] = {}
    text: str | None = None
    if rng.random() < 0.3:  # the ClusterPolicy's devicePlugin.config: a ConfigMap of configs
        cm = "device-plugin-configs"
        default = rng.choice(("", "default"))
        configs = {"default": _config(rng, rng.choice(_STRATEGIES), corners=False),
                   "a100": _config(rng, rng.choice(_STRATEGIES), corners=False)}
        config_maps[(OPERATOR_NS, cm)] = configs
        if rng.random() < 0.4:
            labels[CONFIG_LABEL] = "a100"
        picked = labels.get(CONFIG_LABEL) or default
        text = configs[picked] if picked else ""  # FALLBACK_STRATEGIES=empty
        mounts = [{"name": "config", "mountPath": "/config"},
                  {"name": cm, "mountPath": "/available-configs"}]
        for c in spec["containers"]:
            if c["name"] == "nvidia-device-plugin":
                _set_env(c, "CONFIG_FILE", "/config/config.yaml")
                c["volumeMounts"] += copy.deepcopy(mounts)
        init = next(c for c in spec["initContainers"] if c["name"] == "config-manager-init")
        _set_env(init, "DEFAULT_CONFIG", default)
        _set_env(init, "FALLBACK_STRATEGIES", "empty")
        init.setdefault("volumeMounts", []).extend(copy.deepcopy(mounts))
        side = next(c for c in spec["containers"] if c["name"] == "config-manager")
        _set_env(side, "DEFAULT_CONFIG", default)
        side.setdefault("volumeMounts", []).extend(copy.deepcopy(mounts))
        spec["volumes"] += [{"name": cm, "configMap": {"name": cm}},
                            {"name": "config", "emptyDir": {}}]
        spec["shareProcessNamespace"] = True
    else:
        spec["initContainers"] = [c for c in spec["initContainers"]
                                  if c["name"] != "config-manager-init"]
        spec["containers"] = [c for c in spec["containers"] if c["name"] != "config-manager"]
    spec["nodeName"] = name
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"nvidia-device-plugin-daemonset-{name}",
                        "namespace": OPERATOR_NS, "labels": dict(template["metadata"]["labels"]),
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                             "name": ds["metadata"]["name"], "uid": "x",
                                             "controller": True}]},
           "spec": spec, "status": {"phase": "Running"}}
    # What the plugin process gets: the entrypoint execs it with no argument, in the
    # container's environment plus what driver-ready exports.
    script = config_maps[(OPERATOR_NS, ENTRYPOINT_CM)]["entrypoint.sh"]
    exec_line = [ln.split() for ln in script.splitlines() if "exec nvidia-device-plugin" in ln]
    assert exec_line and exec_line[-1][:2] == ["exec", "nvidia-device-plugin"], release
    env = {**DRIVER_READY, **{e["name"]: e["value"] for e in main["env"] if "value" in e}}
    request: dict[str, Any] = {"args": exec_line[-1][2:], "env": env}
    if text is not None:
        request["config"] = text
    return PluginPod(pod, config_maps, labels, request,
                     f"plugin operator {release} {meant!r}")


def operator_learned(strategy: str, node: str = "node") -> tuple[Any, ...]:
    """What gpupool's agent learns from the GPU Operator's plugin pod on a node, the way it
    learns it (``settle_pods``): for fixtures whose nodes run the operator's plugin."""
    from webhook.api.pluginconfig import settle_pods

    case = operator_pod(random.Random(strategy), node, strategy, None, "v26.3.0")
    return settle_pods([case.pod], case.labels,
                       lambda ns, name: case.config_maps.get((ns, name)))


class Judge:
    """``plugin-judge``, one process for many questions."""

    def __init__(self, bin_dir: Path) -> None:
        self.exe = bin_dir / "plugin-judge"

    def ask(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not requests:
            return []
        r = subprocess.run([str(self.exe)], input="".join(json.dumps(q) + "\n"
                                                          for q in requests),
                           capture_output=True, text=True, timeout=120, check=True)
        answers = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(answers) == len(requests), r.stderr[-2000:]
        return answers
