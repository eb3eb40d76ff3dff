"""Resource names a pod asks for that look like a GPU resource but that nothing in the
cluster serves: a misspelt name (``nvidia.com/gpus``, ``nvidia.com/GPU``, ``nvdia.com/gpu``,
``nvidia.com/gpumemory``) or a MIG profile no node advertises (``nvidia.com/mig-1g.5gbb``).

The scheduler places a pod only on a node that advertises every extended resource it asks
for, so such a pod waits forever, silently; and a misspelt name is not a GPU to gpupool, so it
would be routed nowhere and its containers kept from GPUs. Nothing a node holds is at stake
(it never reaches one), so the answer is a warning naming the likely intended name, or a
denial where the policy asks for it (``onUnknownGPUResource``).

Known are: the policy's exact GPU resource names (HAMi's ``nvidia.com/gpumem`` and friends,
which no node advertises), every extended resource a node advertises (capacity or
allocatable), and every DeviceClass's ``extendedResourceName``. A name the policy's patterns
count as a GPU (``nvidia.com/mig-*``) is unknown only where every node reports its
allocatable, some advertise GPU resources and none this one; any other name is suspect when
its domain is a GPU domain of the policy, or one letter dropped or two swapped from one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from webhook.engine.core.policy import Policy
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.view.cluster import ClusterView


@dataclass(frozen=True)
class Unknown:
    resource: str
    #: the known name it most likely meant (None: none close enough)
    likely: str | None
    #: a name the policy counts as a GPU (a MIG profile), not a misspelt one
    profile: bool


def _near(domain: str) -> set[str]:
    """``domain`` with its first label's letters one dropped or two adjacent swapped: the
    typing slips a name keeps its look through (``nvdia.com``, ``nivdia.com``)."""
    head, dot, rest = domain.partition(".")
    out = {head[:i] + head[i + 1:] for i in range(len(head))}
    out |= {head[:i] + head[i + 1] + head[i] + head[i + 2:] for i in range(len(head) - 1)}
    return {h + dot + rest for h in out if h} - {domain}


def _likely(name: str, known: set[str]) -> str | None:
    """The known name closest to ``name``, letter case aside."""
    by_lower = {k.lower(): k for k in known}
    hit = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[hit[0]] if hit else None


def _suspect_domains(gpu_resources: tuple[str, ...]) -> frozenset[str]:
    """The policy's GPU domains and their near misses (a few dozen strings, made only for a
    pod that asks for a resource the policy does not name; decisions are kept per shape)."""
    domains = {r.split("/", 1)[0].lower() for r in gpu_resources if "/" in r}
    return frozenset(domains.union(*(_near(d) for d in domains)))


def unknown(facts: PodFacts, view: ClusterView | None, policy: Policy) -> tuple[Unknown, ...]:
    """The pod's resource names that look like GPU resources but that nothing serves."""
    exact = policy.exact_gpu_resources
    suspects = [r for r in facts.resources if r not in exact]
    if not suspects:  # (nearly every pod)
        return ()
    domains = _suspect_domains(policy.gpu_resources)
    # A pattern's name (a MIG profile), or a name in a GPU domain or a near miss of one; any
    # other vendor's resource is none of gpupool's business.
    suspects = [r for r in suspects
                if r in facts.gpus or r.split("/", 1)[0].lower() in domains]
    if not suspects:
        return ()
    nodes = view.nodes() if view is not None else []
    classes = (view.device_classes() or {}) if view is not None else {}
    served = {c.extended_resource for c in classes.values() if c.extended_resource}
    unserved = [r for r in sorted(suspects) if r not in served
                and not any(r in n.extended_resources for n in nodes)]
    if not unserved:
        return ()
    advertised = {x for n in nodes for x in n.extended_resources if policy.is_gpu_resource(x)}
    out = []
    for r in unserved:
        if r not in facts.gpus:
            out.append(Unknown(r, _likely(r, set(exact) | advertised), False))
        elif advertised and all(n.allocatable is not None for n in nodes):
            # A pattern's name: unknown only where every node says what it advertises.
            out.append(Unknown(r, _likely(r, {x for x in advertised if x not in exact}), True))
    return tuple(out)
