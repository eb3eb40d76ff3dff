"""The DRA objects the view holds: ResourceSlices by the node they serve (None: every node),
and ResourceClaims and templates by name. Claims change with every pod that uses a template,
so they are read on demand and never invalidate anything.

Slices of one GPU model repeat their device names, shared fields, bus IDs and indexes node
after node: a slice stored is given the equal tuples a slice here holds already, so the
thousands of nodes of one model hold one copy, and a tuple no slice holds any more leaves
with its last slice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.engine.stacks import dra
from webhook.engine.view.sharing import Shared


class DRAObjects:
    def __init__(self) -> None:
        self.slices: dict[str, dra.Slice] = {}
        self.by_node: dict[str | None, dict[str, dra.Slice]] = {}
        #: (kind, namespace, name) -> what the claim asks for
        self.claims: dict[tuple[str, str, str], dra.ClaimSpec] = {}
        #: the tuples slices hold, each once
        self._held: Shared[tuple[Any, ...]] = Shared()

    def replace_slices(self, slices: Iterable[dra.Slice]) -> None:
        self.slices, self.by_node, self._held = {}, {}, Shared()
        for s in slices:
            self._add(s)

    def set_slice(self, name: str, s: dra.Slice | None) -> set[str | None] | None:
        """Store or delete one slice; the nodes whose slices changed (None: every node's),
        or None when nothing did."""
        old = self.slices.get(name)
        if s is None:
            if old is None:
                return None
            del self.slices[name]
            self.by_node.get(old.node, {}).pop(name, None)
            self._release(old)
        else:
            self._add(s)
        return {x.node for x in (old, s) if x is not None}

    def _add(self, s: dra.Slice) -> None:
        old = self.slices.pop(s.name, None)
        if old is not None:
            self.by_node.get(old.node, {}).pop(old.name, None)
            self._release(old)
        s = self._share(s)
        self.slices[s.name] = s
        self.by_node.setdefault(s.node, {})[s.name] = s

    def _share(self, s: dra.Slice) -> dra.Slice:
        """``s`` holding the copies of its tuples slices here hold already."""
        hold = self._held.hold
        return dataclasses.replace(s, names=hold(s.names, s.names),
                                   shared=hold(s.shared, s.shared),
                                   varying=tuple((k, hold(v, v)) for k, v in s.varying))

    def _release(self, s: dra.Slice) -> None:
        for t in (s.names, s.shared, *(v for _, v in s.varying)):
            self._held.release(t)

    def slices_for(self, node: str, own: bool = False) -> tuple[dra.Slice, ...]:
        mine = tuple(self.by_node.get(node, {}).values())
        return mine if own else mine + tuple(self.by_node.get(None, {}).values())

    def nodes_with_slices(self) -> frozenset[str]:
        return frozenset(n for n, found in self.by_node.items() if n is not None and found)

    def replace_claims(self, kind: str, claims: Mapping[tuple[str, str], dra.ClaimSpec]
                       ) -> None:
        self.claims = {k: v for k, v in self.claims.items() if k[0] != kind}
        self.claims.update(((kind, ns, n), spec) for (ns, n), spec in claims.items())

    def set_claim(self, kind: str, namespace: str, name: str,
                  spec: dra.ClaimSpec | None) -> None:
        if spec is None:
            self.claims.pop((kind, namespace, name), None)
        else:
            self.claims[(kind, namespace, name)] = spec
