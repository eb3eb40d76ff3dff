"""The HTTPS path end to end: gunicorn with real certificates, a real HTTPS client."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import warnings

import jsonpatch
import pytest
import requests

from harness.kit import body, gpu_pod


def test_mutate_over_https_keepalive(server):
    with requests.Session() as s:
        for i in range(20):
            r = server.post("mutate", body(gpu_pod(f"p{i}"), uid=f"uid-{i}"), session=s)
            assert r.status_code == 200
            resp = r.json()["response"]
            assert resp["uid"] == f"uid-{i}" and resp["allowed"]
            out = jsonpatch.apply_patch(gpu_pod(f"p{i}"),
                                        json.loads(base64.b64decode(resp["patch"])))
            assert out["spec"]["schedulerName"] == "default-scheduler"


def test_validate_over_https(server):
    r = server.post("validate", body(gpu_pod(), api_version="admission.k8s.io/v1beta1"))
    assert r.status_code == 200
    assert r.json()["apiVersion"] == "admission.k8s.io/v1beta1"
    assert r.json()["response"]["allowed"] is False  # no affinity: mutating webhook skipped


def test_probes(server):
    assert requests.get(f"{server.url}/healthz", verify=server.ca, timeout=5).text == "ok\n"
    assert requests.get(f"{server.url}/livez", verify=server.ca, timeout=5).text == "ok\n"
    assert requests.get(f"{server.url}/readyz", verify=server.ca, timeout=5).text == "ok\n"
    r = requests.get(f"{server.url}/readyz?verbose", verify=server.ca, timeout=5)
    assert r.status_code == 200 and "[+]certificate ok: expires " in r.text
    assert "[+]node-source ok: demo snapshot" in r.text and r.text.endswith("check passed\n")


def test_bad_requests_over_https_and_server_keeps_serving(server):
    assert server.post("mutate", b"{nope").status_code == 400
    assert server.post("mutate", b"{}", content_type="text/plain").status_code == 415
    big = b'{"x": "' + b"a" * (8 * 1024 * 1024) + b'"}'
    assert server.post("mutate", big).status_code == 413
    assert server.post("mutate", body(gpu_pod())).status_code == 200


def test_certificate_verifies_for_ip_and_service_names(server):
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((server.certs / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = sans.get_values_for_type(x509.DNSName)
    assert "gpupool-webhook.gpupool-system.svc" in names
    assert "gpupool-webhook.gpupool-system.svc.cluster.local" in names


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1])
def test_old_tls_refused(server, version):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = version
            ctx.maximum_version = version
        ctx.set_ciphers("ALL:@SECLEVEL=0")
    except (ValueError, ssl.SSLError):
        pytest.skip(f"this OpenSSL cannot even offer {version.name}")
    host, port = server.url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw, pytest.raises(ssl.SSLError):
        ctx.wrap_socket(raw).do_handshake()


def test_tls12_accepted(server):
    ctx = ssl.create_default_context(cafile=server.ca)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    host, port = server.url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        assert tls.version() == "TLSv1.2"
