"""What one node says about one pod's devices, and the form every node check takes.

A node check is one question asked of each candidate node (will the device plugin's GPUs
resolve there, will the pod's own NVIDIA_VISIBLE_DEVICES, will its NRI annotations). Each
declares the pod facts its answer depends on (``reads``, named in ``FACTS``) and how its
finding combines with the others' (``combine``); ``nodechecks`` lists them and derives the
verdict cache key from those declarations, so pods that differ in anything a check reads
never share a cached verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, cast

from webhook.api import delivery
from webhook.api.said import Said, said
from webhook.engine.core.policy import Policy, Pool
from webhook.engine.placement.candidates import GPUDemand
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import clusterpolicy, gfd, hamiplugin, nri
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


class NodeState(StrEnum):
    """Whether every GPU the device plugin could hand a pod resolves on a node."""

    OK = "ok"
    MISSING = "missing"  # some spec lacks a device the pod would get
    UNKNOWN = "unknown"  # gpupool cannot tell (no inventory, unknown mode or GPUs)
    #: the pod's scheduler would not place it on this node's GPUs at all: not a candidate
    #: (its ``note`` says why), and judged no further
    UNFIT = "unfit"


@dataclass(frozen=True)
class NodeAssessment:
    node: str
    state: NodeState
    missing: tuple[str, ...] = ()
    #: what decided, as data (``wording.words`` words it)
    note: Said | None = None
    kind: str = ""
    mode: str | None = None
    way: str = ""
    #: the GPUs would not reach the container at all (see ``delivery.Resolution``)
    undelivered: bool = False
    #: a GPU reaches the container, but not the one the device plugin accounted for (the
    #: pod's NRI annotation injects one where the plugin's never arrives)
    misaccounted: bool = False
    #: the fix, where the finding itself knows it (``fix_text`` works out the others)
    fix: Said | None = None
    #: unknown, yet some GPU there can fail the pod (one HAMi's cordon names, which its
    #: scheduler may still hand out): a warning, not a denial, but steering keeps the pod off
    may_fail: bool = False
    #: the reason code (``Reason``), where the finding itself knows it
    reason: str = ""


def no_inventory(node: NodeInfo) -> Said:
    """A node whose devices cannot be judged: its agent's inventory is absent or unreadable."""
    return said("node.noInventory", error=node.inventory_error)


_SEVERITY = {NodeState.OK: 0, NodeState.UNKNOWN: 1, NodeState.MISSING: 2}


def worse(a: NodeAssessment, b: NodeAssessment | None) -> NodeAssessment:
    """Of two findings on one node, the one that says more: a missing device beats doubt,
    doubt beats fine (``a`` on a tie)."""
    return b if b is not None and _SEVERITY[b.state] > _SEVERITY[a.state] else a


class Combine(StrEnum):
    """How a check's finding joins the finding so far on the same node."""

    FIRST = "first"  # the base judgment: it is the finding so far
    WORSE = "worse"  # the finding that says more wins (``worse``)
    REFINE = "refine"  # it sees the finding so far and may replace it (None keeps it)
    #: asked first: a finding ends the node's judgment (the node is out), None lets the
    #: other checks judge it
    GATE = "gate"


class Ask(NamedTuple):
    """One pod asked of one pool's nodes: what every check may read, worked out once. A
    check is handed it with ``facts`` and ``demand`` opened only as far as it declared
    (``declared``)."""

    facts: PodFacts
    pool: Pool
    view: ClusterView
    policy: Policy
    hami_pool: bool
    demand: Callable[[], GPUDemand]  # on the first node that needs it ("GPU demand")

    @property
    def handler(self) -> str | None:
        """The containerd handler the pod's RuntimeClass names ("runtime class")."""
        return self.view.handler_of(self.facts.runtime_class)


@dataclass(frozen=True)
class NodeCheck:
    """One question asked of every candidate node: ``assess``, a pure function of the node,
    the pod (as ``Ask``) and the finding so far, and what it declares it reads. The
    declarations are the cache keys: the verdicts are kept per pod shape made of the pod
    facts every check reads (``reads``), and a node stored again keeps its findings while
    the node facts every check reads (``node_reads``) hold still. Under
    ``enforce_declarations`` a check that reads anything it did not declare fails
    (``UndeclaredRead``)."""

    name: str
    #: the pod facts (``FACTS``) its answer depends on
    reads: tuple[str, ...]
    #: the node facts (``NODE_FACTS``) its answer depends on, beyond the node's name
    node_reads: tuple[str, ...]
    combine: Combine
    #: (node, ask, prepared, finding so far) -> its finding on the node
    assess: Callable[[NodeInfo, Ask, Any, NodeAssessment | None], NodeAssessment | None]
    #: per pod and pool: what the check needs for every node; None when it has nothing to
    #: ask. (None: it always asks, with nothing prepared.)
    prepare: Callable[[Ask], Any] | None = None


@dataclass(frozen=True)
class Fact:
    """A fact a check may declare it reads: the attributes that hold it (of ``PodFacts``
    for a pod fact, of ``NodeInfo`` for a node fact), the only ones a check that declares
    it may read, and its part of the cache key, which must change whenever they do."""

    fields: frozenset[str]
    key: Callable[[Any, ClusterView], Hashable]


def _nri_key(f: PodFacts, v: ClusterView) -> Hashable:
    if not f.nri_requests:
        return ()
    # which containers ask for GPUs, by name: the annotations name containers
    return f.nri_requests, f.namespace, tuple(c.get("name") for c in f.gpu_containers)


#: The pod facts a check may read: name -> the ``PodFacts`` attributes that hold it and
#: its part of the verdicts' key (each part hashable, so the key is a plain tuple).
#: "GPU demand" also opens ``Ask.demand``, "runtime class" ``Ask.handler``.
FACTS: Mapping[str, Fact] = {
    "GPU demand": Fact(frozenset({"demand_key", "gpus", "asks_mig", "is_gpu_pod"}),
                       lambda f, v: f.demand_key),
    "runtime class": Fact(frozenset({"runtime_class"}), lambda f, v: f.runtime_class),
    "privileged GPU containers": Fact(frozenset({"privileged_gpus"}),
                                      lambda f, v: f.privileged_gpus),
    "own NVIDIA_VISIBLE_DEVICES": Fact(
        frozenset({"own_visible_devices", "own_visible_unknown", "only_own_visible_devices"}),
        lambda f, v: (f.own_visible_devices, f.own_visible_unknown)),
    "NRI annotations": Fact(frozenset({"nri_requests", "namespace", "gpu_containers"}),
                            _nri_key),
    # (read by the verdicts' fold, not by a check: which nodes DRA serves instead of a
    # device plugin)
    "DRA-served resources": Fact(frozenset(), lambda f, v: f.claims.extended),
}

#: The node facts a check may read besides the node's name: name -> the ``NodeInfo``
#: attributes that hold it (none for a fact worked out from the node and the view's
#: settings, read with ``node_fact``) and its part of a node's key (None: never the same).
NODE_FACTS: Mapping[str, Fact] = {
    # the registered and inventoried GPUs, the cordon, the extended resources: one digest
    "devices": Fact(frozenset({"inventory", "inventory_error", "gpus", "register_error",
                               "cordoned", "extended_resources", "allocatable",
                               "gpu_uuids", "gpu_types", "hami_mig_gpus", "runs_hami_mig"}),
                    lambda n, v: n.devices),
    # how its device plugin hands GPUs, as the plugin's pod or the cluster's own
    # configuration says (``declared_way``): the labels the GPU Operator's and HAMi's
    # DaemonSets select on, read for that alone
    "device plugin's way": Fact(frozenset(), lambda n, v: declared_way(n, v)),
    # the GPU Operator's NRI plugin runs there (``nri.runs_on``)
    "NRI plugin": Fact(frozenset(), lambda n, v: nri.runs_on(n.labels)),
    # whether its GPUs have MIG enabled, as GPU feature discovery's and the MIG manager's
    # labels say (``gfd.mig_mode``)
    "MIG mode": Fact(frozenset(), lambda n, v: gfd.mig_mode(n.labels)),
    # HAMi's device plugin runs there: its agent found the plugin's pod, or one of HAMi's
    # DaemonSets selects it (``hamiplugin.runs_here``)
    "HAMi's device plugin": Fact(frozenset(), lambda n, v: hamiplugin.runs_here(
        n.inventory.plugins if n.inventory is not None else None,
        v.hami_plugin_runs(n.labels))),
}


def declared_way(node: NodeInfo, view: ClusterView) -> delivery.Way | None:
    """How the node's device plugin hands GPUs: first as the pod that runs it there says,
    whoever deployed it (the agent reads it: ``delivery.learned_way``); else as the cluster's
    own configuration says: the GPU Operator's ClusterPolicy on the nodes it runs its plugin
    on, HAMi's device-plugin DaemonSet on the nodes it schedules to (``hamiplugin``),
    whatever their pool: a DaemonSet's selector that also lands on another pool's nodes runs
    HAMi's plugin there. None: nothing says."""
    learned = delivery.learned_way(node.inventory).way if node.inventory is not None else None
    if learned is not None:
        return learned
    operator = view.operator_way()
    if operator is not None and clusterpolicy.runs_operator_plugin(node.labels):
        return operator
    return view.hami_way(node.labels)


class UndeclaredRead(AttributeError):
    """A check read a fact it did not declare: its verdicts would be kept under a key that
    does not hold what they depend on."""


#: whether checks are handed only what they declared: the test suite turns it on
#: (tests/conftest.py); serving skips the wrappers, whose reads cost on every node judged
_ENFORCE = False


def enforce_declarations(on: bool = True) -> None:
    """Hand every check only what it declared (``declared``), from now on."""
    global _ENFORCE
    _ENFORCE = on


def _open(declared: tuple[str, ...], table: Mapping[str, Fact], check: str) -> frozenset[str]:
    unknown = [r for r in declared if r not in table]
    if unknown:
        raise UndeclaredRead(f"check {check!r} declares {', '.join(unknown)}, which no "
                             f"fact is (known: {', '.join(table)})")
    return frozenset().union(*(table[r].fields for r in declared))


class _Declared:
    """A pod's facts, or a node, as one check declared them: an attribute outside the
    declared facts' fields raises ``UndeclaredRead``; ``fact`` reads a node fact worked out
    from the node and the view's settings."""

    __slots__ = ("_check", "_facts", "_fields", "_obj", "_view", "_whose")

    def __init__(self, obj: Any, fields: frozenset[str], check: str, whose: str,
                 facts: tuple[str, ...] = (), view: ClusterView | None = None) -> None:
        self._obj, self._fields, self._check, self._whose = obj, fields, check, whose
        self._facts, self._view = facts, view

    def _undeclared(self, what: str) -> UndeclaredRead:
        where = "reads" if self._view is None else "node_reads"
        return UndeclaredRead(f"check {self._check!r} reads {self._whose} {what}, which no "
                              f"fact it declares holds: declare it in its {where}")

    def __getattr__(self, name: str) -> Any:
        if name in self._fields:
            return getattr(self._obj, name)
        raise self._undeclared(name)

    def fact(self, name: str) -> Any:
        if name not in self._facts or self._view is None:
            raise self._undeclared(repr(name))
        return NODE_FACTS[name].key(self._obj, self._view)


def node_fact(node: NodeInfo, name: str, view: ClusterView) -> Any:
    """A node fact worked out from the node and the view's settings (``NODE_FACTS``), as
    a check reads it: gated by its declarations when they are enforced."""
    if isinstance(node, _Declared):
        return node.fact(name)
    return NODE_FACTS[name].key(node, view)


def _fail(check: str, fact: str) -> Callable[[], GPUDemand]:
    def undeclared() -> GPUDemand:
        raise UndeclaredRead(f"check {check!r} reads the pod's {fact}, which it does not "
                             "declare in its reads")
    return undeclared


def declared(check: NodeCheck, ask: Ask) -> Ask:
    """``ask`` as ``check`` may read it: its facts opened only as far as it declared."""
    if not _ENFORCE:
        return ask
    fields = _open(check.reads, FACTS, check.name)
    demand = ask.demand if "GPU demand" in check.reads else _fail(check.name, "GPU demand")
    facts = cast(PodFacts, _Declared(ask.facts, fields, check.name, "the pod's"))
    return ask._replace(facts=facts, demand=demand)


def declared_node(check: NodeCheck, node: NodeInfo, view: ClusterView) -> NodeInfo:
    """``node`` as ``check`` may read it."""
    if not _ENFORCE:
        return node
    fields = _open(check.node_reads, NODE_FACTS, check.name) | {"name"}
    return cast(NodeInfo, _Declared(node, fields, check.name, f"node {node.name}'s",
                                    check.node_reads, view))
