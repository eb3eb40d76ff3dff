"""The picture of gpupool's layers in docs/layers.md, drawn from the code's own imports.

``python -m tests.layers_graph > docs/layers.md`` writes it; tests/unit/test_layers.py fails
when the file and the code disagree, so the picture a reviewer reads is the code's.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "webhook"


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in out if n.startswith("webhook")}


def _layer(module: str) -> str:
    """webhook.engine.checks.cdi -> engine; webhook.files.snapshot -> files;
    webhook.cli.x -> cli; webhook (its version) -> shared"""
    parts = module.split(".")
    if len(parts) == 1:
        return "shared"
    if parts[1] in ("engine", "api", "server", "scan", "node", "cli", "cluster", "files"):
        return parts[1]
    return "cli" if parts[1] == "__main__" else "shared"  # `python -m webhook` is the CLI


def edges() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(layer -> layer it imports), (engine room.module -> room.module it imports)."""
    layers: set[tuple[str, str]] = set()
    engine: set[tuple[str, str]] = set()
    modules = {_module(p) for p in PKG.rglob("*.py")}
    for path in sorted(PKG.rglob("*.py")):
        me = _module(path)
        for name in _imports(path):
            target = max((m for m in modules if name == m or name.startswith(m + ".")),
                         key=len, default=None)
            if target is None or target == me:
                continue
            a, b = _layer(me), _layer(target)
            if a != b:
                layers.add((a, b))
            if a == b == "engine" and len(me.split(".")) > 3 and len(target.split(".")) > 3:
                engine.add((".".join(me.split(".")[2:4]), ".".join(target.split(".")[2:4])))
    return layers, engine


def _rooms(engine: set[tuple[str, str]]) -> list[str]:
    """An arrow where a module of one room imports a module of another."""
    edges = {(a.split(".")[0], b.split(".")[0]) for a, b in engine}
    return [f"  {a} --> {b}" for a, b in sorted(edges) if a != b]


def _modules(engine: set[tuple[str, str]]) -> list[str]:
    """One subgraph per room; an arrow per import between modules."""
    modules = sorted({m for e in engine for m in e})
    out = []
    for room in sorted({m.split(".")[0] for m in modules}):
        out.append(f"  subgraph {room}")
        out += [f"    {m.replace('.', '_')}[{m.split('.')[1]}]"
                for m in modules if m.split(".")[0] == room]
        out.append("  end")
    out += [f"  {a.replace('.', '_')} --> {b.replace('.', '_')}" for a, b in sorted(engine)]
    return out


def render() -> str:
    layers, engine = edges()
    lines = [
        "# gpupool's layers",
        "",
        "Drawn from the code's imports by `python -m tests.layers_graph > docs/layers.md`;",
        "`tests/unit/test_layers.py` fails when this file and the code disagree. An arrow",
        "points at what a module imports. The rules the same test enforces: the engine does no",
        "I/O and imports only `webhook.api`; `webhook.api` imports nothing of gpupool; the node",
        "side never imports the server or the CLI; shells reach the engine only through",
        "`webhook/engine/__init__.py`'s declared surface; no two packages import each other,",
        "directly or round a cycle. `cluster` is the shells' reach into the cluster (`kube`,",
        "`watch`, `routingpolicy`), `files` their reach into files (`policyfile`,",
        "`snapshot`, `certs`); `shared` is the package's own `__init__` (its version).",
        "",
        "## Packages",
        "",
        "```mermaid",
        "flowchart TD",
        *(f"  {a} --> {b}" for a, b in sorted(layers)),
        "```",
        "",
        "## The engine's rooms",
        "",
        "Each room is a package under `webhook/engine/` named for the question it answers;",
        "its `__init__.py` says what it may import, and the test holds it to that.",
        "",
        "```mermaid",
        "flowchart TD",
        *_rooms(engine),
        "```",
        "",
        "## Inside the rooms",
        "",
        "```mermaid",
        "flowchart TD",
        *_modules(engine),
        "```",
        "",
    ]
    return "\n".join(lines)


#: Where the README's map of the package sits (``readme_map``, written in place).
MAP_BEGIN = "<!-- package map: python -m tests.layers_graph --readme -->"
MAP_END = "<!-- end of package map -->"


def _summary(init: Path) -> str:
    """A package's ``__init__`` docstring, its first paragraph, on one line."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def _packages() -> list[Path]:
    """Every package of ``webhook``, the engine's rooms after the engine, in path order."""
    return sorted((p.parent for p in PKG.rglob("__init__.py") if p.parent != PKG),
                  key=lambda d: d.relative_to(PKG).parts)


def readme_map() -> str:
    """The README's table of the package: each folder, what its ``__init__`` says it holds,
    its modules, and what it imports (the engine's rooms: what each declares; the rest:
    the packages the code imports, as docs/layers.md draws them). Made from the tree, so a
    module added, moved or described anew shows here without a hand edit."""
    layers, _ = edges()
    rows = ["| folder | what it holds | modules | imports |", "| --- | --- | --- | --- |"]
    for d in _packages():
        rel = d.relative_to(PKG)
        modules = ", ".join(f"`{p.stem}`" for p in sorted(d.glob("*.py"))
                            if p.name != "__init__.py") or "-"
        if rel.parts[0] == "engine" and len(rel.parts) == 2:
            doc = ast.get_docstring(ast.parse((d / "__init__.py").read_text())) or ""
            declared = [ln for ln in doc.splitlines() if ln.startswith("May import:")]
            imports = declared[0].removeprefix("May import:").strip(" .") if declared else "-"
        elif len(rel.parts) == 1:
            imports = ", ".join(sorted(b for a, b in layers if a == rel.parts[0])) or "nothing"
        else:
            imports = f"as `{rel.parts[0]}`"
        rows.append(f"| `webhook/{rel.as_posix()}/` | {_summary(d / '__init__.py')} | "
                    f"{modules} | {imports} |")
    return "\n".join([MAP_BEGIN, "", *rows, "", MAP_END])


def with_readme_map(text: str) -> str:
    """The README with its package map made anew."""
    head, _, rest = text.partition(MAP_BEGIN)
    _, _, tail = rest.partition(MAP_END)
    return head + readme_map() + tail


if __name__ == "__main__":
    if sys.argv[1:] == ["--readme"]:
        readme = ROOT / "README.md"
        readme.write_text(with_readme_map(readme.read_text()))
    else:
        sys.stdout.write(render())
