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
    """webhook.engine.cdi -> engine; webhook.snapshot -> shared; webhook.cli.commands.x -> cli"""
    parts = module.split(".")
    if len(parts) == 1:
        return "shared"
    if parts[1] in ("engine", "api", "server", "node", "cli"):
        return parts[1]
    return "cli" if parts[1] == "__main__" else "shared"  # `python -m webhook` is the CLI


def edges() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(layer -> layer it imports), (engine module -> engine module it imports)."""
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
            if a == b == "engine" and target != "webhook.engine" and me != "webhook.engine":
                engine.add((me.split(".")[2], target.split(".")[2]))
    return layers, engine


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
        "`webhook/engine/__init__.py`'s declared surface. `shared` is the top-level modules",
        "(`policyfile`, `snapshot`, `certs`, `kube`).",
        "",
        "## Packages",
        "",
        "```mermaid",
        "flowchart TD",
        *(f"  {a} --> {b}" for a, b in sorted(layers)),
        "```",
        "",
        "## Inside the engine",
        "",
        "```mermaid",
        "flowchart TD",
        *(f"  {a} --> {b}" for a, b in sorted(engine)),
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
