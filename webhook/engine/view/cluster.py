"""The cluster view the policy engine decides against: nodes and namespace labels.

Admission must never call the API server on the request path, so the server keeps this view
up to date from a watch and the engine only reads it. Nodes are reduced on the way in to what
decisions use (labels, taints, GPU registrations, CDI inventory), label strings are interned,
and nodes are indexed by their pool label value so a pool's nodes are found without scanning
the cluster.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from webhook.api.delivery import Way
from webhook.api.inventory import INVENTORY_ANNOTATION, Inventory, InventoryError, parse_inventory
from webhook.engine.core import objects
from webhook.engine.core.policy import Policy
from webhook.engine.core.resources import whole_number
from webhook.engine.stacks import clusterpolicy, dra, hami, hamiplugin, nri
from webhook.engine.view.labels import NodeLabels

T = TypeVar("T")
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
_MEMO_SIZE = 4096
#: Folds kept (per pod shape): each holds one small entry per node of its candidate set.
_FOLDS = 16


def _intern_map(m: Any) -> dict[str, str]:
    if not isinstance(m, Mapping):
        return {}
    return {sys.intern(k): sys.intern(v) for k, v in m.items()
            if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What admission needs to know about one node."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...] = ()
    extended_resources: frozenset[str] = frozenset()
    #: Extended resources' allocatable counts (None: the node reported no allocatable).
    allocatable: Mapping[str, int] | None = None
    gpus: tuple[hami.RegisteredGPU, ...] = ()
    register_error: str | None = None
    inventory: Inventory | None = None
    inventory_error: str | None = None
    #: GPUs HAMi's device cordon takes out of new allocations (``hami.io/device-cordon``)
    cordoned: frozenset[str] = frozenset()
    fingerprint: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeInfo:
        """Build from a Node as the API returns it (camelCase dict); tolerant of missing parts."""
        meta = objects.meta_of(obj)
        spec = objects.as_mapping(obj.get("spec"))
        status = objects.as_mapping(obj.get("status"))
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("node has no metadata.name")
        annotations = meta.get("annotations")
        if not isinstance(annotations, Mapping):
            annotations = {}
        gpus: tuple[hami.RegisteredGPU, ...] = ()
        register_error = None
        raw_register = annotations.get(hami.REGISTER_ANNOTATION)
        if isinstance(raw_register, str):
            try:
                gpus = hami.parse_register(raw_register)
            except hami.RegisterError as exc:
                register_error = f"{hami.REGISTER_ANNOTATION}: {exc}"
        inventory = None
        inventory_error = None
        raw_inventory = annotations.get(INVENTORY_ANNOTATION)
        if isinstance(raw_inventory, str):
            try:
                inventory = parse_inventory(raw_inventory)
            except InventoryError as exc:
                inventory_error = f"{INVENTORY_ANNOTATION}: {exc}"
        extended: set[str] = set()
        for part in ("capacity", "allocatable"):
            res = status.get(part)
            if isinstance(res, Mapping):
                extended.update(sys.intern(k) for k in res if isinstance(k, str) and "/" in k)
        allocatable = None
        raw_alloc = status.get("allocatable")
        if isinstance(raw_alloc, Mapping):
            allocatable = {sys.intern(k): n for k, v in raw_alloc.items()
                           if isinstance(k, str) and "/" in k
                           and (n := whole_number(v)) is not None}
        taints = tuple(t for t in spec.get("taints") or () if isinstance(t, Mapping))
        labels = NodeLabels.build(meta.get("labels"), name)
        # A digest of exactly what decisions read: status heartbeats leave it unchanged, so
        # they never invalidate the view's memo.
        cordoned = hami.cordoned(annotations.get(hami.CORDON_ANNOTATION))
        fingerprint = hashlib.blake2b(repr((sorted(labels.items()), taints, raw_register,
                                            raw_inventory, sorted(extended),
                                            sorted((allocatable or {}).items()),
                                            sorted(cordoned))).encode(),
                                      digest_size=16).digest()
        return cls(name=sys.intern(name), labels=labels, taints=taints,
                   extended_resources=frozenset(extended), allocatable=allocatable, gpus=gpus,
                   register_error=register_error, inventory=inventory,
                   inventory_error=inventory_error, cordoned=cordoned,
                   fingerprint=fingerprint)

    def is_gpu_node(self, policy: Policy) -> bool:
        return (self.labels.get(GPU_PRESENT_LABEL) == "true" or bool(self.gpus)
                or self.inventory is not None or policy.pool_label in self.labels
                or any(policy.is_gpu_resource(r) for r in self.extended_resources))

    def gpu_types(self) -> Mapping[str, str]:
        """GPU UUID -> model, as HAMi's register annotation names them (empty: unknown)."""
        return {g.uuid: g.type for g in self.gpus if g.type}

    def hami_mig_gpus(self) -> frozenset[str]:
        """The GPUs HAMi runs in MIG mode: it creates the MIG device it hands out."""
        return frozenset(g.uuid for g in self.gpus if g.mode == hami.MIG_MODE)

    def gpu_uuids(self) -> tuple[str, ...]:
        """The node's GPUs: as its driver lists them (the agent reads them), else as HAMi
        registered them, else the UUIDs its CDI specs name."""
        if self.inventory is not None and self.inventory.gpus:
            return self.inventory.gpus
        if self.gpus:
            return tuple(g.uuid for g in self.gpus)
        if self.inventory is not None:
            return self.inventory.gpu_uuids
        return ()


class NodeFold(Generic[T]):
    """A value per node over a set of nodes, kept current node by node as the view changes.

    The memo is wiped by any change; a fold is not: a node that changes is re-evaluated alone,
    so the first decision after a node change costs that node rather than a rescan of its
    pool. ``fn`` returns None for a node outside the set.
    """

    def __init__(self, fn: Callable[[NodeInfo], T | None], nodes: Iterable[NodeInfo],
                 lock: threading.RLock | None = None, *, reads_slices: bool = False) -> None:
        self.fn = fn
        #: ``fn`` reads the node's ResourceSlices too: a slice change re-judges the node
        self.reads_slices = reads_slices
        #: the view's lock: updates come from the watch while requests derive
        self.lock = lock or threading.RLock()
        self.values: dict[str, T] = {}
        for n in nodes:
            v = fn(n)
            if v is not None:
                self.values[n.name] = v
        self.generation = 0
        #: what the caller derived from ``values``, and the generation it was derived at
        self.derived: tuple[int, Any] | None = None

    def update(self, node: NodeInfo) -> None:
        v = self.fn(node)
        if v is None:
            if self.values.pop(node.name, None) is None:
                return
        else:
            self.values[node.name] = v
        self.generation += 1

    def remove(self, name: str) -> None:
        if self.values.pop(name, None) is not None:
            self.generation += 1

    def derive(self, compute: Callable[[dict[str, T]], Any]) -> Any:
        """``compute(values)``, recomputed only after the values changed."""
        with self.lock:
            got = self.derived
            if got is not None and got[0] == self.generation:
                return got[1]
            value = compute(self.values)
            self.derived = (self.generation, value)
            return value


class ClusterView:
    """Everything the engine knows of the cluster, thread-safe: nodes (with a pool-label
    index), namespace labels, RuntimeClasses, DRA objects, the GPU Operator's ClusterPolicy,
    HAMi's device-plugin DaemonSets, and whether a watch has synced it yet (``synced``).

    Every change that matters to decisions bumps ``version``; memoised results (candidate
    nodes for a pod shape, say) and per-node folds are keyed on it, so repeated pods from one
    workload cost one scan per cluster change rather than one per request.
    """

    def __init__(self, pool_label: str = "gpupool.io/pool") -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._namespaces: dict[str, dict[str, str]] = {}
        self._by_pool_value: dict[str | None, set[str]] = {}
        # Per-node labels are indexed pair by pair; shared label dicts by the nodes using them.
        self._by_own_label: dict[tuple[str, str], set[str]] = {}
        self._by_shared: dict[int, tuple[Mapping[str, str], set[str]]] = {}
        #: nodes where HAMi runs a GPU in MIG mode (its steering label cannot tell)
        self._hami_mig: set[str] = set()
        self._pool_label = pool_label
        self._memo: OrderedDict[Any, Any] = OrderedDict()
        self._folds: OrderedDict[Any, NodeFold[Any]] = OrderedDict()
        #: RuntimeClass name -> its handler; None while the cluster's classes are unknown
        self._runtime_classes: dict[str, str] | None = None
        # DRA (resource.k8s.io): None while not listed (the API or the permission missing)
        self._device_classes: dict[str, dra.DeviceClass] | None = None
        self._slices: dict[str, dra.Slice] = {}
        self._slices_by_node: dict[str | None, dict[str, dra.Slice]] = {}
        #: (kind, namespace, name) -> requests; claims change with every pod that uses a
        #: template, so they are read on demand and never bump ``version``
        self._claims: dict[tuple[str, str, str], dra.ClaimSpec] = {}
        self._slice_changes = 0
        #: what the GPU Operator's ClusterPolicy says (None: unknown)
        self._operator: clusterpolicy.Operator | None = None
        #: HAMi's device-plugin DaemonSets (None: not known)
        self._hami_plugins: tuple[hamiplugin.HamiPlugin, ...] | None = None
        #: False while a watch fills the view and has not listed its nodes and namespaces
        #: yet: decisions then say the view is missing (``onNoNodeView``)
        self.synced = True
        self.version = 0

    # ---------------------------------------------------------------- writes

    def set_synced(self, synced: bool) -> None:
        with self._lock:
            if synced != self.synced:
                self.synced = synced
                self._bump()

    def _bump(self) -> None:
        self.version += 1
        self._memo.clear()

    def set_pool_label(self, pool_label: str) -> None:
        with self._lock:
            if pool_label == self._pool_label:
                return
            self._pool_label = pool_label
            self._by_pool_value = {}
            for n in self._nodes.values():
                self._by_pool_value.setdefault(n.labels.get(pool_label), set()).add(n.name)
            self._folds.clear()
            self._bump()

    def upsert_node(self, node: NodeInfo) -> bool:
        """Store a node; returns False (and keeps the version) when nothing relevant changed."""
        with self._lock:
            old = self._nodes.get(node.name)
            if old is not None and old.fingerprint == node.fingerprint and node.fingerprint:
                return False
            if old is not None:
                self._unindex(old)
            self._nodes[node.name] = node
            self._index(node)
            for fold in self._folds.values():
                fold.update(node)
            self._bump()
            return True

    def _index(self, node: NodeInfo) -> None:
        self._by_pool_value.setdefault(node.labels.get(self._pool_label), set()).add(node.name)
        labels = node.labels
        own: Mapping[str, str]
        if isinstance(labels, NodeLabels):
            own, shared = labels.own, labels.shared
        else:
            own, shared = labels, {}
        for pair in own.items():
            self._by_own_label.setdefault(pair, set()).add(node.name)
        self._by_shared.setdefault(id(shared), (shared, set()))[1].add(node.name)
        if node.hami_mig_gpus():
            self._hami_mig.add(node.name)

    def _unindex(self, node: NodeInfo) -> None:
        key = node.labels.get(self._pool_label)
        bucket = self._by_pool_value.get(key)
        if bucket is not None:
            bucket.discard(node.name)
            if not bucket:
                del self._by_pool_value[key]
        labels = node.labels
        own, shared = (labels.own, labels.shared) if isinstance(labels, NodeLabels) \
            else (labels, {})
        for pair in own.items():
            names = self._by_own_label.get(pair)
            if names is not None:
                names.discard(node.name)
                if not names:
                    del self._by_own_label[pair]
        entry = self._by_shared.get(id(shared))
        if entry is not None:
            entry[1].discard(node.name)
            if not entry[1]:
                del self._by_shared[id(shared)]
        self._hami_mig.discard(node.name)

    def delete_node(self, name: str) -> None:
        with self._lock:
            old = self._nodes.pop(name, None)
            if old is not None:
                self._unindex(old)
                for fold in self._folds.values():
                    fold.remove(name)
                self._bump()

    def replace_nodes(self, nodes: Iterable[NodeInfo]) -> None:
        """Swap in a full listing (initial list or relist after the watch expired)."""
        with self._lock:
            self._nodes = {}
            self._by_pool_value = {}
            self._by_own_label = {}
            self._by_shared = {}
            self._hami_mig = set()
            for n in nodes:
                self._nodes[n.name] = n
                self._index(n)
            self._folds.clear()
            self._bump()

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        with self._lock:
            if labels is None:
                self._namespaces.pop(name, None)
            else:
                self._namespaces[name] = _intern_map(labels)
            self._bump()

    def replace_namespaces(self, namespaces: Mapping[str, Mapping[str, str]]) -> None:
        with self._lock:
            self._namespaces = {k: _intern_map(v) for k, v in namespaces.items()}
            self._bump()

    def replace_runtime_classes(self, classes: Mapping[str, str] | None) -> None:
        """The cluster's RuntimeClasses (name -> handler); None: unknown."""
        with self._lock:
            new = None if classes is None else dict(classes)
            if new == self._runtime_classes:
                return
            self._runtime_classes = new
            self._folds.clear()  # node verdicts depend on the handler a class names
            self._bump()

    def set_runtime_class(self, name: str, handler: str | None) -> None:
        """One RuntimeClass added or changed (``handler``), or deleted (None)."""
        with self._lock:
            classes = dict(self._runtime_classes or {})
            if handler is None:
                classes.pop(name, None)
            else:
                classes[name] = handler
        self.replace_runtime_classes(classes)

    def replace_device_classes(self, classes: Iterable[dra.DeviceClass] | None) -> None:
        """The cluster's DeviceClasses; None: unknown (not listed)."""
        with self._lock:
            self._device_classes = None if classes is None else {c.name: c for c in classes}
            self._folds.clear()  # DRA verdicts depend on the classes
            self._bump()

    def set_device_class(self, name: str, device_class: dra.DeviceClass | None) -> None:
        """One DeviceClass added or changed, or deleted (None)."""
        with self._lock:
            classes = self._device_classes = dict(self._device_classes or {})
            if device_class is None:
                classes.pop(name, None)
            else:
                classes[name] = device_class
            self._folds.clear()
            self._bump()

    def replace_slices(self, slices: Iterable[dra.Slice]) -> None:
        with self._lock:
            self._slices, self._slices_by_node = {}, {}
            for s in slices:
                self._add_slice(s)
            self._folds.clear()
            self._bump()

    def _add_slice(self, s: dra.Slice) -> None:
        old = self._slices.pop(s.name, None)
        if old is not None:
            self._slices_by_node.get(old.node, {}).pop(old.name, None)
        self._slices[s.name] = s
        self._slices_by_node.setdefault(s.node, {})[s.name] = s

    def set_slice(self, name: str, s: dra.Slice | None) -> None:
        """One ResourceSlice added or changed, or deleted (None). Folds re-judge the node it
        serves alone; a slice for every node makes them start over."""
        with self._lock:
            old = self._slices.get(name)
            if s is None:
                if old is None:
                    return
                del self._slices[name]
                self._slices_by_node.get(old.node, {}).pop(name, None)
            else:
                self._add_slice(s)
            touched = {x.node for x in (old, s) if x is not None}
            if None in touched:
                self._folds.clear()
            else:
                for node in (self._nodes.get(n) for n in touched if n is not None):
                    if node is not None:
                        for fold in self._folds.values():
                            if fold.reads_slices:
                                fold.update(node)
            # Nothing memoised reads slices (DRA verdicts are folds, kept just above): the
            # memo stays, and a fold being built meanwhile is not kept.
            self._slice_changes += 1

    def replace_claims(self, kind: str, claims: Mapping[tuple[str, str], dra.ClaimSpec]
                       ) -> None:
        """Every ResourceClaim or ResourceClaimTemplate (``kind``), by (namespace, name)."""
        with self._lock:
            self._claims = {k: v for k, v in self._claims.items() if k[0] != kind}
            self._claims.update(((kind, ns, n), spec) for (ns, n), spec in claims.items())

    def set_claim(self, kind: str, namespace: str, name: str,
                  spec: dra.ClaimSpec | None) -> None:
        with self._lock:
            if spec is None:
                self._claims.pop((kind, namespace, name), None)
            else:
                self._claims[(kind, namespace, name)] = spec

    def set_operator(self, operator: clusterpolicy.Operator | None) -> None:
        """What the GPU Operator's ClusterPolicy says (``clusterpolicy``)."""
        self._set_config("_operator", operator)

    def set_hami_plugins(self, plugins: Iterable[hamiplugin.HamiPlugin] | None) -> None:
        """HAMi's device-plugin DaemonSets (``hamiplugin``); None: not known."""
        self._set_config("_hami_plugins", None if plugins is None else tuple(sorted(
            plugins, key=lambda p: (p.node_selector, str(p.way)))))

    def _set_config(self, attr: str, value: object) -> None:
        """Swap in a cluster-wide setting that node verdicts depend on: every fold is
        recomputed (a change is rare; an unchanged value costs nothing)."""
        with self._lock:
            if getattr(self, attr) == value:
                return
            setattr(self, attr, value)
            self._folds.clear()
            self._bump()

    # ---------------------------------------------------------------- reads

    def hami_way(self, labels: Mapping[str, str]) -> Way | None:
        """How HAMi's device plugin hands GPUs on a node with these labels, where its
        DaemonSet says."""
        plugins = self._hami_plugins
        return hamiplugin.way_on(plugins, labels) if plugins else None

    def knows_hami_plugins(self) -> bool:
        return bool(self._hami_plugins)

    def operator_way(self) -> Way | None:
        """How the GPU Operator's device plugin hands GPUs, where its ClusterPolicy says."""
        return self._operator.way if self._operator is not None else None

    def operator_nri(self) -> nri.NRIPlugin | None:
        """The GPU Operator's NRI plugin, where its ClusterPolicy runs one."""
        return self._operator.nri if self._operator is not None else None

    def device_classes(self) -> Mapping[str, dra.DeviceClass] | None:
        """DeviceClass name -> class, or None when gpupool does not know them."""
        return self._device_classes

    def slices_for(self, node: str, own: bool = False) -> tuple[dra.Slice, ...]:
        """The ResourceSlices whose devices a pod on ``node`` could get: the node's own and
        (unless ``own``) those every node reaches."""
        with self._lock:
            mine = tuple(self._slices_by_node.get(node, {}).values())
            return mine if own else mine + tuple(self._slices_by_node.get(None, {}).values())

    def nodes_with_slices(self) -> frozenset[str]:
        with self._lock:
            return frozenset(n for n, found in self._slices_by_node.items()
                             if n is not None and found)

    def claim(self, kind: str, namespace: str, name: str) -> dra.ClaimSpec | None:
        return self._claims.get((kind, namespace, name))

    def runtime_classes(self) -> Mapping[str, str] | None:
        """RuntimeClass name -> handler, or None when gpupool does not know them."""
        return self._runtime_classes

    def handler_of(self, runtime_class: str | None) -> str | None:
        """The containerd handler a pod's RuntimeClass runs it with. Unknown classes are
        taken to name their handler, as the GPU Operator names them."""
        if runtime_class is None or self._runtime_classes is None:
            return runtime_class
        return self._runtime_classes.get(runtime_class, runtime_class)

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def has_hami_mig(self) -> bool:
        """Does HAMi run a GPU in MIG mode on some node (``NodeInfo.hami_mig_gpus``)?"""
        return bool(self._hami_mig)

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self._namespaces.get(name)

    def __len__(self) -> int:
        return len(self._nodes)

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return list(self._nodes.values())

    def names_with_label(self, key: str, value: str) -> frozenset[str]:
        """Names of nodes carrying ``key=value``, from the label index (no scan)."""
        with self._lock:
            found = set(self._by_own_label.get((key, value), ()))
            for shared, members in self._by_shared.values():
                if shared.get(key) == value:
                    found |= members
            return frozenset(found)

    def pool_nodes(self, policy: Policy, pool: str) -> tuple[NodeInfo, ...]:
        """GPU nodes of one pool, via the pool-label index; memoised per version."""
        def compute() -> tuple[NodeInfo, ...]:
            with self._lock:
                if self._pool_label != policy.pool_label:
                    # The index follows another label (the server re-keys it through
                    # set_pool_label when its policy changes): scan, and leave it alone.
                    return tuple(sorted(
                        (n for n in self._nodes.values() if n.is_gpu_node(policy)
                         and policy.pool_for_label_value(n.labels.get(policy.pool_label))
                         == pool), key=lambda n: n.name))
                if pool == policy.default_pool:
                    names: set[str] = set()
                    for value, bucket in self._by_pool_value.items():
                        if policy.pool_for_label_value(value) == pool:
                            names |= bucket
                else:
                    names = set()
                    for value in policy.by_name[pool].label_values:
                        names |= self._by_pool_value.get(value, set())
                found = (self._nodes[n] for n in sorted(names))
                return tuple(n for n in found if n.is_gpu_node(policy))
        return self.memo(("pool-nodes", policy.cache_key, pool), compute)

    def fold(self, key: Any, fn: Callable[[NodeInfo], T | None],
             initial: Callable[[], Iterable[NodeInfo]], *, reads_slices: bool = False
             ) -> NodeFold[T]:
        """The fold under ``key``, made from ``initial()`` nodes the first time (bounded, LRU).

        ``fn`` must depend on nothing but the node (and its slices, with ``reads_slices``)
        and what ``key`` names."""
        with self._lock:
            fold = self._folds.get(key)
            if fold is not None:
                self._folds.move_to_end(key)
                return fold
            version = (self.version, self._slice_changes if reads_slices else 0)
        fold = NodeFold(fn, initial(), self._lock, reads_slices=reads_slices)
        with self._lock:
            if (self.version, self._slice_changes if reads_slices else 0) == version:
                # no node or slice changed meanwhile: keep it current
                self._folds[key] = fold
                if len(self._folds) > _FOLDS:
                    self._folds.popitem(last=False)
        return fold

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """Cache ``compute()`` under ``key`` until the view next changes (bounded, LRU)."""
        with self._lock:
            version = self.version
            hit = self._memo.get(key)
            if hit is not None:
                self._memo.move_to_end(key)
                return cast(T, hit)  # stored by this method under this key: a T
        value = compute()
        with self._lock:
            if self.version == version:
                self._memo[key] = value
                if len(self._memo) > _MEMO_SIZE:
                    self._memo.popitem(last=False)
        return value


def runtime_classes_of(items: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """RuntimeClass name -> handler, from RuntimeClass objects as the API serves them (the
    watch, a cluster file, a live listing); any without a name or handler is skipped."""
    out: dict[str, str] = {}
    for item in items:
        name, handler = objects.meta_of(item).get("name"), item.get("handler")
        if isinstance(name, str) and name and isinstance(handler, str):
            out[name] = handler
    return out


def view_from_objects(objects: Iterable[Mapping[str, Any]], policy: Policy | None = None,
                      namespaces: Mapping[str, Mapping[str, str]] | None = None,
                      runtime_classes: Mapping[str, str] | None = None,
                      resources: Iterable[Mapping[str, Any]] | None = None) -> ClusterView:
    """A view from Node objects (and optional namespace labels, RuntimeClasses and
    ``resource.k8s.io`` objects: DeviceClasses, ResourceSlices, claims, templates), for
    offline use and tests."""
    view = ClusterView(policy.pool_label if policy else "gpupool.io/pool")
    view.replace_nodes(NodeInfo.from_object(o) for o in objects)
    view.replace_namespaces(namespaces or {})
    view.replace_runtime_classes(runtime_classes)
    if resources is not None:
        load_resources(view, resources)
    return view


DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
#: Every kind ``load_resources`` reads: the DRA objects, the GPU Operator's ClusterPolicy and
#: HAMi's device-plugin DaemonSets.
RESOURCE_KINDS = (*DRA_KINDS, clusterpolicy.KIND, hamiplugin.KIND)


def load_resources(view: ClusterView, items: Iterable[Mapping[str, Any]]) -> None:
    """Put ``resource.k8s.io`` objects (of the kinds in ``DRA_KINDS``), the GPU Operator's
    ClusterPolicy and HAMi's device-plugin DaemonSets into the view, replacing what it held
    of them (other DaemonSets are ignored). DeviceClasses
    and slices count as known only when some are given: a file without any says nothing of
    the cluster's DRA drivers (and a claim is then not judged, rather than judged against
    no devices)."""
    by_kind: dict[str, list[Mapping[str, Any]]] = {k: [] for k in RESOURCE_KINDS}
    for item in items:
        kind = item.get("kind")
        if isinstance(kind, str) and kind in by_kind:
            by_kind[kind].append(item)
    if by_kind[clusterpolicy.KIND]:
        view.set_operator(clusterpolicy.cluster_operator(by_kind[clusterpolicy.KIND]))
    if by_kind[hamiplugin.KIND]:
        view.set_hami_plugins(p for o in by_kind[hamiplugin.KIND]
                              if (p := hamiplugin.hami_plugin_from(o)) is not None)
    if by_kind["DeviceClass"] or by_kind["ResourceSlice"]:
        view.replace_device_classes(c for o in by_kind["DeviceClass"]
                                    if (c := dra.DeviceClass.from_object(o)) is not None)
        view.replace_slices(s for o in by_kind["ResourceSlice"]
                            if (s := dra.Slice.from_object(o)) is not None)
    for kind in ("ResourceClaim", "ResourceClaimTemplate"):
        view.replace_claims(kind, claims_of(kind, by_kind[kind]))


def claims_of(kind: str, items: Iterable[Mapping[str, Any]]
              ) -> dict[tuple[str, str], dra.ClaimSpec]:
    """(namespace, name) -> requests, for ResourceClaims or templates (``kind``) as listed."""
    out = {}
    for item in items:
        meta = objects.meta_of(item)
        ns, name = meta.get("namespace"), meta.get("name")
        if isinstance(ns, str) and isinstance(name, str) and ns and name:
            out[(ns, name)] = dra.claim_spec(kind, item)
    return out
