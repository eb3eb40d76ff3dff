"""The nodes, indexed so a pool's nodes and a label's nodes are found without a scan.

Per-node labels are indexed pair by pair; label dicts shared by many nodes (``NodeLabels``)
by the nodes that share them: a node stored with the same shared labels as a node already
here is given that node's dict, so a node group of thousands holds one copy (GPU nodes carry
150+ labels, nearly all alike), and a dict no node holds any more leaves with its last node.
Likewise the runtime section of the nodes' inventories: nodes of one kind hold one.
Not locked itself: the view holds its lock around every call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.api.inventory import PLUGIN_RESOURCE, RuntimeInfo
from webhook.engine.view.labels import NodeLabels
from webhook.engine.view.nodes import NodeInfo
from webhook.engine.view.sharing import Shared


class NodeIndex:
    def __init__(self, pool_label: str) -> None:
        self.pool_label = pool_label
        self._clear()

    def _clear(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.by_pool_value: dict[str | None, set[str]] = {}
        self._by_own_label: dict[tuple[str, str], set[str]] = {}
        self._by_shared: dict[int, tuple[Mapping[str, str], set[str]]] = {}
        #: the shared label dicts held, by their content's hash
        self._shared_by_content: dict[int, dict[str, str]] = {}
        #: the runtime sections held, by content
        self._runtimes: Shared[RuntimeInfo] = Shared()
        #: nodes where HAMi runs a GPU in MIG mode (its steering label cannot tell)
        self.hami_mig: set[str] = set()
        #: nodes whose device plugin registered MIG devices as nvidia.com/gpu (its single
        #: MIG strategy, as the agent read the kubelet's checkpoint)
        self.single_mig: set[str] = set()
        #: nodes whose containerd has CDI off: who resolves a plugin's CDI names there
        #: depends on the pod's handler (``delivery.cdi_names_path``)
        self.cdi_off: set[str] = set()

    def put(self, node: NodeInfo) -> None:
        old = self.nodes.get(node.name)
        if old is not None:
            self._unindex(old)
        self.nodes[node.name] = node
        self._index(node)

    def pop(self, name: str) -> NodeInfo | None:
        old = self.nodes.pop(name, None)
        if old is not None:
            self._unindex(old)
        return old

    def replace(self, nodes: Iterable[NodeInfo]) -> None:
        self._clear()
        for n in nodes:
            self.nodes[n.name] = n
            self._index(n)

    def rekey(self, pool_label: str) -> None:
        """Index by another pool label."""
        self.pool_label = pool_label
        self.by_pool_value = {}
        for n in self.nodes.values():
            self.by_pool_value.setdefault(n.labels.get(pool_label), set()).add(n.name)

    def names_with_label(self, key: str, value: str) -> frozenset[str]:
        found = set(self._by_own_label.get((key, value), ()))
        for shared, members in self._by_shared.values():
            if shared.get(key) == value:
                found |= members
        return frozenset(found)

    def _index(self, node: NodeInfo) -> None:
        self.by_pool_value.setdefault(node.labels.get(self.pool_label), set()).add(node.name)
        own, shared = _split(node.labels)
        for pair in own.items():
            self._by_own_label.setdefault(pair, set()).add(node.name)
        labels = node.labels
        if isinstance(labels, NodeLabels) and labels.shared:
            held = self._shared_by_content.get(labels.content_hash)
            if held is None:
                self._shared_by_content[labels.content_hash] = labels.shared
            elif held is not labels.shared and held == labels.shared:
                labels.shared = held  # (equal: the node reads the same labels)
            shared = labels.shared  # (another content of the same hash: kept apart)
        self._by_shared.setdefault(id(shared), (shared, set()))[1].add(node.name)
        if node.runs_hami_mig():
            self.hami_mig.add(node.name)
        inv = node.inventory
        if inv is not None:
            if PLUGIN_RESOURCE in (inv.mig or {}):
                self.single_mig.add(node.name)
            if inv.runtime.containerd_cdi is False:
                self.cdi_off.add(node.name)
            runtime = self._runtimes.hold(inv.runtime.content, inv.runtime)
            if runtime is not inv.runtime:
                # (an equal value for the one parsed: the inventory reads the same)
                object.__setattr__(inv, "runtime", runtime)

    def _unindex(self, node: NodeInfo) -> None:
        key = node.labels.get(self.pool_label)
        bucket = self.by_pool_value.get(key)
        if bucket is not None:
            bucket.discard(node.name)
            if not bucket:
                del self.by_pool_value[key]
        own, shared = _split(node.labels)
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
                if isinstance(node.labels, NodeLabels):
                    content_hash = node.labels.content_hash
                    if self._shared_by_content.get(content_hash) is shared:
                        del self._shared_by_content[content_hash]
        self.hami_mig.discard(node.name)
        self.single_mig.discard(node.name)
        self.cdi_off.discard(node.name)
        if node.inventory is not None:
            self._runtimes.release(node.inventory.runtime.content)


def _split(labels: Mapping[str, str]) -> tuple[Mapping[str, str], Mapping[str, str]]:
    if isinstance(labels, NodeLabels):
        return labels.own, labels.shared
    return labels, {}
