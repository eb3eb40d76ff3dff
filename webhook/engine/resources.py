"""Which extended resources a pod asks for.

A pod is a GPU pod when any container or init container requests *or* limits a GPU resource:
HAMi keys on limits, the default scheduler on requests, and either alone is enough for one of
them to act on the pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from webhook.engine.policy import Policy

_ZERO = re.compile(r"^[+]?0*(\.0*)?([eE][+-]?\d+)?([a-zA-Z]{0,2})?$")


def is_zero_quantity(value: Any) -> bool:
    """True for quantities that ask for nothing (0, "0", "0Gi"); unparsable counts as non-zero."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == 0
    if isinstance(value, str):
        s = value.strip()
        return bool(s) and bool(_ZERO.match(s)) and any(c == "0" for c in s)
    return False


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """Yield (field, index, container) for init and regular containers that are mappings."""
    for fieldname in ("initContainers", "containers"):
        items = spec.get(fieldname)
        if not isinstance(items, list):
            continue
        for i, c in enumerate(items):
            if isinstance(c, dict):
                yield fieldname, i, c


def resource_names(spec: Mapping[str, Any]) -> set[str]:
    """Every extended resource named with a non-zero quantity in requests or limits."""
    names: set[str] = set()
    for _, _, c in containers(spec):
        res = c.get("resources")
        if not isinstance(res, dict):
            continue
        for part in ("limits", "requests"):
            values = res.get(part)
            if isinstance(values, dict):
                names.update(k for k, v in values.items()
                             if isinstance(k, str) and not is_zero_quantity(v))
    return names


def gpu_resources(spec: Mapping[str, Any], policy: Policy) -> set[str]:
    return {r for r in resource_names(spec) if policy.is_gpu_resource(r)}
