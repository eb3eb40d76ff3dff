"""The package's layers, enforced: the engine does no I/O and knows no shell.

Read from the source with ``ast`` (not by importing), so a lazy import inside a function
counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PKG = ROOT / "webhook"
ENGINE = sorted((PKG / "engine").glob("*.py"))

#: Modules that do I/O or belong to a shell; the engine imports none of them.
FORBIDDEN = {"flask", "gunicorn", "kubernetes", "requests", "urllib3", "prometheus_client",
             "os", "io", "pathlib", "shutil", "tempfile", "fcntl", "socket", "ssl", "select",
             "subprocess", "http", "urllib", "logging", "glob", "mmap",
             "webhook.server", "webhook.node", "webhook.cli", "webhook.policyfile",
             "webhook.snapshot", "webhook.certs"}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def imports_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: use absolute imports across layers"
            base = node.module or ""
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def _hits(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: p.name)
def test_engine_imports_no_io_and_no_shell(path):
    bad = sorted(n for n in imports_of(path) if _hits(n))
    assert not bad, f"webhook/engine/{path.name} imports {bad}"


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: p.name)
def test_engine_calls_no_io_builtins(path):
    calls = {n.func.id for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & FORBIDDEN_CALLS, f"webhook/engine/{path.name}: {calls & FORBIDDEN_CALLS}"


def test_contract_package_imports_only_itself():
    for path in (PKG / "api").glob("*.py"):
        bad = sorted(n for n in imports_of(path)
                     if n.startswith("webhook") and not n.startswith("webhook.api"))
        assert not bad, f"webhook/api/{path.name} imports {bad}"


def test_node_side_never_imports_the_server_or_cli():
    for path in (PKG / "node").glob("*.py"):
        bad = sorted(n for n in imports_of(path)
                     if n.startswith(("webhook.server", "webhook.cli")))
        assert not bad, f"webhook/node/{path.name} imports {bad}"


def test_the_rule_itself_catches_a_violation(tmp_path):
    """The check must be able to fail: an engine module that opens a file is caught."""
    bad = tmp_path / "leaky.py"
    bad.write_text("from webhook.server import audit\nimport os.path\n")
    assert sorted(n for n in imports_of(bad) if _hits(n)) == [
        "os.path", "webhook.server", "webhook.server.audit"]


SHELLS = sorted(p for p in PKG.rglob("*.py") if (PKG / "engine") not in p.parents)
ENGINE_MODULES = {p.stem for p in ENGINE if p.stem != "__init__"}


def engine_modules_imported(path: Path) -> list[str]:
    """Engine modules a shell imports by name, bypassing ``webhook.engine``'s surface."""
    return sorted(n for n in imports_of(path) if n.startswith("webhook.engine.")
                  and n.split(".")[2] in ENGINE_MODULES)


@pytest.mark.parametrize("path", SHELLS, ids=lambda p: str(p.relative_to(PKG)))
def test_shells_use_only_the_engines_declared_surface(path):
    bad = engine_modules_imported(path)
    assert not bad, (f"webhook/{path.relative_to(PKG)} imports {bad}: take what it needs from "
                     "webhook.engine (declare it in webhook/engine/__init__.py)")


def test_every_declared_name_resolves_and_nothing_else_does():
    import webhook.engine as engine

    for name in engine.__all__:
        assert getattr(engine, name) is not None
    with pytest.raises(AttributeError):
        engine.assess_node  # noqa: B018  (an engine internal: not on the surface)


def test_the_surface_rule_catches_a_shell_reaching_in(tmp_path):
    bad = tmp_path / "shell.py"
    bad.write_text("from webhook.engine import Policy, cdi\n"
                   "from webhook.engine.pods import mutate\nimport webhook.engine.steering\n")
    assert engine_modules_imported(bad) == ["webhook.engine.cdi", "webhook.engine.pods",
                                            "webhook.engine.pods.mutate",
                                            "webhook.engine.steering"]


def test_the_picture_of_the_layers_is_the_codes():
    """docs/layers.md is drawn from the imports; a change to them redraws it."""
    from tests import layers_graph

    assert (ROOT / "docs/layers.md").read_text() == layers_graph.render(), (
        "docs/layers.md is out of date: python -m tests.layers_graph > docs/layers.md")
