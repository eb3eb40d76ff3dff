"""Equal values the view holds once.

Nodes of one kind carry equal parts (a runtime section, a ResourceSlice's device names and
shared fields) that, parsed node by node, would each be a copy: thousands of copies in a
large cluster. The view stores a node or a slice with the copy it holds already, and lets a
copy go with the last node or slice that held it, so values that churn do not pile up.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class _Entry(Generic[V]):
    __slots__ = ("holders", "value")

    def __init__(self, value: V) -> None:
        self.value, self.holders = value, 0


class Shared(Generic[V]):
    """Values by key, each with how many holders it has."""

    def __init__(self) -> None:
        self._held: dict[Hashable, _Entry[V]] = {}

    def hold(self, key: Hashable, value: V) -> V:
        """The value held under ``key`` (``value``, if none is yet), one holder more."""
        entry = self._held.get(key)
        if entry is None:
            entry = self._held[key] = _Entry(value)
        entry.holders += 1
        return entry.value

    def release(self, key: Hashable) -> None:
        """One holder of ``key``'s value fewer; with none left, the value goes."""
        entry = self._held.get(key)
        if entry is not None:
            entry.holders -= 1
            if entry.holders <= 0:
                del self._held[key]

    def __len__(self) -> int:
        return len(self._held)
