"""Which pool a GPU pod belongs to.

Evidence is taken in a fixed order: the pod's own label, where it is pinned (nodeName, then
nodeSelector/affinity on the pool label), its namespace's label, resources or annotations only
one pool serves, then the default pool. Later evidence never overrides earlier evidence, but
it is still checked against it: a pod whose label says one pool while its nodeSelector says
another cannot be placed without breaking one of them, so it is denied rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from webhook.api.said import Said, said
from webhook.engine.core.decision import Reason
from webhook.engine.core.policy import POOL_LABEL, Policy
from webhook.engine.pod import affinity
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import dra
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo

#: the evidence of a pod nothing else routes
DEFAULT_POOL = said("evidence.defaultPool")


@dataclass(slots=True)
class Route:
    """The pod's pool and the evidence for it, as data (``wording.words`` words the evidence,
    a denial's finding and the warnings)."""

    pool: str | None = None
    source: Said | None = None
    admitted: frozenset[str] = frozenset()  # pools the pod's selector/affinity allow
    denial: tuple[Reason, Said] | None = None
    warnings: list[Said] = field(default_factory=list)
    #: the pools that serve one alternative of every request of its claims, in the order
    #: the scheduler tries the alternatives (the first is where ``routed_classes`` routes)
    alternatives: tuple[str, ...] = ()
    #: the pool was taken from its claims' DeviceClasses, which only that pool serves
    by_claims: bool = False


def _exclusive_pools(facts: PodFacts, claimed: _DraRoutes, policy: Policy
                     ) -> dict[str, list[str]]:
    """pool -> the resources, annotations and claimed DeviceClasses in this pod that only
    that pool serves (``claimed``: what its claims say, ``_dra_routes``)."""
    found = _classes(claimed) if claimed.found else {}
    resources = facts.gpus & policy.exclusive_resources
    annotations = _exclusive_annotations(facts, policy) if facts.annotations else None
    if not resources and not annotations:
        return found  # (nearly every pod)
    for pool in policy.pools:
        inter = resources.intersection(pool.exclusive_resources)
        hits = sorted(inter) if inter else []
        if annotations:
            hits += sorted(f"annotation {a}" for a in annotations.intersection(
                pool.exclusive_annotations))
        if hits:
            found.setdefault(pool.name, []).extend(hits)
    return found


def _exclusive_annotations(facts: PodFacts, policy: Policy) -> frozenset[str]:
    """The pod's annotations some pool alone serves (``exclusiveAnnotations``)."""
    return policy.exclusive_annotations.intersection(facts.annotations) \
        if facts.annotations else frozenset()


class _DraRoutes(NamedTuple):
    #: pool -> the DeviceClasses that are its evidence
    found: dict[str, tuple[str, ...]]
    #: the pools that serve one alternative of every request, in the scheduler's order
    order: tuple[str, ...]


_NO_ROUTES = _DraRoutes({}, ())


def _dra_routes(facts: PodFacts, policy: Policy) -> _DraRoutes:
    """What the pod's claims' DeviceClasses say of its pool."""
    d = facts.claims
    if d is dra.NO_DEMAND:
        return _NO_ROUTES  # (nearly every pod)
    # per request, in the scheduler's order: (pool, class) for each alternative a pool
    # serves (requests no pool's class serves say nothing of the pool)
    requests = [tuple(r.device_class for r in alts)
                for claim in d.claims for alts in claim.spec.requests]
    requests += [(c,) for r, c in d.extended if r.startswith(dra.IMPLICIT_EXTENDED_PREFIX)]
    served = [pools for classes in requests
              if (pools := [(p, c) for c in classes
                            if (p := policy.pool_for_device_class(c)) is not None])]
    if not served:
        return _NO_ROUTES
    common = set.intersection(*({p for p, _ in s} for s in served))
    order = tuple(dict.fromkeys(p for p, _ in served[0] if p in common))
    found: dict[str, set[str]] = {}
    if order:  # each request's first alternative there is the one tried
        found[order[0]] = {f"DeviceClass {next(c for p, c in s if p == order[0])}"
                           for s in served}
    else:
        for s in served:
            for pool, cls in s:
                found.setdefault(pool, set()).add(f"DeviceClass {cls}")
    return _DraRoutes({k: tuple(sorted(v)) for k, v in found.items()}, order)


def routed_classes(facts: PodFacts, policy: Policy) -> dict[str, list[str]]:
    """pool -> the DeviceClasses of the pod's claims (and of the classes' implicit extended
    resources) that pool serves: evidence for routing as strong as a resource only one pool
    serves. An extended resource a class serves by ``extendedResourceName`` is not: a device
    plugin may serve the same name in another pool.

    A request with ``firstAvailable`` needs only one of its alternatives: the pod goes to a
    pool that serves one alternative of every request, the first such in the order the
    scheduler tries them (the first request's alternatives, in turn). Only when no pool
    serves them all does every pool's evidence come back, which routing then names as a
    conflict."""
    return _classes(_dra_routes(facts, policy))


def _classes(claimed: _DraRoutes) -> dict[str, list[str]]:
    return {k: list(v) for k, v in claimed.found.items()} if claimed.found else {}


def _serving_pools(resource: str, cls: str, view: ClusterView, policy: Policy
                   ) -> frozenset[str]:
    """The pools with a node that advertises ``resource`` through a device plugin, or whose
    ResourceSlices hold a device DeviceClass ``cls`` (which serves it) matches: a fold of the
    nodes (``ClusterView.fold``), kept current as nodes and their slices change."""
    device_class = (view.device_classes() or {}).get(cls)
    verdicts: dra.Verdicts = {}  # (kept with the fold: ``dra.match_slice``)

    def per_node(n: NodeInfo) -> str | None:
        if (n.allocatable and n.allocatable.get(resource)) or (
                device_class is not None
                and dra.class_has_devices(view.slices_for(n.name), device_class, verdicts)):
            return n.pool(policy)
        return None

    pools: frozenset[str] = view.fold(("pools serving", resource, cls, policy.cache_key),
                                      per_node, view.nodes, reads_slices=True
                                      ).derive(_pools)
    return pools


def _pools(values: dict[str, str]) -> frozenset[str]:
    return frozenset(values.values())


def _only_pool_serving(facts: PodFacts, view: ClusterView, policy: Policy
                       ) -> tuple[str, Said] | None:
    """(pool, evidence) when the resources a DeviceClass serves by ``extendedResourceName``
    (which the pod asks for) are served in one pool alone, that pool not being the default
    one: the default scheduler would place the pod there, and pinning it to the default
    pool would leave it pending forever (KEP-5004, HAMi-DRA's class)."""
    extended = facts.claims.extended
    if not extended:
        return None
    pools = frozenset.intersection(*(_serving_pools(r, c, view, policy) for r, c in extended))
    if len(pools) != 1 or policy.default_pool in pools:
        return None
    (pool,) = pools
    r, cls = extended[0]
    return pool, said("evidence.onlyServing", resource=r, pool=pool, device_class=cls)


def _bind(out: Route, pool: str, source: Said) -> bool:
    """Take the first evidence; later evidence must agree or the pod is denied. (A function
    of the route, not a closure over it: ``route`` would make one on every call.)"""
    if out.pool is None:
        out.pool, out.source = pool, source
        return True
    if pool != out.pool:
        out.denial = (Reason.POOL_CONFLICT,
                      said("route.conflict", source=source, pool=pool, bound=out.source,
                           bound_pool=out.pool))
        return False
    return True


def route(facts: PodFacts, view: ClusterView | None, policy: Policy) -> Route:
    """The pod's pool and the evidence for it."""
    namespace = facts.namespace
    placement = facts.placement
    out = Route()
    # 1. The pod's own label.
    label = facts.labels.get(POOL_LABEL)
    if label is not None:
        if not isinstance(label, str) or label not in policy.by_name:
            out.denial = (Reason.UNKNOWN_POOL,
                          said("route.unknownPool", label=label, pools=tuple(policy.pool_names)))
            return out
        _bind(out, label, said("evidence.label", pool=label))

    # 2. Where the pod is pinned: nodeName, then nodeSelector / required affinity.
    node_name = facts.node_name
    if node_name:
        node = view.node(node_name) if view is not None else None
        if node is None:
            out.warnings.append(said("route.nodeUnknown", node=node_name))
        elif node.is_gpu_node(policy):
            node_pool = node.pool(policy)
            if not _bind(out, node_pool, said("evidence.nodeName", node=node_name,
                                              pool=node_pool)):
                return out
    # DaemonSet pods are pinned by matchFields on metadata.name: as good as a nodeName.
    named = affinity.pinned_node_names(placement)
    if named and view is not None:
        nodes = [view.node(n) for n in named]
        pools = {n.pool(policy)
                 for n in nodes if n is not None and n.is_gpu_node(policy)}
        if len(pools) == 1 and all(n is not None for n in nodes):
            (node_pool,) = pools
            if not _bind(out, node_pool, said("evidence.nodeNames", nodes=tuple(named),
                                              pool=node_pool)):
                return out
    admitted = out.admitted = affinity.pools_admitted(placement, policy)
    if len(admitted) == 1:
        (pinned,) = admitted
        if not _bind(out, pinned, affinity.pool_constraint_source(placement, policy)):
            return out
    elif not admitted:
        out.denial = (Reason.POOL_CONFLICT,
                      said("route.noPoolAdmitted", key=policy.pool_label,
                           pools=tuple(policy.pool_names)))
        return out
    elif out.pool is not None and out.pool not in admitted:
        out.denial = (Reason.POOL_CONFLICT,
                      said("route.notAdmitted",
                           constraint=affinity.pool_constraint_source(placement, policy),
                           admitted=tuple(sorted(admitted)), bound=out.source,
                           bound_pool=out.pool))
        return out

    # 3. The namespace's label.
    if out.pool is None and namespace and view is not None:
        ns_labels = view.namespace_labels(namespace) or {}
        ns_pool = ns_labels.get(POOL_LABEL)
        if ns_pool is not None:
            if ns_pool in policy.by_name and ns_pool in admitted:
                _bind(out, ns_pool, said("evidence.namespace", namespace=namespace, pool=ns_pool))
            elif ns_pool not in policy.by_name:
                out.warnings.append(said("route.namespaceNoPool", namespace=namespace,
                                         pool=ns_pool))

    # 4. Resources or annotations only one pool serves.
    claimed = _dra_routes(facts, policy)
    out.alternatives = claimed.order
    exclusive = _exclusive_pools(facts, claimed, policy)
    if len(exclusive) > 1:
        out.denial = (Reason.EXCLUSIVE_RESOURCE_CONFLICT,
                      said("route.noSinglePool", exclusive=tuple(
                          (pool, tuple(hits)) for pool, hits in exclusive.items())))
        return out
    for pool, hits in exclusive.items():
        if out.pool is not None and out.pool != pool \
                and len(hits) == len(claimed.found.get(pool, ())) \
                and {out.pool, pool} <= set(claimed.order):
            continue  # its hits are its claims' classes alone: its own pin picks among them
        if out.pool is not None and out.pool != pool:
            out.denial = (Reason.EXCLUSIVE_RESOURCE_CONFLICT,
                          said("route.servedElsewhere", hits=tuple(hits), pool=pool,
                               bound=out.source, bound_pool=out.pool))
            return out
        if out.pool is None:  # (a pool's hits list its claims' classes first)
            out.by_claims = pool in claimed.found
        _bind(out, pool, said("evidence.servedOnly", hit=hits[0], pool=pool))

    # 5. An extended resource only one pool serves at all, where a DeviceClass serves it too
    # (its extendedResourceName): the pod cannot start anywhere else.
    if out.pool is None and view is not None:
        only = _only_pool_serving(facts, view, policy)
        if only is not None and only[0] in admitted:
            _bind(out, *only)

    # 6. The default pool.
    if out.pool is None:
        if policy.default_pool not in admitted:
            # Pinned to several pools but none by name: take the first the pod allows.
            _bind(out, sorted(admitted)[0], affinity.pool_constraint_source(placement, policy))
        else:
            _bind(out, policy.default_pool, DEFAULT_POOL)
    return out
