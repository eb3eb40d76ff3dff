"""Which taints keep what off a node: a pod's tolerations against a node's taints, and a DRA
request's tolerations against a device's (both follow the core API's toleration rules)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Effects that keep a new pod (or a new allocation) away; PreferNoSchedule does not.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations: Iterable[Any], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if not isinstance(t, Mapping):
            continue
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        op = t.get("operator") or "Equal"
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def keeps_off(taints: Iterable[Mapping[str, Any]], tolerations: Iterable[Any]) -> bool:
    """Whether a hard taint among these is not tolerated."""
    tolerations = tuple(tolerations)
    return any(t.get("effect") in HARD_EFFECTS and not tolerates(tolerations, t)
               for t in taints)
