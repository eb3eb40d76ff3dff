"""What users install is what we test: the wheel built by the Dockerfile's own steps, installed
into a clean virtualenv with no test extras, serves a real review over HTTPS, runs the agent
and checks a manifest.

The Dockerfile is read, not copied: its build stage's COPY and ``pip wheel`` steps and its final
stage's ``pip install`` are replayed here with the image paths mapped to temporary ones, so a
change to the Dockerfile changes this test. Only ``--no-cache-dir`` is dropped, so the run reuses
pip's download cache (it changes where the bytes come from, not what is installed).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from harness.kit import ROOT
from harness.layouts import write_layout
from harness.servers import free_port, stop_group, wait_ready

pytestmark = pytest.mark.slow


@dataclass
class Stage:
    workdir: str = "/"
    copies: list[tuple[list[str], str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


def dockerfile_stages(path: Path = ROOT / "Dockerfile") -> list[Stage]:
    """The FROM stages with their WORKDIR, COPY (from the context only) and RUN steps;
    continuation lines joined."""
    text = path.read_text().replace("\\\n", " ")
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stages.append(Stage())
        elif word == "WORKDIR":
            stages[-1].workdir = rest.strip()
        elif word == "COPY" and not rest.startswith("--from"):
            *srcs, dest = shlex.split(rest)
            stages[-1].copies.append((srcs, dest))
        elif word == "RUN":
            stages[-1].runs.append(rest.strip())
    return stages


def _pip_steps(run: str) -> list[list[str]]:
    """The ``pip ...`` commands of one RUN line (other commands, such as rm, are not ours)."""
    steps = []
    for part in run.split("&&"):
        argv = shlex.split(part)
        if argv and argv[0] == "pip":
            steps.append([a for a in argv[1:] if a != "--no-cache-dir"])
    return steps


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin directory of a clean virtualenv holding gpupool as the image installs it."""
    tmp = tmp_path_factory.mktemp("wheel")
    build, final = dockerfile_stages()[0], dockerfile_stages()[-1]
    src = tmp / "src"
    src.mkdir()
    for srcs, dest in build.copies:
        for s in srcs:
            target = src / dest if not dest.endswith("/") and len(srcs) == 1 else src / dest / s
            if (ROOT / s).is_dir():
                shutil.copytree(ROOT / s, target,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / s, target)
    wheels = tmp / "wheels"
    wheel_steps = [s for r in build.runs for s in _pip_steps(r)]
    install_steps = [s for r in final.runs for s in _pip_steps(r)]
    assert wheel_steps and wheel_steps[0][0] == "wheel", build.runs
    assert install_steps and install_steps[0][0] == "install", final.runs
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    for argv in wheel_steps:
        argv = [a.replace("/wheels", str(wheels)) for a in argv]
        r = subprocess.run([py, "-m", "pip", "--disable-pip-version-check", *argv], cwd=src,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
    for argv in install_steps:
        argv = [a.replace("/wheels", str(wheels)) for a in argv]
        r = subprocess.run([py, "-m", "pip", "--disable-pip-version-check", *argv],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
    return venv / "bin"


def test_dockerfile_installs_the_version_the_package_declares():
    from webhook import __version__ as version

    (install,) = _pip_steps(dockerfile_stages()[-1].runs[-1])
    assert f"gpupool=={version}" in install


def test_installed_package_has_no_test_extras(installed):
    for module in ("pytest", "hypothesis", "requests_mock"):
        r = subprocess.run([str(installed / "python"), "-c", f"import {module}"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, f"{module} is installed in the image's environment"


def test_installed_server_answers_a_real_review(installed, tmp_path):
    gp = str(installed / "gpupool")
    subprocess.run([gp, "certs", "generate", "--out", str(tmp_path / "certs"), "--ip",
                    "127.0.0.1"], check=True, capture_output=True, timeout=60)
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [gp, "serve", "--bind", f"127.0.0.1:{port}", "--demo", "--workers", "1",
             "--cert", str(tmp_path / "certs/tls.crt"), "--key", str(tmp_path / "certs/tls.key")],
            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    url, ca = f"https://127.0.0.1:{port}", str(tmp_path / "certs/ca.crt")
    try:
        wait_ready(proc, url, ca, log, timeout=30)
        for name, endpoint, allowed in (("review-hami-pod.json", "mutate", True),
                                        ("review-hami-pod-validate.json", "validate", False)):
            sent = json.loads((ROOT / "docs/examples" / name).read_text())
            r = requests.post(f"{url}/{endpoint}", data=json.dumps(sent), verify=ca, timeout=10,
                              headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text
            resp = r.json()["response"]
            assert resp["uid"] == sent["request"]["uid"]
            assert resp["allowed"] is allowed, resp
        assert "Traceback" not in log.read_text()
    finally:
        stop_group(proc)


def test_installed_agent_and_check_run(installed, tmp_path):
    paths = write_layout(tmp_path, "device-plugin")
    r = subprocess.run([str(installed / "gpupool"), "agent", "--once", "--print",
                        "--cdi-dir", str(paths["etc"]), "--cdi-dir", str(paths["run"]),
                        "--runtime-config", str(paths["config"]),
                        "--containerd-config", str(paths["containerd"]),
                        "--driver-gpus-dir", ""],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "k8s.device-plugin.nvidia.com/gpu" in json.loads(r.stdout)["kinds"]
    demo = ROOT / "webhook/data/demo-cluster.yaml"
    r = subprocess.run([str(installed / "gpupool"), "check", "-f",
                        str(ROOT / "docs/examples/pod-hami.yaml"), "--cluster", str(demo)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr  # the demo's broken HAMi node fails it
    assert "CDIDeviceMissing" in r.stdout
