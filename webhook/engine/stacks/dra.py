"""GPUs through Dynamic Resource Allocation: what a pod's claims ask for, and which nodes
could allocate it.

A pod reaches DRA devices three ways: ``spec.resourceClaims`` naming a ResourceClaim or a
ResourceClaimTemplate, or an extended resource (``nvidia.com/gpu: 1``) that a DeviceClass
serves (``spec.extendedResourceName``, or the implicit
``deviceclass.resource.kubernetes.io/<class>``) on nodes where no device plugin does. This
module reads those objects as the API serves them (``resource.k8s.io/v1``) into small
immutable records, and judges a node as kube-scheduler's allocator would: the devices its
ResourceSlices publish, filtered by the class's and the request's CEL selectors
(``webhook.engine.stacks.cel``) and by device taints the request does not tolerate, counted against
what each request asks for.

It over-approximates on purpose, so that it never turns away a pod the scheduler could
place: devices other claims already hold, ``matchAttribute`` constraints, consumable capacity
and the sharing of one device between requests are not modelled; a node "can allocate" when
every request, taken alone, finds enough devices there. A selector that does not compile here
or fails at run time is doubt, never a reason to deny. Pure: no I/O.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

from webhook.api.said import Said, said
from webhook.engine.core import objects, taints
from webhook.engine.stacks import cel

#: The implicit extended resource every DeviceClass serves when DRA-backed extended
#: resources are on (KEP-5004).
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Namespace label that lets claims in it ask for ``adminAccess`` (DRAAdminAccess).
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
_mapping, _list = objects.as_mapping, objects.as_list


def _selectors(raw: object) -> tuple[str, ...]:
    """CEL expressions of a ``selectors`` list (other selector kinds: none exist in v1)."""
    out = []
    for s in _list(raw):
        expr = _mapping(_mapping(s).get("cel")).get("expression")
        if isinstance(expr, str):
            out.append(expr)
    return tuple(out)


# --------------------------------------------------------------------------- objects


class DeviceClass(NamedTuple):
    name: str
    selectors: tuple[str, ...]
    extended_resource: str | None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> DeviceClass | None:
        name = objects.meta_of(obj).get("name")
        if not isinstance(name, str) or not name:
            return None
        spec = _mapping(obj.get("spec"))
        ext = spec.get("extendedResourceName")
        return cls(sys.intern(name), _selectors(spec.get("selectors")),
                   ext if isinstance(ext, str) and ext else None)


#: A field of a device as CEL sees it: ("attributes" or "capacity", domain, name).
Field = tuple[str, str, str]


def _attribute_value(raw: object) -> Any:
    """A DeviceAttribute's one typed field, hashable: versions as ("k8s.io/Semver", text)."""
    a = _mapping(raw)
    for key, kind in (("string", str), ("bool", bool), ("int", int)):
        if key in a:
            v = a[key]
            if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                return None  # a value of the wrong type: as if the attribute were absent
            return sys.intern(v) if isinstance(v, str) else v
    if "version" in a:
        try:
            return (cel.SEMVER_KEY, cel.semver_value(str(a["version"]))[cel.SEMVER_KEY])
        except cel.CELError:
            return None
    return None


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, _, ident = name.rpartition("/")
    return sys.intern(domain or driver), sys.intern(ident)


def _fields(raw: Mapping[str, Any], driver: str) -> dict[Field, Any]:
    out: dict[Field, Any] = {}
    for key, value in _mapping(raw.get("attributes")).items():
        v = _attribute_value(value)
        if isinstance(key, str) and v is not None:
            out[("attributes", *_qualified(key, driver))] = v
    for key, value in _mapping(raw.get("capacity")).items():
        q = _mapping(value).get("value")
        if isinstance(key, str) and isinstance(q, str | int):
            try:
                out[("capacity", *_qualified(key, driver))] = (
                    cel.QUANTITY_KEY, cel.quantity(str(q))[cel.QUANTITY_KEY])
            except cel.CELError:
                continue
    if raw.get("allowMultipleAllocations") is True:
        out[("", "", "allowMultipleAllocations")] = True
    return out


def _cel_value(v: Any) -> Any:
    if isinstance(v, tuple):
        return {v[0]: v[1]}
    return v


class Capacity(NamedTuple):
    """A device capacity's request policy, where it has one (KEP-5075 consumable capacity):
    what a request that names no value consumes, and the values it may ask."""

    default: Fraction | None
    minimum: Fraction | None
    maximum: Fraction | None
    step: Fraction | None
    valid_values: tuple[Fraction, ...] | None


class DeviceExtras(NamedTuple):
    """What a device publishes beyond attributes and capacity values, read only where some
    device of the slice does (partitionable devices, consumable capacity, per-device node
    selection)."""

    multi: bool  # allowMultipleAllocations
    policies: tuple[tuple[str, Capacity], ...]  # capacity name -> its request policy
    consumes: tuple[tuple[str, tuple[tuple[str, Fraction | None], ...]], ...]
    selection: str | None  # per-device node selection, as JSON ({"nodeName": ...} etc.)


def _policy(raw: object) -> Capacity | None:
    p = _mapping(raw)
    if not p:
        return None
    rng = _mapping(p.get("validRange"))
    values = p.get("validValues")
    return Capacity(quantity_or_none(p.get("default")), quantity_or_none(rng.get("min")),
                    quantity_or_none(rng.get("max")), quantity_or_none(rng.get("step")),
                    tuple(q for v in values if (q := quantity_or_none(v)) is not None)
                    if isinstance(values, list) else None)


def _quantities(raw: object, field: str | None = None) -> tuple[tuple[str, Fraction | None], ...]:
    """name -> quantity, sorted by name; ``field``: each value is an object holding the
    quantity there (a counter's ``value``)."""
    return tuple(sorted((str(k), quantity_or_none(_mapping(v).get(field) if field else v))
                        for k, v in _mapping(raw).items()))


def _counter_sets(raw: object, name: str
                  ) -> tuple[tuple[str, tuple[tuple[str, Fraction | None], ...]], ...]:
    """A slice's ``sharedCounters`` (each set's ``name``) or a device's ``consumesCounters``
    (``counterSet``): set -> counter -> value."""
    return tuple((str(_mapping(c).get(name)), _quantities(_mapping(c).get("counters"), "value"))
                 for c in _list(raw))


def _extras(dev: Mapping[str, Any]) -> DeviceExtras | None:
    policies = tuple(sorted((str(k), pol) for k, v in _mapping(dev.get("capacity")).items()
                            if (pol := _policy(_mapping(v).get("requestPolicy"))) is not None))
    consumes = _counter_sets(dev.get("consumesCounters"), "counterSet")
    selection = {k: dev[k] for k in ("nodeName", "allNodes", "nodeSelector") if k in dev}
    multi = dev.get("allowMultipleAllocations") is True
    if not (multi or policies or consumes or selection):
        return None
    return DeviceExtras(multi, policies, consumes,
                        json.dumps(selection, sort_keys=True) if selection else None)


@dataclass(frozen=True, eq=False, slots=True)
class Slice:
    """A ResourceSlice, reduced: whose devices, where they can be used, and each device's
    fields as columns: the fields all its devices share (one copy across equal slices in
    the view: ``draobjects``), and per device the few that differ (UUID, bus ID, index)."""

    name: str
    driver: str
    #: spec.nodeName; None for spec.allNodes or a node selector (which gpupool does not
    #: evaluate): such devices count on every node
    node: str | None
    names: tuple[str, ...]
    shared: tuple[tuple[Field, Any], ...]
    varying: tuple[tuple[Field, tuple[Any, ...]], ...]  # None where a device lacks it
    taints: tuple[tuple[Mapping[str, Any], ...], ...]  # per device; () when none has any
    #: (pool name, generation, resourceSliceCount): the allocator takes a pool whole
    pool: tuple[str, int, int] = ("", 0, 1)
    #: spec.allNodes, spec.nodeSelector (JSON), spec.perDeviceNodeSelection
    all_nodes: bool = False
    selector: str | None = None
    per_device: bool = False
    #: spec.sharedCounters: counter set -> counter -> value (a slice holds these or devices)
    counters: tuple[tuple[str, tuple[tuple[str, Fraction | None], ...]], ...] = ()
    #: per device, what ``DeviceExtras`` holds; None where no device has any
    extras: tuple[DeviceExtras | None, ...] | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Slice | None:
        name = objects.meta_of(obj).get("name")
        spec = _mapping(obj.get("spec"))
        driver = spec.get("driver")
        if not isinstance(name, str) or not name or not isinstance(driver, str) or not driver:
            return None
        node = spec.get("nodeName")
        names: list[str] = []
        rows: list[dict[Field, Any]] = []
        held: list[tuple[Mapping[str, Any], ...]] = []  # each device's hard taints
        extras: list[DeviceExtras | None] = []
        for raw in _list(spec.get("devices")):
            dev = _mapping(raw)
            dname = dev.get("name")
            if not isinstance(dname, str) or not dname:
                continue
            names.append(sys.intern(dname))
            rows.append(_fields(dev, driver))
            held.append(tuple(t for t in _list(dev.get("taints"))
                              if isinstance(t, Mapping) and t.get("effect") in taints.HARD_EFFECTS))
            extras.append(_extras(dev))
        pool = _mapping(spec.get("pool"))
        generation, count = pool.get("generation"), pool.get("resourceSliceCount")
        selector = spec.get("nodeSelector")
        counters = _counter_sets(spec.get("sharedCounters"), "name")
        keys = sorted({k for row in rows for k in row})
        shared, varying = [], []
        for k in keys:
            values = tuple(row.get(k) for row in rows)
            if all(v == values[0] for v in values) and values[0] is not None:
                shared.append((k, values[0]))
            else:
                varying.append((k, values))
        return cls(name, sys.intern(driver), node if isinstance(node, str) and node else None,
                   tuple(names), tuple(shared), tuple(varying),
                   tuple(held) if any(held) else (),
                   pool=(sys.intern(str(pool.get("name") or "")),
                         generation if isinstance(generation, int) else 0,
                         count if isinstance(count, int) and count > 0 else 1),
                   all_nodes=spec.get("allNodes") is True,
                   selector=json.dumps(selector, sort_keys=True)
                   if isinstance(selector, Mapping) else None,
                   per_device=spec.get("perDeviceNodeSelection") is True,
                   counters=counters,
                   extras=tuple(extras) if any(e is not None for e in extras) else None)

    def __len__(self) -> int:
        return len(self.names)

    def device(self, i: int) -> dict[str, Any]:
        """Device ``i`` as CEL selectors see it (``device``)."""
        attributes: dict[str, dict[str, Any]] = {}
        capacity: dict[str, dict[str, Any]] = {}
        value: dict[str, Any] = {"driver": self.driver, "attributes": attributes,
                                 "capacity": capacity, "allowMultipleAllocations": False}
        pairs = list(self.shared) + [(k, vs[i]) for k, vs in self.varying if vs[i] is not None]
        for (part, domain, ident), v in pairs:
            if part == "attributes":
                attributes.setdefault(domain, {})[ident] = _cel_value(v)
            elif part == "capacity":
                capacity.setdefault(domain, {})[ident] = _cel_value(v)
            else:
                value[ident] = v
        return value


#: (selectors, a slice's shared fields, the varying fields they read) -> verdict: what a
#: fold of DRA verdicts keeps with it (``match_slice``), at most this many
VERDICTS_LIMIT = 65536
Verdicts = dict[Any, Any]


class DeviceRequest(NamedTuple):
    """One way to satisfy a claim's request (the request itself, or one ``firstAvailable``
    subrequest)."""

    name: str
    device_class: str
    selectors: tuple[str, ...]
    amount: int  # devices wanted; 0: allocationMode All
    admin_access: bool
    tolerations: tuple[Mapping[str, Any], ...]
    #: capacity.requests: capacity name (as the device publishes it) -> quantity; None
    #: where a value does not parse
    capacity: tuple[tuple[str, Fraction | None], ...] = ()


def _request(name: str, raw: Mapping[str, Any]) -> DeviceRequest:
    count = raw.get("count", 1)
    all_mode = raw.get("allocationMode") == "All"
    tolerations = tuple(t for t in _list(raw.get("tolerations")) if isinstance(t, Mapping))
    cls = raw.get("deviceClassName")
    wanted = _mapping(_mapping(raw.get("capacity")).get("requests"))
    return DeviceRequest(name, cls if isinstance(cls, str) else "",
                         _selectors(raw.get("selectors")),
                         0 if all_mode else (count if isinstance(count, int) and count > 0
                                             else 1),
                         raw.get("adminAccess") is True, tolerations, _quantities(wanted))


def quantity_or_none(value: object) -> Fraction | None:
    """A resource.Quantity as a number (None: it does not parse)."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        return None
    try:
        return cel.parse_quantity(str(value))
    except cel.CELError:
        return None


class Constraint(NamedTuple):
    """One of a claim's ``spec.devices.constraints``: every device allocated for
    ``requests`` (all of the claim's when empty) has the same value of ``attribute``
    (``match``), or no two the same (``distinct``)."""

    match: bool
    attribute: str  # fully qualified: <domain>/<name>
    requests: tuple[str, ...]


class Held(NamedTuple):
    """A device an allocated claim holds (``status.allocation.devices.results``)."""

    driver: str
    pool: str
    device: str
    shared: bool  # a share of a device that allows multiple allocations (shareID)
    consumed: tuple[tuple[str, Fraction | None], ...]  # its consumedCapacity
    admin: bool  # admin access: not counted as in use


class ClaimSpec(NamedTuple):
    """A claim's requests; each is a tuple of alternatives (one unless ``firstAvailable``).
    ``allocated``: the claim is allocated already (``status.allocation``), and these are the
    node selector terms of the allocation, as JSON ("[]": allocated with no node selector,
    so any node reaches its devices; None: not allocated). The scheduler then places the
    pod only on a node those terms match, and allocates nothing more for the claim
    (Kubernetes 1.35 ``pkg/scheduler/framework/plugins/dynamicresources``: an allocated
    claim's ``nodeSelector`` filters nodes)."""

    requests: tuple[tuple[DeviceRequest, ...], ...]
    allocated: str | None = None
    constraints: tuple[Constraint, ...] = ()
    #: the devices it holds, where it is allocated
    held: tuple[Held, ...] = ()

    @classmethod
    def from_spec(cls, spec: object) -> ClaimSpec:
        out: list[tuple[DeviceRequest, ...]] = []
        devices = _mapping(_mapping(spec).get("devices"))
        for raw in _list(devices.get("requests")):
            r = _mapping(raw)
            name = r.get("name") if isinstance(r.get("name"), str) else ""
            if isinstance(r.get("exactly"), Mapping):
                out.append((_request(str(name), r["exactly"]),))
            elif isinstance(r.get("firstAvailable"), list):
                subs = tuple(_request(f"{name}/{s.get('name')}", s)
                             for s in r["firstAvailable"] if isinstance(s, Mapping))
                if subs:
                    out.append(subs)
        constraints = []
        for raw in _list(devices.get("constraints")):
            c = _mapping(raw)
            names = tuple(str(n) for n in _list(c.get("requests")) if isinstance(n, str))
            for key, match in (("matchAttribute", True), ("distinctAttribute", False)):
                if isinstance(c.get(key), str):
                    constraints.append(Constraint(match, c[key], names))
        return cls(tuple(out), constraints=tuple(constraints))

    @property
    def classes(self) -> frozenset[str]:
        return frozenset(r.device_class for alts in self.requests for r in alts)


def claim_spec(kind: str, obj: Mapping[str, Any]) -> ClaimSpec:
    """A ResourceClaim's requests (``spec``), or a ResourceClaimTemplate's (``spec.spec``).
    The kind is the caller's: items of a list carry none."""
    spec = _mapping(obj.get("spec"))
    if kind == "ResourceClaimTemplate":
        return ClaimSpec.from_spec(spec.get("spec"))
    out = ClaimSpec.from_spec(spec)
    allocation = _mapping(obj.get("status")).get("allocation")
    if isinstance(allocation, Mapping):
        terms = _list(_mapping(allocation.get("nodeSelector")).get("nodeSelectorTerms"))
        held = []
        for raw in _list(_mapping(allocation.get("devices")).get("results")):
            r = _mapping(raw)
            if all(isinstance(r.get(k), str) for k in ("driver", "pool", "device")):
                held.append(Held(r["driver"], r["pool"], r["device"],
                                 r.get("shareID") is not None,
                                 _quantities(r.get("consumedCapacity")),
                                 r.get("adminAccess") is True))
        out = out._replace(allocated=json.dumps(
            [t for t in terms if isinstance(t, Mapping)], sort_keys=True), held=tuple(held))
    return out


# --------------------------------------------------------------------------- a pod's demand


class PodClaim(NamedTuple):
    entry: str  # the name in spec.resourceClaims
    source: str  # "ResourceClaim x" / "ResourceClaimTemplate y"
    spec: ClaimSpec


class ClaimDemand(NamedTuple):
    """What a pod asks of DRA."""

    claims: tuple[PodClaim, ...]
    #: claims whose object gpupool has not seen (created later, or in the same apply)
    unresolved: tuple[str, ...]
    #: extended resources a DeviceClass serves: (resource, class)
    extended: tuple[tuple[str, str], ...]

    @property
    def classes(self) -> frozenset[str]:
        found = {c for claim in self.claims for c in claim.spec.classes}
        return frozenset(found | {c for _, c in self.extended})

    @property
    def any(self) -> bool:
        return bool(self.claims or self.unresolved or self.extended)


NO_DEMAND = ClaimDemand((), (), ())


def pod_claim_refs(spec: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """(entry name, kind, object name) of each ``spec.resourceClaims`` entry."""
    out = []
    for raw in _list(spec.get("resourceClaims")):
        r = _mapping(raw)
        entry = r.get("name")
        for field_name, kind in (("resourceClaimName", "ResourceClaim"),
                                 ("resourceClaimTemplateName", "ResourceClaimTemplate")):
            target = r.get(field_name)
            if isinstance(entry, str) and isinstance(target, str) and target:
                out.append((entry, kind, target))
    return tuple(out)


def extended_classes(names: Iterable[str], classes: Mapping[str, DeviceClass]
                     ) -> tuple[tuple[str, str], ...]:
    """Which of these extended resources a DeviceClass serves, and which class."""
    by_resource = {c.extended_resource: c.name for c in classes.values()
                   if c.extended_resource}
    out = []
    for r in sorted(names):
        if r in by_resource:
            out.append((r, by_resource[r]))
        elif r.startswith(IMPLICIT_EXTENDED_PREFIX) and \
                r[len(IMPLICIT_EXTENDED_PREFIX):] in classes:
            out.append((r, r[len(IMPLICIT_EXTENDED_PREFIX):]))
    return tuple(out)


# --------------------------------------------------------------------------- one node


class RuntimeFailure(str):
    """A selector that compiled but failed evaluating a device (a missing attribute, say):
    the allocator returns the error and the scheduler's DRA plugin fails the whole
    scheduling attempt with it (k8s.io/dynamic-resource-allocation v0.35.4,
    structured/internal/stable/allocator_stable.go: selectorsMatch's "CEL runtime error";
    kube-scheduler's Filter then returns an Error status, which ends the cycle for every
    node). A selector gpupool's runtime cannot compile is doubt instead."""


class Matched(NamedTuple):
    """A request's devices on one slice: how many match, how many only a taint keeps out,
    the first selector error seen (doubt), and the first runtime failure (fatal)."""

    found: int
    tainted: int
    error: str
    fatal: str = ""


def match_slice(s: Slice, request: DeviceRequest, device_class: DeviceClass,
                verdicts: Verdicts | None = None) -> Matched:
    """The request's devices among the slice's.

    Devices the selectors cannot tell apart (every field they read is equal) are judged
    once: on a node of eight identical GPUs that is one evaluation, and, across the nodes
    of one model, one evaluation for every node a fold of DRA verdicts judges (``verdicts``,
    which the fold keeps: its key is the selectors and the device fields they read). Which
    fields a selector reads is worked out from its text (``cel.referenced_names``); one it
    cannot tell that of is judged device by device."""
    if verdicts is None:
        verdicts = {}
    elif len(verdicts) >= VERDICTS_LIMIT:
        verdicts.clear()
    selectors = device_class.selectors + request.selectors
    compiled = [cel.held_selector(e, verdicts) for e in selectors]
    names_key = ("names", selectors)
    names = verdicts[names_key] if names_key in verdicts else \
        verdicts.setdefault(names_key, cel.referenced_names(selectors))
    columns = [(i, k) for i, (k, _) in enumerate(s.varying) if names is None or k[2] in names]
    groups: dict[tuple[Any, ...], list[int]] = {}
    for d in range(len(s)):
        groups.setdefault(tuple(s.varying[i][1][d] for i, _ in columns), []).append(d)
    count = tainted = 0
    error = fatal = ""
    for values, members in groups.items():
        vkey = (selectors, s.driver, s.shared, tuple(k for _, k in columns), values)
        verdict = verdicts.get(vkey)
        if verdict is None:
            device = s.device(members[0])
            verdict = True
            for sel in compiled:
                verdict = cel.evaluate(sel, device)
                if isinstance(verdict, str) and sel.program is not None:
                    verdict = RuntimeFailure(verdict)
                if verdict is not True:
                    break
            verdicts[vkey] = verdict
        if isinstance(verdict, RuntimeFailure):
            fatal = fatal or f"device {s.names[members[0]]}: {verdict}"
            continue
        if isinstance(verdict, str):
            error = error or f"on device {s.names[members[0]]}: {verdict}"
            continue
        if not verdict:
            continue
        for d in members:
            if s.taints and taints.keeps_off(s.taints[d], request.tolerations):
                tainted += 1
            else:
                count += 1
    return Matched(count, tainted, error, fatal)


def class_has_devices(slices: Iterable[Slice], device_class: DeviceClass,
                      verdicts: Verdicts | None = None) -> bool:
    """Does the class match a device in these slices (tainted or not: it is advertised)?"""
    r = DeviceRequest(device_class.name, device_class.name, (), 1, False, ())
    return any((m := match_slice(s, r, device_class, verdicts)).found or m.tainted
               for s in slices)


class NodeResult(NamedTuple):
    """Whether a node could allocate a pod's claims; ``why`` names the first request it
    cannot serve, ``doubt`` what kept gpupool from telling, ``fatal`` a selector's runtime
    failure on one of its devices (``RuntimeFailure``)."""

    ok: bool
    why: Said | None = None
    doubt: str = ""
    fatal: str = ""


def _judge_request(claim: PodClaim, r: DeviceRequest, slices: tuple[Slice, ...],
                   classes: Mapping[str, DeviceClass], verdicts: Verdicts | None
                   ) -> tuple[bool, Said | None, str, str]:
    """(served, why not, doubt, fatal) for one request, or one ``firstAvailable``
    alternative."""
    dc = classes.get(r.device_class)
    if dc is None:
        return False, said("dra.noClass", device_class=r.device_class), "", ""
    found = tainted = 0
    doubt = fatal = ""
    for s in slices:
        m = match_slice(s, r, dc, verdicts)
        found, tainted = found + m.found, tainted + m.tainted
        doubt = doubt or m.error
        fatal = fatal or (f"{claim.source} request {r.name}: {m.fatal}" if m.fatal else "")
    if fatal:
        return False, said("dra.error", error=fatal), doubt, fatal
    if r.amount == 0 and tainted:
        # allocationMode All takes every device the class and selectors match, tainted or
        # not, then refuses one whose taint the request does not tolerate
        # (k8s.io/dynamic-resource-allocation v0.35.4, allocator_stable.go: allDevices
        # from isSelectable, which reads no taint; allocateDevice -> allTaintsTolerated).
        return False, said("dra.allTainted", source=claim.source, request=r.name,
                           device_class=r.device_class, tainted=tainted), doubt, ""
    if (r.amount == 0 and found) or (r.amount and found >= r.amount):
        return True, None, doubt, ""
    return False, said("dra.tooFew", source=claim.source, request=r.name, amount=r.amount,
                       device_class=r.device_class, selectors=bool(r.selectors), found=found,
                       tainted=tainted), doubt, ""


def judge_node(claims: Iterable[PodClaim], slices: Iterable[Slice],
               classes: Mapping[str, DeviceClass], verdicts: Verdicts | None = None
               ) -> NodeResult:
    """Could every claim be allocated from these slices (the node's own and those every
    node reaches)? Each request alone; alternatives of ``firstAvailable`` in turn."""
    slices = tuple(slices)
    doubt = ""
    for claim in claims:
        for alternatives in claim.spec.requests:
            why: Said | None = None
            for r in alternatives:
                served, reason, seen, fatal = _judge_request(claim, r, slices, classes,
                                                             verdicts)
                doubt = doubt or seen
                if fatal:
                    return NodeResult(False, reason, doubt, fatal)
                if served:
                    break
                why = why or reason
            else:
                return NodeResult(False, why, doubt)
    return NodeResult(True, doubt=doubt)
