"""The type checkers' copy of the engine's surface, written from ``webhook.engine._SURFACE``.

The surface is listed once, as ``_SURFACE`` (name -> module), which the engine's lazy
loader reads. Type checkers cannot follow a lazy loader, so ``webhook/engine/__init__.py``
ends with a ``TYPE_CHECKING`` block of explicit re-exports; ``python -m tests.engine_surface``
writes that block from ``_SURFACE``, and tests/unit/test_layers.py fails when the two
disagree, as it does for docs/layers.md.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INIT = ROOT / "webhook" / "engine" / "__init__.py"
MARK = "if TYPE_CHECKING:  # written by python -m tests.engine_surface from _SURFACE\n"


def block() -> str:
    from webhook.engine import _SURFACE

    def order(item: tuple[str, str]) -> tuple[str, int, str]:
        """isort's (ruff's) order: by module; constants, then classes, then the rest."""
        name, module = item
        return module, 0 if name.isupper() else 1 if name[0].isupper() else 2, name

    return MARK + "".join(f"    from webhook.engine.{module} import {name} as {name}\n"
                          for name, module in sorted(_SURFACE.items(), key=order))


def current() -> str:
    text = INIT.read_text()
    return text[text.index(MARK):]


def main() -> None:
    text = INIT.read_text()
    INIT.write_text(text[:text.index(MARK)] + block())


if __name__ == "__main__":
    main()
