"""HAMi's real mutating webhook in the end-to-end cluster.

The program is HAMi v2.10.0's own `scheduler.NewWebHook()` (tests/hami: HAMi's sources with
their licence, and a small Go main of ours that serves it over TLS at /webhook, as HAMi's
scheduler does). It runs on loopback with the chart's flags (`--scheduler-name hami-scheduler`,
`--force-overwrite-default-scheduler=true`), and is registered with the
MutatingWebhookConfiguration that HAMi's own chart renders (`helm template` of the chart in
tests/fixtures/upstream/hami-chart, `customURL` pointing at the process), with the caBundle
filled in as the chart's patch job does. Nothing here imitates HAMi: what it mutates, skips
or denies is HAMi's code.
"""

from __future__ import annotations

import re
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from tests.conftest import ROOT, UPSTREAM
from tests.integration.conftest import free_port
from tests.tools.gobuild import built

BUILD = ROOT / "tests" / "hami" / "build.sh"
CHART = UPSTREAM / "hami-chart"
# klog V(5) line HAMi's Handle writes for every pod it processes (webhook.go `template`).
_PROCESSED = re.compile(r"Processing admission hook for pod ([^/\s]*)/([^,\s]*), UID:")


def binary() -> Path:
    return built(BUILD, "HAMi's webhook") / "hami-webhook"


class HamiWebhook:
    def __init__(self, cert: Path, key: Path, log: Path) -> None:
        self.cert, self.key, self.log = cert, key, log
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> HamiWebhook:
        out = self.log.open("wb")
        self.proc = subprocess.Popen(
            [str(binary()), "--bind", f"127.0.0.1:{self.port}", "--cert", str(self.cert),
             "--key", str(self.key), "--scheduler-name", "hami-scheduler",
             "--force-overwrite-default-scheduler=true", "-v=5", "--logtostderr"],
            stdout=out, stderr=subprocess.STDOUT)
        ctx = ssl.create_default_context(cafile=str(self.cert.parent / "ca.crt"))
        ctx.check_hostname = False
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz",
                                            context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError as err:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.log.read_text()
                    raise RuntimeError(f"HAMi's webhook did not start:\n{log}") from err
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    @property
    def seen(self) -> set[str]:
        """Names of the pods HAMi's webhook processed (not merely skipped), from its log."""
        return {m.group(2) for m in _PROCESSED.finditer(self.log.read_text(errors="replace"))}

    def configuration(self, helm: Path, ca_bundle: str, work: Path) -> dict:
        """The chart's own registration for this process: `helm template` of HAMi's chart,
        cut to its helpers and the webhook template (the other templates need the `common`
        library chart, a dependency the stored chart does not carry)."""
        chart = work / "hami-chart"
        (chart / "templates" / "scheduler").mkdir(parents=True, exist_ok=True)
        for f in ("Chart.yaml", "values.yaml", "templates/_helpers.tpl",
                  "templates/scheduler/webhook.yaml"):
            (chart / f).write_bytes((CHART / f).read_bytes())
        r = subprocess.run(
            [str(helm), "template", "hami", str(chart), "--namespace", "kube-system",
             "--show-only", "templates/scheduler/webhook.yaml",
             "--set", "scheduler.admissionWebhook.customURL.enabled=true",
             "--set", "scheduler.admissionWebhook.customURL.host=127.0.0.1",
             "--set", f"scheduler.admissionWebhook.customURL.port={self.port}",
             "--set", "scheduler.admissionWebhook.customURL.path=/webhook"],
            capture_output=True, text=True, check=True, timeout=120)
        cfg = yaml.safe_load(r.stdout)
        for wh in cfg["webhooks"]:
            wh["clientConfig"]["caBundle"] = ca_bundle  # what the chart's patch job adds
        return cfg
