"""Shared test helpers. Upstream inputs live in tests/fixtures/upstream (see its SOURCES.tsv
for each file's project, path, commit and licence)."""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
DATA = ROOT / "tests" / "fixtures" / "data"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_REPORTS: list[tuple[str, str]] = []


def report(title: str, text: str) -> None:
    """Print ``text`` under ``title`` at the end of the run (tables a test measured)."""
    _REPORTS.append((title, text))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for title, text in _REPORTS:
        terminalreporter.section(title)
        terminalreporter.write_line(text)


def wait_until(probe: Callable[[], object], what: str, timeout: float = 30,
               every: float = 0.1) -> None:
    """Until ``probe()`` is true; fails naming ``what`` after ``timeout`` seconds. The one
    way a test waits: for a condition, never for a fixed time."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def load_docs(path: Path | str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def upstream_pods() -> list[tuple[str, dict[str, Any]]]:
    """Every Pod document in the upstream pod fixtures, with a readable id."""
    out = []
    for path in sorted((UPSTREAM / "pods").rglob("*.yaml")):
        for doc in load_docs(path):
            if doc.get("kind") == "Pod":
                out.append((f"{path.relative_to(UPSTREAM / 'pods')}:{doc['metadata']['name']}",
                            doc))
    return out


def review(obj: dict[str, Any] | None, *, api_version: str = "admission.k8s.io/v1",
           operation: str = "CREATE", namespace: str = "default", dry_run: bool = False,
           kind: str = "Pod", group: str = "", uid: str | None = None) -> dict[str, Any]:
    version = "v1"
    resource = {"Pod": "pods", "Deployment": "deployments", "StatefulSet": "statefulsets",
                "DaemonSet": "daemonsets", "ReplicaSet": "replicasets", "Job": "jobs",
                "CronJob": "cronjobs"}.get(kind, kind.lower() + "s")
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "operation": operation,
            "namespace": namespace,
            "name": (obj or {}).get("metadata", {}).get("name", ""),
            "object": copy.deepcopy(obj),
            "oldObject": None,
            "dryRun": dry_run,
            "userInfo": {"username": "alice", "groups": ["devs", "system:authenticated"]},
        },
    }


def body(obj: dict[str, Any] | None, **kw: Any) -> bytes:
    return json.dumps(review(obj, **kw)).encode()


def gpu_pod(name: str = "p", limits: dict[str, Any] | None = None,
            **spec: Any) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "image": "cuda",
                                    "resources": {"limits": limits or {"nvidia.com/gpu": 1}}}]}}
    pod["spec"].update(spec)
    return pod


@pytest.fixture
def policy():
    from webhook.policyfile import default_policy

    return default_policy()


@pytest.fixture
def venv_bin() -> Path:
    return Path(sys.executable).parent


@pytest.fixture(scope="session")
def k8s_bin() -> Path:
    """kube-apiserver, kubectl and etcd built from the Kubernetes Go modules (cached)."""
    from tests.controlplane import binaries

    return binaries()


@pytest.fixture(scope="session")
def kubectl(k8s_bin: Path) -> Path:
    return k8s_bin / "kubectl"


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm built from the Go module proxy (cached)."""
    from tests.tools.helm import binary

    return binary()
