"""One GPU pod, already admitted (or let through while the webhook was bypassed), judged as
the cluster stands now.

The answer is the validating stage's decision for the pod as stored (``admit.decide``):
gpupool's own routing is in the stored pod, so a pod it admitted passes the routing checks
again and only the node checks can change their mind; a pod created while gpupool was
bypassed fails the routing checks exactly as it would have at admission. What the decision
means depends on where the pod is: bound to a node, a denial there means its next container
start on that node fails; still pending, it means no node of its pool can ever take it. A
bound pod that holds its devices (it started, or the kubelet allocated them) is judged for
them by what it holds (``restart``): its restart gets the kubelet's cached answer again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.api.said import said
from webhook.engine.admission.admit import Stage, Subject, decide
from webhook.engine.aftercare.restart import restart_answer
from webhook.engine.checks.assessment import NodeState
from webhook.engine.core.decision import Decision, Reason
from webhook.engine.core.objects import as_mapping, meta_of
from webhook.engine.core.policy import ANY_WRITER, Policy, Ungranted
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView
from webhook.engine.wording.words import words


class Outcome(StrEnum):
    """What a re-check found; the value is what reports, Events and metrics carry. Add
    outcomes; never rename one."""

    FINE = "Fine"
    #: bound to a node that now fails it: the next container start there fails
    FAILS_ON_RESTART = "FailsOnRestart"
    #: its scheduler or pool pinning is not what the policy says (created while gpupool was
    #: bypassed, or changed by a webhook after it)
    MISROUTED = "Misrouted"
    #: pending for a scheduler with no live instance
    SCHEDULER_NOT_RUNNING = "SchedulerNotRunning"
    #: pending, and no node its pool and placement reach can ever start it
    NEVER_SCHEDULABLE = "NeverSchedulable"
    #: bound to a node gpupool cannot vouch for (its inventory unknown, the plugin's way
    #: only inferred): its next container start may fail; a warning, not a failure
    MAY_FAIL_ON_RESTART = "MayFailOnRestart"

    @property
    def at_risk(self) -> bool:
        """Known to fail, or to be misplaced: what reports mark ``fail``, Events and alerts
        name."""
        return self not in (Outcome.FINE, Outcome.MAY_FAIL_ON_RESTART)

    @property
    def doubtful(self) -> bool:
        return self is Outcome.MAY_FAIL_ON_RESTART


#: Admission denials that say the pod is not routed as the policy says (not about a node).
ROUTING_REASONS = frozenset({
    Reason.SCHEDULER_MISMATCH, Reason.AFFINITY_MISMATCH, Reason.HAMI_RESOURCE_OUTSIDE_POOL,
    Reason.POOL_CONFLICT, Reason.EXCLUSIVE_RESOURCE_CONFLICT, Reason.UNKNOWN_POOL})
_FINISHED = frozenset({"Succeeded", "Failed"})
#: Denials about what the device plugin's GPUs find on a node: for a pod that holds its
#: devices already, what it holds decides instead (``aftercare.restart``).
DEVICE_REASONS = frozenset({
    Reason.CDI_DEVICE_MISSING, Reason.GPU_NOT_DELIVERED, Reason.GPU_NOT_ACCOUNTED,
    Reason.UNKNOWN_DEVICE, Reason.INVENTORY_MISSING, Reason.NO_CANDIDATE_NODES,
    Reason.GPU_UUID_UNAVAILABLE})
_RESTART_OUTCOMES = {NodeState.OK: Outcome.FINE, NodeState.MISSING: Outcome.FAILS_ON_RESTART,
                     NodeState.UNKNOWN: Outcome.MAY_FAIL_ON_RESTART}


@dataclass(frozen=True)
class SchedulerState:
    """What the shell learned of one scheduler's instances (its leader-election Lease):
    ``running`` None when it cannot tell (no Lease: the scheduler may run without leader
    election), so no pod is reported waiting for it."""

    running: bool | None
    detail: str = ""


@dataclass(frozen=True)
class PodAnswer:
    namespace: str
    name: str
    uid: str
    node: str | None  # the node it is bound to (None: pending)
    pool: str | None
    scheduler: str | None
    outcome: Outcome
    reason: str  # the admission reason code (``Reason``) behind the outcome
    message: str
    missing: tuple[str, ...] = ()  # the devices its node lacks, when it is bound

    @property
    def key(self) -> tuple[str, str, str]:
        """What a report or Event says: when it is unchanged, nothing is written."""
        return self.outcome, self.reason, self.message

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid,
                "node": self.node, "pool": self.pool, "scheduler": self.scheduler,
                "outcome": self.outcome.value, "reason": self.reason,
                "message": self.message, "missing": list(self.missing)}


def as_admitted(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as its admission saw it: no decision reads its status."""
    return {k: v for k, v in pod.items() if k != "status"}


def finished(pod: Mapping[str, Any]) -> bool:
    """Succeeded, failed or being deleted: no later start can fail it."""
    return as_mapping(pod.get("status")).get("phase") in _FINISHED \
        or bool(meta_of(pod).get("deletionTimestamp"))


def restart_policy(policy: Policy) -> Policy:
    """The policy a running pod is re-judged under: whether its next container start gets
    its GPUs. Who wrote its annotations (HAMi's scheduler did, when it bound the pod) and
    which of its containers may reach GPUs were its admission's questions, answered then
    (docs/security.md), and no restart changes them."""
    access = dataclasses.replace(policy.access, ungranted=Ungranted.OFF,
                                 scheduler_identities=(ANY_WRITER,))
    return dataclasses.replace(policy, access=access)


def recheck(pod: Mapping[str, Any], view: ClusterView, policy: Policy,
            schedulers: Mapping[str, SchedulerState] | None = None) -> PodAnswer | None:
    """The answer for one pod; None for a pod gpupool does not judge (not a GPU pod, a
    custom scheduler's, finished or being deleted) or cannot judge yet (no node view)."""
    if finished(pod):
        return None
    meta = meta_of(pod)
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    rejudge = restart_policy(policy)
    d = decide(Stage.VALIDATE, Subject(kind="Pod", object=as_admitted(pod),
                                        namespace=namespace or "default"), view, rejudge)
    if not d.gpu or d.reason in (Reason.NOT_GPU_POD, Reason.CUSTOM_SCHEDULER,
                                 Reason.NODE_VIEW_MISSING):
        return None
    node = as_mapping(pod.get("spec")).get("nodeName")
    node = node if isinstance(node, str) and node else None
    outcome = _outcome(d, node, schedulers or {})
    message = d.message
    doubt = next((f.note for f in d.nodes if node and f.node == node and not f.missing
                  and f.note), "") if outcome is Outcome.FINE else ""
    if doubt:
        outcome = Outcome.MAY_FAIL_ON_RESTART
        message = words(said("risk.mayFail", namespace=namespace, name=meta.get("name"),
                             node=node, doubt=doubt))
    if outcome is Outcome.SCHEDULER_NOT_RUNNING:
        state = (schedulers or {})[str(d.scheduler_name)]
        message = words(said("risk.schedulerDown", namespace=namespace, name=meta.get("name"),
                             scheduler=d.scheduler_name, detail=state.detail))
    reason: str = {Outcome.SCHEDULER_NOT_RUNNING: Reason.SCHEDULER_NOT_RUNNING,
                   Outcome.MAY_FAIL_ON_RESTART: Reason.DEVICES_UNVERIFIED}.get(outcome, d.reason)
    missing = tuple(m for f in d.nodes if f.node == node for m in f.missing) if node else ()
    bound = view.node(node) if node else None
    if bound is not None and d.pool is not None and d.pool in policy.by_name and (
            d.allowed or d.reason in DEVICE_REASONS):
        # It holds its devices already (or will, the same, at its first start): what it
        # holds decides, not what the device plugin would hand a new pod.
        facts = PodFacts.parse(as_admitted(pod), namespace or "default", rejudge, view)
        restart = restart_answer(pod, facts, d.pool, bound, view, rejudge)
        if restart is not None:
            outcome = _RESTART_OUTCOMES[restart.state]
            reason, message, missing = restart.reason, words(restart.said), restart.missing
    return PodAnswer(namespace=namespace or "default", name=str(meta.get("name") or ""),
                     uid=str(meta.get("uid") or ""), node=node, pool=d.pool,
                     scheduler=d.scheduler_name, outcome=outcome, reason=str(reason),
                     message=message, missing=missing)


def _outcome(d: Decision, node: str | None, schedulers: Mapping[str, SchedulerState]
             ) -> Outcome:
    if not d.allowed:
        if d.reason in ROUTING_REASONS:
            return Outcome.MISROUTED
        return Outcome.FAILS_ON_RESTART if node else Outcome.NEVER_SCHEDULABLE
    if node is None and d.scheduler_name is not None:
        state = schedulers.get(d.scheduler_name)
        if state is not None and state.running is False:
            return Outcome.SCHEDULER_NOT_RUNNING
    return Outcome.FINE
