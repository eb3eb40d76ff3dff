"""The cluster view the policy engine decides against, as one object shells hold.

Admission must never call the API server on the request path, so the server keeps this view
up to date from a watch and the engine only reads it. It is made of four parts, each its own
module: the node index (``index``), the cluster-wide settings (``settings``), the DRA
objects (``draobjects``) and the caches (``caches``). A write changes one part and says
what kind of change it made; what that clears or re-judges is decided in ``caches`` alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from webhook.api.delivery import Way
from webhook.engine.core import objects
from webhook.engine.core.policy import Policy
from webhook.engine.stacks import clusterpolicy, dra, hamiplugin, nri
from webhook.engine.stacks.releases import Release
from webhook.engine.view.caches import Again, Caches, Change, Changes, NodeFold
from webhook.engine.view.draobjects import DRAObjects
from webhook.engine.view.index import NodeIndex
from webhook.engine.view.nodes import NodeInfo, intern_map
from webhook.engine.view.settings import ClusterSettings

T = TypeVar("T")


class ClusterView:
    """Everything the engine knows of the cluster, thread-safe: nodes (indexed by pool label
    and by label), namespace labels, the cluster-wide settings, DRA objects, and whether a
    watch has synced it yet (``synced``).

    What it keeps between decisions is in ``caches``: the folds (verdicts per node, kept
    current node by node) and the decisions per pod shape (until anything changes), so
    repeated pods from one workload cost one scan per cluster change rather than one per
    request.
    """

    def __init__(self, pool_label: str = "gpupool.io/pool") -> None:
        self._lock = threading.RLock()
        self._index = NodeIndex(pool_label)
        self._namespaces: dict[str, dict[str, str]] = {}
        self._settings = ClusterSettings()
        self._dra = DRAObjects()
        self._caches = Caches(self._lock)
        #: False while a watch fills the view and has not listed its nodes and namespaces
        #: yet: decisions then say the view is missing (``onNoNodeView``)
        self.synced = True

    @property
    def version(self) -> int:
        return self._caches.version


    def track_changes(self) -> None:
        """Start keeping what changes, for ``take_changes``."""
        with self._lock:
            if self._caches.log is None:
                self._caches.log = Changes()

    def take_changes(self) -> Changes:
        """What changed since the last call (or ``track_changes``), and start afresh."""
        with self._lock:
            taken, self._caches.log = self._caches.log or Changes(), Changes()
            return taken

    # ---------------------------------------------------------------- writes

    def set_synced(self, synced: bool) -> None:
        with self._lock:
            if synced != self.synced:
                self.synced = synced
                self._caches.changed(Change.SYNCED)

    def set_pool_label(self, pool_label: str) -> None:
        with self._lock:
            if pool_label != self._index.pool_label:
                self._index.rekey(pool_label)
                self._caches.changed(Change.SETTING)

    def upsert_node(self, node: NodeInfo) -> bool:
        """Store a node; returns False (and keeps the version) when nothing relevant changed."""
        with self._lock:
            old = self._index.nodes.get(node.name)
            if old is not None and old.fingerprint == node.fingerprint and node.fingerprint:
                return False
            self._index.put(node)
            self._caches.changed(Change.NODE, nodes=(node,),
                                 replaced={node.name: old} if old is not None else None)
            return True

    def delete_node(self, name: str) -> None:
        with self._lock:
            if self._index.pop(name) is not None:
                self._caches.changed(Change.NODE_GONE, names=(name,))

    def replace_nodes(self, nodes: Iterable[NodeInfo]) -> None:
        """Swap in a full listing (initial list or relist after the watch expired)."""
        with self._lock:
            self._index.replace(nodes)
            self._caches.changed(Change.NODES)

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        with self._lock:
            if labels is None:
                self._namespaces.pop(name, None)
            else:
                self._namespaces[name] = intern_map(labels)
            self._caches.changed(Change.NAMESPACES, namespaces=(name,))

    def replace_namespaces(self, namespaces: Mapping[str, Mapping[str, str]]) -> None:
        with self._lock:
            self._namespaces = {k: intern_map(v) for k, v in namespaces.items()}
            self._caches.changed(Change.NAMESPACES)

    def _setting(self, changed: Callable[[], bool]) -> None:
        with self._lock:
            if changed():
                self._caches.changed(Change.SETTING)

    def replace_runtime_classes(self, classes: Mapping[str, str] | None) -> None:
        """The cluster's RuntimeClasses (name -> handler); None: unknown."""
        self._setting(lambda: self._settings.set_runtime_classes(classes))

    def set_runtime_class(self, name: str, handler: str | None) -> None:
        """One RuntimeClass added or changed (``handler``), or deleted (None)."""
        with self._lock:
            classes = dict(self._settings.runtime_classes or {})
            if handler is None:
                classes.pop(name, None)
            else:
                classes[name] = handler
            self.replace_runtime_classes(classes)

    def replace_device_classes(self, classes: Iterable[dra.DeviceClass] | None) -> None:
        """The cluster's DeviceClasses; None: unknown (not listed)."""
        self._setting(lambda: self._settings.set_device_classes(classes))

    def set_device_class(self, name: str, device_class: dra.DeviceClass | None) -> None:
        """One DeviceClass added or changed, or deleted (None)."""
        self._setting(lambda: self._settings.set_device_class(name, device_class))

    def set_operator(self, operator: clusterpolicy.Operator | None) -> None:
        """What the GPU Operator's ClusterPolicy says (``clusterpolicy``)."""
        self._setting(lambda: self._settings.set_operator(operator))

    def set_hami_plugins(self, plugins: Iterable[hamiplugin.HamiPlugin] | None) -> None:
        """HAMi's device-plugin DaemonSets (``hamiplugin``); None: not known."""
        self._setting(lambda: self._settings.set_hami_plugins(plugins))

    def set_release(self, release: Release) -> None:
        """The Kubernetes release the cluster runs (``stacks.releases``)."""
        self._setting(lambda: self._settings.set_release(release))

    def replace_slices(self, slices: Iterable[dra.Slice]) -> None:
        with self._lock:
            self._dra.replace_slices(slices)
            self._caches.changed(Change.SLICE_LISTING)

    def set_slice(self, name: str, s: dra.Slice | None) -> None:
        """One ResourceSlice added or changed, or deleted (None). Folds re-judge the node it
        serves alone; a slice for every node makes them start over."""
        with self._lock:
            touched = self._dra.set_slice(name, s)
            if touched is None:
                return
            if None in touched:
                self._caches.changed(Change.ALL_SLICES)
            else:
                nodes = (self._index.nodes.get(n) for n in touched if n is not None)
                self._caches.changed(Change.SLICES, nodes=[n for n in nodes if n is not None])

    def replace_claims(self, kind: str, claims: Mapping[tuple[str, str], dra.ClaimSpec]
                       ) -> None:
        """Every ResourceClaim or ResourceClaimTemplate (``kind``), by (namespace, name)."""
        with self._lock:
            self._dra.replace_claims(kind, claims)
            self._caches.changed(Change.CLAIMS)

    def set_claim(self, kind: str, namespace: str, name: str,
                  spec: dra.ClaimSpec | None) -> None:
        with self._lock:
            self._dra.set_claim(kind, namespace, name, spec)
            self._caches.changed(Change.CLAIMS, namespaces=(namespace,))

    # ---------------------------------------------------------------- reads

    def hami_way(self, labels: Mapping[str, str]) -> Way | None:
        """How HAMi's device plugin hands GPUs on a node with these labels, where its
        DaemonSet says."""
        return self._settings.hami_way(labels)

    def hami_plugin_runs(self, labels: Mapping[str, str]) -> bool:
        """Whether one of HAMi's device-plugin DaemonSets schedules to a node with these
        labels (False when none is known)."""
        return self._settings.hami_plugin_runs(labels)

    def knows_hami_plugins(self) -> bool:
        return bool(self._settings.hami_plugins)

    def operator_way(self) -> Way | None:
        """How the GPU Operator's device plugin hands GPUs, where its ClusterPolicy says."""
        return self._settings.operator_way()

    def operator_nri(self) -> nri.NRIPlugin | None:
        """The GPU Operator's NRI plugin, where its ClusterPolicy runs one."""
        return self._settings.operator_nri()

    def release(self) -> Release:
        """The Kubernetes release whose DRA allocator decides: discovered, given, or the
        newest supported."""
        return self._settings.release

    def device_classes(self) -> Mapping[str, dra.DeviceClass] | None:
        """DeviceClass name -> class, or None when gpupool does not know them."""
        return self._settings.device_classes

    def slices_for(self, node: str, own: bool = False) -> tuple[dra.Slice, ...]:
        """The ResourceSlices whose devices a pod on ``node`` could get: the node's own and
        (unless ``own``) those every node reaches."""
        with self._lock:
            return self._dra.slices_for(node, own)

    def nodes_with_slices(self) -> frozenset[str]:
        with self._lock:
            return self._dra.nodes_with_slices()

    def claim(self, kind: str, namespace: str, name: str) -> dra.ClaimSpec | None:
        return self._dra.claims.get((kind, namespace, name))

    def held_devices(self) -> tuple[dra.Held, ...]:
        """Every device an allocated ResourceClaim holds: in use now."""
        claims = tuple(self._dra.claims.values())
        return tuple(h for c in claims for h in c.held)

    def runtime_classes(self) -> Mapping[str, str] | None:
        """RuntimeClass name -> handler, or None when gpupool does not know them."""
        return self._settings.runtime_classes

    def handler_of(self, runtime_class: str | None) -> str | None:
        """The containerd handler a pod's RuntimeClass runs it with. Unknown classes are
        taken to name their handler, as the GPU Operator names them."""
        return self._settings.handler_of(runtime_class)

    def node(self, name: str) -> NodeInfo | None:
        return self._index.nodes.get(name)

    def has_hami_mig(self, pool: str, policy: Policy) -> bool:
        """Does HAMi's device plugin run a GPU in MIG mode on some node of ``pool``
        (``NodeInfo.hami_mig_gpus``)? Asked of every pool, not only HAMi's: the node's
        plugin creates the MIG device whoever scheduled the pod."""
        return any(node is not None and node.in_pool(pool, policy)
                   for node in map(self._index.nodes.get, self._index.hami_mig))

    def has_single_strategy_mig(self) -> bool:
        """Does a device plugin hand MIG devices as nvidia.com/gpu on some node?"""
        return bool(self._index.single_mig)

    def has_containerd_cdi_off(self) -> bool:
        """Does containerd run with CDI off on some node? A plugin's CDI names then reach a
        resolver or not by the pod's runtime handler, which the agent's label (judged under
        the default handler) cannot say."""
        return bool(self._index.cdi_off)

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self._namespaces.get(name)

    def __len__(self) -> int:
        return len(self._index.nodes)

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return list(self._index.nodes.values())

    def names_with_label(self, key: str, value: str) -> frozenset[str]:
        """Names of nodes carrying ``key=value``, from the label index (no scan)."""
        with self._lock:
            return self._index.names_with_label(key, value)

    def pool_nodes(self, policy: Policy, pool: str) -> tuple[NodeInfo, ...]:
        """GPU nodes of one pool, via the pool-label index (what a fold of the pool's
        verdicts starts from)."""
        with self._lock:
            index = self._index
            if index.pool_label != policy.pool_label:
                # The index follows another label (the server re-keys it through
                # set_pool_label when its policy changes): scan, and leave it alone.
                return tuple(sorted((n for n in index.nodes.values()
                                     if n.in_pool(pool, policy)), key=lambda n: n.name))
            names: set[str] = set()
            if pool == policy.default_pool:
                for value, bucket in index.by_pool_value.items():
                    if policy.pool_for_label_value(value) == pool:
                        names |= bucket
            else:
                for value in policy.by_name[pool].label_values:
                    names |= index.by_pool_value.get(value, set())
            found = (index.nodes[n] for n in sorted(names))
            return tuple(n for n in found if n.is_gpu_node(policy))

    def fold(self, key: Any, fn: Callable[[NodeInfo], T | None],
             initial: Callable[[], Iterable[NodeInfo]], *, reads_slices: bool = False,
             again: Again[T] | None = None) -> NodeFold[T]:
        """The fold under ``key``, made from ``initial()`` nodes the first time (bounded, LRU).

        ``fn`` must depend on nothing but the node (and its slices, with ``reads_slices``)
        and what ``key`` names. ``again(change, value)``: a node stored in place of
        ``change.old``, whose value was ``value``; it must answer as ``fn(change.node)``
        would (what the folds work out alike about the node: ``change.shared``)."""
        return self._caches.fold(key, fn, initial, reads_slices=reads_slices, again=again)

    def kept_fold(self, key: Any) -> NodeFold[Any] | None:
        """The fold kept under ``key``, if any (``fold`` makes one): a caller that would
        build much to make it asks first."""
        return self._caches.kept_fold(key)

    def until_any_change(self, key: Any, compute: Callable[..., T], *args: Any) -> T:
        """Keep ``compute(*args)`` under ``key`` while nothing in the view changes, slices
        included: admission's decisions per pod shape (``admit``). Bounded, LRU. A hit is
        found without the lock, so ``key`` must hash and compare in C (tuples of str, int,
        bytes, None): the lookup is then one step under the GIL. (``args``, not a closure:
        every review of a known shape would make one, and its cells, to throw away.)"""
        return self._caches.until_any_change(key, compute, *args)


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
