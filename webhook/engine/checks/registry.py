"""The checks a routed GPU pod goes through at validation, as one list.

Each check answers one question for the whole pod (its findings on every candidate node
already summed up) and declares how an allowed answer joins the pod's decision. A denial
always ends validation: the first one is the answer. Adding a check is its module and one
line here; what each check asks of every node is ``nodechecks``' list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from webhook.engine.checks import allocation, cdi, usernamespace
from webhook.engine.core.decision import Decision, with_warnings
from webhook.engine.core.policy import Policy
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView


def warnings_only(d: Decision, found: Decision) -> Decision:
    """An allowed answer lends the pod's decision its warnings, nothing else."""
    return d.warned(*found.warnings)


def findings(d: Decision, found: Decision) -> Decision:
    """An allowed answer lends its nodes, its message, why it went unchecked, and warnings."""
    said = found if found.statement else d
    return replace(d, nodes=d.nodes + found.nodes, statement=said.statement,
                   of_subject=said.of_subject, unchecked=found.unchecked or d.unchecked,
                   warnings=with_warnings(d.warnings, found.warnings))


@dataclass(frozen=True)
class PodCheck:
    name: str
    #: (facts, pool, view, policy) -> a denial, an allowed answer to merge, or None
    decide: Callable[[PodFacts, str, ClusterView | None, Policy], Decision | None]
    #: (the pod's decision so far, the allowed answer) -> the pod's decision
    merge: Callable[[Decision, Decision], Decision]
    #: it judges nodes, so it has nothing to say without a cluster view
    needs_view: bool = True


def _cdi(facts: PodFacts, pool: str, view: ClusterView | None, policy: Policy
         ) -> Decision | None:
    assert view is not None
    return cdi.cdi_decision(facts, pool, view, policy)


def _dra(facts: PodFacts, pool: str, view: ClusterView | None, policy: Policy
         ) -> Decision | None:
    assert view is not None
    return allocation.dra_decision(facts, pool, view, policy)


POD_CHECKS: tuple[PodCheck, ...] = (
    PodCheck("user namespace", usernamespace.decide, warnings_only, needs_view=False),
    PodCheck("device delivery (device plugin, CDI, NRI, MIG, cordon)", _cdi, findings),
    PodCheck("DRA allocation", _dra, findings),
)
