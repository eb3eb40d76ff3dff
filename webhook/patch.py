"""JSON Patch (RFC 6902) operations with RFC 6901 pointers.

Patches are built operation by operation rather than diffed from a mutated copy: the result
is minimal by construction, never reorders lists, and costs nothing per request for pods we
do not touch.
"""

from __future__ import annotations

import base64
import json
from typing import Any

Op = dict[str, Any]


def escape(token: str | int) -> str:
    """Escape one reference token: '~' first, then '/', as RFC 6901 requires."""
    return str(token).replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(t) for t in tokens)


def add(path: str, value: Any) -> Op:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> Op:
    return {"op": "replace", "path": path, "value": value}


def encode(ops: list[Op]) -> str:
    """The base64 text an AdmissionResponse carries in ``patch``."""
    return base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()


def set_map_entry(obj: dict[str, Any], base: tuple[str, ...], key: str, value: Any) -> list[Op]:
    """Ops that make ``obj[base...][key] == value``, creating missing maps on the way."""
    cur: Any = obj
    for depth, token in enumerate(base):
        nxt = cur.get(token) if isinstance(cur, dict) else None
        if not isinstance(nxt, dict):
            nested: Any = {key: value}
            for t in reversed(base[depth + 1:]):
                nested = {t: nested}
            return [add(pointer(*base[: depth + 1]), nested)]
        cur = nxt
    if key in cur and cur[key] == value:
        return []
    return [add(pointer(*base, key), value)]
