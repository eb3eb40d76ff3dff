"""Development and self-signed-install certificates: a CA and the webhook's serving cert.

The CA is kept apart from the serving certificate so ``renew`` can reissue the serving
certificate from the same CA: the ``caBundle`` in the webhook configurations then never has to
change, and rotation is a Secret update the server picks up without a restart.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
CA_BUNDLE = "caBundle"


class CertError(RuntimeError):
    pass


@dataclass(frozen=True)
class Paths:
    out: Path

    @property
    def ca_cert(self) -> Path:
        return self.out / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.out / CA_KEY

    @property
    def tls_cert(self) -> Path:
        return self.out / TLS_CERT

    @property
    def tls_key(self) -> Path:
        return self.out / TLS_KEY

    @property
    def ca_bundle(self) -> Path:
        return self.out / CA_BUNDLE


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key(algorithm: str) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    if algorithm == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise CertError(f"unknown key algorithm {algorithm!r} (ecdsa or rsa)")


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write atomically with the final mode from the start: a key is never world-readable.
    A file that cannot be written is a CertError naming it (every write comes through here)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise CertError(f"{path}: {exc.strerror}") from exc


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def dns_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


#: ``certs generate``/``renew`` warn, and ``doctor`` reports a finding, when the serving
#: certificate expires sooner than this.
EXPIRY_WARNING = dt.timedelta(days=30)


def not_after(pem: bytes) -> dt.datetime:
    """When a PEM certificate expires (ValueError if it is not one)."""
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


def expiry_state(when: dt.datetime) -> str:
    """"expired", "soon" (within EXPIRY_WARNING) or "" for a certificate expiring ``when``."""
    left = when - _now()
    if left.total_seconds() <= 0:
        return "expired"
    return "soon" if left < EXPIRY_WARNING else ""


@dataclass(frozen=True)
class Generated:
    paths: Paths
    ca_kept: bool  # an existing CA was kept (its caBundle stays valid)
    not_after: dt.datetime  # when the serving certificate expires


def _check_days(days: int, flag: str = "--days") -> None:
    if days < 1:
        raise CertError(f"{flag} {days}: a certificate must be valid for at least 1 day")


def generate(out: str | Path, service: str, namespace: str, *, extra_dns: Sequence[str] = (),
             extra_ips: Sequence[str] = (), days: int = 365, ca_days: int = 3650,
             algorithm: str = "ecdsa", force: bool = False) -> Generated:
    """A serving certificate in ``out``, issued by the CA already there, or by a new one.

    An existing CA is kept unless ``force``: installed webhook configurations trust it through
    their caBundle, and replacing it silently would make the API server reject the webhook.
    A new directory is built beside ``out`` and renamed into place, so a failure leaves
    nothing half-written."""
    _check_days(days)
    paths = Paths(Path(out))
    has_ca = paths.ca_cert.exists() or paths.ca_key.exists()
    if has_ca and not force:
        _load_ca(paths)  # a broken CA is an error here, not a silently replaced one
        expires = _issue(paths, service, namespace, list(extra_dns), list(extra_ips), days,
                         algorithm)
        return Generated(paths, True, expires)
    if paths.out.exists() and not paths.out.is_dir():
        raise CertError(f"--out {paths.out}: exists and is not a directory")
    parent = paths.out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{paths.out.name}.", dir=parent))
    except OSError as exc:
        raise CertError(f"--out {paths.out}: cannot write in {parent} ({exc.strerror})") from exc
    try:
        staged = Paths(tmp)
        _new_ca(staged, namespace, ca_days, algorithm)
        expires = _issue(staged, service, namespace, list(extra_dns), list(extra_ips), days,
                         algorithm)
        if paths.out.is_dir():
            # --force over an existing directory: replace our files one by one, CA last, so
            # a reader never pairs a new serving certificate with the old CA's key.
            for name in (TLS_KEY, TLS_CERT, CA_BUNDLE, CA_KEY, CA_CERT):
                os.replace(tmp / name, paths.out / name)
        else:
            os.chmod(tmp, 0o755)
            os.replace(tmp, paths.out)
    except OSError as exc:
        raise CertError(f"--out {paths.out}: {exc.strerror}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Generated(paths, False, expires)


def _new_ca(paths: Paths, namespace: str, ca_days: int, algorithm: str) -> None:
    ca_key = _new_key(algorithm)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpupool-ca.{namespace}")])
    now = _now()
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=ca_days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    _write(paths.ca_key, _key_pem(ca_key), 0o600)
    _write(paths.ca_cert, ca.public_bytes(serialization.Encoding.PEM), 0o644)


def _load_ca(paths: Paths
             ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey]:
    try:
        ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise CertError(f"{exc.filename}: not found; run 'gpupool certs generate' first") from exc
    except OSError as exc:
        raise CertError(f"{exc.filename}: {exc.strerror}") from exc
    except ValueError as exc:
        raise CertError(f"{paths.out}: CA files are not valid PEM: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertError(f"{paths.ca_key}: not an ECDSA or RSA key (gpupool signs with those)")
    return ca, key


def _issue(paths: Paths, service: str, namespace: str, extra_dns: list[str],
           extra_ips: list[str], days: int, algorithm: str) -> dt.datetime:
    """Issue the serving certificate from the CA in ``paths``; returns when it expires."""
    ca, ca_key = _load_ca(paths)
    key = _new_key(algorithm)
    now = _now()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in
                                    dict.fromkeys(dns_names(service, namespace) + extra_dns)]
    for ip in extra_ips:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as exc:
            raise CertError(f"{ip!r} is not an IP address") from exc
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                        f"{service}.{namespace}.svc")]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + dt.timedelta(days=days), ca.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    # Key first, then cert: a reader that sees the new cert always finds its key.
    _write(paths.tls_key, _key_pem(key), 0o600)
    _write(paths.tls_cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(paths.ca_bundle, ca_bundle(paths).encode() + b"\n", 0o644)
    return cert.not_valid_after_utc


def ca_bundle(paths: Paths) -> str:
    """The base64 PEM the webhook configurations' clientConfig.caBundle takes."""
    try:
        return base64.b64encode(paths.ca_cert.read_bytes()).decode()
    except OSError as exc:
        raise CertError(f"{paths.ca_cert}: {exc.strerror}; run 'gpupool certs generate --out "
                        f"{paths.out}' first") from exc


def expiry(cert_path: str | Path) -> dt.datetime:
    return not_after(Path(cert_path).read_bytes())


def needs_renewal(paths: Paths, renew_before: dt.timedelta) -> bool:
    try:
        return expiry(paths.tls_cert) - _now() <= renew_before
    except (OSError, ValueError):
        return True


def renew(out: str | Path, service: str, namespace: str, *, extra_dns: Sequence[str] = (),
          extra_ips: Sequence[str] = (), days: int = 365, renew_before_days: float = 30,
          algorithm: str = "ecdsa", force: bool = False) -> bool:
    """Reissue the serving certificate from the existing CA when it is due; True if reissued."""
    _check_days(days)
    paths = Paths(Path(out))
    if not force and not needs_renewal(paths, dt.timedelta(days=renew_before_days)):
        return False
    _issue(paths, service, namespace, list(extra_dns), list(extra_ips), days, algorithm)
    return True
