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
from typing import Any, NamedTuple

from webhook.engine.core.policy import Policy, Pool
from webhook.engine.placement.candidates import GPUDemand
from webhook.engine.pod import podclaims
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


class NodeState(StrEnum):
    """Whether every GPU the device plugin could hand a pod resolves on a node."""

    OK = "ok"
    MISSING = "missing"  # some spec lacks a device the pod would get
    UNKNOWN = "unknown"  # gpupool cannot tell (no inventory, unknown mode or GPUs)


@dataclass(frozen=True)
class NodeAssessment:
    node: str
    state: NodeState
    missing: tuple[str, ...] = ()
    note: str = ""
    kind: str = ""
    mode: str | None = None
    way: str = ""
    #: the GPUs would not reach the container at all (see ``delivery.Resolution``)
    undelivered: bool = False
    #: a GPU reaches the container, but not the one the device plugin accounted for (the
    #: pod's NRI annotation injects one where the plugin's never arrives)
    misaccounted: bool = False
    #: the fix, where the finding itself knows it (``fix_text`` works out the others)
    fix: str = ""
    #: unknown, yet some GPU there can fail the pod (one HAMi's cordon names, which its
    #: scheduler may still hand out): a warning, not a denial, but steering keeps the pod off
    may_fail: bool = False
    #: the reason code (``Reason``), where the finding itself knows it
    reason: str = ""


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


class Ask(NamedTuple):
    """One pod asked of one pool's nodes: what every check may read, worked out once."""

    facts: PodFacts
    pool: Pool
    view: ClusterView
    policy: Policy
    handler: str | None  # the containerd handler its RuntimeClass names
    hami_pool: bool
    demand: Callable[[], GPUDemand]  # on the first node that needs it


@dataclass(frozen=True)
class NodeCheck:
    name: str
    #: the pod facts (``FACTS``) its answer depends on: the verdict cache key is made of them
    reads: tuple[str, ...]
    #: the node's facts it reads (documentation, and ``docs/checks.md``)
    node_reads: tuple[str, ...]
    combine: Combine
    #: per pod and pool: what the check needs for every node; None when it has nothing to ask
    prepare: Callable[[Ask], Any]
    #: (node, ask, prepared, finding so far) -> its finding on the node
    assess: Callable[[NodeInfo, Ask, Any, NodeAssessment | None], NodeAssessment | None]
    #: everything of the node (and of the view's cluster-wide settings, beyond what a
    #: setting change clears) that ``assess`` reads, as one value: a node stored again
    #: with the same key gets the same finding, so it is not asked again
    #: (``nodechecks.node_key``). It must change whenever a ``node_reads`` fact does.
    node_key: Callable[[NodeInfo, ClusterView], Hashable]


#: name -> how the fact is read from a pod (and the view, for what the view resolves); each
#: is hashable, as the verdicts' cache key holds them
FACTS: Mapping[str, Callable[[PodFacts, ClusterView], Hashable]] = {
    "GPU demand": lambda f, v: f.demand_key,
    "runtime class": lambda f, v: f.runtime_class,
    "privileged GPU containers": lambda f, v: f.privileged_gpus,
    "own NVIDIA_VISIBLE_DEVICES": lambda f, v: (f.own_visible_devices, f.own_visible_unknown),
    "NRI annotations": lambda f, v: (f.nri_requests, f.namespace) if f.nri_requests else (),
    "DRA-served resources": lambda f, v: podclaims.demand(f, v).extended,
}
