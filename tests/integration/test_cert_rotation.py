"""Certificates: `gpupool certs`, hot rotation through a Secret-style symlink swap under
load, and readiness when the certificate is missing or expired."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import requests
from cryptography import x509

from harness.kit import body, gpu_pod, wait_until
from harness.servers import generate_certs, start_server, stop_server


def gpupool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True,
                          text=True, timeout=60)


def test_generate_layout_modes_and_sans(tmp_path):
    r = gpupool("certs", "generate", "--out", str(tmp_path), "--service", "gw", "--namespace",
                "ops", "--dns", "gw.example.com", "--ip", "10.1.2.3")
    assert r.returncode == 0, r.stderr
    for key in ("ca.key", "tls.key"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "gw", "gw.ops", "gw.ops.svc", "gw.ops.svc.cluster.local", "gw.example.com"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    assert cert.public_key().curve.name == "secp256r1"
    import base64

    bundle = (tmp_path / "caBundle").read_text().strip()
    assert base64.b64decode(bundle) == (tmp_path / "ca.crt").read_bytes()


def test_renew_keeps_the_ca_bundle(tmp_path):
    gpupool("certs", "generate", "--out", str(tmp_path), "--days", "10")
    bundle = (tmp_path / "caBundle").read_text()
    serial = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes()).serial_number
    r = gpupool("certs", "renew", "--out", str(tmp_path), "--renew-before-days", "5")
    assert "not due" in r.stdout
    r = gpupool("certs", "renew", "--out", str(tmp_path), "--renew-before-days", "30")
    assert "renewed" in r.stdout
    new = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert new.serial_number != serial and (tmp_path / "caBundle").read_text() == bundle
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    new.verify_directly_issued_by(ca)


def _secret_volume(root: Path, source: Path, generation: int) -> None:
    """Lay files out as the kubelet does for a Secret volume: ..data -> timestamped dir."""
    data = root / f"..{generation}"
    data.mkdir()
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copy(source / name, data / name)
    tmp_link = root / "..data_tmp"
    os.symlink(data.name, tmp_link)
    os.replace(tmp_link, root / "..data")  # the atomic swap
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if not (root / name).is_symlink():
            os.symlink(f"..data/{name}", root / name)


def _served_serial(url: str, ca: str) -> int:
    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_rotation_under_load_fails_no_request(tmp_path):
    src = tmp_path / "issued"
    generate_certs(src)
    vol = tmp_path / "volume"
    vol.mkdir()
    _secret_volume(vol, src, 1)
    ca = str(src / "ca.crt")
    srv = start_server(tmp_path, cert=vol / "tls.crt", key=vol / "tls.key", ca=src / "ca.crt")
    try:
        first = _served_serial(srv.url, ca)
        errors: list[str] = []
        done = threading.Event()
        count = [0]

        def load() -> None:
            # Some clients keep their connection (in flight across the swap), some reconnect.
            with requests.Session() as keep:
                while not done.is_set():
                    for s in (keep, None):
                        try:
                            r = srv.post("mutate", body(gpu_pod()), session=s)
                            if r.status_code != 200:
                                errors.append(str(r.status_code))
                        except requests.RequestException as exc:
                            errors.append(repr(exc))
                        count[0] += 1

        threads = [threading.Thread(target=load) for _ in range(6)]
        for t in threads:
            t.start()
        wait_until(lambda: count[0] >= 30, "load before the rotation")
        subprocess.run([sys.executable, "-m", "webhook", "certs", "renew", "--out", str(src),
                        "--force", "--ip", "127.0.0.1", "--dns", "localhost"], check=True,
                       capture_output=True)
        _secret_volume(vol, src, 2)
        deadline = time.monotonic() + 15
        while _served_serial(srv.url, ca) == first:
            assert time.monotonic() < deadline, "new certificate never served"
            time.sleep(0.2)
        after = count[0]
        wait_until(lambda: count[0] >= after + 30, "load after the rotation")
        done.set()
        for t in threads:
            t.join(30)
        new = x509.load_pem_x509_certificate((src / "tls.crt").read_bytes()).serial_number
        # Each worker checks the files at most once a second, so one may still serve the old
        # pair just after another first served the new one: every worker within the interval.
        wait_until(lambda: all(_served_serial(srv.url, ca) == new for _ in range(8)),
                   "every worker serving the new certificate", timeout=5)
        assert errors == [] and count[0] > 50
    finally:
        stop_server(srv)


def test_readiness_fails_when_certificate_missing_or_expired(tmp_path):
    certs = tmp_path / "certs"
    generate_certs(certs)
    _reissue_expired(certs)
    srv = start_server_unready(tmp_path, certs)
    try:
        # The kubelet's HTTPS probes do not verify certificates; neither does this one.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = requests.get(f"{srv.url}/readyz", verify=False, timeout=5)
        assert r.status_code == 503 and "[-]certificate failed: expired at" in r.text
    finally:
        stop_server(srv)
    generate_certs(certs)
    srv = start_server(tmp_path)
    try:
        (certs / "tls.crt").unlink()
        r = requests.get(f"{srv.url}/readyz", verify=srv.ca, timeout=5)
        assert r.status_code == 503 and "is missing" in r.text
        # Already-loaded certificates keep serving admission requests.
        assert srv.post("mutate", body(gpu_pod())).status_code == 200
    finally:
        stop_server(srv)


def _reissue_expired(certs: Path) -> None:
    """Replace the serving certificate with one that expired a minute ago, from the same CA
    and key (``certs generate`` refuses to write an expired one)."""
    import datetime as dt

    from cryptography.hazmat.primitives import hashes, serialization

    ca = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((certs / "ca.key").read_bytes(), None)
    old = x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(old.subject).issuer_name(ca.subject)
            .public_key(old.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=2))
            .not_valid_after(now - dt.timedelta(minutes=1))
            .add_extension(old.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value, critical=False)
            .sign(ca_key, hashes.SHA256()))
    (certs / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def start_server_unready(tmp_path: Path, certs: Path):
    """Start a server that is expected never to turn ready; wait for it to answer."""
    from harness.servers import Server, free_port, gpupool_cmd

    port = free_port()
    log = tmp_path / "unready.log"
    proc = subprocess.Popen([*gpupool_cmd(), "serve", "--bind", f"127.0.0.1:{port}", "--cert",
                             str(certs / "tls.crt"), "--key", str(certs / "tls.key"), "--demo",
                             "--workers", "1", "--no-audit-stdout"], stdout=open(log, "wb"),  # noqa: SIM115
                            stderr=subprocess.STDOUT, start_new_session=True)
    srv = Server(f"https://127.0.0.1:{port}", str(certs / "ca.crt"), certs, tmp_path / "a",
                 proc, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.get(f"{srv.url}/healthz", verify=srv.ca, timeout=2)
            return srv
        except requests.exceptions.SSLError:
            return srv  # answering; the expired certificate fails verification
        except requests.RequestException:
            time.sleep(0.2)
    stop_server(srv)
    pytest.fail(f"server did not start: {log.read_text()}")
