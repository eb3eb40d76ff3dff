"""The stand-in webhooks of `python -m bench.e2e_load --calls`, bench/floor (Go) and
bench/baseline.py with --mark (gpupool's serving stack): each must answer as a webhook does
(the uid back, a patch the API server can apply to any pod, "allowed" from the validating
paths), or what they measure is not a webhook's floor."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import jsonpatch
import pytest
import requests

from bench.e2e_load import STAND_IN_ANNOTATION, serve_baseline
from harness.gobuild import built
from harness.hami import TlsProgram
from harness.kit import body, gpu_pod
from harness.servers import free_port, generate_certs, stop_group

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("stand-ins") / "certs"
    generate_certs(out)
    return out


@pytest.fixture(scope="module")
def floor(certs):
    bin_dir = built(ROOT / "bench/floor/build.sh", "the floor stand-in")
    prog = TlsProgram(certs / "tls.crt", certs / "tls.key", certs.parent / "floor.log")
    prog.launch([str(bin_dir / "floor"), "--bind", f"127.0.0.1:{prog.port}",
                 "--cert", str(prog.cert), "--key", str(prog.key),
                 "--mark", STAND_IN_ANNOTATION])
    yield f"https://127.0.0.1:{prog.port}"
    prog.stop()


@pytest.fixture(scope="module")
def baseline(certs):
    port = free_port()
    proc = serve_baseline(port, certs, certs.parent / "baseline.log", workers=1)
    yield f"https://127.0.0.1:{port}"
    stop_group(proc)


@pytest.fixture(params=["floor", "baseline"])
def stand_in(request, certs):
    return request.getfixturevalue(request.param), str(certs / "ca.crt")


@pytest.mark.parametrize("annotations", [None, {"team": "a"}])
def test_a_stand_in_adds_its_annotation_to_any_pod(stand_in, annotations):
    url, ca = stand_in
    pod = gpu_pod()
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    review = json.loads(body(pod))
    r = requests.post(url + "/mutate", json=review, verify=ca, timeout=10)
    assert r.status_code == 200
    out = r.json()
    assert (out["apiVersion"], out["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert out["response"]["uid"] == review["request"]["uid"]
    assert out["response"]["allowed"] is True
    assert out["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    patched = jsonpatch.apply_patch(pod, ops)
    assert patched["metadata"]["annotations"] == {**(annotations or {}),
                                                  STAND_IN_ANNOTATION: "1"}
    # applied again (the reinvocation pass) it changes nothing
    assert jsonpatch.apply_patch(patched, ops) == patched


def test_a_stand_in_allows_on_its_validating_path(stand_in):
    url, ca = stand_in
    review = json.loads(body(gpu_pod()))
    out = requests.post(url + "/validate", json=review, verify=ca, timeout=10).json()
    assert out["response"] == {"uid": review["request"]["uid"], "allowed": True}


def test_the_floor_mutates_on_hamis_path_and_refuses_what_is_no_review(floor, certs):
    ca = str(certs / "ca.crt")
    review = json.loads(body(gpu_pod()))
    out = requests.post(floor + "/webhook", json=review, verify=ca, timeout=10).json()
    assert out["response"]["patchType"] == "JSONPatch"
    assert requests.post(floor + "/validate", data=b"{", verify=ca, timeout=10).status_code == 400
    assert requests.get(floor + "/validate", verify=ca, timeout=10).status_code == 405
    assert requests.get(floor + "/healthz", verify=ca, timeout=10).text == "ok"


def test_the_floor_refuses_to_start_without_what_it_needs(certs):
    bin_dir = built(ROOT / "bench/floor/build.sh", "the floor stand-in")
    r = subprocess.run([str(bin_dir / "floor"), "--cert", str(certs / "tls.crt")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert r.stderr.strip() == "floor: give --cert, --key and --mark"
