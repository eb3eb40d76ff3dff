"""Compact node labels: what nodes of one kind share is stored once.

GPU nodes carry 150+ labels (GPU feature discovery, NFD), nearly all identical across a node
group; a 5,000-node cache holding a dict per node spends most of its memory on copies. Each
node's labels are split into the few that are per node (hostname, zone, anything equal to
the node's name) and the rest, which nodes with the same rest share: the view's index gives
each node stored the dict an equal node holds already (``view.index``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

#: Keys whose values differ from node to node even inside one node group.
PER_NODE_KEYS = frozenset({
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
})

_EMPTY: dict[str, str] = {}


class NodeLabels(Mapping[str, str]):
    __slots__ = ("content_hash", "own", "shared")

    def __init__(self, shared: dict[str, str], own: dict[str, str]) -> None:
        self.shared = shared
        self.own = own
        #: the hash of what ``shared`` holds, by which the view's index finds the dict an
        #: equal node holds already (``view.index``), worked out as the node is built: the
        #: view looks it up on every node update. (Keys, then values, in the object's
        #: order: the API server writes labels sorted, so nodes with the same labels hash
        #: alike. The tuples are not kept: a hit is confirmed on the dicts themselves, and
        #: a node update would pay for freeing them.)
        self.content_hash = hash((tuple(shared), tuple(shared.values())))

    @classmethod
    def build(cls, raw: Any, node_name: str = "") -> NodeLabels:
        shared: dict[str, str] = {}
        own: dict[str, str] = {}
        if isinstance(raw, Mapping):
            for k, v in raw.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    continue
                k, v = sys.intern(k), sys.intern(v)
                if k in PER_NODE_KEYS or (node_name and v == node_name):
                    own[k] = v
                else:
                    shared[k] = v
        return cls(shared or _EMPTY, own or _EMPTY)

    def get(self, key: str, default: Any = None) -> Any:
        v = self.own.get(key)
        if v is not None:
            return v
        return self.shared.get(key, default)

    def same_at(self, other: Mapping[str, str], keys: Iterable[str]) -> bool:
        """Does ``other`` hold the same value (or none) at every one of ``keys``? (Asked of
        a node stored again, by every fold that holds it: read straight from the dicts.)"""
        if not isinstance(other, NodeLabels):
            return all(self.get(k) == other.get(k) for k in keys)
        own, shared, other_own, other_shared = self.own, self.shared, other.own, other.shared
        if shared is other_shared and own == other_own:
            return True
        for k in keys:
            v = own.get(k)
            if v is None:
                v = shared.get(k)
            w = other_own.get(k)
            if w is None:
                w = other_shared.get(k)
            if v != w:
                return False
        return True

    def __getitem__(self, key: str) -> str:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return str(v)

    def __contains__(self, key: object) -> bool:
        return key in self.own or key in self.shared

    def __iter__(self) -> Iterator[str]:
        yield from self.own
        yield from (k for k in self.shared if k not in self.own)

    def __len__(self) -> int:
        return len(self.own) + sum(1 for k in self.shared if k not in self.own)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"NodeLabels({dict(self.items())!r})"


def same_at(a: Mapping[str, str], b: Mapping[str, str], keys: Iterable[str]) -> bool:
    """Do two nodes' labels agree at every one of ``keys`` (absent at both counts)?"""
    if isinstance(a, NodeLabels):
        return a.same_at(b, keys)
    return all(a.get(k) == b.get(k) for k in keys)
