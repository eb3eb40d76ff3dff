"""Tables as kubectl prints them: upper-case headers, each column as wide as its widest cell
(three spaces apart), the last column left ragged. Widths come from the content, so no cell
ever runs into the next column, whatever the names."""

from __future__ import annotations

from collections.abc import Sequence

GAP = "   "


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    return [_line(headers, widths), *(_line(r, widths) for r in cells)]


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    last = len(cells) - 1
    return GAP.join(c if i == last else c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()


def names(items: Sequence[str], wide: bool, shown: int = 3) -> str:
    """A list of names, cut to ``shown`` with a count of the rest unless ``wide``."""
    if wide or len(items) <= shown:
        return ", ".join(items)
    return f"{', '.join(items[:shown])} and {len(items) - shown} more"
