"""The one entry into the engine: an object being admitted in, a Decision out.

Every shell goes through here: the admission server calls ``decide`` for the stage its path
serves, ``gpupool check`` and workload-template validation call ``review``, which runs both
stages in the order the API server does (for a pod being created, both kept as one pair per
pod shape). Which kinds, operations and policy switches apply is decided in this module
alone, so an offline answer cannot differ from an online one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from webhook.api.said import said
from webhook.engine.access import schedulerstate
from webhook.engine.admission import pods, workloads
from webhook.engine.core import objects, patch
from webhook.engine.core.decision import Decision, Reason, allow, deny, joined
from webhook.engine.core.policy import Policy, WorkloadTemplates
from webhook.engine.pod import podclaims
from webhook.engine.pod.podfacts import PodFacts, decision_metadata, who_of
from webhook.engine.view.cluster import ClusterView
from webhook.engine.wording.words import words


class Stage(StrEnum):
    """The two admission stages; the value is the path segment and the audit record's
    ``endpoint``."""

    MUTATE = "mutate"
    VALIDATE = "validate"


class Subject(NamedTuple):
    """What is being admitted, as an AdmissionReview request describes it. (A named tuple:
    one is built for every review, and a frozen dataclass costs several times more.)"""

    kind: str
    group: str = ""
    operation: str = "CREATE"
    object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    namespace: str | None = None
    sub_resource: str = ""
    #: who sends it (the request's ``userInfo.username``; "" offline)
    user: str = ""

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Subject:
        """A manifest as ``kubectl create`` would send it (namespace ``default`` if unset)."""
        kind = obj.get("kind")
        return cls(kind=kind if isinstance(kind, str) else "",
                   group=workloads.group_of(obj.get("apiVersion")), object=obj,
                   namespace=objects.meta_of(obj).get("namespace") or "default")

    @property
    def is_pod(self) -> bool:
        return self.kind == "Pod" and self.group == "" and not self.sub_resource

    @property
    def is_workload(self) -> bool:
        return workloads.is_workload(self.group, self.kind) and not self.sub_resource

    @property
    def type_name(self) -> str:
        name = f"{self.group + '/' if self.group else ''}{self.kind}"
        return name + (f"/{self.sub_resource}" if self.sub_resource else "")


#: what the entry says of what it leaves alone, and of a workload whose pods pass
POD_UPDATE = said("admit.podUpdate")
TEMPLATE_UNCHANGED = said("admit.templateUnchanged")
PODS_ADMITTED = said("workload.podsAdmitted")


def handles(stage: Stage, subject: Subject) -> bool:
    """Whether gpupool's webhook for ``stage`` is registered for this kind (manifests/)."""
    return subject.is_pod or (stage is Stage.VALIDATE and subject.is_workload)


def decide(stage: Stage, subject: Subject, view: ClusterView | None, policy: Policy
           ) -> Decision:
    is_pod = subject.is_pod
    if not is_pod and not handles(stage, subject):
        # A webhook rule that sends us other kinds is a configuration slip: blocking
        # unrelated objects over it would be worse than letting them through, loudly.
        unhandled = {"stage": stage.value, "kind": subject.type_name}
        return allow(Reason.KIND_NOT_HANDLED,
                     message=words(said("admit.kindNotHandled", **unhandled)),
                     warnings=(words(said("admit.kindNotHandledWarning", **unhandled)),))
    if subject.operation not in ("CREATE", "UPDATE"):
        return allow(Reason.NOT_A_POD,
                     message=words(said("admit.notChecked", operation=subject.operation)))
    # (a dict is tested first: an ABC's test is a Python call, and every review asks)
    obj = subject.object if isinstance(subject.object, (dict, Mapping)) else {}
    if is_pod:
        update = subject.operation != "CREATE"
        old = (subject.old_object if isinstance(subject.old_object, Mapping) else {}) \
            if update else None
        forged = schedulerstate.forged(obj, old, subject.user,
                                       policy.access.scheduler_identities)
        if forged:
            return _forged(forged, obj, subject, policy)
        if update:
            return allow(Reason.NOT_A_POD, message=words(POD_UPDATE))
        return _pod_stage(stage, obj, subject.namespace, view, policy)
    if subject.operation == "UPDATE" and isinstance(subject.old_object, Mapping) and \
            workloads.same_template(obj, subject.old_object, subject.kind):
        # Labels, replicas, status...: blocking them would not fix any pod.
        return allow(Reason.NOT_GPU_POD, message=words(TEMPLATE_UNCHANGED))
    return _validate_workload(obj, subject, view, policy)


def _forged(keys: tuple[str, ...], obj: Mapping[str, Any], subject: Subject, policy: Policy
            ) -> Decision:
    """HAMi's scheduler-owned annotations set by someone else (``schedulerstate``)."""
    creating = subject.operation == "CREATE"
    return deny(Reason.FORGED_ALLOCATION,
                words(said("admit.forged", keys=keys, creating=creating,
                           writers=tuple(policy.access.scheduler_identities),
                           sender=subject.user)),
                of_subject=True,
                # (denied before routing: whether it is a GPU pod is still its own fact)
                gpu=PodFacts.parse(obj, subject.namespace, policy).is_gpu_pod
                ).about(who_of(obj, subject.namespace))


def _pod_stage(stage: Stage, obj: Mapping[str, Any], namespace: str | None,
               view: ClusterView | None, policy: Policy) -> Decision:
    """One stage for one pod, decided once per pod shape while the view stands.

    The replicas of a workload differ in their names and in labels no rule reads (as do
    the pods of a CronJob's Jobs): the first is decided in full and the rest are told its
    decision, which names no pod (``Decision.about`` names each). The decision is kept in
    the view (``ClusterView.until_any_change``) under the view's version and its
    ResourceSlices': any change a decision reads starts it over. Claims change without the
    view's version (one per pod made from a template), so a pod with resourceClaims is kept
    under what the claims it names ask, as the view holds them now: a claim created, changed
    or allocated is another shape."""
    decide_facts = pods.mutate if stage is Stage.MUTATE else pods.validate
    if view is None:
        return decide_facts(PodFacts.parse(obj, namespace, policy, view), view, policy).about(
            who_of(obj, namespace))
    key, shape = _shape_key(stage._value_, obj, namespace, view, policy)
    kept = view.until_any_change(key, _decided, decide_facts, shape, namespace, view, policy)
    return kept.about(who_of(obj, namespace))


def _shape_key(what: str, obj: Mapping[str, Any], namespace: str | None, view: ClusterView,
               policy: Policy) -> tuple[tuple[str, str, object, str | None, bytes],
                                        Mapping[str, Any]]:
    """The key ``what`` is kept under for a pod (a stage's decision, or both stages'), and
    the pod's shape that is decided: the pod as far as any decision reads it."""
    spec = obj.get("spec")
    claims = podclaims.claims_key(spec, namespace, view).encode() \
        if isinstance(spec, dict) and spec.get("resourceClaims") else b""
    # Its name only says which pod it is about, and labels and annotations no rule reads
    # are not part of it (a Job's pods, each Job's, are one shape). What is decided is
    # that, so the decision kept is its own.
    meta = obj.get("metadata")
    shape = {**obj, "metadata": decision_metadata(meta, policy)} \
        if isinstance(meta, dict) else obj
    # (a digest: thousands of kept shapes must not each hold a copy of their pod)
    # (SHA-256: collision-proof as the key must be, and the fastest such hash here, where
    # the CPU computes it)
    h = hashlib.sha256(objects.json_bytes(shape))
    if claims:
        h.update(claims)
    # (every part a str, an int or bytes: hashed and compared in C, so the view's lookup
    # without a lock is one step under the GIL; a stage's ``_value_``, as ``.value`` is a
    # Python-level property on every review)
    return ("pod", what, policy.cache_key, namespace, h.digest()[:16]), shape


def _decided(decide_facts: Callable[[PodFacts, ClusterView | None, Policy], Decision],
             shape: Mapping[str, Any], namespace: str | None, view: ClusterView,
             policy: Policy) -> Decision:
    """A pod shape's decision, as admission keeps it for every pod of the shape."""
    return decide_facts(PodFacts.parse(shape, namespace, policy, view), view, policy)


def decide_pod(stage: Stage, pod: Mapping[str, Any], namespace: str | None,
               view: ClusterView | None, policy: Policy) -> Decision:
    """One stage for one Pod being created: ``decide`` as a pod's review reaches it."""
    return decide(stage, Subject(kind="Pod", object=pod, namespace=namespace), view, policy)


@dataclass
class Review:
    """Both stages of one object, as the API server runs them. ``validation`` is None when
    it has nothing to add: its webhook is not registered for the kind, or the mutation
    already decided (a denial, a pod gpupool leaves alone)."""

    mutation: Decision | None
    validation: Decision | None

    @property
    def final(self) -> Decision:
        """What the user sees: the mutation's decision when validation did not run, else the
        mutation's routing with the validation's verdict, findings and both stages'
        warnings."""
        m, v = self.mutation, self.validation
        if v is None:
            assert m is not None, "neither stage handles this kind"
            return m
        if m is None:
            return v
        said = m if v.allowed else v
        return v._replace(reason=said.reason, statement=said.statement, pool=m.pool,
                          scheduler_name=m.scheduler_name, patch=m.patch,
                          warnings=joined(m.warnings, v.warnings),
                          of_subject=said.of_subject, subject=said.subject)


def review(subject: Subject, view: ClusterView | None, policy: Policy) -> Review:
    """Both stages, as the API server would run them for ``subject``. A pod being created
    (a workload's template, a manifest checked) goes to ``_pod_stage`` at both stages, so
    both are decided, and kept, as one: the pod validated is the shape with the mutation's
    patch, itself a function of the shape, so the pair is a function of the shape too. One
    key and one lookup for the pair, and none of the patched pod's, where two stages would
    take two of each (tests/integration/test_cache_equivalence.py holds the pair to what the
    two served stages answer)."""
    obj = subject.object
    if view is not None and subject.is_pod and subject.operation == "CREATE" and \
            isinstance(obj, (dict, Mapping)) and not schedulerstate.forged(
                obj, None, subject.user, policy.access.scheduler_identities):
        namespace = subject.namespace
        key, shape = _shape_key("review", obj, namespace, view, policy)
        mutation, validation = view.until_any_change(key, _reviewed, shape, namespace, view,
                                                     policy)
        who = who_of(obj, namespace)
        return Review(mutation.about(who),
                      validation.about(who) if validation is not None else None)
    m = decide(Stage.MUTATE, subject, view, policy) if handles(Stage.MUTATE, subject) else None
    if m is not None and _ends_review(m):
        return Review(m, None)
    if m is not None and m.patch and isinstance(obj, (dict, Mapping)):
        s = subject
        subject = Subject(s.kind, s.group, s.operation, patch.apply(obj, m.patch),
                          s.old_object, s.namespace, s.sub_resource)
    v = decide(Stage.VALIDATE, subject, view, policy) \
        if handles(Stage.VALIDATE, subject) else None
    return Review(m, v)


def _ends_review(mutation: Decision) -> bool:
    """Validation would only repeat this mutation's decision: a denial, a pod that is not a
    GPU pod, or one another scheduler takes."""
    return not mutation.allowed or not mutation.gpu or \
        mutation.reason == Reason.CUSTOM_SCHEDULER


def _reviewed(shape: Mapping[str, Any], namespace: str | None, view: ClusterView,
              policy: Policy) -> tuple[Decision, Decision | None]:
    """Both stages of a pod shape, as ``review`` keeps them for every pod of the shape."""
    m = _decided(pods.mutate, shape, namespace, view, policy)
    if _ends_review(m):
        return m, None
    patched = patch.apply(shape, m.patch) if m.patch else shape
    return m, _decided(pods.validate, patched, namespace, view, policy)


def review_pod(pod: Mapping[str, Any], namespace: str | None, view: ClusterView | None,
               policy: Policy) -> Decision:
    """What a user sees when creating ``pod`` in ``namespace``."""
    return review(Subject(kind="Pod", object=pod, namespace=namespace), view, policy).final


def _validate_workload(obj: Mapping[str, Any], subject: Subject, view: ClusterView | None,
                       policy: Policy) -> Decision:
    """Decide on a workload as its pods would be decided; deny or warn per policy.

    The decision's patch is what gpupool's /mutate will give each pod, placed at the pod
    template's path: it is never sent (a validating reply carries no patch), but ``check``
    shows it so a user can see, and apply, what the pods will get."""
    kind, namespace = subject.kind, subject.namespace
    pod = workloads.template_pod(obj, kind, namespace)
    if pod is None or policy.workload_templates is WorkloadTemplates.OFF:
        return allow(Reason.NOT_GPU_POD)
    inner = review_pod(pod, namespace, view, policy)
    who = objects.describe(obj, namespace, kind)
    template_patch = workloads.template_patch(obj, kind, inner.patch)
    if inner.allowed:
        return allow(inner.reason, gpu=inner.gpu, pool=inner.pool,
                     scheduler_name=inner.scheduler_name, nodes=inner.nodes,
                     patch=template_patch, message=words(PODS_ADMITTED), of_subject=True,
                     warnings=inner.warnings).about(who)
    message = words(said("workload.podsDenied", message=inner.message))
    if policy.workload_templates is WorkloadTemplates.WARN:
        return allow(inner.reason, gpu=True, pool=inner.pool, message=message,
                     of_subject=True, nodes=inner.nodes, scheduler_name=inner.scheduler_name,
                     warnings=(words(said("workload.podsDeniedWarning", kind=kind,
                                          reason=str(inner.reason))),)).about(who)
    return deny(inner.reason, message, of_subject=True, gpu=True, pool=inner.pool,
                nodes=inner.nodes, scheduler_name=inner.scheduler_name).about(who)
