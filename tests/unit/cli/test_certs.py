"""``gpupool certs`` as an operator meets it: a renewal keeps what the certificate was made
for, and ``generate`` refuses what would make a certificate the API server cannot verify.
Each certificate is then checked the way the API server checks it: a TLS handshake verified
against the caBundle for the Service's name."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID


def gp(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(path: Path) -> set[str]:
    san = _cert(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {*san.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))}


def _verifies(certs: Path, host: str) -> bool:
    """A TLS handshake served with tls.crt/tls.key, verified against ca.crt for ``host``, as
    the API server's webhook client verifies it."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    client = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            with socket.create_connection(listener.getsockname()) as raw, \
                    client.wrap_socket(raw, server_hostname=host):
                return True
        except ssl.SSLCertVerificationError:
            return False
        finally:
            t.join(5)


def test_renew_keeps_the_names_usage_and_key_type_it_was_generated_with(tmp_path):
    out = tmp_path / "c"
    r = gp("certs", "generate", "--out", out, "--service", "gpu-admission", "--namespace",
           "platform", "--dns", "admission.example.com", "--ip", "10.1.2.3", "--algorithm",
           "rsa")
    assert r.returncode == 0, r.stderr
    before = _sans(out / "tls.crt")
    r = gp("certs", "renew", "--out", out, "--force")
    assert r.returncode == 0, r.stderr
    assert _sans(out / "tls.crt") == before
    assert "gpu-admission.platform.svc" in r.stdout and "10.1.2.3" in r.stdout
    assert isinstance(_cert(out / "tls.crt").public_key(), rsa.RSAPublicKey)
    assert _verifies(out, "gpu-admission.platform.svc")
    assert not _verifies(out, "gpupool-webhook.gpupool-system.svc")  # no default names added
    # names given on renew are added to, not swapped for, the old ones
    r = gp("certs", "renew", "--out", out, "--force", "--dns", "extra.example.com")
    assert _sans(out / "tls.crt") == before | {"extra.example.com"}


def test_renew_keeps_the_extended_key_usage_of_the_certificate_it_replaces(tmp_path):
    """A serving certificate someone issued for client use too (mutual TLS) keeps it."""
    out = tmp_path / "c"
    assert gp("certs", "generate", "--out", out).returncode == 0
    ca = _cert(out / "ca.crt")
    ca_key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), None)
    old = _cert(out / "tls.crt")
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (x509.CertificateBuilder().subject_name(old.subject).issuer_name(ca.subject)
               .public_key(old.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(old.not_valid_before_utc)
               .not_valid_after(old.not_valid_after_utc)
               .add_extension(old.extensions.get_extension_for_class(
                   x509.SubjectAlternativeName).value, critical=False)
               .add_extension(x509.ExtendedKeyUsage(both), critical=False))
    (out / "tls.crt").write_bytes(builder.sign(ca_key, hashes.SHA256())
                                  .public_bytes(serialization.Encoding.PEM))
    assert gp("certs", "renew", "--out", out, "--force").returncode == 0
    renewed = _cert(out / "tls.crt")
    assert renewed.serial_number != old.serial_number
    assert list(renewed.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == both


def test_generate_refuses_what_makes_a_broken_certificate(tmp_path):
    out = tmp_path / "c"
    for args, words in ((["--dns", "bad host"], "not a DNS name"),
                        (["--dns", "https://foo"], "without scheme, port or path"),
                        (["--dns", "10.0.0.1"], "pass it with --ip"),
                        (["--service", "My_Svc"], "not a Service name"),
                        (["--namespace", "Team.A"], "not a namespace name"),
                        (["--ip", "300.1.1.1"], "not an IP address"),
                        (["--days", "100000"], "pass --days 3650 or fewer")):
        r = gp("certs", "generate", "--out", out, *args)
        assert r.returncode == 2 and not out.exists(), (args, r.stderr)
        (line,) = r.stderr.splitlines()
        assert words in line and args[1] in line, line


def test_a_kept_ca_must_hold_together(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert gp("certs", "generate", "--out", a).returncode == 0
    assert gp("certs", "generate", "--out", b).returncode == 0
    shutil.copy(b / "ca.key", a / "ca.key")  # a key from another CA
    r = gp("certs", "generate", "--out", a)
    assert r.returncode == 2 and "ca.key does not match" in r.stderr
    (a / "ca.key").unlink()
    r = gp("certs", "renew", "--out", a, "--force")
    assert r.returncode == 2
    assert "ca.key: missing beside ca.crt" in r.stderr and "--force" in r.stderr
    assert "run 'gpupool certs generate' first" not in r.stderr
    r = gp("certs", "renew", "--out", tmp_path / "none")
    assert r.returncode == 2 and "run 'gpupool certs generate --out" in r.stderr
    # a serving certificate cannot outlive its CA: refused, never cut short in silence
    r = gp("certs", "renew", "--out", b, "--force", "--days", "5000")
    assert r.returncode == 2 and "cannot outlive it" in r.stderr


@pytest.mark.parametrize("service,covered", [("gpupool-system/gpupool-webhook", True),
                                             ("other/gpupool-webhook", False)])
def test_doctor_reports_the_names_and_whether_they_cover_the_service(tmp_path, service,
                                                                      covered):
    assert gp("certs", "generate", "--out", tmp_path / "c").returncode == 0
    r = gp("doctor", "--cluster", "webhook/data/demo-cluster.yaml", "--cert",
           tmp_path / "c/tls.crt", "--webhook-service", service, "-o", "json")
    cert = json.loads(r.stdout)["certificate"]
    assert "gpupool-webhook.gpupool-system.svc" in cert["sans"]
    assert cert["host"] == f"{service.split('/')[1]}.{service.split('/')[0]}.svc"
    assert cert["covers_host"] is covered and cert["finding"] is not covered
    text = gp("doctor", "--cluster", "webhook/data/demo-cluster.yaml", "--cert",
              tmp_path / "c/tls.crt", "--webhook-service", service).stdout
    assert ("do not cover gpupool-webhook.other.svc" in text) is not covered
