"""JSON Patch (RFC 6902) operations with RFC 6901 pointers.

Patches are built operation by operation rather than diffed from a mutated copy: the result
is minimal by construction, never reorders lists, and costs nothing per request for pods we
do not touch.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

Op = dict[str, Any]


def escape(token: str | int) -> str:
    """Escape one reference token: '~' first, then '/', as RFC 6901 requires."""
    text = str(token)
    if "~" not in text and "/" not in text:
        return text  # (nearly every token: every mutation builds several)
    return text.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    out = ""
    for token in tokens:  # (``escape`` called only where it has work: every mutation builds a few)
        text = str(token)
        out += "/" + (escape(text) if "~" in text or "/" in text else text)
    return out


def add(path: str, value: Any) -> Op:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> Op:
    return {"op": "replace", "path": path, "value": value}


def remove(path: str) -> Op:
    return {"op": "remove", "path": path}


def encode_patch(ops: Sequence[Op]) -> str:
    """The base64 text an AdmissionResponse carries in ``patch``."""
    # (``base64.b64encode`` is this one C call behind a Python function, on every review)
    return binascii.b2a_base64(orjson.dumps(ops), newline=False).decode("ascii")


def set_map_entry(obj: Mapping[str, Any], base: tuple[str, ...], key: str, value: Any
                  ) -> list[Op]:
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


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply(obj: Mapping[str, Any], ops: Sequence[Op]) -> dict[str, Any]:
    """Apply our own add/replace/remove operations without touching ``obj``.

    Only the containers on each operation's path are copied (path copying), so applying a
    patch costs the length of its paths, not the size of the pod or of the values: patches
    are memoised per pod shape, and neither they nor the request are ever written to.
    """
    root = dict(obj)
    copied = {id(root)}
    for op in ops:
        if op["op"] not in ("add", "replace", "remove"):
            raise ValueError(f"unsupported operation {op['op']!r}")
        path = op["path"]
        tokens = path.split("/")[1:]
        if "~" in path:
            tokens = [unescape(t) for t in tokens]
        parent: Any = root
        for token in tokens[:-1]:
            key: Any = int(token) if isinstance(parent, list) else token
            child = parent[key]
            if id(child) not in copied:
                child = dict(child) if isinstance(child, dict) else list(child)
                parent[key] = child
                copied.add(id(child))
            parent = child
        last = tokens[-1]
        if op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
            continue
        # Shared, not copied, like the untouched rest of the pod: the result is read-only,
        # and a later operation that descends into this value copies what it walks.
        value = op["value"]
        if isinstance(parent, list):
            if last == "-":
                parent.append(value)
            elif op["op"] == "add":
                parent.insert(int(last), value)
            else:
                parent[int(last)] = value
        else:
            parent[last] = value
    return root
