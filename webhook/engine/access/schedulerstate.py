"""HAMi's scheduler-owned pod annotations, written only by the identities that own them.

HAMi's device plugin hands a container the devices its scheduler wrote into the pod's
annotations, trusting them (HAMi v2.10 ``pkg/device/nvidia/device.go``: the request and
allocation annotations ``hami.io/vgpu-devices-to-allocate`` and
``hami.io/vgpu-devices-allocated``; ``pkg/util/types.go``: the bind phase, time and node,
which ``util.GetPendingPod`` reads to find the pod it allocates for). A pod that arrives with
them, or gains them by an UPDATE, can be handed devices no scheduler allocated: HAMi's master
denies both (HAMi #3042, #3074), v2.10.0 does not, and gpupool's ``hami.io/webhook: ignore``
label turns HAMi's webhook off for the pods of other pools. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.core.policy import ANY_WRITER

#: The keys HAMi's scheduler writes (v2.10 ``pkg/util/types.go``, ``device.go``).
OWNED = frozenset({"hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated",
                   "hami.io/vgpu-node", "hami.io/vgpu-time", "hami.io/bind-time",
                   "hami.io/bind-phase"})
#: Every vendor's request and allocation annotations end alike
#: (``hami.io/<vendor>-devices-to-allocate``, ``...-devices-allocated``); the webhook
#: configurations' matchConditions test the same (manifests/).
OWNED_SUFFIXES = ("-devices-to-allocate", "-devices-allocated")



def owned(key: object) -> bool:
    return isinstance(key, str) and (key in OWNED or (
        key.startswith("hami.io/") and key.endswith(OWNED_SUFFIXES)))


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # (JSON objects are dicts: a type test, not an ABC's, on every review of a pod)
    meta = obj.get("metadata") if type(obj) is dict else None
    ann = meta.get("annotations") if type(meta) is dict else None
    return ann if type(ann) is dict else {}


def forged(obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
           user: str, owners: tuple[str, ...]) -> tuple[str, ...]:
    """The scheduler-owned annotations this request sets that its sender does not own:
    every one a new pod carries, or every one an update adds or changes (removing one
    hands nobody a device). Empty for the owners themselves."""
    new = _annotations(obj)
    if not new or user in owners or ANY_WRITER in owners:
        return ()
    # (every review of a pod asks: the usual pod has no key of HAMi's at all)
    keys = [k for k in new if isinstance(k, str) and k.startswith("hami.io/") and owned(k)]
    if not keys:
        return ()
    before = _annotations(old) if old is not None else {}
    return tuple(sorted(k for k in keys if old is None or before.get(k) != new[k]))
