"""docs/compatibility.md against the code: the supported range the chart, the kustomize base
and the engine declare, a row per allocator switch with the code's own value for each
release, and every test the table names."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from webhook.engine import SUPPORTED_RELEASES, Release

ROOT = Path(__file__).parents[2]
DOC = (ROOT / "docs" / "compatibility.md").read_text()


def _table(header: str) -> list[list[str]]:
    lines = DOC.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


SWITCHES = sorted(n for n, v in vars(Release).items() if isinstance(v, property)
                  and n != "supported")


def test_the_supported_range_is_declared_alike_everywhere():
    oldest = SUPPORTED_RELEASES[0]
    chart = yaml.safe_load((ROOT / "manifests/helm/gpupool/Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={oldest}.0-0"
    base = yaml.safe_load((ROOT / "manifests/base/deployment.yaml").read_text())
    assert base["metadata"]["annotations"]["gpupool.io/kubernetes-versions"] == \
        f">={oldest}.0-0"
    assert f"**{oldest} to {SUPPORTED_RELEASES[-1]}**" in DOC
    assert f"Prerequisites: Kubernetes {oldest} to {SUPPORTED_RELEASES[-1]}" in \
        (ROOT / "docs/install.md").read_text()
    assert [r[0] for r in _table("Release")] == list(reversed(SUPPORTED_RELEASES))


def test_every_switch_has_its_row_and_each_cell_is_the_codes():
    header = _table("Difference")
    assert not Release(34).supported
    rows = {r[0].strip("`"): r for r in header if r[0].startswith("`")}
    assert sorted(rows) == SWITCHES
    releases = ("1.34", "1.35", "1.36", "1.37")
    for name, row in rows.items():
        for col, text in zip(releases, row[1:5], strict=True):
            release = Release(int(col.split(".")[1]))
            if not release.supported:
                assert text == "-", (name, col, text)
            else:
                want = "on" if getattr(release, name) else "off"
                assert text == want, (name, col, text, want)


def test_every_test_the_table_names_exists():
    named = [r[-1] for r in _table("Difference") if r[-1] != "-"]
    assert len(named) > 10
    for ref in named:
        path, _, func = ref.partition("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {re.escape(func)}\(", source, re.M), ref
