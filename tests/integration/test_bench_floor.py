"""bench/floor, the stand-in webhook of `python -m bench.e2e_load --calls`: it must answer as
a webhook does (the uid back, a patch the API server can apply to any pod, "allowed" from
the validating paths), or the floor it measures is not a webhook's."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import jsonpatch
import pytest
import requests

from tests.conftest import body, gpu_pod
from tests.e2e.hami import TlsProgram
from tests.integration.conftest import generate_certs
from tests.tools.gobuild import built

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def floor(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("floor")
    generate_certs(tmp / "certs")
    bin_dir = built(ROOT / "bench/floor/build.sh", "the floor stand-in")
    prog = TlsProgram(tmp / "certs/tls.crt", tmp / "certs/tls.key", tmp / "floor.log")
    prog.launch([str(bin_dir / "floor"), "--bind", f"127.0.0.1:{prog.port}",
                 "--cert", str(prog.cert), "--key", str(prog.key)])
    yield f"https://127.0.0.1:{prog.port}", str(tmp / "certs/ca.crt")
    prog.stop()


@pytest.mark.parametrize("annotations", [None, {"team": "a"}])
@pytest.mark.parametrize("path", ["/mutate", "/webhook"])
def test_the_stand_in_adds_its_annotation_to_any_pod(floor, path, annotations):
    from bench.e2e_load import FLOOR_ANNOTATION

    url, ca = floor
    pod = gpu_pod()
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    review = json.loads(body(pod))
    r = requests.post(url + path, data=json.dumps(review), verify=ca, timeout=10,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    out = r.json()
    assert (out["apiVersion"], out["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert out["response"]["uid"] == review["request"]["uid"]
    assert out["response"]["allowed"] is True
    assert out["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    patched = jsonpatch.apply_patch(pod, ops)
    assert patched["metadata"]["annotations"] == {**(annotations or {}), FLOOR_ANNOTATION: "1"}
    # applied again (the reinvocation pass) it changes nothing
    assert jsonpatch.apply_patch(patched, ops) == patched


def test_the_stand_in_allows_on_its_validating_paths_and_refuses_what_is_no_review(floor):
    url, ca = floor
    review = json.loads(body(gpu_pod()))
    out = requests.post(url + "/validate", json=review, verify=ca, timeout=10).json()
    assert out["response"] == {"uid": review["request"]["uid"], "allowed": True}
    assert requests.post(url + "/validate", data=b"{", verify=ca, timeout=10).status_code == 400
    assert requests.get(url + "/validate", verify=ca, timeout=10).status_code == 405
    assert requests.get(url + "/healthz", verify=ca, timeout=10).text == "ok"
