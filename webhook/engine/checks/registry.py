"""The checks a routed GPU pod goes through at validation, as one list.

Each check answers one question for the whole pod (its findings on every candidate node
already summed up) with a ``PodFinding``, data that ``render`` alone puts into words
(``decide``). A denial always ends validation: the first one is the answer; an allowed
finding joins the pod's decision as every other does (``join``). Adding a check is its
module, its words in ``render`` and one line here; what each check asks of every node is
``nodechecks``' list (docs/checks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook.engine.checks import allocation, cdi, render, usernamespace
from webhook.engine.checks.findings import PodFinding
from webhook.engine.core.decision import Decision, joined
from webhook.engine.core.policy import Policy
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView


@dataclass(frozen=True)
class PodCheck:
    name: str
    #: (facts, pool, view, policy) -> what it found, or None (nothing to say)
    find: Callable[[PodFacts, str, ClusterView | None, Policy], PodFinding | None]
    #: it judges nodes, so it has nothing to say without a cluster view
    needs_view: bool = True


def decide(check: PodCheck, facts: PodFacts, pool: str, view: ClusterView | None,
           policy: Policy) -> Decision | None:
    """What ``check`` finds of the pod, as the decision ``render`` makes of it."""
    found = check.find(facts, pool, view, policy)
    return None if found is None else render.decision(found, policy, view)


def join(d: Decision, found: Decision) -> Decision:
    """The pod's decision with an allowed finding joined, the same for every check: its
    nodes added, its statement (where it makes one) in place of the decision's, why it went
    unchecked, and its warnings. A finding that should not speak for the pod makes no
    statement."""
    said = found if found.statement else d
    return d._replace(nodes=d.nodes + found.nodes, statement=said.statement,
                   of_subject=said.of_subject, unchecked=found.unchecked or d.unchecked,
                   warnings=joined(d.warnings, found.warnings))


def _cdi(facts: PodFacts, pool: str, view: ClusterView | None, policy: Policy
         ) -> PodFinding | None:
    assert view is not None
    return cdi.cdi_decision(facts, pool, view, policy)


def _dra(facts: PodFacts, pool: str, view: ClusterView | None, policy: Policy
         ) -> PodFinding | None:
    assert view is not None
    return allocation.dra_decision(facts, pool, view, policy)


POD_CHECKS: tuple[PodCheck, ...] = (
    PodCheck("user namespace", usernamespace.decide, needs_view=False),
    PodCheck("device delivery (device plugin, CDI, NRI, MIG, cordon)", _cdi),
    PodCheck("DRA allocation", _dra),
)
