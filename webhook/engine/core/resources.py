"""Which extended resources a pod asks for.

A pod is a GPU pod when any container or init container requests *or* limits a GPU resource:
HAMi keys on limits, the default scheduler on requests, and either alone is enough for one of
them to act on the pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

_NONZERO_DIGITS = frozenset("123456789")
_ZERO = re.compile(r"^[+]?0*(\.0*)?([eE][+-]?\d+)?([a-zA-Z]{0,2})?$")


def is_zero_quantity(value: Any) -> bool:
    """True for quantities that ask for nothing (0, "0", "0Gi"); unparsable counts as non-zero."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    if isinstance(value, str):
        if value[:1] in _NONZERO_DIGITS:  # ("8000", "1Gi": most quantities, no regex)
            return False
        s = value.strip()
        return bool(s) and bool(_ZERO.match(s)) and any(c == "0" for c in s)
    return False


def whole_number(value: Any) -> int | None:
    """An extended resource's quantity as the whole number it must be (None: not one)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """Yield (field, index, container) for init and regular containers that are mappings."""
    for fieldname in ("initContainers", "containers"):
        items = spec.get(fieldname)
        if not isinstance(items, list):
            continue
        for i, c in enumerate(items):
            if isinstance(c, dict):
                yield fieldname, i, c


def container_list(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """The init and regular containers that are mappings, in that order."""
    init, regular = spec.get("initContainers"), spec.get("containers")
    if not init and isinstance(regular, list):  # (nearly every pod: no init containers)
        return tuple([c for c in regular if isinstance(c, dict)])
    out: list[Mapping[str, Any]] = []
    for items in (init, regular):
        if isinstance(items, list):
            out.extend(c for c in items if isinstance(c, dict))
    return tuple(out)


def resource_names(spec: Mapping[str, Any]) -> set[str]:
    """Every extended resource named with a non-zero quantity in requests or limits."""
    return requested_names(container_list(spec))


def requested_names(items: Iterable[Mapping[str, Any]]) -> set[str]:
    """``resource_names`` of these containers."""
    names: set[str] = set()
    for c in items:
        names.update(asked_by(c))
    return names


_NOTHING: frozenset[str] = frozenset()


def asked_by(container: Mapping[str, Any]) -> frozenset[str]:
    """The resources one container asks for (a non-zero request or limit)."""
    res = container.get("resources")
    if not isinstance(res, dict):
        return _NOTHING
    names: set[str] = set()
    for part in ("limits", "requests"):
        values = res.get(part)
        if isinstance(values, dict):
            for k, v in values.items():
                if not isinstance(k, str):
                    continue
                if type(v) is int:  # (a whole number: most extended resources' quantities)
                    if v:
                        names.add(k)
                elif not is_zero_quantity(v):
                    names.add(k)
    return frozenset(names) if names else _NOTHING


def _amount(c: Mapping[str, Any], name: str) -> int:
    """A container's request for an extended resource (requests equal limits for those; a
    limit alone stands for both)."""
    res = c.get("resources")
    if not isinstance(res, dict):
        return 0
    for part in ("limits", "requests"):
        values = res.get(part)
        if isinstance(values, dict) and name in values:
            n = whole_number(values[name])
            if n is not None:
                return n
    return 0


def pod_requests(spec: Mapping[str, Any], names: Iterable[str]) -> dict[str, int]:
    """What the scheduler counts against a node's allocatable: the sum over containers, or
    the largest init container's request if that is more."""
    out: dict[str, int] = {}
    for name in names:
        regular = sum(_amount(c, name) for f, _, c in containers(spec) if f == "containers")
        init = max((_amount(c, name) for f, _, c in containers(spec) if f == "initContainers"),
                   default=0)
        if max(regular, init):
            out[name] = max(regular, init)
    return out


def most_per_container(spec: Mapping[str, Any], count_resource: str,
                       implied_by: set[str]) -> int:
    """The most devices of ``count_resource`` one container asks for; a container that asks
    only for ``implied_by`` resources (HAMi's memory and core shares) gets one."""
    most = 0
    for _, _, c in containers(spec):
        n = _amount(c, count_resource)
        if not n and any(_amount(c, r) or _named(c, r) for r in implied_by):
            n = 1
        most = max(most, n)
    return most


def _named(c: Mapping[str, Any], name: str) -> bool:
    res = c.get("resources")
    return isinstance(res, dict) and any(
        isinstance(res.get(part), dict) and name in res[part] and not is_zero_quantity(
            res[part][name]) for part in ("limits", "requests"))
