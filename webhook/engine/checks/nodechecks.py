"""The questions asked of every candidate node, as one list, and the cache key they imply.

Adding a node check is its module and one line here. The verdicts are kept per pod shape
(``ClusterView.fold``), so the key must hold every pod fact any check reads: it is derived
from the checks' own ``reads``, never written out by hand. Likewise a node stored again keeps
its findings only while every node fact the checks declare (``node_reads``) is as it was.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from webhook.engine.checks import nriannotations, owndevices, plugindevices
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

NODE_CHECKS: tuple[NodeCheck, ...] = (plugindevices.CHECK, owndevices.CHECK,
                                         nriannotations.CHECK)

#: what the verdicts read besides the checks: which nodes DRA serves instead of a device
#: plugin, and which nodes' GPUs can serve the demand at all (``candidates.unfit_reason``)
FOLD_READS = ("DRA-served resources", "GPU demand")


def reads(checks: Sequence[NodeCheck] | None = None) -> tuple[str, ...]:
    """The pod facts the verdicts read: every check's, and the fold's own."""
    return tuple(sorted(set(FOLD_READS).union(
        *(c.reads for c in (NODE_CHECKS if checks is None else checks)))))


def shape_key(facts: PodFacts, view: ClusterView,
              checks: Sequence[NodeCheck] | None = None) -> tuple[Hashable, ...]:
    """The pod's shape as far as the verdicts go: its placement and every fact read (each
    fact is hashable, so the key is a plain tuple). (Worked out from the list each time,
    so a check added to it is in the key at once.)"""
    return (facts.placement.key, *(FACTS[r].key(facts, view) for r in reads(checks)))


def node_reads(checks: Sequence[NodeCheck] | None = None) -> tuple[str, ...]:
    """The node facts the checks read."""
    return tuple(sorted(set().union(
        *(c.node_reads for c in (NODE_CHECKS if checks is None else checks)))))


def node_key(node: NodeInfo, view: ClusterView,
             checks: Sequence[NodeCheck] | None = None) -> Hashable | None:
    """Everything of the node the checks declare they read (``NodeCheck.node_reads``): a
    node stored again with the same key gets the same findings, so a label that no check
    reads (the agent's steering labels, a team's own) does not make every fold judge the
    node anew. None for a node not built from its object (its devices unknown): never the
    same."""
    if node.devices is None:
        return None
    return tuple(NODE_FACTS[r].key(node, view) for r in node_reads(checks))


def prepared(ask: Ask, checks: Sequence[NodeCheck] | None = None
             ) -> tuple[tuple[NodeCheck, Ask, Any], ...]:
    """The checks that have something to ask of this pod, each with the pod as it may read
    it (``declared``) and what it prepared."""
    out = []
    for c in NODE_CHECKS if checks is None else checks:
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
        if check.combine is Combine.FIRST or finding is None:
            finding = found
        elif check.combine is Combine.WORSE:
            finding = worse(finding, found)
        elif found is not None:
            finding = found
    assert finding is not None, "the first node check always answers"
    return finding
