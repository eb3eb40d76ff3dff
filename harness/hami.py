"""HAMi's real programs in the end-to-end clusters, registered as HAMi's own chart does.

Built by tests/hami/build.sh from HAMi v2.10.0's sources (tests/hami/src, with their licence):

- `HamiWebhook`: HAMi's `scheduler.NewWebHook()` alone, served over TLS at /webhook by a
  small Go main of ours (no API server needed), for the admission-only suite;
- `HamiScheduler`: HAMi's own `cmd/scheduler`, as the chart deploys it: the webhook at
  /webhook and the scheduler extender's /filter and /bind, reading the nodes' device
  annotations through the API server.

Both run with the chart's flags (`--scheduler-name hami-scheduler`,
`--force-overwrite-default-scheduler=true`). Their registration, the extender's
KubeSchedulerConfiguration and the device config are rendered by `helm template` from HAMi's
chart (tests/fixtures/upstream/hami-chart, `customURL` pointing at the process), with the
caBundle filled in as the chart's patch job does. Nothing here imitates HAMi: what it
mutates, skips, denies, filters and binds is HAMi's code.
"""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from harness.gobuild import built
from harness.kit import ROOT, UPSTREAM
from harness.servers import free_port

BUILD = ROOT / "tests" / "hami" / "build.sh"
CHART = UPSTREAM / "hami-chart"
# The chart templates rendered here; the others need the `common` library chart, a
# dependency the stored chart does not carry.
TEMPLATES = ("scheduler/webhook.yaml", "scheduler/configmap.yaml",
             "scheduler/device-configmap.yaml")
# klog V(5) line HAMi's Handle writes for every pod it processes (webhook.go `template`).
_PROCESSED = re.compile(r"Processing admission hook for pod ([^/\s]*)/([^,\s]*), UID:")
LOCK = "hami.io/mutex.lock"  # HAMi's node lock: "<time>,<namespace>,<pod>"


def binaries() -> Path:
    return built(BUILD, "HAMi's scheduler and webhook")


def render(helm: Path, work: Path, template: str, *sets: str) -> dict[str, Any]:
    """One template of HAMi's chart, as `helm template` renders it with these values."""
    chart = work / "hami-chart"
    for f in ("Chart.yaml", "values.yaml", "templates/_helpers.tpl", "templates/_commons.tpl",
              *(f"templates/{t}" for t in (*TEMPLATES, template))):
        if not (chart / f).exists():
            (chart / f).parent.mkdir(parents=True, exist_ok=True)
            (chart / f).write_bytes((CHART / f).read_bytes())
    args = [a for s in sets for a in ("--set", s)]
    r = subprocess.run([str(helm), "template", "hami", str(chart), "--namespace", "kube-system",
                        "--show-only", f"templates/{template}", *args],
                       capture_output=True, text=True, check=True, timeout=120)
    found: dict[str, Any] = yaml.safe_load(r.stdout)
    return found


class TlsProgram:
    """A Go program serving TLS on loopback (HAMi's, or the benchmark's stand-in webhook),
    ready once ``/healthz`` answers, its log kept for what it processed."""

    def __init__(self, cert: Path, key: Path, log: Path) -> None:
        self.cert, self.key, self.log = cert, key, log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        out = self.log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        ctx = ssl.create_default_context(cafile=str(self.cert.parent / "ca.crt"))
        ctx.check_hostname = False
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz",
                                            context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError as err:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.log.read_text(errors="replace")[-4000:]
                    raise RuntimeError(f"{cmd[0]} did not start:\n{log}") from err
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class HamiProgram(TlsProgram):
    """A HAMi program serving HAMi's admission webhook: its webhook binary, and its scheduler,
    which serves the same webhook."""

    def configuration(self, helm: Path, ca_bundle: str, work: Path) -> dict[str, Any]:
        """The chart's MutatingWebhookConfiguration, pointed at this process."""
        cfg = render(helm, work, "scheduler/webhook.yaml",
                     "scheduler.admissionWebhook.customURL.enabled=true",
                     "scheduler.admissionWebhook.customURL.host=127.0.0.1",
                     f"scheduler.admissionWebhook.customURL.port={self.port}",
                     "scheduler.admissionWebhook.customURL.path=/webhook")
        for wh in cfg["webhooks"]:
            wh["clientConfig"]["caBundle"] = ca_bundle  # what the chart's patch job adds
        return cfg


class HamiWebhook(HamiProgram):
    @property
    def seen(self) -> set[str]:
        """Names of the pods HAMi's webhook processed (not merely skipped), from its log."""
        return {m.group(2) for m in _PROCESSED.finditer(self.log.read_text(errors="replace"))}

    def start(self, verbosity: int = 5) -> HamiWebhook:
        """``verbosity`` 5 logs each pod processed (``seen`` reads it); the chart's default,
        as a throughput benchmark wants it, is lower."""
        self.launch([str(binaries() / "hami-webhook"), "--bind", f"127.0.0.1:{self.port}",
                     "--cert", str(self.cert), "--key", str(self.key),
                     "--scheduler-name", "hami-scheduler",
                     "--force-overwrite-default-scheduler=true", f"-v={verbosity}",
                     "--logtostderr"])
        return self


class HamiScheduler(HamiProgram):
    def start(self, helm: Path, kubeconfig: Path, work: Path,
              plugin_kubeconfig: Path | None = None) -> HamiScheduler:
        """``kubeconfig``: the scheduler's identity; ``plugin_kubeconfig``: the device
        plugin's, which the lock releaser (its test double) acts as."""
        devices = render(helm, work, "scheduler/device-configmap.yaml")
        device_config = work / "hami-device-config.yaml"
        device_config.write_text(devices["data"]["device-config.yaml"])
        self.launch([str(binaries() / "scheduler"), f"--http_bind=127.0.0.1:{self.port}",
                     f"--cert_file={self.cert}", f"--key_file={self.key}",
                     "--scheduler-name=hami-scheduler",
                     f"--metrics-bind-address=127.0.0.1:{free_port()}",
                     "--node-scheduler-policy=binpack", "--gpu-scheduler-policy=spread",
                     "--force-overwrite-default-scheduler=true",
                     f"--device-config-file={device_config}", "--leader-elect=false",
                     # With no device plugin answering its handshakes, HAMi's register loop
                     # rewrites every vendor's handshake annotation on every node while it
                     # holds the lock that /filter waits on; at the client's default 5 QPS
                     # one round took 20 s and every pod waited for it. HAMi's own flags
                     # lift the client limit instead.
                     "--kube-qps=500", "--kube-burst=1000", "--v=5"],
                    env={"KUBECONFIG": str(kubeconfig)})
        self._stop = threading.Event()
        self._releaser = threading.Thread(target=self._release_locks,
                                          args=(plugin_kubeconfig or kubeconfig,), daemon=True)
        self._releaser.start()
        return self

    def stop(self) -> None:
        if getattr(self, "_stop", None) is not None:
            self._stop.set()
        super().stop()

    def _release_locks(self, kubeconfig: Path) -> None:
        """A test double for the one thing HAMi's device plugin does that the chain needs:
        HAMi's bind locks the node (`hami.io/mutex.lock`) until the device plugin's Allocate
        marks the pod `hami.io/bind-phase: success` and releases the lock. No device plugin
        runs here (no GPU, no kubelet), so once a locked pod is bound this does both, as
        the plugin's `PodAllocationSuccess` does; without it each node takes one pod per
        five minutes (the lock's timeout)."""
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException

        api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
        while not self._stop.wait(0.2):
            try:
                for node in api.list_node().items:
                    meta = node.metadata
                    assert meta is not None and meta.name is not None  # the API sets both
                    lock = (meta.annotations or {}).get(LOCK)
                    if not lock or lock.count(",") != 2:
                        continue
                    _, ns, name = lock.split(",")
                    try:
                        pod = api.read_namespaced_pod(name, ns)
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
                        continue  # HAMi releases a dangling lock itself
                    if pod.spec is not None and pod.spec.node_name:
                        api.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {
                            "hami.io/bind-phase": "success"}}})
                        api.patch_node(meta.name,
                                       {"metadata": {"annotations": {LOCK: None}}})
            except Exception as exc:  # the API server may be going away at teardown
                if self._stop.is_set():
                    return
                with self.log.with_suffix(".releases").open("a") as f:
                    f.write(f"{exc!r}\n")
                time.sleep(0.5)

    def kube_scheduler_config(self, helm: Path, work: Path, kubeconfig: Path) -> dict[str, Any]:
        """The chart's KubeSchedulerConfiguration for HAMi's kube-scheduler: one profile,
        `hami-scheduler`, with this process as its extender (filter, bind)."""
        cm = render(helm, work, "scheduler/configmap.yaml",
                    "scheduler.leaderElect=false")
        cfg: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
        for ext in cfg["extenders"]:
            ext["urlPrefix"] = f"https://127.0.0.1:{self.port}"
        cfg["clientConnection"] = {"kubeconfig": str(kubeconfig)}
        return cfg
