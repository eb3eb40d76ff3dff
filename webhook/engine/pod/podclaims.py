"""What a pod asks of Dynamic Resource Allocation: its claims as the view knows them, and
the extended resources a DeviceClass serves.

One answer, worked out when the pod is parsed (``PodFacts.claims``), read by routing (a
claim's DeviceClass is evidence of its pool), by the CDI check (an extended resource DRA
serves is not the device plugin's to deliver) and by the DRA check itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.engine.stacks import dra
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


def resolve(spec: Mapping[str, Any], resources: frozenset[str], namespace: str | None,
            view: ClusterView | None) -> dra.ClaimDemand:
    """What a pod asks of DRA: its claims as the view knows them, and the extended resources
    (of ``resources``, those it asks for) a DeviceClass serves. Worked out when the pod is
    parsed (``PodFacts.claims``)."""
    if view is None:
        return dra.NO_DEMAND
    # (nearly every pod names no claim)
    refs = dra.pod_claim_refs(spec) if spec.get("resourceClaims") else ()
    classes = view.device_classes() or {}
    extended = dra.extended_classes(resources, classes) if classes else ()
    if not refs and not extended:
        return dra.NO_DEMAND
    claims, unresolved = [], []
    for entry, kind, name in refs:
        found = view.claim(kind, namespace or "", name)
        if found is None:
            unresolved.append(f"{kind} {name}")
        else:
            claims.append(dra.PodClaim(entry, f"{kind} {name}", found))
    return dra.ClaimDemand(tuple(claims), tuple(unresolved), extended)


def dra_served(node: NodeInfo, resource: str, extended: Iterable[tuple[str, str]]) -> bool:
    """On this node, does a DeviceClass serve ``resource`` rather than a device plugin? The
    scheduler uses DRA for an extended resource on nodes that do not advertise it."""
    return any(r == resource for r, _ in extended) and not (
        node.allocatable and node.allocatable.get(resource))


def claims_key(spec: Mapping[str, Any], namespace: str | None, view: ClusterView) -> str:
    """What the claims a pod names ask, as the view holds them now (absent ones too): part
    of the key a pod's decision is kept under, since claims change without the view's
    version."""
    return repr(tuple(view.claim(kind, namespace or "", name)
                      for _, kind, name in dra.pod_claim_refs(spec)))
