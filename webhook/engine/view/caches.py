"""What the view keeps between decisions, and what each kind of change takes away.

The engine keeps what it works out at two places, both here, and nowhere else: the folds (a
verdict per node over a pod shape's candidate nodes, kept current node by node) and the
decisions per pod shape (kept until anything changes, slices included: kept under the
version they were made at, so a change makes them unreachable, and they age out). Their keys
are made from what the rules declare they read (``checks.nodechecks``, ``admit``). Which of
them a change clears or updates is decided here once, from the kind of change (``EFFECTS``);
the view's writes only say what changed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar, cast

from webhook.engine.view.nodes import NodeInfo

T = TypeVar("T")


class NodeChange:
    """One node stored again, as every fold re-judges it. The folds of one pod's stages, of
    a workload's replicas on other nodes, ask the node the same questions: what they work
    out alike about it is worked out once for all of them (``shared``), and dropped with the
    change. Keys name everything the answer depends on besides the two nodes."""

    __slots__ = ("_memo", "node", "old")

    def __init__(self, node: NodeInfo, old: NodeInfo) -> None:
        self.node, self.old = node, old
        self._memo: dict[Hashable, Any] = {}

    def shared(self, key: Hashable, compute: Callable[[], T]) -> T:
        if key in self._memo:
            return cast(T, self._memo[key])
        value = self._memo[key] = compute()
        return value


#: (the change, the value the node it replaced had) -> the node's value, or None
Again = Callable[[NodeChange, T], "T | None"]
#: Values kept until anything changes (``ClusterView.until_any_change``): mostly decisions
#: per pod shape, each a few hundred bytes.
_SHAPES = 2048
#: Folds kept (per pod shape): each holds one small entry per node of its candidate set.
_FOLDS = 16


class NodeFold(Generic[T]):
    """A value per node over a set of nodes, kept current node by node as the view changes.

    The decisions per shape start over at any change; a fold does not: a node that changes
    is re-evaluated alone, so the first decision after a node change costs that node rather
    than a rescan of its pool. ``fn`` returns None for a node outside the set.

    A change only marks the node (``update``): the watch that stores nodes runs no rule and
    holds the view's lock for a dictionary write. The node is judged when a decision next
    reads the fold (``derive``), outside the lock, and its value swapped in under it.
    """

    def __init__(self, fn: Callable[[NodeInfo], T | None], nodes: Iterable[NodeInfo],
                 lock: threading.RLock | None = None, *, reads_slices: bool = False,
                 again: Again[T] | None = None) -> None:
        self.fn = fn
        #: (the change, the replaced node's value) -> the node's value, for a node stored
        #: again: what of the old value still holds need not be worked out anew
        self.again = again
        #: ``fn`` reads the node's ResourceSlices too: a slice change re-judges the node
        self.reads_slices = reads_slices
        #: the view's lock: updates come from the watch while requests derive
        self.lock = lock or threading.RLock()
        self.values: dict[str, T] = {}
        for n in nodes:
            v = fn(n)
            if v is not None:
                self.values[n.name] = v
        #: nodes changed since they were last judged: the node now, and what it replaced
        #: when the value held for it still stands for that (None: judge it afresh)
        self.pending: dict[str, tuple[NodeInfo, NodeChange | None]] = {}
        #: a reader is judging marked nodes (outside the view's lock); another reader
        #: waits for it (``_settling``) rather than derive from values about to change
        self.settling = False
        self._settling = threading.Lock()
        self.generation = 0
        #: what the caller derived from ``values``, and the generation it was derived at
        self.derived: tuple[int, Any] | None = None

    def update(self, node: NodeInfo, change: NodeChange | None = None) -> None:
        """Mark ``node`` to be judged again; ``change``: it replaced a node (None: a slice
        change, or nothing to build on). Call with the lock held."""
        was = self.pending.get(node.name)
        if was is not None and change is not None:
            # changed twice before it was judged: the value held is the first old node's
            first = was[1]
            change = NodeChange(node, first.old) if first is not None else None
        self.pending[node.name] = (node, change)

    def remove(self, name: str) -> None:
        """Drop the node (call with the lock held): nothing to judge."""
        self.pending.pop(name, None)
        if self.values.pop(name, None) is not None:
            self.generation += 1

    def _settle(self) -> None:
        """Judge the nodes changed since, outside the lock, and swap their values in: a
        node changed again meanwhile stays marked (its mark names the value swapped in
        here as the one it replaced), a node removed meanwhile stays removed."""
        with self.lock:
            self.settling = True
            work, self.pending = self.pending, {}
            held = {name: self.values.get(name) for name in work}
        judged: dict[str, T | None] = {}
        try:
            for name, (node, change) in work.items():
                prev = held[name]
                if self.again is not None and change is not None and prev is not None:
                    judged[name] = self.again(change, prev)
                else:
                    judged[name] = self.fn(node)
        except BaseException:
            with self.lock:  # (left marked, as they were, for the next reader)
                self.settling = False
                self.pending = {**work, **self.pending}
            raise
        with self.lock:
            self.settling = False
            for name, v in judged.items():
                if self.values.get(name) is not held[name]:
                    continue  # removed (or re-judged by another reader) meanwhile
                if v is None:
                    if self.values.pop(name, None) is None:
                        continue
                elif v is held[name]:
                    continue  # (its value stands: what was derived from the values holds)
                else:
                    self.values[name] = v
                self.generation += 1

    def derive(self, compute: Callable[[dict[str, T]], Any]) -> Any:
        """``compute(values)``, recomputed only after the values changed; marked nodes are
        judged first (one reader judges them, the others wait for it)."""
        with self.lock:
            busy = bool(self.pending) or self.settling
        if busy:
            with self._settling:
                if self.pending:
                    self._settle()
        with self.lock:
            got = self.derived
            if got is not None and got[0] == self.generation and not self.pending:
                return got[1]
            value = compute(self.values)
            self.derived = (self.generation, value)
            return value


class Change(Enum):
    """What changed in the view."""

    NODE = "a node stored"
    NODE_GONE = "a node deleted"
    NODES = "every node replaced (a listing)"
    NAMESPACES = "namespace labels"
    SETTING = "a cluster-wide setting node verdicts read (RuntimeClasses, DeviceClasses, " \
              "ClusterPolicy, HAMi's DaemonSets, the pool label)"
    SLICES = "ResourceSlices of some nodes"
    ALL_SLICES = "a ResourceSlice every node reaches"
    SLICE_LISTING = "every ResourceSlice replaced (a listing)"
    SYNCED = "whether the watch has synced"
    CLAIMS = "ResourceClaims or templates (read on demand: nothing kept reads them)"


@dataclass(frozen=True)
class Effect:
    version: bool  # the view's version is bumped (decisions per shape start over)
    #: what the folds do: re-judge the changed nodes, drop a node, start over, re-judge the
    #: changed nodes in the folds that read slices, or nothing
    folds: str  # "update" | "remove" | "clear" | "slices" | "keep"
    #: ResourceSlices changed: what reads them (slice folds, ``until_any_change``) starts over
    slices: bool = False


EFFECTS: dict[Change, Effect] = {
    Change.NODE: Effect(version=True, folds="update"),
    Change.NODE_GONE: Effect(version=True, folds="remove"),
    Change.NODES: Effect(version=True, folds="clear"),
    Change.NAMESPACES: Effect(version=True, folds="keep"),
    Change.SETTING: Effect(version=True, folds="clear"),
    # (The decisions per shape start over at a slice change too: their stamp holds
    # ``slice_changes``; a fold being built meanwhile is not kept.)
    Change.SLICES: Effect(version=False, folds="slices", slices=True),
    Change.ALL_SLICES: Effect(version=False, folds="clear", slices=True),
    Change.SLICE_LISTING: Effect(version=True, folds="clear", slices=True),
    Change.SYNCED: Effect(version=True, folds="keep"),
    Change.CLAIMS: Effect(version=False, folds="keep"),
}


@dataclass
class Changes:
    """What changed since it was last taken, for a reader that re-decides only what a change
    touched (``gpupool scan``): the nodes stored, deleted or whose slices changed, the
    namespaces whose labels or claims changed, or everything (a listing, a cluster-wide
    setting)."""

    everything: bool = False
    nodes: set[str] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.everything or bool(self.nodes) or bool(self.namespaces)


class Caches:
    """The folds and the decisions per shape, guarded by the view's lock."""

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        self.folds: OrderedDict[Any, NodeFold[Any]] = OrderedDict()
        #: (version, key) -> a value per pod shape: never cleared, it ages out (a node
        #: update must not pay for dropping thousands of them)
        self.shapes: OrderedDict[Any, Any] = OrderedDict()
        #: bumped by every change but a slice's (``slice_changes``)
        self.version = 0
        self.slice_changes = 0
        #: (version, slice_changes), replaced whole when either changes (read without lock)
        self.stamp = (0, 0)
        #: kept only once a reader asks for it (``ClusterView.track_changes``)
        self.log: Changes | None = None

    def changed(self, change: Change, nodes: Iterable[NodeInfo] = (),
                names: Iterable[str] = (), namespaces: Iterable[str] = (),
                replaced: Mapping[str, NodeInfo] | None = None) -> None:
        """Apply what ``change`` takes away; ``nodes`` are the nodes stored or re-judged,
        ``names`` the nodes deleted, ``namespaces`` those whose labels or claims changed
        (none given: every namespace), ``replaced`` the nodes ``nodes`` replaced, by name.
        Call with the lock held."""
        effect = EFFECTS[change]
        if self.log is not None:
            self._note(change, nodes, names, tuple(namespaces))
        if effect.folds == "clear":
            self.folds.clear()
        elif effect.folds == "update":
            for node in nodes:
                old = replaced.get(node.name) if replaced else None
                stored = NodeChange(node, old) if old is not None else None
                for fold in self.folds.values():
                    fold.update(node, stored)
        elif effect.folds == "remove":
            for name in names:
                for fold in self.folds.values():
                    fold.remove(name)
        elif effect.folds == "slices":
            for node in nodes:
                for fold in self.folds.values():
                    if fold.reads_slices:
                        fold.update(node)
        if effect.slices:
            self.slice_changes += 1
        if effect.version:
            self.version += 1
        self.stamp = (self.version, self.slice_changes)

    def _note(self, change: Change, nodes: Iterable[NodeInfo], names: Iterable[str],
              namespaces: tuple[str, ...]) -> None:
        """Keep what changed for the reader that asked (``ClusterView.track_changes``)."""
        assert self.log is not None
        if change in (Change.NODE, Change.SLICES):
            self.log.nodes.update(n.name for n in nodes)
        elif change is Change.NODE_GONE:
            self.log.nodes.update(names)
        elif change in (Change.NAMESPACES, Change.CLAIMS) and namespaces:
            self.log.namespaces.update(namespaces)
        else:
            self.log.everything = True

    def fold(self, key: Any, fn: Callable[[NodeInfo], T | None],
             initial: Callable[[], Iterable[NodeInfo]], *, reads_slices: bool = False,
             again: Again[T] | None = None) -> NodeFold[T]:
        with self.lock:
            fold = self.kept_fold(key)
            if fold is not None:
                return fold
            version = (self.version, self.slice_changes if reads_slices else 0)
        fold = NodeFold(fn, initial(), self.lock, reads_slices=reads_slices, again=again)
        with self.lock:
            if (self.version, self.slice_changes if reads_slices else 0) == version:
                # no node or slice changed meanwhile: keep it current
                self.folds[key] = fold
                if len(self.folds) > _FOLDS:
                    self.folds.popitem(last=False)
        return fold

    def kept_fold(self, key: Any) -> NodeFold[Any] | None:
        with self.lock:
            fold = self.folds.get(key)
            if fold is not None:
                self.folds.move_to_end(key)
            return fold

    def until_any_change(self, key: Any, compute: Callable[..., T], *args: Any) -> T:
        # A hit takes no lock (every review of a known pod shape is one): the stamp is one
        # tuple, replaced whole on a change, and a lookup of a key hashed in C is atomic
        # under the GIL (``ClusterView.until_any_change``). A change racing with the lookup
        # finds the value made just before it, as a review a moment earlier would have.
        stamp = self.stamp
        full = (*stamp, key)
        store = self.shapes
        hit: T | None = store.get(full)
        if hit is not None:
            try:  # noqa: SIM105  (``contextlib.suppress`` is three Python calls a review)
                store.move_to_end(full)
            except KeyError:  # (aged out meanwhile, by another thread)
                pass
            return hit
        value = compute(*args)
        with self.lock:
            if self.stamp == stamp:  # (else the view changed while it was worked out)
                store[full] = value
                if len(store) > _SHAPES:
                    store.popitem(last=False)
        return value
