"""Routing compiled for the API server: a MutatingAdmissionPolicy that routes the GPU pods
whose whole mutation is a function of the policy, the pod and its namespace.

Kubernetes 1.36 made MutatingAdmissionPolicy GA (``admissionregistration.k8s.io/v1``): CEL
run inside the API server, so routing survives an outage of every gpupool replica and a GPU
pod costs one webhook call (validation) instead of two. The policy *claims* a pod only where
the answer it writes is exactly what ``pods.mutate`` would write:

- the pod asks the device plugin for GPUs (no DRA claims, no extended resource a DeviceClass
  serves), is not pinned to nodes by name (``spec.nodeName``, ``matchFields``), and its
  routing evidence agrees (a conflict is a denial, with a message: the webhook's);
- nothing else of the mutation reads the cluster: every container asks for a GPU (no
  ``NVIDIA_VISIBLE_DEVICES=void`` to decide), and nothing makes steering per node (no
  RuntimeClass, privileged container, own ``NVIDIA_VISIBLE_DEVICES``, MIG resource, HAMi GPU
  picking or NRI annotation; no pool the cluster steers node by node: ``RoutingFacts``);
- nothing the webhook would warn about (another pool's ``schedulerName``, HAMi's opt-out
  label on a HAMi pod, a namespace label naming no pool).

Every other pod is the webhook's: its configuration gets the condition ``webhook_condition``
built here from the same constants, which skips a pod only when it is already routed
exactly as the webhook would route it (what the policy leaves; a pod a user routed by hand the
same way, whose patch would be empty). So no pod is routed by both, and none by neither.

Pure: the objects are built from the policy and ``RoutingFacts``; nothing is read or sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from webhook.api.inventory import MIG_RESOURCE_PREFIX
from webhook.engine.access.grants import VARIABLE
from webhook.engine.admission.steering import cluster_steers_by_name, label_requirement
from webhook.engine.core.policy import (
    HAMI_IGNORE_LABEL,
    HAMI_IGNORE_VALUE,
    POOL_ANNOTATION,
    POOL_LABEL,
    Policy,
    Ungranted,
)
from webhook.engine.pod.affinity import pool_expression
from webhook.engine.pod.podfacts import (
    DEFAULT_SCHEDULER,
    NARROWING_ANNOTATIONS,
    PRIVILEGED_CAPABILITIES,
)
from webhook.engine.stacks import nri
from webhook.engine.stacks.dra import IMPLICIT_EXTENDED_PREFIX
from webhook.engine.view.cluster import ClusterView

#: The objects' names (and the webhook condition's).
ROUTING_NAME = "gpupool-routing"
CONDITION = "not-routed-by-policy"
#: What the compiled objects record, for ``doctor``: the spec's digest, and the facts.
DIGEST_ANNOTATION = "gpupool.io/routing-digest"
FACTS_ANNOTATION = "gpupool.io/routing-facts"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
#: The namespaces gpupool's webhooks never see (manifests/base/webhooks.yaml).
EXCLUDED_NAMESPACES = ("kube-system", "kube-node-lease", "gpupool-system")


class RoutingFacts(NamedTuple):
    """What of the cluster decides which pods the API server can route: the pools whose
    pods it steers node by node (``steering.cluster_steers_by_name``), and the extended
    resources DeviceClasses serve (``extendedResourceName``: routed by the cluster's
    ResourceSlices)."""

    by_name: frozenset[str] = frozenset()
    dra_extended: frozenset[str] = frozenset()

    def as_json(self) -> dict[str, list[str]]:
        return {"steeredByName": sorted(self.by_name), "draExtended": sorted(self.dra_extended)}


def routing_facts(view: ClusterView | None, policy: Policy) -> RoutingFacts:
    if view is None:
        return RoutingFacts()
    classes = view.device_classes() or {}
    return RoutingFacts(
        frozenset(p.name for p in policy.pools
                  if cluster_steers_by_name(p.name, view, policy)),
        frozenset(c.extended_resource for c in classes.values() if c.extended_resource))


def claimable_pools(policy: Policy, facts: RoutingFacts) -> tuple[str, ...]:
    """The pools whose pods the API server may route: not steered node by node here, and
    not repaired (``cdi.repair`` reads every candidate node)."""
    return tuple(p.name for p in policy.pools
                 if p.name not in facts.by_name and not p.cdi.repair)


def why_left(policy: Policy, facts: RoutingFacts, pools: Sequence[str]) -> str:
    """Why these pools' pods stay with the webhook, in words."""
    out = []
    for name in pools:
        if policy.by_name[name].cdi.repair:
            out.append(f"{name}: cdi.repair reads every candidate node")
        elif name in facts.by_name:
            out.append(f"{name}: the cluster steers its pods node by node (a device-plugin "
                       "configuration the agent's label cannot speak for, or MIG devices)")
    return "; ".join(out)


# ------------------------------------------------------------------ CEL text


def _s(value: str) -> str:
    return json.dumps(value)


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_s(v) for v in values) + "]"


def _any(parts: Sequence[str]) -> str:
    return "(" + " || ".join(parts) + ")" if parts else "false"


def glob_regex(pattern: str) -> str:
    """fnmatch's pattern as an RE2 regular expression (``policy.is_gpu_resource`` matches
    with ``fnmatch.fnmatchcase``): ``*``, ``?`` and ``[...]`` classes (``[!...]`` negated)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        end = pattern.find("]", i + 2) if ch == "[" else -1
        if end > 0:
            body = pattern[i + 1:end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        out.append(".*" if ch == "*" else "." if ch == "?" else re.escape(ch))
        i += 1
    return "^" + "".join(out) + "$"


def _glob_test(k: str, pattern: str) -> str:
    """``k`` matches fnmatch's ``pattern``: a prefix test where the pattern is a literal
    prefix and one final ``*`` (``nvidia.com/mig-*``, the usual case), a regular expression
    otherwise. The API server runs this on every container of every pod create, and a
    prefix test costs a fraction of a regular expression's match."""
    head = pattern[:-1]
    if pattern.endswith("*") and not any(ch in head for ch in "*?["):
        return f"{k}.startsWith({_s(head)})"
    return f"{k}.matches({_s(glob_regex(pattern))})"


def _is_gpu(policy: Policy, k: str) -> str:
    exact, patterns = policy.exact_gpu_resources, policy.gpu_resource_patterns
    return _any([f"{k} in {_list(sorted(exact))}"] * bool(exact)
                + [_glob_test(k, p) for p in patterns])


def _maps(c: str) -> list[str]:
    """A container's resource maps (limits, requests), each {} where absent."""
    return [f"({c}.?resources.?{part}.orValue({{}}))" for part in ("limits", "requests")]


def _asks_nonzero(c: str, test: str) -> str:
    """Container ``c`` asks, with a non-zero quantity, for a resource ``k`` passing ``test``
    (``PodFacts.resources``: a zero quantity asks for nothing)."""
    return _any([f"{m}.exists(k, {test} && sign(quantity(string({m}[k]))) != 0)"
                 for m in _maps(c)])


def _names_key(c: str, test: str) -> str:
    """Container ``c`` names a resource ``k`` passing ``test``, whatever its quantity."""
    return _any([f"{m}.exists(k, {test})" for m in _maps(c)])


def _term_has(t: str, req: Mapping[str, Any]) -> str:
    """Term ``t`` holds ``req`` already (``affinity.term_has``: same key, operator and
    values)."""
    values = list(req["values"])
    v = "e.?values.orValue([])"
    return (f"{t}.?matchExpressions.orValue([]).exists(e, e.key == {_s(req['key'])} && "
            f"e.operator == {_s(req['operator'])} && size({v}) == {len(values)} && "
            f"{_list(values)}.all(x, x in {v}))")


def _requirements(policy: Policy, pool: str) -> list[dict[str, Any]]:
    """What ``pods.mutate`` adds to every required term of a claimed pod of ``pool``: the
    pool's expression, and the steering label where the pool is steered (by label: pods
    steered node by node are never claimed)."""
    out = []
    expr = pool_expression(policy, pool)
    if expr is not None:
        out.append(dict(expr))
    p = policy.by_name[pool]
    if p.cdi.checked and p.cdi.steer:
        out.append(dict(label_requirement(p.cdi.delivery, policy)[1]))
    return out


#: A pod's containers, init containers first.
_CONTAINERS = "object.spec.?initContainers.orValue([]) + object.spec.containers"


def _gpu_pod(policy: Policy, containers: str) -> str:
    """Does some container of ``containers`` ask for a GPU resource (a non-zero amount)?"""
    return f"{containers}.exists(c, {_asks_nonzero('c', _is_gpu(policy, 'k'))})"


def _variables(policy: Policy, facts: RoutingFacts) -> list[tuple[str, str]]:
    L = policy.pool_label
    D = policy.default_pool
    names = [p.name for p in policy.pools]
    claimable = claimable_pools(policy, facts)
    others = [v for p in policy.pools if p.name != D for v in p.label_values]
    pods = "variables.containers"
    # (no "is it a GPU pod" here: the policy's matchCondition has asked it already)
    out = [("containers", _CONTAINERS)]
    # Where the mutation would read the cluster, or differ per node.
    grant = _any([_is_gpu(policy, "k"), f"k.startsWith({_s(IMPLICIT_EXTENDED_PREFIX)})"])
    granted = "true" if policy.access.ungranted is Ungranted.OFF else (
        f"request.namespace in {_list(policy.access.exempt_namespaces)} || "
        f"{_names_key('c', grant)}")
    kept_out = _any([f"k.startsWith({_s(IMPLICIT_EXTENDED_PREFIX)})",
                     f"k.startsWith({_s(MIG_RESOURCE_PREFIX)})"]
                    + ([f"k in {_list(sorted(facts.dra_extended))}"]
                       if facts.dra_extended else []))
    caps = [p + c for c in PRIVILEGED_CAPABILITIES for p in ("", "CAP_")]
    privileged = ("c.?securityContext.?privileged.orValue(false) || "
                  "c.?securityContext.?capabilities.?add.orValue([]).exists(a, "
                  f"a.upperAscii() in {_list(caps)})")
    annotations = "object.metadata.?annotations.orValue({})"
    # (one pass over the containers: this runs in the API server on every pod create)
    out.append(("plain", " && ".join([
        "object.spec.?nodeName.orValue('') == ''",
        "size(object.spec.?resourceClaims.orValue([])) == 0",
        "object.spec.?runtimeClassName.orValue('') == ''",
        f"!{annotations}.exists(k, k in {_list(NARROWING_ANNOTATIONS)} || "
        f"k.startsWith({_s(nri.DOMAIN)}))",
        f"{pods}.all(c, !{_names_key('c', kept_out)} && !({privileged}) && "
        f"!c.?env.orValue([]).exists(e, e.name == {_s(VARIABLE)}) && ({granted}))",
    ])))
    out.append(("terms", f"object.spec.?affinity.?nodeAffinity.?{_REQUIRED}"
                         ".?nodeSelectorTerms.orValue([])"))
    out.append(("nameFields", "variables.terms.exists(t, "
                              "size(t.?matchFields.orValue([])) > 0)"))
    # The pools the nodeSelector and required affinity admit (``affinity.pools_admitted``).
    sel = "object.spec.?nodeSelector.orValue({})"
    out.append(("selectorSet", f"{_s(L)} in {sel}"))
    for i, p in enumerate(policy.pools):
        own = list(p.label_values)
        if p.name == D:
            maps_here = f"(v in {_list(own)} || !(v in {_list(others)}))"
        else:
            maps_here = f"v in {_list(own)}"
        not_in = "true" if p.name == D else \
            f"{_list(own)}.exists(lv, !(lv in e.?values.orValue([])))"
        ok = (f"(e.operator == 'In' && e.?values.orValue([]).exists(v, {maps_here})) || "
              f"(e.operator == 'NotIn' && {not_in}) || "
              f"(e.operator == 'DoesNotExist' && {'true' if p.name == D else 'false'}) || "
              "!(e.operator in ['In', 'NotIn', 'DoesNotExist'])")
        selector_ok = (f"(!variables.selectorSet || "
                       f"[{sel}[{_s(L)}]].all(v, {maps_here}))")
        out.append((f"admits{i}", f"{selector_ok} && (size(variables.terms) == 0 || "
                                  f"variables.terms.exists(t, t.?matchExpressions.orValue([])"
                                  f".all(e, e.key != {_s(L)} || {ok})))"))
    out.append(("admitted", " + ".join(f"(variables.admits{i} ? [{_s(p.name)}] : [])"
                                       for i, p in enumerate(policy.pools))))
    labels = "object.metadata.?labels.orValue({})"
    out.append(("labelSet", f"{_s(POOL_LABEL)} in {labels}"))
    out.append(("labelPool", f"variables.labelSet ? {labels}[{_s(POOL_LABEL)}] : ''"))
    ns = "namespaceObject.metadata.?labels.orValue({})"
    out.append(("nsSet", f"{_s(POOL_LABEL)} in {ns}"))
    out.append(("nsPool", f"variables.nsSet ? {ns}[{_s(POOL_LABEL)}] : ''"))
    # Pools a resource or annotation only it serves pins (``routing._exclusive_pools``).
    parts = []
    for p in policy.pools:
        resources = [r for r in p.exclusive_resources if policy.is_gpu_resource(r)]
        hits = []
        if resources:
            hits.append(f"{pods}.exists(c, {_asks_nonzero('c', f'k in {_list(resources)}')})")
        if p.exclusive_annotations:
            hits.append(f"{annotations}.exists(k, k in {_list(p.exclusive_annotations)})")
        if hits:
            parts.append(f"({_any(hits)} ? [{_s(p.name)}] : [])")
    out.append(("exclusive", " + ".join(parts) if parts else "[]"))
    # The evidence in routing's order: label, pin, namespace; then what only one pool
    # serves, then the default pool (or the first pool the pod allows).
    out.append(("first", "variables.labelSet ? variables.labelPool : "
                         "size(variables.admitted) == 1 ? variables.admitted[0] : "
                         "(variables.nsSet && variables.nsPool in variables.admitted) ? "
                         "variables.nsPool : ''"))
    fallback = f"{_s(D)} in variables.admitted ? {_s(D)} : "
    for name in sorted(names):
        fallback += f"{_s(name)} in variables.admitted ? {_s(name)} : "
    fallback += "''"
    out.append(("chosen", "variables.first != '' ? variables.first : "
                          "size(variables.exclusive) == 1 ? variables.exclusive[0] : "
                          f"({fallback})"))
    sched = "{" + ", ".join(f"{_s(p.name)}: {_s(p.scheduler_name)}" for p in policy.pools) + "}"
    hami = [p.name for p in policy.pools if policy.is_hami_pool(p.name)]
    # The cheapest tests first (``&&`` stops at the first false): a pod the policy leaves
    # to the webhook should cost the API server as little as it can.
    agrees = " && ".join([
        f"size(variables.terms) <= {MAX_TERMS}", "!variables.nameFields",
        f"(!variables.labelSet || variables.labelPool in {_list(names)})",
        "size(variables.admitted) > 0",
        "(!variables.labelSet || variables.labelPool in variables.admitted)",
        # (a namespace label naming no pool is warned about where routing reads it)
        f"(!variables.nsSet || variables.nsPool in {_list(names)} || variables.labelSet || "
        "size(variables.admitted) == 1)",
        "variables.plain",
        "size(variables.exclusive) <= 1",
        "(size(variables.exclusive) == 0 || variables.first == '' || "
        "variables.first == variables.exclusive[0])",
        f"variables.chosen in {_list(claimable)}",
        f"(object.spec.?schedulerName.orValue('') in ['', {_s(DEFAULT_SCHEDULER)}] || "
        f"object.spec.schedulerName == {sched}[variables.chosen])",
        f"!(variables.chosen in {_list(hami)} && {_s(HAMI_IGNORE_LABEL)} in {labels})",
    ])
    out.append(("pool", f"({agrees}) ? variables.chosen : ''"))
    return out


def _set_entry(base: str, key: str, value: str) -> str:
    """``patch.set_map_entry`` for metadata ``base`` (labels, annotations)."""
    return (f"(has(object.metadata.{base}) ? [JSONPatch{{op: 'add', path: "
            f"'/metadata/{base}/' + jsonpatch.escapeKey({_s(key)}), value: {_s(value)}}}] : "
            f"[JSONPatch{{op: 'add', path: '/metadata/{base}', "
            f"value: {{{_s(key)}: {_s(value)}}}}}])")


#: The most required terms a claimed pod may have: the patch adds the pool's requirements
#: term by term (one JSON patch op each, as ``affinity.affinity_patch`` does), and CEL has no
#: index to walk a list with, so each position is written out. Pods with more are the
#: webhook's (``variables.pool`` is empty for them).
MAX_TERMS = 8


def _value(v: Any) -> str:
    """A patch value as a CEL literal of plain maps and lists, every map's values ``dyn``.

    Never a typed ``Object`` initializer: on Kubernetes 1.36 before v1.36.5 (and 1.35 before
    its cherry-pick) a patch value holding a list of them makes the API server panic in
    ``ObjectVal.ConvertToNative`` and drop the request whatever ``failurePolicy`` says
    (kubernetes#142181, fixed by #140419 and #140557); and 1.37 fails to marshal them where
    the policy has a matchCondition ("proto: invalid type: v1.NodeSelectorRequirement").
    Plain values convert through cel-go's own map and list conversion on every release.
    ``dyn`` makes a map of strings and lists one type (the API server's CEL takes only
    homogeneous literals)."""
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_s(k)}: dyn({_value(x)})" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return _s(v)


def _affinity_ops(reqs: list[dict[str, Any]]) -> str:
    """``affinity.affinity_patch``: each requirement added to every required term that lacks
    it, creating what is missing on the way, one op per requirement and term."""
    if not reqs:
        return "[]"
    term = {"matchExpressions": reqs}
    required = {"nodeSelectorTerms": [term]}
    node = {_REQUIRED: required}
    has_node = "object.spec.?affinity.?nodeAffinity"
    path = f"/spec/affinity/nodeAffinity/{_REQUIRED}/nodeSelectorTerms"

    def at(i: int) -> str:
        t = f"variables.terms[{i}]"
        whole = (f"[JSONPatch{{op: 'add', path: {_s(f'{path}/{i}/matchExpressions')}, "
                 f"value: {_value(reqs)}}}]")
        each = " + ".join(
            f"({_term_has(t, r)} ? [] : [JSONPatch{{op: 'add', "
            f"path: {_s(f'{path}/{i}/matchExpressions/-')}, value: {_value(r)}}}])"
            for r in reqs)
        return (f"(size(variables.terms) <= {i} ? [] : "
                f"!has({t}.matchExpressions) ? {whole} : {each})")

    per_term = " + ".join(at(i) for i in range(MAX_TERMS))
    return (f"(!has(object.spec.affinity) ? [JSONPatch{{op: 'add', path: '/spec/affinity', "
            f"value: {_value({'nodeAffinity': node})}}}] : "
            f"!{has_node}.hasValue() ? [JSONPatch{{op: 'add', path: "
            f"'/spec/affinity/nodeAffinity', value: {_value(node)}}}] : "
            f"!{has_node}.?{_REQUIRED}.hasValue() ? "
            f"[JSONPatch{{op: 'add', path: {_s(path.rsplit('/', 1)[0])}, "
            f"value: {_value(required)}}}] : "
            f"size(variables.terms) == 0 ? [JSONPatch{{op: 'replace', path: {_s(path)}, "
            f"value: {_value([term])}}}] : ({per_term}))")


def _mutation(policy: Policy, facts: RoutingFacts) -> str:
    """The patch: none for a pod the policy does not claim (``variables.pool`` empty).
    (Match conditions cannot read the policy's variables, so the claim is decided here.)"""
    out = "[]"
    for pool in reversed(claimable_pools(policy, facts)):
        p = policy.by_name[pool]
        ops = [_set_entry("labels", HAMI_IGNORE_LABEL, HAMI_IGNORE_VALUE)] \
            if not policy.is_hami_pool(pool) else []
        ops.append(_set_entry("annotations", POOL_ANNOTATION, pool))
        ops.append(f"(object.spec.?schedulerName.orValue('') != {_s(p.scheduler_name)} ? "
                   f"[JSONPatch{{op: 'add', path: '/spec/schedulerName', "
                   f"value: {_s(p.scheduler_name)}}}] : [])")
        ops.append(_affinity_ops(_requirements(policy, pool)))
        out = f"variables.pool == {_s(pool)} ? ({' + '.join(ops)}) : {out}"
    return out


def digest(spec: Mapping[str, Any]) -> str:
    """What ``doctor`` compares: the digest of the compiled policy's spec and its binding's
    selectors, so an installed policy matches the PoolPolicy and the cluster exactly when
    compiling them again gives it (and a changed selector is a new policy, proved again)."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compile_policy(policy: Policy, facts: RoutingFacts,
                   excluded_namespaces: Sequence[str] = EXCLUDED_NAMESPACES,
                   name: str = ROUTING_NAME, selectors: Mapping[str, Any] | None = None
                   ) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding. ``selectors``: the webhook's own
    ``namespaceSelector`` and ``objectSelector``, so that the binding gives the policy the
    pods the webhook would see (else namespaces ``excluded_namespaces`` are left out). They
    are the binding's, not the policy's: a second binding (``native.canary``) gives it the
    canary pods in gpupool's own namespace, which the webhook never sees."""
    constraints: dict[str, Any] = {
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                           "operations": ["CREATE"], "resources": ["pods"]}]}
    match: dict[str, Any] = {}
    if selectors:
        match.update({k: v for k, v in selectors.items()
                      if k in ("namespaceSelector", "objectSelector")})
    else:
        match["namespaceSelector"] = {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": list(excluded_namespaces)}]}
    variables = _variables(policy, facts)
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "matchConstraints": constraints,
        # Pods without a GPU leave here, before any variable is built: most pods of a
        # cluster ask for none. (Conditions see no variables: the test is written out. With
        # typed Object values in the patch, 1.37's API server failed to marshal them once a
        # condition was present; the patch's values are plain maps now: ``_value``.)
        "matchConditions": [{"name": "gpu-pods",
                             "expression": _gpu_pod(policy, f"({_CONTAINERS})")}],
        "variables": [{"name": n, "expression": e} for n, e in variables],
        "mutations": [{"patchType": "JSONPatch",
                       "jsonPatch": {"expression": _mutation(policy, facts)}}],
    }
    meta: dict[str, Any] = {
        "name": name, "labels": {"app.kubernetes.io/name": "gpupool",
                                 "app.kubernetes.io/component": "routing-policy"},
        "annotations": {DIGEST_ANNOTATION: digest({"policy": spec, "binding": match}),
                        FACTS_ANNOTATION: json.dumps(facts.as_json(), sort_keys=True)}}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
         "metadata": meta, "spec": spec},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {**meta, "annotations": dict(meta["annotations"])},
         "spec": {"policyName": name, "matchResources": match}},
    ]


def webhook_condition(policy: Policy, facts: RoutingFacts) -> dict[str, str]:
    """The matchCondition for gpupool's mutating webhook: true (call it) unless the pod is
    already routed exactly as the webhook would route it (the policy's work, or a user's),
    with nothing else for the webhook to add. Webhook conditions see the object alone (no
    variables, no namespace), so this reads only what the policy wrote."""
    claimable = claimable_pools(policy, facts)
    if not claimable:
        return {"name": CONDITION, "expression": "true"}
    variables = {**dict(_variables(policy, facts)),
                 "gpuPod": _gpu_pod(policy, "variables.containers")}

    def expand(text: str) -> str:
        """The policy's variables this reads, written out (those that use ``containers``
        first, so it is written out in them too)."""
        for k in ("gpuPod", "plain", "terms", "containers"):
            text = text.replace(f"variables.{k}", f"({variables[k]})")
        return text

    labels = "object.metadata.?labels.orValue({})"
    annotations = "object.metadata.?annotations.orValue({})"
    routed = []
    for pool in claimable:
        p = policy.by_name[pool]
        label = (f"!({_s(HAMI_IGNORE_LABEL)} in {labels})" if policy.is_hami_pool(pool)
                 else f"{labels}[?{_s(HAMI_IGNORE_LABEL)}].orValue('') == "
                      f"{_s(HAMI_IGNORE_VALUE)}")
        reqs = _requirements(policy, pool)
        terms = "true" if not reqs else (
            "size(variables.terms) > 0 && variables.terms.all(t, size(t.?matchFields."
            "orValue([])) == 0 && " + " && ".join(_term_has("t", r) for r in reqs) + ")")
        routed.append(" && ".join([
            f"{annotations}[?{_s(POOL_ANNOTATION)}].orValue('') == {_s(pool)}",
            f"object.spec.?schedulerName.orValue('') == {_s(p.scheduler_name)}",
            f"{labels}[?{_s(POOL_LABEL)}].orValue({_s(pool)}) == {_s(pool)}",
            label, terms]))
    # What the policy wrote is asked first: a pod it did not route (every pod but those it
    # claims) leaves at an annotation lookup, before any container is read. (The API server
    # evaluates this for every pod the webhook's rules match; written out in full, with the
    # container scans first, it cost 0.9 ms of its CPU per pod: bench/README.md.)
    expression = ("!((" + " || ".join(f"({r})" for r in routed)
                  + ") && variables.gpuPod && variables.plain)")
    return {"name": CONDITION, "expression": expand(expression)}
