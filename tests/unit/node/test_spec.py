"""CDI spec parsing agrees with upstream: every valid fixture loads, every invalid one fails."""

from __future__ import annotations

import re

import pytest

from harness.kit import UPSTREAM
from webhook.node.spec import CDIError, parse_qualified, parse_spec

SPECS = UPSTREAM / "cdi-specs"
# Upstream tests substitute these placeholders before parsing (strings.ReplaceAll).
PLACEHOLDER = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")


def _text(path) -> str:
    return PLACEHOLDER.sub(lambda m: f"/{m.group(1)}", path.read_text())


VALID = sorted(p for p in SPECS.rglob("*") if p.suffix in (".json", ".yaml")
               and "invalid" not in p.parts and "schema" not in p.parts)
INVALID = sorted(p for p in (SPECS / "invalid").rglob("*") if p.is_file())


def test_fixture_sets_are_not_empty():
    assert len(VALID) >= 7 and len(INVALID) >= 10


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_upstream_spec_loads(path):
    spec = parse_spec(_text(path), str(path))
    assert spec.devices and "/" in spec.kind


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_upstream_spec_rejected(path):
    with pytest.raises(CDIError):
        parse_spec(_text(path), str(path))


def test_known_devices_of_upstream_specs():
    spec = parse_spec(_text(SPECS / "from-go-literals/nvidia-ctk-generate-default.yaml"))
    assert spec.kind == "example.com/device" and spec.devices == ("0", "all")
    spec = parse_spec(_text(SPECS / "from-go-literals/newspec-valid-3-devices.yaml"))
    assert spec.devices == ("dev1", "dev2", "dev3")


BASE = "cdiVersion: {v}\nkind: {k}\ndevices:\n  - name: {n}\n    containerEdits:\n{e}"
ENV = "      env: [A=B]\n"


@pytest.mark.parametrize("version,kind,name,edits,error", [
    ("0.4.0", "v.com/gpu", "'0'", ENV, "at least 0.5.0"),  # digit-first name needs 0.5.0
    ("0.5.0", "v.com/gpu", "'0'", ENV, None),
    ("0.5.0", "v.com/g.pu", "a", ENV, "at least 0.6.0"),  # dot in class needs 0.6.0
    ("0.6.0", "v.com/g.pu", "a", ENV, None),
    ("0.3.0", "v.com/gpu", "a", "      mounts: [{hostPath: /a, containerPath: /b, type: bind}]\n",
     "at least 0.4.0"),
    ("0.6.0", "v.com/gpu", "a", "      additionalGids: [5]\n", "at least 0.7.0"),
    ("1.0.0", "v.com/gpu", "a", "      netDevices: [{hostInterfaceName: e0, name: e1}]\n",
     "at least 1.1.0"),
    ("v1.1.0", "v.com/gpu", "a", "      netDevices: [{hostInterfaceName: e0, name: e1}]\n", None),
    ("0.9.0", "v.com/gpu", "a", ENV, "invalid version"),
    ("0.5.0", "v.com/gpu", "a-", ENV, "invalid device name"),
    ("0.5.0", "v.com/gpu", "GPU-1:2", ENV, None),
    ("0.5.0", "v.com/gpu", "a", "      env: [A=B]\n      bogus: 1\n", "unknown field 'bogus'"),
    ("0.5.0", "v.com/gpu", "a", "      env: [AB]\n", "not KEY=VALUE"),
    ("0.5.0", "v.com/gpu", "a", "      hooks: [{hookName: nope, path: /x}]\n", "not an OCI hook"),
    ("0.5.0", "-v.com/gpu", "a", ENV, "invalid vendor"),
])
def test_version_features_and_names(version, kind, name, edits, error):
    text = BASE.format(v=version, k=kind, n=name, e=edits)
    if error is None:
        assert parse_spec(text).kind == kind
    else:
        with pytest.raises(CDIError, match=re.escape(error)):
            parse_spec(text)


def test_annotations_need_060():
    text = BASE.format(v="0.5.0", k="v.com/gpu", n="a", e=ENV) + "annotations: {x: y}\n"
    with pytest.raises(CDIError, match=r"at least 0\.6\.0"):
        parse_spec(text)


def test_qualified_names():
    assert parse_qualified("management.nvidia.com/gpu=GPU-59ab") == (
        "management.nvidia.com/gpu", "GPU-59ab")
    with pytest.raises(CDIError):
        parse_qualified("nvidia.com/gpu")
