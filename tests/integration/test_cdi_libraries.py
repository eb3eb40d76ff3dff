"""Which spec files a node's containerd reads, judged by the CDI libraries containerd links
(tests/cdilibs: each release built from its module, listing what its registry resolves on
the same spec directories). The agent publishes what a reader of each older spec version
resolves (``Inventory.readable_up_to``) and admission takes the node's containerd's library
from its runtime version (``webhook.api.cdireaders``); both must agree with every library
on every layout here, the toolkit's 0.7.0 specs with ``additionalGids`` (toolkit #1860,
#1940) included."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.gobuild import built
from harness.kit import ROOT, UPSTREAM
from harness.layouts import UUIDS, device_plugin_spec, management_spec, nvidia_ctk_spec
from webhook.api import cdireaders
from webhook.api.inventory import Inventory
from webhook.node import specdirs

BUILD = ROOT / "tests" / "cdilibs" / "build.sh"
LIBRARIES = tuple(line.split()[1] for line in (ROOT / "tests/cdilibs/releases.txt")
                  .read_text().splitlines() if line.strip() and not line.startswith("#"))


def _toolkit_0_7(text: str) -> str:
    spec = json.loads(text)
    spec["cdiVersion"] = "0.7.0"
    spec["containerEdits"]["additionalGids"] = [44]
    return json.dumps(spec)


def _annotated_0_6(uuid: str) -> str:
    return json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
                       "annotations": {"written-by": "a 0.6.0 generator"},
                       "devices": [{"name": uuid, "containerEdits": {
                           "deviceNodes": [{"path": "/dev/nvidia0"}]}}]})


def _layouts(root: Path) -> dict[str, list[Path]]:
    """Spec directories as nodes have them: the GPU Operator's specs with the plugin's
    written at 0.7.0; a 0.7.0 file overriding a 0.5.0 one from a later directory; two files
    of one directory defining the same device at 0.5.0 and 0.7.0 (a conflict only for a
    library that reads both); a 0.6.0 spec with annotations; every upstream valid spec."""
    out: dict[str, list[Path]] = {}

    def layout(name: str, files: dict[str, dict[str, str]]) -> None:
        dirs = []
        for d, specs in files.items():
            path = root / name / d
            path.mkdir(parents=True)
            for fname, text in specs.items():
                (path / fname).write_text(text)
            dirs.append(path)
        out[name] = dirs

    plugin = device_plugin_spec()
    layout("operator, toolkit 0.7", {"etc": {}, "run": {
        "management.nvidia.com-gpu.yaml": management_spec(),
        "k8s.device-plugin.nvidia.com-gpu.json": _toolkit_0_7(plugin)}})
    layout("0.7 overrides 0.5", {"etc": {"nvidia.yaml": nvidia_ctk_spec()}, "run": {
        "nvidia.json": _toolkit_0_7(json.dumps({
            "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": UUIDS[0], "containerEdits": {
                "deviceNodes": [{"path": "/dev/nvidia0"}]}}],
            "containerEdits": {}}))}})
    layout("a conflict only newer readers see", {"run": {
        "a.yaml": nvidia_ctk_spec(),
        "b.json": _toolkit_0_7(json.dumps({
            "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": UUIDS[1], "containerEdits": {
                "deviceNodes": [{"path": "/dev/nvidia1"}]}}],
            "containerEdits": {}}))}})
    layout("0.6 annotations", {"run": {"a.json": _annotated_0_6(UUIDS[0]),
                                       "m.yaml": management_spec()}})
    upstream = {p.name: p.read_text() for p in (UPSTREAM / "cdi-specs").glob("*.json")}
    upstream.update({p.name: p.read_text()
                     for p in (UPSTREAM / "cdi-specs/from-go-literals").glob("*.yaml")
                     if "{{" not in p.read_text()})
    layout("upstream specs", {"run": upstream})
    return out


def _library_reads() -> dict[str, str]:
    return {row.library: row.reads for row in cdireaders.CONTAINERD}


def test_every_library_the_table_names_is_judged():
    assert set(_library_reads()) <= set(LIBRARIES)


@pytest.mark.parametrize("library", sorted(_library_reads(), key=lambda v: tuple(
    int(x) for x in v[1:].split("."))))
def test_what_each_containerd_library_resolves_is_what_gpupool_says_it_resolves(
        tmp_path, library):
    exe = built(BUILD, "the CDI libraries containerd links") / f"cdi-list-{library}"
    reads = _library_reads()[library]
    checked = 0
    for name, dirs in _layouts(tmp_path).items():
        r = subprocess.run([str(exe), *map(str, dirs)], capture_output=True, text=True,
                           timeout=60, check=True)
        real = set(json.loads(r.stdout)["devices"])
        reg = specdirs.scan(map(str, dirs))
        versions, up_to = specdirs.readable_up_to(map(str, dirs), reg)
        inv = Inventory(kinds=reg.kinds(), spec_versions=versions, readable_up_to=up_to,
                        containerd_reads=reads)
        ours = {f"{k}={d}" for k, devs in inv.containerd_kinds.items() for d in devs}
        assert ours == real, (name, library, sorted(ours ^ real))
        checked += len(real)
    assert checked  # every library resolves some device of some layout
