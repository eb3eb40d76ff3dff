"""Deciding one Pod, for one admission stage (``webhook.engine.admission.admit`` picks the stage).

``mutate`` routes a GPU pod to its pool (scheduler, node affinity, HAMi opt-out label, pool
annotation). ``validate`` checks the object as it stands after *every* mutating webhook ran,
because HAMi's webhook may run after ours and rewrite what we set.
"""

from __future__ import annotations

from dataclasses import replace

from webhook.engine.access import grants
from webhook.engine.admission import steering
from webhook.engine.checks import allocation, registry
from webhook.engine.checks import cdi as cdi_needs
from webhook.engine.core import objects, patch
from webhook.engine.core.decision import Decision, Reason, allow, deny
from webhook.engine.core.policy import (
    HAMI_DRA_LABEL,
    HAMI_IGNORE_LABEL,
    HAMI_IGNORE_VALUE,
    POOL_ANNOTATION,
    Policy,
)
from webhook.engine.placement import routing
from webhook.engine.pod import affinity
from webhook.engine.pod.podfacts import DEFAULT_SCHEDULER, PodFacts
from webhook.engine.view.cluster import ClusterView

HAMI_DRA_REWRITE = (
    ". HAMi-DRA's webhook rewrote this pod's GPU resources into ResourceClaims of its own "
    "DeviceClass (label hami.io/dra=true) after gpupool had routed it, so it can only run on "
    "HAMi's DRA nodes; keep HAMi-DRA's webhook to HAMi's namespaces "
    "(webhook.config.scope.excludedNamespaces in its chart) or label the pod "
    "gpupool.io/pool with HAMi's pool")
WEBHOOK_ORDER_FIX = ("name gpupool's MutatingWebhookConfiguration so it sorts before "
                     "hami-webhook and keep reinvocationPolicy: IfNeeded")


def _prelude(facts: PodFacts, view: ClusterView | None, policy: Policy
             ) -> tuple[Decision | None, routing.Route | None]:
    """Shared first steps: GPU pod? custom scheduler? which pool? Returns an early decision,
    or the route for the caller to act on."""
    if not facts.is_gpu_pod and not routing.routed_classes(facts, policy):
        unresolved = facts.claims.unresolved if policy.serves_dra else ()
        return allow(Reason.NOT_GPU_POD, warnings=(
            f"gpupool: {ref} not found; if it asks for GPUs, the pod is not routed to a GPU "
            "pool" for ref in unresolved)), None
    scheduler = facts.scheduler
    if scheduler != DEFAULT_SCHEDULER and scheduler not in policy.schedulers:
        return allow(Reason.CUSTOM_SCHEDULER, gpu=True, scheduler_name=scheduler,
                     message=f" uses scheduler {objects.clip(scheduler)}; gpupool leaves it "
                             "alone", of_subject=True,
                     warnings=(f"gpupool: scheduler {scheduler} is not a pool's; pod not "
                               "routed to a GPU pool",)), None
    r = routing.route(facts, view, policy)
    if r.denial is not None:
        reason, message = r.denial
        if facts.labels.get(HAMI_DRA_LABEL) == "true":
            message += HAMI_DRA_REWRITE
        return deny(reason, f": {message}", of_subject=True, gpu=True, pool=r.pool), r
    return None, _first_allocatable_alternative(facts, view, policy, r)


def _first_allocatable_alternative(facts: PodFacts, view: ClusterView | None, policy: Policy,
                                   r: routing.Route) -> routing.Route:
    """A pod routed by its claims' DeviceClasses whose ``firstAvailable`` alternatives name
    classes of several pools goes where the scheduler would allocate it: on a node it tries
    the alternatives in order and takes the first that fits, so the pool of the first
    alternative some node there can allocate (issue 35, item 1), not merely the first
    alternative's pool. Nothing changes where the pool came from other evidence, or where
    no pool can allocate it (its checks then say so). Another pool is a new Route."""
    if view is None or r.pool is None or not r.source.startswith("DeviceClass "):
        return r
    order = r.alternatives
    if len(order) < 2 or r.pool != order[0]:
        return r
    for pool in order:
        if r.admitted and pool not in r.admitted:
            continue
        if allocation.can_allocate(facts, pool, view, policy):
            if pool != r.pool:
                return replace(r, pool=pool, source=(
                    f"the first firstAvailable alternative a node of pool {pool!r} can "
                    "allocate"), warnings=list(r.warnings))
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
    return grants.decision(facts, e, policy, mutating, d)


def mutate(facts: PodFacts, view: ClusterView | None, policy: Policy) -> Decision:
    early, r = _prelude(facts, view, policy)
    if early is not None:
        return _with_access(early, facts, view, policy, True)
    assert r is not None and r.pool is not None
    pool = policy.by_name[r.pool]
    spec = facts.spec
    reason, message = Reason.ROUTED, f" routed to pool {pool.name} (by {r.source})"
    warnings = list(r.warnings)
    obj = dict(facts.obj)
    ops: list[patch.Op] = []
    if not facts.has_metadata:
        obj["metadata"] = {}
        ops.append(patch.add("/metadata", {}))
    if not policy.is_hami_pool(pool.name):
        ops += patch.set_map_entry(obj, ("metadata", "labels"), HAMI_IGNORE_LABEL,
                                   HAMI_IGNORE_VALUE)
    elif HAMI_IGNORE_LABEL in facts.labels:
        # gpupool owns this label on the pods it routes: set by the user on a pod of HAMi's
        # pool, it would turn HAMi's webhook off for it (HAMi #3041)
        ops.append(patch.remove(patch.pointer("metadata", "labels", HAMI_IGNORE_LABEL)))
        warnings.append(f"gpupool: label {HAMI_IGNORE_LABEL} removed: pool {pool.name} is "
                        "HAMi's, whose webhook must see the pod")
    ops += patch.set_map_entry(obj, ("metadata", "annotations"), POOL_ANNOTATION, pool.name)
    current = facts.scheduler_field
    if current != pool.scheduler_name:
        if isinstance(current, str) and current not in ("", DEFAULT_SCHEDULER):
            warnings.append(f"gpupool: schedulerName {current} replaced by "
                            f"{pool.scheduler_name} for pool {pool.name}")
        op = patch.replace if "schedulerName" in spec else patch.add
        ops.append(op("/spec/schedulerName", pool.scheduler_name))
    repair = cdi_needs.repair_class(facts, pool.name, view, policy) \
        if view is not None else None
    if repair is not None:
        # Under that class no CDI device is used: nothing to steer the pod off.
        steer: list[affinity.Requirement] = []
        ops.append(patch.add("/spec/runtimeClassName", repair))
        reason = Reason.REPAIRED
        message = (f" routed to pool {pool.name} (by {r.source}); "
                   f"runtimeClassName {repair} set: without it every candidate node would "
                   "fail it with 'unresolvable CDI devices' (cdi.repair)")
        warnings.append(f"gpupool: runtimeClassName {repair} set: its GPUs' CDI devices are "
                        "missing on every candidate node (cdi.repair)")
    else:
        steer, steering_warnings = steering.requirements(facts, pool.name, view, policy)
        warnings += steering_warnings
    ops += affinity.affinity_patch({"spec": spec}, affinity.pool_expression(policy, pool.name),
                                   steer)
    d = allow(reason, gpu=True, pool=pool.name, scheduler_name=pool.scheduler_name,
              message=message, of_subject=True, patch=ops, warnings=warnings)
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
                    f" is in pool {pool.name} (by {r.source}) but "
                    f"{_scheduler_cause(facts.scheduler_field, pool.scheduler_name)}",
                    of_subject=True, gpu=True, pool=pool.name, scheduler_name=scheduler)
    admitted = r.admitted
    node = view.node(facts.node_name) if view is not None and facts.node_name else None
    on_pool_node = node is not None and node.pool(policy) == pool.name
    if admitted != frozenset({pool.name}) and not on_pool_node:
        return deny(Reason.AFFINITY_MISMATCH,
                    f" is in pool {pool.name} but its node affinity also allows pools "
                    f"{', '.join(sorted(admitted - {pool.name})) or 'none'}: the gpupool "
                    f"mutating webhook did not run on it; check its webhook configuration "
                    f"(objectSelector, matchConditions, failurePolicy)",
                    of_subject=True, gpu=True, pool=pool.name, scheduler_name=scheduler)
    d = allow(Reason.ROUTED, gpu=True, pool=pool.name, scheduler_name=scheduler,
              message=f" stays in pool {pool.name}", of_subject=True, warnings=r.warnings)
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


def _scheduler_cause(current: object, wanted: str) -> str:
    """Why a pod reached validation unrouted, as far as the object itself tells."""
    if not isinstance(current, str) or not current:
        return (f"it has no spec.schedulerName, so it is not routed as its pool requires "
                f"({wanted}). The API server sets one on every pod, so this review did not "
                "come through the API server's mutating webhooks: it was sent by hand or by "
                "another tool; send the pod to /mutate first, or create it through the API "
                "server")
    if current == DEFAULT_SCHEDULER:
        return (f"its schedulerName is still {DEFAULT_SCHEDULER}, not {wanted}: it is not "
                "routed as its pool requires. Either gpupool's mutating webhook did not run "
                "on it (check its rules, objectSelector, matchConditions and failurePolicy "
                "Ignore with gpupool down) or a later mutating webhook reset the field; "
                f"{WEBHOOK_ORDER_FIX}")
    return (f"its schedulerName is {objects.clip(current)}, not {wanted}: another mutating "
            f"webhook changed it after gpupool; {WEBHOOK_ORDER_FIX}")


def _hami_resource_outside_pool(early: Decision, facts: PodFacts, policy: Policy,
                                r: routing.Route) -> Decision:
    """Name the usual culprit when a pod pinned outside HAMi's pool carries HAMi-only asks."""
    for hp in (p for p in policy.pools if policy.is_hami_pool(p.name)):
        hits = sorted(set(hp.exclusive_resources) & facts.gpus)
        if hits and r.pool is not None and r.pool != hp.name:
            return deny(Reason.HAMI_RESOURCE_OUTSIDE_POOL,
                        f" is in pool {r.pool} (by {r.source}) but "
                        f"carries {', '.join(hits)}, which only HAMi's pool {hp.name} serves. "
                        f"If the pod did not ask for it, HAMi's webhook added it before "
                        f"gpupool labelled the pod {HAMI_IGNORE_LABEL}={HAMI_IGNORE_VALUE}: "
                        f"{WEBHOOK_ORDER_FIX}; otherwise drop it or label the pod "
                        f"gpupool.io/pool={hp.name}",
                        of_subject=True, gpu=True, pool=r.pool)
    return early
