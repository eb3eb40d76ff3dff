"""Could these claims be allocated together on this node? As Kubernetes' structured-parameters
allocator decides it.

kube-scheduler's DRA plugin asks ``k8s.io/dynamic-resource-allocation/structured`` node by
node. This follows v0.35.4's ``internal/experimental/allocator_experimental.go`` (the
implementation a 1.35 scheduler with the GPU DRA features selects), search and all, and
where v0.36's and v0.37's ``internal/incubating`` decide differently it follows the cluster's
release through the named switches of ``stacks.releases``:

- every request and every ``firstAvailable`` subrequest has its DeviceClass looked up before
  anything is tried (``validateDeviceRequest``); a missing one is an error;
- claims, requests and devices are taken in order, each device checked as ``allocateOne`` and
  ``allocateDevice`` check it: not in use (held by an allocated claim, or taken for this pod;
  admin access excepted), selectors of the class and the request (a CEL runtime error is an
  error, fatal for the scheduling attempt), taints the request does not tolerate
  (``taintPreventsAllocation``), the claim's constraints (``matchAttribute``,
  ``distinctAttribute``: ``constraint.go``, quirks included), shared counters of
  partitionable devices (``checkAvailableCounters``), consumable capacity
  (``consumable_capacity.go``); a failure backtracks;
- ``allocationMode: All`` takes every device the class and selectors match (and whose
  capacity fits); each must then be allocatable, or it is an error (a constraint) or a
  failure;
- ``firstAvailable`` tries its subrequests in order, each with everything after it.

Pools are taken as the view holds them: the node's own slices and those for every node (or a
node selector that matches). A search past ``budget`` steps is doubt, not an answer.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from webhook.api.said import Said, said
from webhook.engine.core import taints
from webhook.engine.stacks import cel
from webhook.engine.stacks.dra import (
    Capacity,
    ClaimSpec,
    DeviceClass,
    DeviceRequest,
    Held,
    RuntimeFailure,
    Slice,
)
from webhook.engine.stacks.releases import NEWEST_RELEASE, Release

#: allocateOne steps before the search is given up as doubt
BUDGET = 20000
#: resourceapi.AllocationResultsMaxSize
MAX_RESULTS = 32

DeviceID = tuple[str, str, str]  # driver, pool, device


class Outcome(NamedTuple):
    """``ok``: True, False, or None (doubt: ``why``); ``fatal``: an error the allocator
    returns, which ends the pod's scheduling attempt."""

    ok: bool | None
    why: Said | None = None
    fatal: str = ""


@dataclass
class InUse:
    """What allocated claims hold: devices taken whole, and capacity taken from devices
    that allow multiple allocations (the scheduler's claim tracker,
    ``GatherAllocatedState``)."""

    devices: set[DeviceID] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Fraction]] = field(default_factory=dict)
    #: devices held through shares, whether or not a share records consumed capacity
    #: (``AllocatedSharedDeviceIDs``; ``capacity`` is ``AggregatedCapacity``)
    shares: set[DeviceID] = field(default_factory=set)

    @classmethod
    def of(cls, held: Iterable[Held]) -> InUse:
        out = cls()
        for h in held:
            if h.admin:
                continue
            key = (h.driver, h.pool, h.device)
            if h.shared:
                out.shares.add(key)
                if not h.consumed:
                    continue
                got = out.capacity.setdefault(key, {})
                for name, q in h.consumed:
                    got[name] = got.get(name, Fraction(0)) + (q or 0)
            else:
                out.devices.add(key)
        return out


class _Error(Exception):
    """The allocator returns an error (``fatal``)."""


class _Budget(Exception):
    """Too many steps: doubt."""


@dataclass
class _Device:
    id: DeviceID
    slice: Slice
    index: int
    multi: bool
    policies: Mapping[str, Capacity]
    consumes: tuple[tuple[str, tuple[tuple[str, Fraction | None], ...]], ...]
    _view: dict[str, Any] | None = None
    _capacity: dict[str, Fraction] | None = None

    @property
    def view(self) -> dict[str, Any]:
        if self._view is None:
            self._view = self.slice.device(self.index)
        return self._view

    def attribute(self, name: str) -> Any:
        """``lookupAttribute``: the fully qualified name, or the driver's own by its ID."""
        domain, _, ident = name.rpartition("/")
        attrs = self.view["attributes"]
        if domain in attrs and ident in attrs[domain]:
            value = attrs[domain][ident]
            return json.dumps(value, sort_keys=True) if isinstance(value, dict) else value
        return None

    @property
    def capacity(self) -> dict[str, Fraction]:
        """Capacity name as published -> value (read once: every step checks it)."""
        if self._capacity is None:
            self._capacity = {
                ident if domain == self.slice.driver else f"{domain}/{ident}":
                    cel.fraction_of(value)
                for domain, values in self.view["capacity"].items()
                for ident, value in values.items()}
        return self._capacity

    @property
    def taints(self) -> tuple[Mapping[str, Any], ...]:
        return self.slice.taints[self.index] if self.slice.taints else ()


def _node_matches(selection: Mapping[str, Any], node: str,
                  labels: Mapping[str, str], term_matches: Callable[..., bool]) -> bool:
    if selection.get("allNodes") is True:
        return True
    if isinstance(selection.get("nodeName"), str):
        return bool(selection["nodeName"] == node)
    terms = (selection.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    return any(term_matches(t, labels, node) for t in terms if isinstance(t, Mapping))


def devices_on(node: str, labels: Mapping[str, str], slices: Iterable[Slice],
               term_matches: Callable[..., bool]
               ) -> tuple[list[_Device], dict[tuple[str, str], dict[str, dict[str, Fraction]]],
                          set[tuple[str, str]]]:
    """The devices a pod on this node could get, in the allocator's order (pool by pool,
    slice by slice); each pool's shared counters; the pools that are incomplete."""
    pools: dict[tuple[str, str], list[Slice]] = {}
    for s in slices:
        if s.node is None and not s.counters:
            if s.selector is not None and not _node_matches(
                    {"nodeSelector": json.loads(s.selector)}, node, labels, term_matches):
                continue
            if not (s.all_nodes or s.selector is not None or s.per_device):
                continue
        pools.setdefault((s.driver, s.pool[0]), []).append(s)
    devices: list[_Device] = []
    counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
    incomplete: set[tuple[str, str]] = set()
    for key, found in pools.items():
        newest = max(s.pool[1] for s in found)
        found = [s for s in found if s.pool[1] == newest]
        if len(found) != found[0].pool[2]:
            incomplete.add(key)
        for s in found:
            for name, values in s.counters:
                counters.setdefault(key, {})[name] = {k: v or Fraction(0) for k, v in values}
            for i, dname in enumerate(s.names):
                extra = s.extras[i] if s.extras else None
                if extra is not None and extra.selection is not None and not _node_matches(
                        json.loads(extra.selection), node, labels, term_matches):
                    continue
                devices.append(_Device((s.driver, s.pool[0], dname), s, i,
                                       extra.multi if extra else False,
                                       dict(extra.policies) if extra else {},
                                       extra.consumes if extra else ()))
    return devices, counters, incomplete


class _Constraint:
    def __init__(self, match: bool, attribute: str, requests: tuple[str, ...],
                 every: bool) -> None:
        self.match, self.attribute, self.requests = match, attribute, set(requests)
        self.first: Any = None
        self.count = 0
        self.seen: dict[str, Any] = {}  # distinct: per request name, the last value
        #: distinct over every device held (``Release.distinct_over_every_device``)
        self.every = every
        self.values: list[Any] = []

    def applies(self, request: str, sub: str) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (bool(sub) and f"{request}/{sub}" in self.requests)

    def add(self, request: str, sub: str, d: _Device) -> bool:
        if not self.applies(request, sub):
            return True
        value = d.attribute(self.attribute)
        if value is None:
            return False
        if not self.match and self.every:
            if any(v == value and type(v) is type(value) for v in self.values):
                return False
            self.values.append(value)
            self.count += 1
            return True
        if self.count == 0:
            if self.match:
                self.first = value
            else:
                self.seen[request] = value
            self.count = 1
            return True
        if self.match:
            if value != self.first or type(value) is not type(self.first):
                return False
        else:
            if any(v == value and type(v) is type(value) for v in self.seen.values()):
                return False
            self.seen[request] = value
        self.count += 1
        return True

    def remove(self, request: str, sub: str) -> None:
        if not self.applies(request, sub):
            return
        if not self.match:
            if self.every:
                self.values.pop()
            else:
                self.seen.pop(request, None)
        self.count -= 1


class _Request(NamedTuple):
    claim: int
    name: str  # the request's name
    sub: str  # the subrequest's name ("" for none)
    r: DeviceRequest
    cls: DeviceClass
    all_devices: tuple[_Device, ...] | None  # allocationMode All: every device it takes


def _consumed(r: DeviceRequest, capacity: Mapping[str, Fraction],
              policies: Mapping[str, Capacity]) -> dict[str, Fraction] | None:
    """``calculateConsumedCapacity`` for each of the device's capacities; None where a
    request names a capacity the device lacks, or a value its policy refuses."""
    wanted = dict(r.capacity)
    if any(name not in capacity for name in wanted):
        return None
    out = {}
    for name, total in capacity.items():
        p = policies.get(name)
        asked = wanted.get(name)
        if name in wanted and asked is None:
            return None
        if asked is None:
            value = p.default if p is not None and p.default is not None else total
        elif p is None:
            value = asked
        elif p.minimum is not None:
            value = max(asked, p.minimum)
            if p.step and value > p.minimum:
                steps = -(-(value - p.minimum) // p.step)
                value = p.minimum + p.step * steps
        elif p.valid_values is not None:
            value = next((v for v in sorted(p.valid_values) if asked <= v), asked)
        else:
            value = asked
        if p is not None and not (p.default is not None and value == p.default):
            if p.minimum is not None and (
                    (p.maximum is not None and value > p.maximum)
                    or (p.step and (value - p.minimum) % p.step)):
                return None
            if p.minimum is None and p.valid_values and value not in p.valid_values:
                return None
        out[name] = value
    return out


class _Search:
    def __init__(self, claims: Sequence[ClaimSpec], devices: list[_Device],
                 counters: Mapping[tuple[str, str], Mapping[str, Mapping[str, Fraction]]],
                 incomplete: set[tuple[str, str]], classes: Mapping[str, DeviceClass],
                 in_use: InUse, budget: int, release: Release,
                 compiled: dict[Any, Any] | None = None) -> None:
        self.claims, self.devices, self.classes = claims, devices, classes
        #: the selectors compiled (``cel.held_selector``), for this search or the caller's
        #: fold
        self.compiled: dict[Any, Any] = {} if compiled is None else compiled
        self.release = release
        self.incomplete = incomplete
        self.in_use = in_use
        self.budget = budget
        self.steps = 0
        self.match_cache: dict[tuple[int, int, int, int], bool] = {}
        self.taken: dict[DeviceID, set[int]] = {}  # exclusive devices -> claims taking them
        self.capacity: dict[DeviceID, dict[str, Fraction]] = {}
        self.counters_used: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self.available = self._available(counters)
        self.constraints = [[_Constraint(c.match, c.attribute, c.requests,
                                         release.distinct_over_every_device)
                             for c in claim.constraints] for claim in claims]
        self.plan: list[list[list[_Request]]] = []  # claim -> request -> alternatives

    def _available(self, counters: Mapping[tuple[str, str], Mapping[str, Mapping[str, Fraction]]]
                   ) -> dict[tuple[str, str], dict[str, dict[str, Fraction]]]:
        """Each pool's counters less what held devices consume."""
        out = {k: {s: dict(v) for s, v in sets.items()} for k, sets in counters.items()}
        shares = self.in_use.shares if self.release.held_shares_charge_counters else set()
        for d in self.devices:
            if (d.id in self.in_use.devices or d.id in shares) and d.consumes:
                for name, values in d.consumes:
                    got = out.get(d.id[:2], {}).get(name)
                    if got is None:
                        continue
                    for k, v in values:
                        if k in got:
                            got[k] -= v or 0
        return out

    # ---------------------------------------------------------------- matching

    def selectable(self, q: _Request, qi: tuple[int, int, int], d_index: int) -> bool:
        key = (*qi, d_index)
        hit = self.match_cache.get(key)
        if hit is not None:
            return hit
        d = self.devices[d_index]
        ok = True
        for expr in (*q.cls.selectors, *q.r.selectors):
            selector = cel.held_selector(expr, self.compiled)
            verdict = cel.evaluate(selector, d.view)
            if isinstance(verdict, str):
                if selector.program is None:
                    raise _Budget(f"selector {expr!r} could not be evaluated: {verdict}")
                raise _Error(f"request {q.name}: device {d.id[2]}: "
                             f"{RuntimeFailure(verdict)}")
            if verdict is not True:
                ok = False
                break
        self.match_cache[key] = ok
        return ok

    def static_capacity_fits(self, q: _Request, d: _Device) -> bool:
        """The request against the device's capacity alone, nothing taken."""
        consumed = _consumed(q.r, d.capacity, d.policies)
        return consumed is not None and all(consumed[n] <= total
                                            for n, total in d.capacity.items())

    def capacity_fits(self, q: _Request, d: _Device) -> bool:
        """``CmpRequestOverCapacity``."""
        capacity = d.capacity
        consumed = _consumed(q.r, capacity, d.policies)
        if consumed is None:
            return False
        held = self.in_use.capacity.get(d.id, {})
        taking = self.capacity.get(d.id, {})
        return all(consumed[n] + held.get(n, 0) + taking.get(n, 0) <= total
                   for n, total in capacity.items())

    # ---------------------------------------------------------------- the search

    def prepare(self) -> None:
        """``validateDeviceRequest`` for every request and subrequest."""
        for ci, claim in enumerate(self.claims):
            requests: list[list[_Request]] = []
            for alternatives in claim.requests:
                alts = []
                for r in alternatives:
                    name, _, sub = r.name.partition("/")
                    cls = self.classes.get(r.device_class)
                    if cls is None:
                        raise _Error(f"request {r.name}: DeviceClass {r.device_class} does not "
                                     "exist")
                    alts.append(_Request(ci, name, sub, r, cls, None))
                requests.append(alts)
            self.plan.append(requests)
        for ci, requests in enumerate(self.plan):
            for ri, alts in enumerate(requests):
                for si, q in enumerate(alts):
                    if q.r.amount == 0:
                        alts[si] = q._replace(all_devices=self._all(q, (ci, ri, si)))

    def _all(self, q: _Request, qi: tuple[int, int, int]) -> tuple[_Device, ...]:
        if self.incomplete & {d.id[:2] for d in self.devices}:
            raise _Error(f"request {q.name}: asks for all devices, but a resource pool is "
                         "currently being updated")
        fits = self.static_capacity_fits if self.release.all_takes_capacity_blocked_devices \
            else self.capacity_fits
        return tuple(d for i, d in enumerate(self.devices)
                     if self.selectable(q, qi, i) and fits(q, d))

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.budget:
            raise _Budget(f"more than {self.budget} steps")

    def run(self) -> bool:
        return self.one(0, 0, None, 0)

    def one(self, ci: int, ri: int, si: int | None, di: int, start: int = 0) -> bool:
        """``allocateOne``: device ``di`` of request ``ri`` (subrequest ``si``) of claim
        ``ci``, searched from device ``start`` on."""
        self.step()
        if ci >= len(self.plan):
            return True
        if ri >= len(self.plan[ci]):
            return self.one(ci + 1, 0, None, 0)
        alts = self.plan[ci][ri]
        if si is None:  # firstAvailable: each subrequest in turn, with all that follows
            return any(self.one(ci, ri, s, di) for s in range(len(alts)))
        q = alts[si]
        if q.all_devices is not None:
            if not q.all_devices:
                return False
            if di >= len(q.all_devices):
                return self.one(ci, ri + 1, None, 0)
            undo = self.allocate(q, q.all_devices[di], must=True)
            if undo is None:
                return False
            nxt = si if self.release.all_subrequest_keeps_its_index else 0
            if self.one(ci, ri, nxt, di + 1):
                return True
            undo()
            return False
        if di >= q.r.amount:
            return self.one(ci, ri + 1, None, 0)
        once = self.release.request_takes_a_device_once
        for i in range(start if once else 0, len(self.devices)):
            d = self.devices[i]
            if q.r.admin_access and ci in self.taken.get(d.id, ()):
                continue
            if not q.r.admin_access and self.in_use_now(d.id):
                continue
            if not self.selectable(q, (ci, ri, si), i) or not self.capacity_fits(q, d):
                continue
            undo = self.allocate(q, d, must=False)
            if undo is None:
                continue
            if self.one(ci, ri, si, di + 1, i + 1):
                return True
            undo()
        return False

    def in_use_now(self, device: DeviceID) -> bool:
        return device in self.in_use.devices or bool(self.taken.get(device))

    def allocate(self, q: _Request, d: _Device, must: bool) -> Callable[[], None] | None:
        """``allocateDevice``: None when the device cannot be taken."""
        multi = d.multi
        if not multi and q.r.admin_access and q.claim in self.taken.get(d.id, ()):
            return None
        if not q.r.admin_access and self.in_use_now(d.id):
            return None
        rel = self.release
        shared_now = d.id in self.in_use.capacity or any(self.capacity.get(d.id, {}).values()) \
            or (rel.shares_without_capacity_are_shared and d.id in self.in_use.shares)
        counted = False
        if d.consumes and not (multi and shared_now):
            if not self.take_counters(d):
                return None
            counted = True
        # Before 1.36 a device refused past this point keeps the counters it was just charged
        # (v0.35.4's allocateDevice returns on a taint or a constraint without
        # deallocateCountersForDevice) and later devices of the pool see them charged.
        give_back = counted and rel.rollback_returns_counters
        if taints.keeps_off(d.taints, q.r.tolerations):
            if give_back:
                self.give_counters(d)
            return None
        added: list[_Constraint] = []
        for c in self.constraints[q.claim]:
            if not c.add(q.name, q.sub, d):
                if must:
                    raise _Error(f"request {q.r.name}: cannot add device {d.id[2]} because a "
                                 "claim constraint would not be satisfied")
                for a in reversed(added):
                    a.remove(q.name, q.sub)
                if give_back:
                    self.give_counters(d)
                return None
            added.append(c)
        if not multi:
            self.taken.setdefault(d.id, set()).add(q.claim)
        consumed: dict[str, Fraction] = {}
        if not self.capacity_fits(q, d):
            for a in reversed(added):
                a.remove(q.name, q.sub)
            if counted:
                self.give_counters(d)
            if not multi:
                self.taken[d.id].discard(q.claim)
            return None
        if multi:
            consumed = _consumed(q.r, d.capacity, d.policies) or {}
            got = self.capacity.setdefault(d.id, {})
            for n, v in consumed.items():
                got[n] = got.get(n, Fraction(0)) + v

        def undo() -> None:
            for a in reversed(added):
                a.remove(q.name, q.sub)
            if multi:
                got = self.capacity[d.id]
                for n, v in consumed.items():
                    got[n] -= v
                # v0.35.4's undo gives a shared device's counters back only for exclusive
                # devices; 1.36's rollbackDevice for every device it charged.
                if counted and rel.rollback_returns_counters:
                    self.give_counters(d)
            else:
                self.taken[d.id].discard(q.claim)
                if counted:
                    self.give_counters(d)
        return undo

    def take_counters(self, d: _Device) -> bool:
        """``checkAvailableCounters``: what the device consumes, on top of what this pod's
        devices consume, within what the pool's counter sets have left."""
        pool = d.id[:2]
        used = self.counters_used.setdefault(pool, {})
        for name, values in d.consumes:
            got = used.setdefault(name, {})
            for k, v in values:
                got[k] = got.get(k, Fraction(0)) + (v or 0)
        available = self.available.get(pool, {})
        for name, counters in available.items():
            for k, total in counters.items():
                if total < used.get(name, {}).get(k, 0):
                    self.give_counters(d)
                    return False
        return True

    def give_counters(self, d: _Device) -> None:
        used = self.counters_used.get(d.id[:2], {})
        for name, values in d.consumes:
            got = used.get(name, {})
            for k, v in values:
                if k in got:
                    got[k] -= v or 0


def allocate(claims: Sequence[ClaimSpec], node: str, labels: Mapping[str, str],
             slices: Iterable[Slice], classes: Mapping[str, DeviceClass],
             in_use: InUse | None, term_matches: Callable[..., bool],
             release: Release = NEWEST_RELEASE, budget: int = BUDGET,
             compiled: dict[Any, Any] | None = None) -> Outcome:
    """Could these claims be allocated together on ``node``, with ``in_use`` held (None:
    every held device free), as ``release``'s allocator decides? ``compiled``: where the
    selectors compiled are kept for the caller's other nodes (a fold of DRA verdicts)."""
    devices, counters, incomplete = devices_on(node, labels, slices, term_matches)
    search = _Search(claims, devices, counters, incomplete, classes, in_use or InUse(),
                     budget, release, compiled)
    try:
        search.prepare()
        for claim in search.plan:
            least = sum(min(len(q.all_devices) if q.all_devices is not None else q.r.amount
                            for q in alts) for alts in claim)
            if least > MAX_RESULTS:
                raise _Error(f"a claim asks for {least} devices, over the limit of "
                             f"{MAX_RESULTS}")
        ok = search.run()
    except _Error as exc:
        return Outcome(False, said("dra.error", error=str(exc)), fatal=str(exc))
    except _Budget as exc:
        return Outcome(None, said("dra.searchUnfinished", why=str(exc)))
    except RecursionError:
        return Outcome(None, said("dra.searchTooDeep"))
    if ok:
        return Outcome(True)
    return Outcome(False, said("dra.noSet"))
