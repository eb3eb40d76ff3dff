"""How gpupool names the objects it speaks about, in messages and audit records alike, and
reads their fields; and the one way a piece of an object becomes a cache key."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson


def as_mapping(value: object) -> Mapping[str, Any]:
    """A field that should hold a mapping, as one (empty when it holds anything else)."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    """A field that should hold a list, as one (empty when it holds anything else)."""
    return value if isinstance(value, list) else []


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    # (a dict is tested first: an ABC's test is a Python call, and every review asks)
    return meta if isinstance(meta, (dict, Mapping)) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    """The object's name, or ``generateName*`` before the API server has picked one."""
    meta = meta_of(obj)
    if meta.get("name"):
        return str(meta["name"])
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate:
        return generate + "*"
    return ""


#: The most of one user-supplied value a message or audit record repeats.
QUOTE_LIMIT = 100


def clip(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A user-supplied value as a message may repeat it: a 1 MiB label value must not make a
    1 MiB denial (nor audit record). Keeps the start, says how much was cut."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(+{len(text) - limit} chars)"


def describe(obj: Mapping[str, Any], namespace: str | None, kind: str) -> str:
    """'<kind> ns/name': every message says which object it is about."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(name, str) and name and namespace and len(name) <= QUOTE_LIMIT \
            and len(namespace) <= QUOTE_LIMIT:
        return f"{kind} {namespace}/{name}"  # (every review names its pod: the usual case)
    ns = clip(namespace or meta_of(obj).get("namespace") or "")
    return f"{kind} {ns + '/' if ns else ''}{clip(name_of(obj)) or '(unnamed)'}"


def env_entry(env: object, name: str) -> Mapping[str, Any] | None:
    """A variable's entry in a container's (or a ClusterPolicy component's) ``env`` list:
    the last one named so wins, as in the container. None when unset."""
    found = None
    if not isinstance(env, list):
        return None
    for e in env:
        # (``dict``, not ``Mapping``: JSON gives nothing else, and the check is far cheaper)
        if isinstance(e, dict) and e.get("name") == name:
            found = e
    return found


def literal_value(entry: Mapping[str, Any]) -> str | None:
    """An env entry's value as written ("" when it gives none); None when it comes from
    ``valueFrom``, or is not a string, and so cannot be known here."""
    value = entry.get("value", "")
    return value if isinstance(value, str) and "valueFrom" not in entry else None


def json_key(value: object) -> str:
    """``value`` as JSON, its keys in the order given: a cache key for what it decides.
    (Not sorted: equal text is then an equal value in the same order, so a key never
    joins two values that differ; one sent with its keys in another order is only decided
    again. The API server writes an object's keys in one order, and sorting cost a fifth
    of the digest of every new pod shape.)"""
    return json_bytes(value).decode()


def json_bytes(value: object) -> bytes:
    """``json_key`` as UTF-8 bytes, for a digest. Built on every review, so orjson (several
    times faster); the stdlib takes over for what orjson refuses (integers past 64 bits in a
    hand-written spec)."""
    try:
        return orjson.dumps(value, default=str)
    except TypeError:
        return json.dumps(value, default=str).encode()
