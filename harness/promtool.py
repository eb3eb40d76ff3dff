"""Prometheus's promtool, built from its Go module by build-promtool.sh and cached outside
the tree: the judge of gpupool's alert rules and dashboard queries."""

from __future__ import annotations

from pathlib import Path

from harness.gobuild import built
from harness.kit import ROOT

BUILD = ROOT / "tests" / "tools" / "build-promtool.sh"


def binary() -> Path:
    return built(BUILD, "promtool") / "promtool"
