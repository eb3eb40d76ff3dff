"""What a pod asks of Dynamic Resource Allocation: its claims as the view knows them, and
the extended resources a DeviceClass serves.

One answer, worked out once per pod, read by routing (a claim's DeviceClass is evidence of
its pool), by the CDI check (an extended resource DRA serves is not the device plugin's to
deliver) and by the DRA check itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import dra
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo


def demand(facts: PodFacts, view: ClusterView | None) -> dra.ClaimDemand:
    """What the pod asks of DRA: its claims as the view knows them, and the extended
    resources a DeviceClass serves. Worked out once per pod."""
    return facts.once("dra", _demand, facts, view)


def _demand(facts: PodFacts, view: ClusterView | None) -> dra.ClaimDemand:
    if view is None:
        return dra.NO_DEMAND
    refs = dra.pod_claim_refs(facts.spec)
    classes = view.device_classes() or {}
    extended = dra.extended_classes(facts.resources, classes) if classes else ()
    if not refs and not extended:
        return dra.NO_DEMAND
    claims, unresolved = [], []
    for entry, kind, name in refs:
        spec = view.claim(kind, facts.namespace or "", name)
        if spec is None:
            unresolved.append(f"{kind} {name}")
        else:
            claims.append(dra.PodClaim(entry, f"{kind} {name}", spec))
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
