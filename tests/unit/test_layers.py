"""The package's layers, enforced: the engine does no I/O and knows no shell.

Read from the source with ``ast`` (not by importing), so a lazy import inside a function
counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.kit import ROOT

PKG = ROOT / "webhook"
ENGINE = sorted((PKG / "engine").rglob("*.py"))

#: Modules that do I/O or belong to a shell; the engine imports none of them.
FORBIDDEN = {"flask", "gunicorn", "kubernetes", "requests", "urllib3", "prometheus_client",
             "os", "io", "pathlib", "shutil", "tempfile", "fcntl", "socket", "ssl", "select",
             "subprocess", "http", "urllib", "logging", "glob", "mmap",
             "webhook.server", "webhook.node", "webhook.cli", "webhook.files",
             "webhook.cluster", "webhook.scan"}
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


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: str(p.relative_to(PKG)))
def test_engine_imports_no_io_and_no_shell(path):
    bad = sorted(n for n in imports_of(path) if _hits(n))
    assert not bad, f"{path.relative_to(PKG)} imports {bad}"


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: str(p.relative_to(PKG)))
def test_engine_calls_no_io_builtins(path):
    calls = {n.func.id for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & FORBIDDEN_CALLS, f"{path.relative_to(PKG)}: {calls & FORBIDDEN_CALLS}"


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
#: Outside the engine's own tests, tests and benchmarks keep to the shells' rule.
OUTSIDERS = sorted(p for d in ("tests", "bench", "harness") for p in (ROOT / d).rglob("*.py")
                   if (ROOT / "tests/unit/engine") not in p.parents)


ROOMS = sorted(p.parent.name for p in (PKG / "engine").glob("*/__init__.py"))


def engine_modules_imported(path: Path) -> list[str]:
    """Engine modules a shell imports by name, bypassing ``webhook.engine``'s surface."""
    return sorted(n for n in imports_of(path)
                  if n.startswith("webhook.engine.") and n.split(".")[2] in ROOMS)


@pytest.mark.parametrize("path", SHELLS, ids=lambda p: str(p.relative_to(PKG)))
def test_shells_use_only_the_engines_declared_surface(path):
    bad = engine_modules_imported(path)
    assert not bad, (f"webhook/{path.relative_to(PKG)} imports {bad}: take what it needs from "
                     "webhook.engine (declare it in webhook/engine/__init__.py)")


@pytest.mark.parametrize("path", OUTSIDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_tests_and_benchmarks_use_only_the_surface_too(path):
    bad = engine_modules_imported(path)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: use webhook.engine's surface"


def test_every_declared_name_resolves_and_nothing_else_does():
    import webhook.engine as engine

    for name in engine.__all__:
        assert getattr(engine, name) is not None
    with pytest.raises(AttributeError):
        engine.assess_node  # noqa: B018  (an engine internal: not on the surface)


def test_the_surface_rule_catches_a_shell_reaching_in(tmp_path):
    bad = tmp_path / "shell.py"
    bad.write_text("from webhook.engine import Policy, Stage\n"
                   "from webhook.engine.admission.pods import mutate\n"
                   "import webhook.engine.checks.cdi\n")
    assert engine_modules_imported(bad) == ["webhook.engine.admission.pods",
                                            "webhook.engine.admission.pods.mutate",
                                            "webhook.engine.checks.cdi"]


def declared_imports(room: str) -> set[str]:
    """The rooms (and ``webhook.api``) a room's docstring says it may import."""
    doc = ast.get_docstring(ast.parse((PKG / "engine" / room / "__init__.py").read_text())) or ""
    lines = [ln for ln in doc.splitlines() if ln.startswith("May import:")]
    assert len(lines) == 1, f"webhook/engine/{room}/__init__.py: say once what it may import"
    return {n.strip(" .") for n in lines[0].removeprefix("May import:").split(",")}


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["webhook", "engine"] else None


def room_violations(room: str, path: Path) -> list[str]:
    """Imports of ``path`` (a module of ``room``) that its room does not declare."""
    allowed = declared_imports(room)
    bad = []
    for name in sorted(imports_of(path)):
        other = room_of(name)
        if name.startswith("webhook.api") and "webhook.api" not in allowed:
            bad.append(name)
        elif name.startswith("webhook.engine") and (
                other is None or (other != room and other not in allowed)):
            bad.append(name)  # a room's module, through its room, or nothing
    return bad


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_imports_only_what_it_declares(room):
    for path in sorted((PKG / "engine" / room).glob("*.py")):
        bad = room_violations(room, path)
        assert not bad, (f"{path.relative_to(PKG)} imports {bad}; its room declares only "
                         f"{sorted(declared_imports(room))}")


def test_the_room_rule_catches_an_import_upward(tmp_path):
    bad = tmp_path / "leaky.py"
    bad.write_text("from webhook.engine.core import policy\n"
                   "from webhook.engine.checks.cdi import verdicts\n"
                   "from webhook.engine import Stage\n")
    assert room_violations("placement", bad) == [
        "webhook.engine", "webhook.engine.Stage", "webhook.engine.checks.cdi",
        "webhook.engine.checks.cdi.verdicts"]


def test_the_rooms_declare_no_cycle():
    """The declarations themselves form layers: a room never may import one that may import
    it, however indirectly."""
    graph = {r: declared_imports(r) - {"webhook.api"} for r in ROOMS}
    assert set().union(*graph.values()) <= set(ROOMS)
    done: set[str] = set()

    def visit(room: str, path: tuple[str, ...]) -> None:
        assert room not in path, f"cycle: {' -> '.join((*path, room))}"
        if room not in done:
            for other in graph[room]:
                visit(other, (*path, room))
            done.add(room)

    for room in ROOMS:
        visit(room, ())


def test_no_module_sits_outside_a_room():
    loose = sorted(p.name for p in (PKG / "engine").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"webhook/engine/{loose}: put each module in the room of its question"


def test_the_picture_of_the_layers_is_the_codes():
    """docs/layers.md is drawn from the imports; a change to them redraws it."""
    from tests import layers_graph

    assert (ROOT / "docs/layers.md").read_text() == layers_graph.render(), (
        "docs/layers.md is out of date: python -m tests.layers_graph > docs/layers.md")


def test_the_readmes_map_of_the_package_is_the_tree_as_it_is():
    """The README's folders, their modules and what each imports are made from the tree
    (each package's own docstring says what it holds): a module added or moved, or a
    package described anew, without the map made again fails here."""
    from tests import layers_graph

    readme = (ROOT / "README.md").read_text()
    assert layers_graph.MAP_BEGIN in readme and layers_graph.MAP_END in readme
    assert readme == layers_graph.with_readme_map(readme), (
        "README.md's package map is out of date: python -m tests.layers_graph --readme")
    # and the map names every module there is
    for path in PKG.rglob("*.py"):
        if path.name != "__init__.py" and path.parent != PKG:
            assert f"`{path.stem}`" in layers_graph.readme_map(), path


def test_the_engine_surface_is_listed_once():
    """``_SURFACE`` is the list; the type checkers' block is written from it, and every
    name it lists is what its module defines."""
    import importlib

    from tests import engine_surface
    from webhook.engine import _SURFACE

    assert engine_surface.current() == engine_surface.block(), (
        "webhook/engine/__init__.py's TYPE_CHECKING block is out of date: "
        "python -m tests.engine_surface")
    for name, module in _SURFACE.items():
        assert hasattr(importlib.import_module(f"webhook.engine.{module}"), name), name


def _top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("folder,never", [("bench", {"tests"}), ("harness", {"tests", "bench"})])
def test_bench_and_the_harness_import_no_test(folder, never):
    """bench/ and tests/ share what both need through harness/, which needs neither."""
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = sorted(n for n in imports_of(path) if _top(n) in never)
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}: move it to harness/"


def test_bench_imports_form_no_circle():
    """The benchmarks' entry points share modules (servers, baselines, publishing); none of
    them imports another's entry point back."""
    graph = {p.stem: {n.split(".")[1] for n in imports_of(p)
                      if n.startswith("bench.") and len(n.split(".")) > 1}
             for p in (ROOT / "bench").glob("*.py")}
    graph = {k: {v for v in vs if v in graph and v != k} for k, vs in graph.items()}
    done: set[str] = set()

    def visit(mod: str, path: tuple[str, ...]) -> None:
        assert mod not in path, f"bench imports in a circle: {' -> '.join((*path, mod))}"
        if mod not in done:
            for other in sorted(graph[mod]):
                visit(other, (*path, mod))
            done.add(mod)

    for mod in sorted(graph):
        visit(mod, ())



def test_the_packages_import_each_other_in_no_cycle():
    """The webhook and the scan share the cluster watch through a shared module, not one
    through the other: the package graph has no cycle, so the picture shows none."""
    from tests import layers_graph

    layers, _ = layers_graph.edges()
    graph: dict[str, set[str]] = {}
    for a, b in layers:
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(a for a in graph if reaches(a, a, {a}))
    assert not cycles, f"packages on an import cycle: {cycles}"


@pytest.mark.parametrize("folder, allowed", [
    ("cluster", ("webhook.api", "webhook.engine", "webhook.cluster")),
    ("files", ("webhook.api", "webhook.engine", "webhook.cluster", "webhook.files")),
])
def test_the_shells_reach_into_cluster_and_files_imports_only_what_it_declares(folder, allowed):
    """The cluster-facing and file-facing modules every shell shares sit below the shells:
    they import the contract, the engine's surface and (files) the cluster's reach, never a
    shell, so the server, the scan and the CLI can all use them."""
    for path in (PKG / folder).glob("*.py"):
        bad = sorted(n for n in imports_of(path) if n.startswith("webhook.")
                     and not n.startswith(allowed))
        assert not bad, f"webhook/{folder}/{path.name} imports {bad}"
