"""pytest's fixtures for every layer, and the report printed after a run. The helpers tests
share with the benchmarks are in ``harness`` (``harness.kit``, ``harness.servers``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from webhook import engine

# Every check the suite runs is handed only the facts it declared: one that reads another
# fails the test that reached it (``webhook.engine.checks.assessment.declared``).
engine.enforce_declarations()

_REPORTS: list[tuple[str, str]] = []


def report(title: str, text: str) -> None:
    """Print ``text`` under ``title`` at the end of the run (tables a test measured)."""
    _REPORTS.append((title, text))


def pytest_sessionfinish(session: Any) -> None:
    """Under pytest-xdist, a worker hands its reports to the controller, which prints them."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["reports"] = json.dumps(_REPORTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    # (a worker that died has no output: its own error is what the run must show)
    output = getattr(node, "workeroutput", None) or {}
    _REPORTS.extend((t, x) for t, x in json.loads(output.get("reports", "[]")))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for title, text in _REPORTS:
        terminalreporter.section(title)
        terminalreporter.write_line(text)


@pytest.fixture
def policy():
    from webhook.files.policyfile import default_policy

    return default_policy()


@pytest.fixture
def venv_bin() -> Path:
    return Path(sys.executable).parent


@pytest.fixture(scope="session")
def k8s_bin() -> Path:
    """kube-apiserver, kubectl and etcd built from the Kubernetes Go modules (cached)."""
    from harness.controlplane import binaries

    return binaries()


@pytest.fixture(scope="session")
def kubectl(k8s_bin: Path) -> Path:
    return k8s_bin / "kubectl"


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm built from the Go module proxy (cached)."""
    from harness.helm import binary

    return binary()
