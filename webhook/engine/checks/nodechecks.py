"""The questions asked of every candidate node, as one list, and the cache key they imply.

Adding a node check is its module and one line here. The verdicts are kept per pod shape
(``ClusterView.fold``), so the key must hold every pod fact any check reads: it is derived
from the checks' own ``reads``, never written out by hand. Likewise a node stored again keeps
its findings only when every check's own ``node_key`` says it reads the same of it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from webhook.engine.checks import nriannotations, owndevices, plugindevices
from webhook.engine.checks.assessment import (
    FACTS,
    Ask,
    Combine,
    NodeAssessment,
    NodeCheck,
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


def reads(checks: Sequence[NodeCheck] = NODE_CHECKS) -> tuple[str, ...]:
    return tuple(sorted(set(FOLD_READS).union(*(c.reads for c in checks))))


#: the facts the registered checks read, worked out once
_READERS = tuple(FACTS[r] for r in reads())


def shape_key(facts: PodFacts, view: ClusterView,
              checks: Sequence[NodeCheck] = NODE_CHECKS) -> tuple[Hashable, ...]:
    """The pod's shape as far as the verdicts go: its placement and every fact read (each
    fact is hashable, so the key is a plain tuple)."""
    readers = _READERS if checks is NODE_CHECKS else tuple(FACTS[r] for r in reads(checks))
    return (facts.placement.key, *(read(facts, view) for read in readers))


def node_key(node: NodeInfo, view: ClusterView,
             checks: Sequence[NodeCheck] = NODE_CHECKS) -> Hashable | None:
    """Everything of the node the checks read, from their own ``node_key``: a node stored
    again with the same key gets the same findings, so a label that no check reads (the
    agent's steering labels, a team's own) does not make every fold judge the node anew.
    None for a node not built from its object (its devices unknown): never the same."""
    if node.devices is None:
        return None
    return tuple(c.node_key(node, view) for c in checks)


def prepared(ask: Ask, checks: Sequence[NodeCheck] = NODE_CHECKS
             ) -> tuple[tuple[NodeCheck, Any], ...]:
    """The checks that have something to ask of this pod, each with what it prepared."""
    return tuple((c, p) for c in checks if (p := c.prepare(ask)) is not None)


def judge(node: NodeInfo, ask: Ask, active: tuple[tuple[NodeCheck, Any], ...]
          ) -> NodeAssessment:
    """Every active check asked of one node, their findings combined as each declares."""
    finding: NodeAssessment | None = None
    for check, prep in active:
        found = check.assess(node, ask, prep, finding)
        if check.combine is Combine.FIRST or finding is None:
            finding = found
        elif check.combine is Combine.WORSE:
            finding = worse(finding, found)
        elif found is not None:
            finding = found
    assert finding is not None, "the first node check always answers"
    return finding
