"""gpupool installed into an end-to-end cluster from manifests/ (the self-signed overlay, as
`kubectl kustomize` renders it): everything but the workloads, with gpupool itself under
gunicorn on loopback and its webhook configurations pointed there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness import kit
from harness.controlplane import ControlPlane
from harness.kit import ROOT
from harness.servers import Server, generate_certs, start_server

# No kubelet runs the Deployment and DaemonSet here: gpupool runs on loopback instead.
KEEP = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
        "RoleBinding", "ConfigMap", "PriorityClass", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding"}
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def apply(cp: ControlPlane, objs: list[dict[str, Any]] | dict[str, Any], *extra: str
          ) -> subprocess.CompletedProcess[str]:
    docs = objs if isinstance(objs, list) else [objs]
    return cp.kubectl("apply", "-f", "-", *extra,
                      input="\n---\n".join(yaml.safe_dump(d) for d in docs), check=False)


def render(kubectl: Path, tmp: Path) -> list[dict[str, Any]]:
    tree = tmp / "manifests"
    shutil.copytree(ROOT / "manifests", tree, ignore=shutil.ignore_patterns("certs"))
    shutil.copytree(tmp / "certs", tree / "overlays/self-signed/certs")
    out = subprocess.run([str(kubectl), "kustomize", str(tree / "overlays/self-signed")],
                         check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def webhook_token_kubeconfig(cp: ControlPlane, path: Path) -> Path:
    """gpupool's own identity (its ServiceAccount's token), not the admin's."""
    return cp.token_kubeconfig("webhook", path)


def prepare(cp: ControlPlane, tmp: Path) -> list[dict[str, Any]]:
    """Certificates and everything but the workloads and webhooks; returns the rendered
    objects (the webhook configurations among them)."""
    generate_certs(tmp / "certs")
    objs = render(cp.bin / "kubectl", tmp)
    r = apply(cp, [o for o in objs if o["kind"] in KEEP])
    assert r.returncode == 0, r.stderr
    return objs


def serve(cp: ControlPlane, tmp: Path, objs: list[dict[str, Any]],
          policy: Path | None = None, extra: Sequence[str] = ()) -> Server:
    """gpupool under gunicorn with its ServiceAccount's token, and its webhooks registered
    (with ``policy``, that PoolPolicy file instead of the built-in one; ``extra``: more of
    ``gpupool serve``'s flags)."""
    server = start_server(tmp, "--kubeconfig",
                          str(webhook_token_kubeconfig(cp, tmp / "webhook.kubeconfig")),
                          "--audit-file", str(tmp / "gpupool-audit.log"),
                          *(["--policy", str(policy)] if policy else []), *extra, workers=2)
    register(cp, objs, server.url)
    return server


def register(cp: ControlPlane, objs: list[dict[str, Any]], url: str) -> None:
    """Register gpupool's webhook configurations ``objs`` against the server at ``url``."""
    port = url.rsplit(":", 1)[1]
    for cfg in objs:
        if cfg["kind"] in WEBHOOK_KINDS:
            cfg = yaml.safe_load(yaml.safe_dump(cfg))  # a copy: registered again later
            for wh in cfg["webhooks"]:
                path = wh["clientConfig"].pop("service")["path"]
                wh["clientConfig"]["url"] = f"https://127.0.0.1:{port}{path}"
            r = apply(cp, cfg)
            assert r.returncode == 0, r.stderr


def unregister(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    for cfg in objs:
        if cfg["kind"] in WEBHOOK_KINDS:
            cp.kubectl("delete", cfg["kind"], cfg["metadata"]["name"])


def agent(cp: ControlPlane, node: str, paths: dict[str, Path]) -> None:
    """One real `gpupool agent --once` run for ``node`` on the spec directories, runtime
    configs and driver GPU list in ``paths`` (etc, run, config, containerd, driver; and the
    kubelet's checkpoint, where ``checkpoint`` names one)."""
    extra = ["--kubelet-checkpoint", str(paths["checkpoint"])] if "checkpoint" in paths \
        else []
    subprocess.run([sys.executable, "-m", "webhook", "agent", "--once", "--node-name", node,
                    "--kubeconfig", str(cp.kubeconfig), "--cdi-dir", str(paths["etc"]),
                    "--cdi-dir", str(paths["run"]), "--runtime-config", str(paths["config"]),
                    "--containerd-config", str(paths["containerd"]),
                    "--driver-gpus-dir", str(paths["driver"]), *extra],
                   check=True, capture_output=True, timeout=60)


#: Where NVIDIA's standalone chart runs its device plugin (a namespace gpupool exempts).
PLUGIN_NS = "nvidia-device-plugin"


def device_plugin(cp: ControlPlane, node: str, strategy: str | None) -> None:
    """The device-plugin pod bound to ``node``, as NVIDIA's chart runs it (its strategy in
    ``DEVICE_LIST_STRATEGY``): what gpupool's agent learns the node's strategy from
    (docs/cdi-inventory.md). No kubelet runs it here; the agent reads the pod. None: no
    plugin pod runs there."""
    name = f"nvdp-{node}"
    env = [{"name": "DEVICE_LIST_STRATEGY", "value": strategy}] if strategy else None
    got = cp.kubectl("get", "pod", name, "-n", PLUGIN_NS, "-o", "json", check=False)
    if got.returncode == 0:
        if env is not None and json.loads(got.stdout)["spec"]["containers"][0].get(
                "env") == env:
            return
        cp.kubectl("delete", "pod", name, "-n", PLUGIN_NS, "--force", "--grace-period=0",
                   "--wait=true", check=False)
    if env is None:
        return
    cp.kubectl("create", "namespace", PLUGIN_NS, check=False)
    r = apply(cp, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": PLUGIN_NS,
        "labels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
        "spec": {"nodeName": node, "containers": [{
            "name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.3",
            "env": env}]}})
    assert r.returncode == 0, r.stderr


def layout_strategy(paths: dict[str, Path]) -> str:
    """The strategy a node of this layout's plugin runs: a CDI one where its spec is on
    disk, else envvar."""
    return "cdi-annotations" if (paths["run"] / "k8s.device-plugin.nvidia.com-gpu.json"
                                 ).exists() else "envvar"


def wait_until(probe: Callable[[], bool], what: str, timeout: float = 60) -> None:
    kit.wait_until(probe, what, timeout, every=0.5)


def routing_installed(cp: ControlPlane) -> tuple[str | None, bool]:
    """What gpupool installed for routing in the API server, as kubectl shows it: the
    MutatingAdmissionPolicy's digest (None: no policy), and whether mutate.gpupool.io
    carries the condition that skips the pods it routed."""
    got = cp.kubectl("get", "mutatingadmissionpolicy", "gpupool-routing", "-o", "json",
                     check=False)
    digest = json.loads(got.stdout)["metadata"]["annotations"][
        "gpupool.io/routing-digest"] if got.returncode == 0 else None
    cfg = cp.kubectl("get", "mutatingwebhookconfiguration", "gpupool-mutating", "-o", "json",
                     check=False)
    hooks = json.loads(cfg.stdout)["webhooks"] if cfg.returncode == 0 else []
    return digest, any(c["name"] == "not-routed-by-policy" for w in hooks
                       if w["name"] == "mutate.gpupool.io" for c in w.get("matchConditions")
                       or [])


def validation_fails_open(cp: ControlPlane) -> None:
    """validate-pods.gpupool.io to ``failurePolicy: Ignore``: the outage choice
    docs/install.md describes once routing is in the API server."""
    cfg = json.loads(cp.kubectl("get", "validatingwebhookconfiguration", "gpupool-validating",
                                "-o", "json").stdout)
    cp.kubectl("patch", "validatingwebhookconfiguration", "gpupool-validating", "--type=json",
               "-p", json.dumps([{"op": "replace", "path": f"/webhooks/{i}/failurePolicy",
                                  "value": "Ignore"} for i, w in enumerate(cfg["webhooks"])
                                 if w["name"] == "validate-pods.gpupool.io"]))


def wait_for_webhooks(cp: ControlPlane, server: Server, namespace: str) -> None:
    """Registrations take effect asynchronously: probe until gpupool is seen mutating."""
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"containers": [{"name": "c", "image": "cuda",
                                      "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    last: list[str] = [""]

    def mutated() -> bool:
        r = apply(cp, probe, "--dry-run=server", "-o", "json")
        last[0] = r.stderr
        return r.returncode == 0 and "gpupool.io/pool" in r.stdout

    try:
        wait_until(mutated, "gpupool's webhooks to take effect")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {last[0]}\n{server.log.read_text()[-2000:]}") from None
