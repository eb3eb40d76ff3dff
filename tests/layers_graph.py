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
    """webhook.engine.checks.cdi -> engine; webhook.snapshot -> shared; webhook.cli.x -> cli"""
    parts = module.split(".")
    if len(parts) == 1:
        return "shared"
    if parts[1] in ("engine", "api", "server", "scan", "node", "cli"):
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
        "directly or round a cycle. `shared` is the top-level modules (`policyfile`,",
        "`snapshot`, `certs`, `kube`, `clusterwatch`).",
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


if __name__ == "__main__":
    sys.stdout.write(render())
