"""The engine as the benchmarks drive it, from this tree or from a reference commit's.

This tree's engine is reached through its declared surface (``webhook.engine``), like any
shell. ``bench.versus_ref`` also runs the same timings against an older commit's package,
which predates that surface; there the names are taken from the modules that held them then.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple


class Engine(NamedTuple):
    ClusterView: Any
    NodeInfo: Any
    review_pod: Any
    #: one stage, as the server decides it on one request: ``decide(Stage, Subject, ...)``
    decide: Any
    Stage: Any
    Subject: Any


#: where the names lived before the engine declared a surface (commit 1b74cc1 and older)
_BEFORE_SURFACE = {"ClusterView": "webhook.engine.cluster", "NodeInfo": "webhook.engine.cluster",
                   "review_pod": "webhook.engine.admit", "decide": "webhook.engine.admit",
                   "Stage": "webhook.engine.admit", "Subject": "webhook.engine.admit"}


def engine() -> Engine:
    import webhook.engine as surface

    if hasattr(surface, "__all__") and "review_pod" in surface.__all__:
        return Engine(surface.ClusterView, surface.NodeInfo, surface.review_pod,
                      surface.decide, surface.Stage, surface.Subject)
    return Engine(*(getattr(importlib.import_module(module), name)
                    for name, module in _BEFORE_SURFACE.items()))


def default_policy() -> Any:
    """The built-in PoolPolicy, read by the tree whose ``webhook`` package is imported:
    ``webhook/files/policyfile.py`` here, ``webhook/policyfile.py`` before the shells'
    modules moved into folders (commit ed4be44)."""
    from pathlib import Path

    import webhook

    here = Path(webhook.__file__).parent
    module = "webhook.files.policyfile" if (here / "files" / "policyfile.py").exists() \
        else "webhook.policyfile"
    return importlib.import_module(module).default_policy()
