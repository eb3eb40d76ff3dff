"""Deciding one Pod, for one admission stage (``webhook.engine.admission.admit`` picks the stage).

``mutate`` routes a GPU pod to its pool (scheduler, node affinity, HAMi opt-out label, pool
annotation). ``validate`` checks the object as it stands after *every* mutating webhook ran,
because HAMi's webhook may run after ours and rewrite what we set.
"""

from __future__ import annotations

from dataclasses import replace

from webhook.api.said import said
from webhook.engine.access import grants
from webhook.engine.admission import steering
from webhook.engine.checks import allocation, registry, resourcenames
from webhook.engine.checks import cdi as cdi_needs
from webhook.engine.core import patch
from webhook.engine.core.decision import Decision, Reason, allow, deny
from webhook.engine.core.policy import (
    HAMI_DRA_LABEL,
    HAMI_IGNORE_LABEL,
    HAMI_IGNORE_VALUE,
    POOL_ANNOTATION,
    OnFinding,
    Policy,
)
from webhook.engine.placement import routing
from webhook.engine.pod import affinity
from webhook.engine.pod.podfacts import DEFAULT_SCHEDULER, PodFacts
from webhook.engine.view.cluster import ClusterView
from webhook.engine.wording.words import words


def _prelude(facts: PodFacts, view: ClusterView | None, policy: Policy
             ) -> tuple[Decision | None, routing.Route | None]:
    """Shared first steps: GPU pod? custom scheduler? which pool? Returns an early decision,
    or the route for the caller to act on."""
    if not facts.is_gpu_pod and not routing.routed_classes(facts, policy):
        unresolved = facts.claims.unresolved if policy.serves_dra else ()
        d = allow(Reason.NOT_GPU_POD, warnings=tuple(
            words(said("pod.claimNotFound", ref=ref)) for ref in unresolved))
        # (a misspelt GPU resource is what most often makes a GPU pod "not a GPU pod")
        return (_unknown_resources(d, facts, view, policy) or d
                if facts.resources else d), None
    scheduler = facts.scheduler
    if scheduler != DEFAULT_SCHEDULER and scheduler not in policy.schedulers:
        return allow(Reason.CUSTOM_SCHEDULER, gpu=True, scheduler_name=scheduler,
                     message=words(said("pod.customScheduler", scheduler=scheduler)),
                     of_subject=True,
                     warnings=(words(said("pod.notRouted", scheduler=scheduler)),)), None
    r = routing.route(facts, view, policy)
    if r.denial is not None:
        reason, finding = r.denial
        rewritten = facts.labels.get(HAMI_DRA_LABEL) == "true"
        return deny(reason, words(said("pod.routeDenied", finding=finding, hami_dra=rewritten)),
                    of_subject=True, gpu=True, pool=r.pool), r
    return None, _first_allocatable_alternative(facts, view, policy, r)


def _first_allocatable_alternative(facts: PodFacts, view: ClusterView | None, policy: Policy,
                                   r: routing.Route) -> routing.Route:
    """A pod routed by its claims' DeviceClasses whose ``firstAvailable`` alternatives name
    classes of several pools goes where the scheduler would allocate it: on a node it tries
    the alternatives in order and takes the first that fits, so the pool of the first
    alternative some node there can allocate (issue 35, item 1), not merely the first
    alternative's pool. Nothing changes where the pool came from other evidence, or where
    no pool can allocate it (its checks then say so). Another pool is a new Route."""
    order = r.alternatives
    if view is None or not r.by_claims or len(order) < 2 or r.pool != order[0]:
        return r
    for pool in order:
        if r.admitted and pool not in r.admitted:
            continue
        if allocation.can_allocate(facts, pool, view, policy):
            if pool != r.pool:
                return replace(r, pool=pool, source=said("evidence.firstAlternative",
                                                         pool=pool), warnings=list(r.warnings))
            return r
    return r


def _with_access(d: Decision, facts: PodFacts, view: ClusterView | None, policy: Policy,
                 mutating: bool) -> Decision:
    """The decision so far, joined by what the pod's containers without a GPU grant get
    (``grants``): unchanged where none could get a GPU, else voided, warned or denied."""
    if not d.allowed:
        return d
    e = grants.exposure(facts, view, policy)
    if e is None:
        return d
    return _joined(d, grants.finding(facts, e, policy, mutating))


def _joined(base: Decision, a: grants.Finding) -> Decision:
    """The decision so far (a routed GPU pod's, or one that asks for no GPU) joined by the
    access rule's finding: replaced by its denial, or told what it warns or voids."""
    if a.outcome is grants.Outcome.DENIED or a.outcome is grants.Outcome.UNDONE:
        text = said("access.denied", exposed=a.exposed) if a.outcome is grants.Outcome.DENIED \
            else said("access.undone", exposed=a.exposed)
        return deny(Reason.GPU_NOT_GRANTED, words(text), of_subject=True, gpu=base.gpu,
                    pool=base.pool, scheduler_name=base.scheduler_name)
    if a.outcome is grants.Outcome.WARNED:
        statement = words(said("access.warned", statement=base.statement, exposed=a.exposed))
        told = base.saying(statement) if base.statement else \
            base.saying(statement, of_subject=True)
        return told.warned(words(said("access.warning", count=a.counted)))
    voided = base._replace(patch=(*base.patch, *a.ops))
    statement = words(said("access.voided", statement=base.statement if base.gpu else None,
                           exposed=a.exposed))
    voided = voided.saying(statement) if base.gpu \
        else voided.saying(statement, of_subject=True)._replace(reason=Reason.ACCESS_VOIDED)
    return voided.warned(words(said("access.voidedWarning", count=a.counted)))


def mutate(facts: PodFacts, view: ClusterView | None, policy: Policy) -> Decision:
    early, r = _prelude(facts, view, policy)
    if early is not None:
        return _with_access(early, facts, view, policy, True)
    assert r is not None and r.pool is not None
    pool = policy.by_name[r.pool]
    spec = facts.spec
    reason, message = Reason.ROUTED, said("pod.routed", pool=pool.name, source=r.source)
    warnings = [words(w) for w in r.warnings] if r.warnings else []
    # (read by the patch builders, copied only to be written: a pod without metadata, or
    # one given as another kind of mapping, which they read as a dict)
    obj = facts.obj if type(facts.obj) is dict else dict(facts.obj)
    ops: list[patch.Op] = []
    if not facts.has_metadata:
        obj = {**obj, "metadata": {}}
        ops.append(patch.add("/metadata", {}))
    if not policy.is_hami_pool(pool.name):
        ops += patch.set_map_entry(obj, ("metadata", "labels"), HAMI_IGNORE_LABEL,
                                   HAMI_IGNORE_VALUE)
    elif HAMI_IGNORE_LABEL in facts.labels:
        # gpupool owns this label on the pods it routes: set by the user on a pod of HAMi's
        # pool, it would turn HAMi's webhook off for it (HAMi #3041)
        ops.append(patch.remove(patch.pointer("metadata", "labels", HAMI_IGNORE_LABEL)))
        warnings.append(words(said("pod.ignoreLabelRemoved", pool=pool.name)))
    ops += patch.set_map_entry(obj, ("metadata", "annotations"), POOL_ANNOTATION, pool.name)
    current = facts.scheduler_field
    if current != pool.scheduler_name:
        if isinstance(current, str) and current not in ("", DEFAULT_SCHEDULER):
            warnings.append(words(said("pod.schedulerReplaced", current=current,
                                       scheduler=pool.scheduler_name, pool=pool.name)))
        op = patch.replace if "schedulerName" in spec else patch.add
        ops.append(op("/spec/schedulerName", pool.scheduler_name))
    repair = cdi_needs.repair_class(facts, pool.name, view, policy) \
        if view is not None else None
    if repair is not None:
        # Under that class no CDI device is used: nothing to steer the pod off.
        steer: list[affinity.Requirement] = []
        ops.append(patch.add("/spec/runtimeClassName", repair))
        reason = Reason.REPAIRED
        message = said("pod.repaired", pool=pool.name, source=r.source, runtime_class=repair)
        warnings.append(words(said("pod.repairedWarning", runtime_class=repair)))
    else:
        steer, steering_warnings = steering.requirements(facts, pool.name, view, policy)
        warnings += steering_warnings
    ops += affinity.affinity_patch({"spec": spec}, affinity.pool_expression(policy, pool.name),
                                   steer)
    d = allow(reason, gpu=True, pool=pool.name, scheduler_name=pool.scheduler_name,
              message=words(message), of_subject=True, patch=ops, warnings=warnings)
    return _with_access(d, facts, view, policy, True)


def validate(facts: PodFacts, view: ClusterView | None, policy: Policy) -> Decision:
    early, r = _prelude(facts, view, policy)
    if early is not None:
        if early.reason == Reason.EXCLUSIVE_RESOURCE_CONFLICT and r is not None:
            return _hami_resource_outside_pool(early, facts, policy, r)
        return early
    assert r is not None and r.pool is not None
    pool = policy.by_name[r.pool]
    scheduler = facts.scheduler
    if scheduler != pool.scheduler_name:
        return deny(Reason.SCHEDULER_MISMATCH,
                    words(said("pod.schedulerMismatch", pool=pool.name, source=r.source,
                               current=facts.scheduler_field, wanted=pool.scheduler_name)),
                    of_subject=True, gpu=True, pool=pool.name, scheduler_name=scheduler)
    admitted = r.admitted
    node = view.node(facts.node_name) if view is not None and facts.node_name else None
    on_pool_node = node is not None and node.pool(policy) == pool.name
    if admitted != frozenset({pool.name}) and not on_pool_node:
        return deny(Reason.AFFINITY_MISMATCH,
                    words(said("pod.affinityMismatch", pool=pool.name,
                               others=tuple(sorted(admitted - {pool.name})))),
                    of_subject=True, gpu=True, pool=pool.name, scheduler_name=scheduler)
    d = allow(Reason.ROUTED, gpu=True, pool=pool.name, scheduler_name=scheduler,
              message=words(said("pod.stays", pool=pool.name)), of_subject=True,
              warnings=[words(w) for w in r.warnings] if r.warnings else ())
    unknown = _unknown_resources(d, facts, view, policy)
    if unknown is not None:
        # No node serves it: the pod is never placed, so no node's devices are judged.
        return unknown
    for check in registry.POD_CHECKS:
        if check.needs_view and view is None:
            continue
        found = registry.decide(check, facts, pool.name, view, policy)
        if found is None:
            continue
        if not found.allowed:  # a denial ends validation
            return found._replace(scheduler_name=scheduler)
        d = registry.join(d, found)
    return _with_access(d, facts, view, policy, False)


def _unknown_resources(d: Decision, facts: PodFacts, view: ClusterView | None,
                       policy: Policy) -> Decision | None:
    """The decision so far, told of the resource names the pod asks for that look like GPU
    resources but that nothing serves (``resourcenames``): denied where the policy says so
    and gpupool sees the cluster, else warned. None: there are none."""
    unknown = resourcenames.unknown(facts, view, policy)
    if not unknown:
        return None
    if policy.on_unknown_gpu_resource is OnFinding.DENY and view is not None:
        return deny(Reason.UNKNOWN_GPU_RESOURCE,
                    words(said("pod.unknownResource", unknown=unknown)), of_subject=True,
                    gpu=d.gpu, pool=d.pool, scheduler_name=d.scheduler_name)
    return d.warned(words(said("pod.unknownResourceWarning", unknown=unknown)))


def _hami_resource_outside_pool(early: Decision, facts: PodFacts, policy: Policy,
                                r: routing.Route) -> Decision:
    """Name the usual culprit when a pod pinned outside HAMi's pool carries HAMi-only asks."""
    for hp in (p for p in policy.pools if policy.is_hami_pool(p.name)):
        hits = sorted(set(hp.exclusive_resources) & facts.gpus)
        if hits and r.pool is not None and r.pool != hp.name:
            return deny(Reason.HAMI_RESOURCE_OUTSIDE_POOL,
                        words(said("pod.hamiResourceOutsidePool", pool=r.pool,
                                   source=r.source, hits=tuple(hits), hami_pool=hp.name)),
                        of_subject=True, gpu=True, pool=r.pool)
    return early
