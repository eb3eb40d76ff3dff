"""The scanner's state: GPU pods, their answers, the nodes' hazards, and what changed.

No I/O and no clock of its own: the watch hands it pods and keeps the view current, the
loop calls ``sync`` to re-decide what a change touched, and the writers read what changed
since they last wrote. A node change re-decides the pods bound to that node and the pending
ones (a node can make a pending pod schedulable or not); a pod event re-decides that pod; a
cluster-wide change (a listing, DeviceClasses, RuntimeClasses, the ClusterPolicy, HAMi's
DaemonSets, the policy) re-decides every pod.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine import (
    ClusterView,
    NodeHazard,
    PodAnswer,
    Policy,
    SchedulerState,
    advertised_twice,
    finished,
    meta_of,
    recheck,
    resource_names,
)

log = logging.getLogger(__name__)

#: Fields no answer reads and that a stored pod need not keep (a 20,000-pod scan holds
#: each GPU pod).
_DROPPED_META = ("managedFields",)


@dataclass
class Answer:
    """A pod's answer, when it last changed, and what change it followed."""

    answer: PodAnswer
    since: float
    cause: str


@dataclass
class Stats:
    rechecks: int = 0
    errors: int = 0  # pods the engine failed on (logged, left out)
    full_scans: int = 0
    last_full_scan_seconds: float = 0.0
    last_full_scan: float = 0.0  # wall time


@dataclass
class Dirty:
    """What changed since the writers last took it."""

    namespaces: set[str] = field(default_factory=set)
    pods: set[str] = field(default_factory=set)  # uids
    nodes: set[str] = field(default_factory=set)


def _slim(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in meta_of(pod).items() if k not in _DROPPED_META}
    return {**pod, "metadata": meta}


def _uid(pod: Mapping[str, Any]) -> str:
    meta = meta_of(pod)
    uid = meta.get("uid")
    return uid if isinstance(uid, str) and uid else f"{meta.get('namespace')}/{meta.get('name')}"


class Scanner:
    def __init__(self, view: ClusterView, policy: Policy, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.view = view
        self.policy = policy
        self.clock = clock
        self.schedulers: dict[str, SchedulerState] = {}
        self._lock = threading.RLock()
        self._pods: dict[str, dict[str, Any]] = {}
        self._on_node: dict[str, set[str]] = {}
        self._answers: dict[str, Answer] = {}
        self._hazards: dict[str, tuple[NodeHazard, ...]] = {}
        #: each node's pool as last judged: a node that leaves a pool concerns its pods too
        self._node_pools: dict[str, str | None] = {}
        self._dirty = Dirty()
        self._scanned = False  # the first full scan ran (the view had synced)
        self.stats = Stats()
        view.track_changes()

    # ------------------------------------------------------------ inputs

    def pods_listed(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A full listing: pods not in it are gone."""
        with self._lock:
            fresh = {_uid(p): _slim(p) for p in pods if self.keeps(p)}
            for uid in set(self._pods) - set(fresh):
                self._forget(uid)
            for uid, pod in fresh.items():
                self._store(uid, pod)
            if self._scanned:
                self._recheck(fresh, "a listing of pods")

    def pod_event(self, etype: str, pod: Mapping[str, Any]) -> None:
        uid = _uid(pod)
        with self._lock:
            if etype == "DELETED" or not self.keeps(pod):
                self._forget(uid)
                return
            self._store(uid, _slim(pod))
            if self._scanned:
                self._recheck((uid,), "the pod changed" if etype == "MODIFIED"
                              else "the pod was created")

    def set_schedulers(self, states: Mapping[str, SchedulerState]) -> None:
        """New liveness of the schedulers: pending pods of those that changed are decided
        again."""
        with self._lock:
            changed = {n for n in set(states) | set(self.schedulers)
                       if states.get(n) != self.schedulers.get(n)}
            self.schedulers = dict(states)
            if changed and self._scanned:
                uids = [u for u in self._on_node.get("", ()) if self._answers.get(u) is None
                        or self._answers[u].answer.scheduler in changed]
                self._recheck(uids, f"scheduler {', '.join(sorted(changed))} changed state")

    def resync(self) -> None:
        """Decide every pod again, as a controller's resync does: whatever a narrowed
        re-check could have missed is caught within one period (writes follow only from
        answers that changed)."""
        with self._lock:
            if self._scanned:
                self._full("the periodic resync")

    def set_policy(self, policy: Policy) -> None:
        with self._lock:
            if policy.cache_key != self.policy.cache_key:
                self.policy = policy
                if self._scanned:
                    self._full("the policy changed")

    # ------------------------------------------------------------ the loop's step

    def sync(self) -> bool:
        """Re-decide what the view's changes touched (everything, the first time after the
        view synced). Returns whether anything was decided."""
        with self._lock:
            if not self.view.synced:
                return False
            changes = self.view.take_changes()
            if not self._scanned:
                self._scanned = True
                self._full("start")
                return True
            if not changes:
                return False
            if changes.everything:
                self._full("a cluster-wide change (a relist, DeviceClasses, RuntimeClasses, "
                           "the ClusterPolicy, HAMi's DaemonSets or namespaces)")
                return True
            uids: set[str] = set()
            pools: set[str | None] = set()
            for node in changes.nodes:
                uids |= self._on_node.get(node, set())
                pools.add(self._node_pools.get(node))
                pools.add(self._pool_of_node(node))
            # pending pods of the pools those nodes were or are in (a node elsewhere is no
            # candidate of theirs); pods without an answer yet, whatever their pool
            uids |= {u for u in self._on_node.get("", ()) if (a := self._answers.get(u)) is None
                     or a.answer.pool in pools or a.answer.pool is None} if changes.nodes \
                else set()
            if changes.namespaces:
                uids |= {u for u, p in self._pods.items()
                         if meta_of(p).get("namespace") in changes.namespaces}
            self._recheck(uids, "node " + ", ".join(sorted(changes.nodes)[:3])
                          + (f" and {len(changes.nodes) - 3} more" if len(changes.nodes) > 3
                             else "") + " changed" if changes.nodes
                          else "namespace labels or ResourceClaims changed")
            self._judge_nodes(changes.nodes)
            return True

    # ------------------------------------------------------------ outputs

    def stored(self) -> list[dict[str, Any]]:
        """The GPU pods kept, as last seen."""
        with self._lock:
            return list(self._pods.values())

    def answers(self) -> list[Answer]:
        with self._lock:
            return list(self._answers.values())

    def answer_of(self, uid: str) -> Answer | None:
        with self._lock:
            return self._answers.get(uid)

    def hazards(self) -> dict[str, tuple[NodeHazard, ...]]:
        with self._lock:
            return dict(self._hazards)

    def in_namespace(self, namespace: str) -> list[Answer]:
        with self._lock:
            return [a for a in self._answers.values() if a.answer.namespace == namespace]

    def take_dirty(self) -> Dirty:
        with self._lock:
            taken, self._dirty = self._dirty, Dirty()
            return taken

    def everything_dirty(self) -> Dirty:
        """All there is, as if all of it had changed (a new leader writes it all)."""
        with self._lock:
            return Dirty({a.answer.namespace for a in self._answers.values()},
                         set(self._answers), set(self._hazards))

    @property
    def scanned(self) -> bool:
        return self._scanned

    # ------------------------------------------------------------ internals

    def keeps(self, pod: Mapping[str, Any]) -> bool:
        """Pods that could be GPU pods: a quick look before the engine decides (a scan of
        200,000 pods must not store the 180,000 that are not)."""
        if finished(pod):
            return False
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            return False
        return bool(spec.get("resourceClaims")) or any(
            self.policy.is_gpu_resource(r) for r in resource_names(spec))

    def _store(self, uid: str, pod: dict[str, Any]) -> None:
        old = self._pods.get(uid)
        if old is not None:
            self._on_node.get(_node(old), set()).discard(uid)
        self._pods[uid] = pod
        self._on_node.setdefault(_node(pod), set()).add(uid)

    def _forget(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        if pod is not None:
            self._on_node.get(_node(pod), set()).discard(uid)
        gone = self._answers.pop(uid, None)
        if gone is not None:
            self._dirty.namespaces.add(gone.answer.namespace)
            self._dirty.pods.add(uid)

    def _full(self, cause: str) -> None:
        start = time.perf_counter()
        self._recheck(list(self._pods), cause)
        self._judge_nodes(None)
        self.stats.full_scans += 1
        self.stats.last_full_scan_seconds = time.perf_counter() - start
        self.stats.last_full_scan = self.clock()

    def _recheck(self, uids: Iterable[str], cause: str) -> None:
        now = self.clock()
        for uid in uids:
            pod = self._pods.get(uid)
            if pod is None:
                continue
            self.stats.rechecks += 1
            try:
                new = recheck(pod, self.view, self.policy, self.schedulers)
            except Exception as exc:  # one pod the engine cannot read stops no other
                self.stats.errors += 1
                meta = meta_of(pod)
                log.warning("pod %s/%s not decided (%s: %s); kept out of the reports",
                            meta.get("namespace"), meta.get("name"), type(exc).__name__, exc)
                new = None
            old = self._answers.get(uid)
            if new is None:
                if old is not None:
                    del self._answers[uid]
                    self._dirty.namespaces.add(old.answer.namespace)
                    self._dirty.pods.add(uid)
                continue
            if old is not None and old.answer.key == new.key and old.answer.node == new.node:
                if old.answer != new:  # the same answer, other details (pool, devices)
                    old.answer = new
                continue
            self._answers[uid] = Answer(new, now, cause)
            self._dirty.namespaces.add(new.namespace)
            if old is not None and old.answer.namespace != new.namespace:
                self._dirty.namespaces.add(old.answer.namespace)
            self._dirty.pods.add(uid)

    def _pool_of_node(self, name: str) -> str | None:
        """The pool of the node of that name now (``NodeInfo.pool``); None once it is gone."""
        node = self.view.node(name)
        return node.pool(self.policy) if node is not None else None

    def _judge_nodes(self, names: Iterable[str] | None) -> None:
        if names is None:
            self._node_pools = {n.name: n.pool(self.policy) for n in self.view.nodes()}
        else:
            for name in names:
                self._node_pools[name] = self._pool_of_node(name)
        nodes = self.view.nodes() if names is None else [
            n for name in names if (n := self.view.node(name)) is not None]
        if names is None:
            gone = set(self._hazards)
        else:
            gone = {n for n in names if self.view.node(n) is None and n in self._hazards}
        for node in nodes:
            found = tuple(advertised_twice(node, self.view))
            gone.discard(node.name)
            if found != self._hazards.get(node.name, ()):
                if found:
                    self._hazards[node.name] = found
                else:
                    self._hazards.pop(node.name, None)
                self._dirty.nodes.add(node.name)
        for name in gone:
            if self._hazards.pop(name, None) is not None:
                self._dirty.nodes.add(name)


def _node(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""
