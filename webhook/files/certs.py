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
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.cluster.kube import WEBHOOK_NAMESPACE, WEBHOOK_SERVICE

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


def service_host(service: str, namespace: str) -> str:
    """The name the API server verifies when it calls a webhook through a Service
    (``clientConfig.service``): ``<service>.<namespace>.svc``."""
    return f"{service}.{namespace}.svc"


#: A Service name is an RFC 1035 label; a namespace an RFC 1123 label (Kubernetes'
#: ``IsDNS1035Label`` and ``IsDNS1123Label``, apimachinery ``pkg/util/validation``).
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: A host name in a SAN: RFC 1123 labels of letters (either case), digits and inner '-',
#: with an optional leading wildcard label.
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?")


def check_service_names(service: str, namespace: str) -> None:
    """Names that would make a certificate no Service can present: refused before any file
    is written."""
    if len(service) > 63 or not _DNS1035_LABEL.fullmatch(service):
        raise CertError(f"--service {service!r}: not a Service name (lowercase letters, digits "
                        "and '-', starting with a letter, at most 63 characters)")
    if len(namespace) > 63 or not _DNS1123_LABEL.fullmatch(namespace):
        raise CertError(f"--namespace {namespace!r}: not a namespace name (lowercase letters, "
                        "digits and '-', at most 63 characters)")


def check_dns_name(name: str) -> None:
    """RFC 1123 host names (``*.`` allowed first); a URL, a port or an IP is named as such."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        raise CertError(f"--dns {name!r}: an IP address; pass it with --ip")
    if "://" in name or "/" in name or ":" in name:
        raise CertError(f"--dns {name!r}: a host name only, without scheme, port or path "
                        f"(e.g. {_host_of(name)!r})")
    labels = name.split(".")
    if labels[0] == "*":
        labels = labels[1:]
    if (not labels or len(name) > 253
            or not all(len(x) <= 63 and _HOST_LABEL.fullmatch(x) for x in labels)):
        raise CertError(f"--dns {name!r}: not a DNS name (RFC 1123: labels of letters, digits "
                        "and inner '-', separated by '.', each at most 63 characters)")


def _host_of(text: str) -> str:
    rest = text.split("://", 1)[-1]
    return rest.split("/", 1)[0].rsplit(":", 1)[0] or "webhook.example.com"


def _ip_sans(ips: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for ip in ips:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as exc:
            raise CertError(f"--ip {ip!r}: not an IP address") from exc
    return out


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


def _check_days_within(days: int, ca: x509.Certificate, paths: Paths) -> None:
    """A serving certificate cannot outlive its CA: refused, never cut short in silence."""
    left = (ca.not_valid_after_utc - _now()).days
    # the minutes between the CA's signing and now are not held against --days
    if _now() + dt.timedelta(days=days) > ca.not_valid_after_utc + dt.timedelta(hours=1):
        raise CertError(f"--days {days}: the CA in {paths.out} expires on "
                        f"{ca.not_valid_after_utc:%Y-%m-%d}, in {left} day(s), and a serving "
                        f"certificate cannot outlive it; pass --days {max(left, 1)} or fewer, "
                        "or a new CA with 'gpupool certs generate --force' (then update the "
                        "webhooks' caBundle)")


def generate(out: str | Path, service: str, namespace: str, *, extra_dns: Sequence[str] = (),
             extra_ips: Sequence[str] = (), days: int = 365, ca_days: int = 3650,
             algorithm: str = "ecdsa", force: bool = False) -> Generated:
    """A serving certificate in ``out``, issued by the CA already there, or by a new one.

    An existing CA is kept unless ``force``: installed webhook configurations trust it through
    their caBundle, and replacing it silently would make the API server reject the webhook.
    A new directory is built beside ``out`` and renamed into place, so a failure leaves
    nothing half-written."""
    _check_days(days)
    check_service_names(service, namespace)
    for name in extra_dns:
        check_dns_name(name)
    _ip_sans(extra_ips)
    paths = Paths(Path(out))
    has_ca = paths.ca_cert.exists() or paths.ca_key.exists()
    if has_ca and not force:
        _load_ca(paths)  # a broken CA is an error here, not a silently replaced one
        expires = _issue(paths, service, namespace, list(extra_dns), list(extra_ips), days,
                         algorithm)
        return Generated(paths, True, expires)
    if days > ca_days:
        raise CertError(f"--days {days}: the new CA is valid for {ca_days} days and a serving "
                        f"certificate cannot outlive it; pass --days {ca_days} or fewer")
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
    new_ca = (f"or make a new CA with 'gpupool certs generate --out {paths.out} --force' (then "
              "update the webhooks' caBundle)")
    if not paths.ca_cert.exists() and not paths.ca_key.exists():
        raise CertError(f"{paths.out}: no CA here ({CA_CERT}, {CA_KEY}); run 'gpupool certs "
                        f"generate --out {paths.out}' first")
    for present, missing in ((paths.ca_cert, paths.ca_key), (paths.ca_key, paths.ca_cert)):
        if present.exists() and not missing.exists():
            raise CertError(f"{missing}: missing beside {present.name}; restore it from where "
                            f"the CA was made (a backup, the Secret), {new_ca}")
    try:
        ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
    except OSError as exc:
        raise CertError(f"{exc.filename}: {exc.strerror}") from exc
    except (ValueError, TypeError) as exc:
        raise CertError(f"{paths.out}: CA files are not valid PEM ({exc}); restore them, "
                        f"{new_ca}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertError(f"{paths.ca_key}: not an ECDSA or RSA key (gpupool signs with those)")
    if key.public_key().public_bytes(*_SPKI) != ca.public_key().public_bytes(*_SPKI):
        raise CertError(f"{paths.ca_key} does not match {paths.ca_cert}: certificates signed "
                        "with it would fail verification against the caBundle; restore the "
                        f"key that belongs to {CA_CERT}, {new_ca}")
    return ca, key


_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class Names:
    """What a serving certificate says it is for: its subject, SANs and extended key usage.
    ``renew`` reads them from the certificate it replaces."""

    common_name: str
    dns: tuple[str, ...]
    ips: tuple[str, ...] = ()
    usages: tuple[x509.ObjectIdentifier, ...] = (ExtendedKeyUsageOID.SERVER_AUTH,)

    @classmethod
    def for_service(cls, service: str, namespace: str, extra_dns: Sequence[str] = (),
                    extra_ips: Sequence[str] = ()) -> Names:
        return cls(service_host(service, namespace),
                   tuple(dict.fromkeys([*dns_names(service, namespace), *extra_dns])),
                   tuple(dict.fromkeys(extra_ips)))

    @classmethod
    def of(cls, cert: x509.Certificate) -> Names:
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            dns = tuple(san.get_values_for_type(x509.DNSName))
            ips = tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
        except x509.ExtensionNotFound:
            dns, ips = (), ()
        try:
            usages = tuple(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        except x509.ExtensionNotFound:
            usages = (ExtendedKeyUsageOID.SERVER_AUTH,)
        cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        common_name = str(cns[0].value) if cns else (dns[0] if dns else WEBHOOK_SERVICE)
        return cls(common_name, dns, ips, usages)

    def plus(self, extra_dns: Sequence[str], extra_ips: Sequence[str]) -> Names:
        return Names(self.common_name, tuple(dict.fromkeys([*self.dns, *extra_dns])),
                     tuple(dict.fromkeys([*self.ips, *extra_ips])), self.usages)


def _issue(paths: Paths, service: str, namespace: str, extra_dns: list[str],
           extra_ips: list[str], days: int, algorithm: str) -> dt.datetime:
    """Issue the serving certificate for a Service from the CA in ``paths``."""
    return _issue_names(paths, Names.for_service(service, namespace, extra_dns, extra_ips),
                        days, algorithm)


def _issue_names(paths: Paths, names: Names, days: int, algorithm: str) -> dt.datetime:
    """Issue the serving certificate from the CA in ``paths``; returns when it expires."""
    ca, ca_key = _load_ca(paths)
    _check_days_within(days, ca, paths)
    key = _new_key(algorithm)
    now = _now()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names.dns]
    sans.extend(_ip_sans(names.ips))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                        names.common_name)]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + dt.timedelta(days=days), ca.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(list(names.usages)), critical=False)
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


def load_certificate(path: str | Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(Path(path).read_bytes())
    except OSError as exc:
        raise CertError(f"{path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise CertError(f"{path}: not a PEM certificate ({exc})") from exc


def expiry(cert_path: str | Path) -> dt.datetime:
    return not_after(Path(cert_path).read_bytes())


def needs_renewal(paths: Paths, renew_before: dt.timedelta) -> bool:
    try:
        return expiry(paths.tls_cert) - _now() <= renew_before
    except (OSError, ValueError):
        return True


def renew(out: str | Path, service: str | None = None, namespace: str | None = None, *,
          extra_dns: Sequence[str] = (), extra_ips: Sequence[str] = (), days: int = 365,
          renew_before_days: float = 30, algorithm: str | None = None,
          force: bool = False) -> bool:
    """Reissue the serving certificate from the existing CA when it is due; True if reissued.

    The new certificate keeps the names, extended key usage and key algorithm of the one it
    replaces: a certificate generated for a custom Service, namespace or extra SANs must not
    come back with the default names, or the API server stops trusting the webhook at the
    next renewal. ``service``/``namespace`` given add that Service's names; ``extra_*`` add
    SANs. With no readable certificate to replace, the Service's names (defaults
    ``gpupool-webhook``, ``gpupool-system``) are issued."""
    _check_days(days)
    for name in extra_dns:
        check_dns_name(name)
    _ip_sans(extra_ips)
    if service is not None or namespace is not None:
        check_service_names(service or WEBHOOK_SERVICE, namespace or WEBHOOK_NAMESPACE)
    paths = Paths(Path(out))
    if not force and not needs_renewal(paths, dt.timedelta(days=renew_before_days)):
        return False
    old = _current(paths)
    if old is None:
        names = Names.for_service(service or WEBHOOK_SERVICE, namespace or WEBHOOK_NAMESPACE,
                                  extra_dns, extra_ips)
    else:
        names = Names.of(old)
        if service is not None or namespace is not None:
            names = names.plus(dns_names(service or WEBHOOK_SERVICE,
                                         namespace or WEBHOOK_NAMESPACE), ())
        names = names.plus(extra_dns, extra_ips)
    _issue_names(paths, names, days, algorithm or _algorithm_of(old) or "ecdsa")
    return True


def _current(paths: Paths) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(paths.tls_cert.read_bytes())
    except (OSError, ValueError):
        return None


def _algorithm_of(cert: x509.Certificate | None) -> str | None:
    if cert is None:
        return None
    key = cert.public_key()
    return "rsa" if isinstance(key, rsa.RSAPublicKey) else "ecdsa"
