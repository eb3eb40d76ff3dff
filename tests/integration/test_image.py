"""The container image, built from the Dockerfile by buildah and run as the image says
(its ENTRYPOINT, as its USER), serving a real review over HTTPS.

The Dockerfile's base, python:3.11-slim, lives on a container registry this machine cannot
reach. A stand-in base takes its place, assembled from Debian's own packages by mmdebstrap
(Debian bookworm: its python3 is 3.11, as the real base's), with ``python``/``pip`` where the
real base has them. It also trusts this machine's CA bundle, because the network here
reaches PyPI only through a TLS-inspecting proxy. Everything after ``FROM`` is the
Dockerfile's own steps, unchanged. The image runs under buildah's chroot isolation: a
container runtime cannot set its rlimits in this sandbox (crun: setrlimit RLIMIT_NOFILE:
operation not permitted).

buildah and mmdebstrap are Debian packages; as root the test installs them when missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from harness.kit import IN_CI, ROOT
from harness.procs import argv0, children
from harness.servers import free_port, generate_certs, stop_group, wait_ready

pytestmark = pytest.mark.slow
CACHE = Path(os.environ.get("GPUPOOL_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or
                                                      Path.home() / ".cache") / "gpupool")
BASE_PACKAGES = "python3,python3-venv,python3-pip,passwd"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def _need_tools() -> None:
    missing = [t for t in ("buildah", "mmdebstrap") if shutil.which(t) is None]
    if not missing:
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True,
                       timeout=600, env=env)
        r = subprocess.run(["apt-get", "install", "-y", "-qq", "buildah", "mmdebstrap"],
                           capture_output=True, text=True, timeout=900, env=env)
        if r.returncode == 0:
            return
        msg = f"cannot install buildah/mmdebstrap: {r.stderr[-1000:]}"
    else:
        msg = f"{', '.join(missing)} not installed and not root to install them"
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def _run(*cmd: str, timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{' '.join(cmd[:6])}: {r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def buildah(tmp_path_factory) -> list[str]:
    _need_tools()
    storage = CACHE / "containers"
    return ["buildah", "--root", str(storage / "root"), "--runroot", str(storage / "run"),
            "--storage-driver", "vfs"]


@pytest.fixture(scope="module")
def base_image(buildah, tmp_path_factory) -> str:
    """The stand-in for python:3.11-slim, cached by its inputs."""
    ca = HOST_CA.read_bytes() if HOST_CA.exists() else b""
    key = hashlib.sha256(BASE_PACKAGES.encode() + ca).hexdigest()[:16]
    tag = f"localhost/gpupool-base-standin:{key}"
    if subprocess.run([*buildah, "inspect", "--type", "image", tag], capture_output=True,
                      timeout=120).returncode == 0:
        return tag
    ctx = tmp_path_factory.mktemp("base")
    _run("mmdebstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm",
         str(ctx / "rootfs.tar"))
    (ctx / "ca-certificates.crt").write_bytes(ca)
    (ctx / "Containerfile").write_text(
        "FROM scratch\nADD rootfs.tar /\n"
        "COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"
        "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt\n"
        "RUN ln -sf /usr/bin/python3 /usr/local/bin/python"
        " && ln -sf /usr/bin/pip3 /usr/local/bin/pip"
        " && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED\n")
    _run(*buildah, "bud", "--isolation", "chroot", "--layers=false", "-t", tag,
         "-f", str(ctx / "Containerfile"), str(ctx))
    return tag


@pytest.fixture(scope="module")
def image(buildah, base_image):
    tag = f"localhost/gpupool:test-{uuid.uuid4().hex[:8]}"
    _run(*buildah, "bud", "--isolation", "chroot", "--layers=false",
         "--build-arg", f"PYTHON_IMAGE={base_image}", "-t", tag, "-f",
         str(ROOT / "Dockerfile"), str(ROOT))
    config = json.loads(_run(*buildah, "inspect", "--type", "image", tag).stdout)
    ctr = _run(*buildah, "from", "--pull-never", tag).stdout.strip()
    try:
        yield ctr, config["OCIv1"]["config"]
    finally:
        subprocess.run([*buildah, "rm", ctr], capture_output=True, timeout=300)
        subprocess.run([*buildah, "rmi", tag], capture_output=True, timeout=300)


def test_image_runs_as_its_user_without_build_tools_or_test_extras(buildah, image):
    ctr, config = image
    assert config["User"] == "10001:10001"
    run = [*buildah, "run", "--isolation", "chroot", ctr, "--"]
    assert _run(*run, "id", "-u").stdout.strip() == "10001"
    assert _run(*run, "gpupool", "--version").stdout.startswith("gpupool ")
    listing = _run(*run, "python", "-m", "pip", "list", "--format=json").stdout
    installed = {p["name"].lower() for p in json.loads(listing)}
    assert {"gpupool", "gunicorn", "gevent", "packaging"} <= installed
    assert not installed & {"pytest", "hypothesis", "ruff", "setuptools-scm"}
    assert not _run(*run, "sh", "-c", "ls /wheels 2>/dev/null || true").stdout.strip()


def test_image_entrypoint_serves_a_real_review(buildah, image, tmp_path):
    ctr, config = image
    certs = tmp_path / "certs"
    generate_certs(certs)
    (certs / "tls.key").chmod(0o644)  # as a Secret volume mounts it (defaultMode 0644)
    port = free_port()
    log = tmp_path / "image.log"
    cmd = [*buildah, "run", "--isolation", "chroot", "-v", f"{certs}:/certs:ro", ctr, "--",
           *config["Entrypoint"], "--demo", "--bind", f"127.0.0.1:{port}", "--workers", "1",
           "--cert", "/certs/tls.crt", "--key", "/certs/tls.key"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url, ca = f"https://127.0.0.1:{port}", str(certs / "ca.crt")
    shm_before = _metrics_folders()
    try:
        wait_ready(proc, url, ca, log)
        sent = json.loads((ROOT / "docs/examples/review-hami-pod-validate.json").read_text())
        r = requests.post(f"{url}/validate", data=json.dumps(sent), verify=ca, timeout=10,
                          headers={"Content-Type": "application/json"})
        resp = r.json()["response"]
        assert r.status_code == 200 and resp["uid"] == sent["request"]["uid"]
        assert resp["allowed"] is False and "CDIDeviceMissing" in resp["status"]["message"]
        # Stopped as the kubelet stops a container: SIGTERM to its first process, which
        # then leaves nothing in /dev/shm (the host's, here: buildah's chroot isolation
        # mounts it into the container, as a pod's emptyDir of medium Memory is mounted).
        entry = _container_entry(proc.pid)
        os.kill(entry, signal.SIGTERM)
        proc.wait(60)
    finally:
        stop_group(proc)
    assert "Traceback" not in log.read_text()
    assert _metrics_folders() <= shm_before, log.read_text()[-2000:]


def _metrics_folders() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.glob("gpupool-metrics-*")} if shm.is_dir() else set()


def _container_entry(buildah_run: int) -> int:
    """The container's first process (its entrypoint): buildah (chroot isolation) runs it
    as a process of the host, the child of its own helper (``buildah-chroot-exec``), which
    stands where a runtime's shim does."""
    seen, todo = set(), [buildah_run]
    while todo:
        pid = todo.pop()
        kids = children(pid)
        if argv0(pid) == b"buildah-chroot-exec" and kids:
            (entry,) = kids
            return entry
        seen.add(pid)
        todo += kids - seen
    raise AssertionError(f"no buildah-chroot-exec under buildah run ({buildah_run})")
