"""The questions asked of every candidate node, as one list, and the cache key they imply.

Adding a node check is its module and one line here. The verdicts are kept per pod shape
(``ClusterView.fold``), so the key must hold every pod fact any check reads: it is derived
from the checks' own ``reads``, never written out by hand. Likewise a node stored again keeps
its findings only while every node fact the checks declare (``node_reads``) is as it was.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, overload

from webhook.engine.checks import (
    gpufit,
    hamibinding,
    nriannotations,
    owndevices,
    plugindevices,
)
from webhook.engine.checks.assessment import (
    FACTS,
    NODE_FACTS,
    Ask,
    Combine,
    NodeAssessment,
    NodeCheck,
    declared,
    declared_node,
    worse,
)
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo

#: what the verdicts read besides the checks: which nodes DRA serves instead of a device
#: plugin
FOLD_READS = ("DRA-served resources",)


class Checks(Sequence[NodeCheck]):
    """A list of node checks, with what their declarations add up to, worked out when the
    list is made: the pod facts and node facts they read, and how each is read."""

    def __init__(self, checks: Iterable[NodeCheck]) -> None:
        self.checks = tuple(checks)
        #: the pod facts the verdicts read: every check's, and the fold's own
        self.reads = tuple(sorted(set(FOLD_READS).union(*(c.reads for c in self.checks))))
        #: the node facts the checks read, each once, in the checks' order
        self.node_reads = tuple(dict.fromkeys(r for c in self.checks for r in c.node_reads))
        self.pod_keys = tuple(FACTS[r].key for r in self.reads)
        self.node_keys = tuple(NODE_FACTS[r].key for r in self.node_reads)

    @overload
    def __getitem__(self, i: int) -> NodeCheck: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[NodeCheck]: ...

    def __getitem__(self, i: int | slice) -> NodeCheck | Sequence[NodeCheck]:
        return self.checks[i]

    def __len__(self) -> int:
        return len(self.checks)


NODE_CHECKS = Checks((gpufit.CHECK, plugindevices.CHECK, owndevices.CHECK,
                     nriannotations.CHECK, hamibinding.CHECK))


def _checks(checks: Iterable[NodeCheck] | None) -> Checks:
    """The list given (or the registered one), as a ``Checks``."""
    if checks is None:
        checks = NODE_CHECKS
    return checks if isinstance(checks, Checks) else Checks(checks)


def reads(checks: Iterable[NodeCheck] | None = None) -> tuple[str, ...]:
    """The pod facts the verdicts read: every check's, and the fold's own."""
    return _checks(checks).reads


def shape_key(facts: PodFacts, view: ClusterView,
              checks: Iterable[NodeCheck] | None = None) -> tuple[Hashable, ...]:
    """The pod's shape as far as the verdicts go: its placement and every fact read (each
    fact is hashable, so the key is a plain tuple)."""
    keys = _checks(checks).pod_keys
    return (facts.placement.key, *[key(facts, view) for key in keys])


def node_reads(checks: Iterable[NodeCheck] | None = None) -> tuple[str, ...]:
    """The node facts the checks read, each once, in the checks' order."""
    return _checks(checks).node_reads


def node_key(node: NodeInfo, view: ClusterView,
             checks: Iterable[NodeCheck] | None = None) -> Hashable | None:
    """Everything of the node the checks declare they read (``NodeCheck.node_reads``): a
    node stored again with the same key gets the same findings, so a label that no check
    reads (the agent's steering labels, a team's own) does not make every fold judge the
    node anew. None for a node not built from its object (its devices unknown): never the
    same."""
    if node.devices is None:
        return None
    keys = _checks(checks).node_keys
    return tuple([key(node, view) for key in keys])


def prepared(ask: Ask, checks: Iterable[NodeCheck] | None = None
             ) -> tuple[tuple[NodeCheck, Ask, Any], ...]:
    """The checks that have something to ask of this pod, each with the pod as it may read
    it (``declared``) and what it prepared."""
    out = []
    for c in _checks(checks):
        mine = declared(c, ask)
        p = True if c.prepare is None else c.prepare(mine)
        if p is not None:
            out.append((c, mine, p))
    return tuple(out)


def judge(node: NodeInfo, ask: Ask, active: tuple[tuple[NodeCheck, Ask, Any], ...]
          ) -> NodeAssessment:
    """Every active check asked of one node, their findings combined as each declares."""
    finding: NodeAssessment | None = None
    view = ask.view
    for check, mine, prep in active:
        found = check.assess(declared_node(check, node, view), mine, prep, finding)
        if check.combine is Combine.GATE:
            if found is not None:
                return found
            continue
        if check.combine is Combine.FIRST or finding is None:
            finding = found
        elif check.combine is Combine.WORSE:
            finding = worse(finding, found)
        elif found is not None:
            finding = found
    assert finding is not None, "the first node check always answers"
    return finding
