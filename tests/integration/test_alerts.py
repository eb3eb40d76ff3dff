"""The chart's alerts and dashboard, judged by Prometheus's own promtool: the rules parse and
fire as their unit tests say (a hand-over between scan replicas included), and every
dashboard query parses and names only metrics gpupool's webhook and scan really export."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import requests
import yaml

from harness import promtool
from harness.kit import ROOT, body, gpu_pod
from harness.servers import start_server, stop_server
from webhook.engine import ClusterView, Outcome, PodAnswer
from webhook.files.policyfile import default_policy
from webhook.scan.metrics import ScanCollector, exposition, registry_for
from webhook.scan.scanner import Answer, Scanner

FILES = ROOT / "manifests/helm/gpupool/files"
TESTS = ROOT / "tests/fixtures/alerts/alerts-test.yaml"


def _promtool(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool.binary()), *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


def test_the_alert_rules_fire_as_their_unit_tests_say(tmp_path):
    shutil.copy(FILES / "alerts.yaml", tmp_path / "alerts.yaml")
    shutil.copy(TESTS, tmp_path / "alerts-test.yaml")
    r = _promtool(tmp_path, "check", "rules", "alerts.yaml")
    assert r.returncode == 0 and "SUCCESS: 6 rules found" in r.stdout, r.stdout + r.stderr
    r = _promtool(tmp_path, "test", "rules", "alerts-test.yaml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_wrong_expectation_fails_promtool(tmp_path):
    """The unit tests can fail: an alert expected before its ``for`` has passed is refused."""
    shutil.copy(FILES / "alerts.yaml", tmp_path / "alerts.yaml")
    doc = yaml.safe_load(TESTS.read_text())
    first = doc["tests"][0]["alert_rule_test"][0]
    assert first["alertname"] == "GPUPodsFailOnRestart" and first["exp_alerts"] == []
    first["exp_alerts"] = [{"exp_labels": {"severity": "critical", "pool": "hami",
                                           "reason": "CDIDeviceMissing"}}]
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(doc))
    r = _promtool(tmp_path, "test", "rules", "wrong.yaml")
    assert r.returncode != 0 and "GPUPodsFailOnRestart" in r.stdout + r.stderr


def _exported_names(text: str) -> set[str]:
    """Metric family names as the exposition declares them, with the series names a
    histogram or counter adds."""
    out = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            out.add(name)
            if kind == "histogram":
                out |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
            if kind == "counter":
                out |= {f"{name}_total", name.removesuffix("_total")}
    return out


def _scan_metrics() -> str:
    scanner = Scanner(ClusterView(), default_policy())
    # one answer at risk, so the labelled families carry a sample
    answer = PodAnswer("ml", "p", "u", "n", "hami", "hami-scheduler",
                       Outcome.FAILS_ON_RESTART, "CDIDeviceMissing", "m")
    scanner._answers["u"] = Answer(answer, 0.0, "start")
    collector = ScanCollector(scanner, lambda: True, lambda: {"policyreports": (True, 1, 0),
                                                              "events": (True, 1, 0)})
    return exposition(registry_for(collector)).decode()


def test_every_dashboard_query_parses_and_names_exported_metrics(tmp_path):
    dashboard = json.loads((FILES / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    # promtool's parser is Prometheus's: each query as a recording rule
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"gpupool:dashboard:{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump(rules))
    r = _promtool(tmp_path, "check", "rules", "dashboard-rules.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    srv = start_server(tmp_path, workers=1)
    try:
        # reviews, so the webhook's labelled counters and histogram have samples: one
        # GPU pod that asks for a pool the demo policy does not have (denied)
        bad = gpu_pod("p", limits={"nvidia.com/gpu": 1})
        bad["metadata"]["labels"] = {"gpupool.io/pool": "nowhere"}
        for path in ("mutate", "validate"):
            r = requests.post(f"{srv.url}/{path}", data=body(bad), verify=srv.ca, timeout=10,
                              headers={"Content-Type": "application/json"})
            assert r.ok and r.json()["response"]["allowed"] is False
        webhook = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=10).text
    finally:
        stop_server(srv)
    exported = _exported_names(webhook) | _exported_names(_scan_metrics())
    used = {m for e in exprs for m in re.findall(r"\bgpupool_[a-z_]+", e)}
    assert used - exported == set()
    alerts = (FILES / "alerts.yaml").read_text()
    assert {m for m in re.findall(r"\bgpupool_[a-z_]+", alerts)} - exported == set()
