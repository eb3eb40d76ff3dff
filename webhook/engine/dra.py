"""GPUs through Dynamic Resource Allocation: what a pod's claims ask for, and which nodes
could allocate it.

A pod reaches DRA devices three ways: ``spec.resourceClaims`` naming a ResourceClaim or a
ResourceClaimTemplate, or an extended resource (``nvidia.com/gpu: 1``) that a DeviceClass
serves (``spec.extendedResourceName``, or the implicit
``deviceclass.resource.kubernetes.io/<class>``) on nodes where no device plugin does. This
module reads those objects as the API serves them (``resource.k8s.io/v1``) into small
immutable records, and judges a node as kube-scheduler's allocator would: the devices its
ResourceSlices publish, filtered by the class's and the request's CEL selectors
(``webhook.engine.cel``) and by device taints the request does not tolerate, counted against
what each request asks for.

It over-approximates on purpose, so that it never turns away a pod the scheduler could
place: devices other claims already hold, ``matchAttribute`` constraints, consumable capacity
and the sharing of one device between requests are not modelled; a node "can allocate" when
every request, taken alone, finds enough devices there. A selector that does not compile here
or fails at run time is doubt, never a reason to deny. Pure: no I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from webhook.engine import cel, objects

GROUP = "resource.k8s.io"
#: The implicit extended resource every DeviceClass serves when DRA-backed extended
#: resources are on (KEP-5004).
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Namespace label that lets claims in it ask for ``adminAccess`` (DRAAdminAccess).
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


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


class Device(NamedTuple):
    """One published device: its name, the value CEL selectors see as ``device``, and its
    hard taints."""

    name: str
    value: Mapping[str, Any]
    taints: tuple[Mapping[str, Any], ...]


def _attribute_value(raw: object) -> Any:
    """A DeviceAttribute as CEL sees it: its one typed field; versions as semver values."""
    a = _mapping(raw)
    for key in ("string", "bool", "int"):
        if key in a:
            return a[key]
    if "version" in a:
        try:
            return cel.semver_value(str(a["version"]))
        except cel.CELError:
            return None
    return None


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, _, ident = name.rpartition("/")
    return (domain or driver), ident


def _device(raw: Mapping[str, Any], driver: str) -> Device | None:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        return None
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in _mapping(raw.get("attributes")).items():
        v = _attribute_value(value)
        if isinstance(key, str) and v is not None:
            domain, ident = _qualified(key, driver)
            attributes.setdefault(sys.intern(domain), {})[sys.intern(ident)] = v
    capacity: dict[str, dict[str, Any]] = {}
    for key, value in _mapping(raw.get("capacity")).items():
        q = _mapping(value).get("value")
        if isinstance(key, str) and isinstance(q, str | int):
            try:
                domain, ident = _qualified(key, driver)
                capacity.setdefault(domain, {})[ident] = cel.quantity(str(q))
            except cel.CELError:
                continue
    taints = tuple(t for t in _list(raw.get("taints"))
                   if isinstance(t, Mapping) and t.get("effect") in _HARD_EFFECTS)
    value = {"driver": driver, "attributes": attributes, "capacity": capacity,
             "allowMultipleAllocations": bool(raw.get("allowMultipleAllocations"))}
    return Device(sys.intern(name), value, taints)


@dataclass(frozen=True, eq=False)
class Slice:
    """A ResourceSlice, reduced: whose devices, where they can be used."""

    name: str
    driver: str
    node: str | None  # spec.nodeName
    all_nodes: bool  # spec.allNodes, or a node selector gpupool does not evaluate
    devices: tuple[Device, ...]
    #: per request shape: the devices it matched (a cache; a changed slice is a new object)
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Slice | None:
        name = objects.meta_of(obj).get("name")
        spec = _mapping(obj.get("spec"))
        driver = spec.get("driver")
        if not isinstance(name, str) or not name or not isinstance(driver, str) or not driver:
            return None
        node = spec.get("nodeName")
        devices = tuple(d for raw in _list(spec.get("devices")) if isinstance(raw, Mapping)
                        if (d := _device(raw, driver)) is not None)
        return cls(name, sys.intern(driver), node if isinstance(node, str) and node else None,
                   not (isinstance(node, str) and node), devices)


class Request(NamedTuple):
    """One way to satisfy a claim's request (the request itself, or one ``firstAvailable``
    subrequest)."""

    name: str
    device_class: str
    selectors: tuple[str, ...]
    amount: int  # devices wanted; 0: allocationMode All
    admin_access: bool
    tolerations: tuple[Mapping[str, Any], ...]


def _request(name: str, raw: Mapping[str, Any]) -> Request:
    count = raw.get("count", 1)
    all_mode = raw.get("allocationMode") == "All"
    tolerations = tuple(t for t in _list(raw.get("tolerations")) if isinstance(t, Mapping))
    cls = raw.get("deviceClassName")
    return Request(name, cls if isinstance(cls, str) else "", _selectors(raw.get("selectors")),
                   0 if all_mode else (count if isinstance(count, int) and count > 0 else 1),
                   raw.get("adminAccess") is True, tolerations)


class ClaimSpec(NamedTuple):
    """A claim's requests; each is a tuple of alternatives (one unless ``firstAvailable``)."""

    requests: tuple[tuple[Request, ...], ...]

    @classmethod
    def from_spec(cls, spec: object) -> ClaimSpec:
        out: list[tuple[Request, ...]] = []
        for raw in _list(_mapping(_mapping(spec).get("devices")).get("requests")):
            r = _mapping(raw)
            name = r.get("name") if isinstance(r.get("name"), str) else ""
            if isinstance(r.get("exactly"), Mapping):
                out.append((_request(str(name), r["exactly"]),))
            elif isinstance(r.get("firstAvailable"), list):
                subs = tuple(_request(f"{name}/{s.get('name')}", s)
                             for s in r["firstAvailable"] if isinstance(s, Mapping))
                if subs:
                    out.append(subs)
        return cls(tuple(out))

    @property
    def classes(self) -> frozenset[str]:
        return frozenset(r.device_class for alts in self.requests for r in alts)


def claim_spec(kind: str, obj: Mapping[str, Any]) -> ClaimSpec:
    """A ResourceClaim's requests (``spec``), or a ResourceClaimTemplate's (``spec.spec``).
    The kind is the caller's: items of a list carry none."""
    spec = _mapping(obj.get("spec"))
    return ClaimSpec.from_spec(spec.get("spec") if kind == "ResourceClaimTemplate" else spec)


# --------------------------------------------------------------------------- a pod's demand


class PodClaim(NamedTuple):
    entry: str  # the name in spec.resourceClaims
    source: str  # "ResourceClaim x" / "ResourceClaimTemplate y"
    spec: ClaimSpec


class Demand(NamedTuple):
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


NO_DEMAND = Demand((), (), ())


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


def _tolerated(tolerations: tuple[Mapping[str, Any], ...], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        if t.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


class Matched(NamedTuple):
    """A request's devices on one slice: how many match, how many only a taint keeps out,
    and the first selector error seen (doubt)."""

    found: int
    tainted: int
    error: str


def match_slice(s: Slice, request: Request, device_class: DeviceClass) -> Matched:
    """The request's devices among the slice's; kept on the slice per request shape."""
    key = (request.device_class, device_class.selectors, request.selectors,
           request.tolerations and repr(request.tolerations))
    hit = s.memo.get(key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    compiled = [cel.compile_selector(e) for e in device_class.selectors + request.selectors]
    count = tainted = 0
    error = ""
    for d in s.devices:
        verdict: bool | str = True
        for sel in compiled:
            verdict = cel.evaluate(sel, d.value)
            if verdict is not True:
                break
        if isinstance(verdict, str):
            error = error or f"{sel.text!r} on device {d.name}: {verdict}"
            continue
        if not verdict:
            continue
        if any(not _tolerated(request.tolerations, t) for t in d.taints):
            tainted += 1
        else:
            count += 1
    out = Matched(count, tainted, error)
    if len(s.memo) < 64:
        s.memo[key] = out
    return out


class NodeResult(NamedTuple):
    """Whether a node could allocate a pod's claims; ``why`` names the first request it
    cannot serve, ``doubt`` what kept gpupool from telling."""

    ok: bool
    why: str = ""
    doubt: str = ""
    tainted: bool = False  # only device taints stand in the way


def judge_node(claims: Iterable[PodClaim], slices: Iterable[Slice],
               classes: Mapping[str, DeviceClass]) -> NodeResult:
    """Could every claim be allocated from these slices (the node's own and those every
    node reaches)? Each request alone; alternatives of ``firstAvailable`` in turn."""
    slices = tuple(slices)
    doubt = ""
    for claim in claims:
        for alternatives in claim.spec.requests:
            served = False
            first_why, only_tainted = "", True
            for r in alternatives:
                dc = classes.get(r.device_class)
                if dc is None:
                    first_why = first_why or f"DeviceClass {r.device_class} does not exist"
                    only_tainted = False
                    continue
                found = tainted = 0
                for s in slices:
                    m = match_slice(s, r, dc)
                    found, tainted = found + m.found, tainted + m.tainted
                    doubt = doubt or m.error
                if (r.amount == 0 and found) or (r.amount and found >= r.amount):
                    served = True
                    break
                if not tainted:
                    only_tainted = False
                need = "at least one device" if r.amount == 0 else \
                    f"{r.amount} device{'s' if r.amount > 1 else ''}"
                first_why = first_why or (
                    f"{claim.source} request {r.name} needs {need} of class "
                    f"{r.device_class}{' matching its selectors' if r.selectors else ''}; "
                    f"{found} found" + (f", {tainted} more behind device taints it does "
                                        "not tolerate" if tainted else ""))
            if not served:
                return NodeResult(False, first_why, doubt, only_tainted)
    return NodeResult(True, doubt=doubt)
