"""What the engine decides about one object, and the stable reason codes that name why.

Reason codes are part of gpupool's interface: they appear in admission responses, audit
records, metrics labels and ``gpupool check -o json``, and dashboards and alerts key on them.
Add codes; never rename one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from webhook.engine.core.patch import Op, encode_patch


class Reason(StrEnum):
    """A member compares equal to its code, so the code is what JSON, metrics and audit
    records carry."""

    # allowed
    NOT_GPU_POD = "NotGPUPod"
    ROUTED = "Routed"
    REPAIRED = "Repaired"
    CUSTOM_SCHEDULER = "CustomScheduler"
    NOT_A_POD = "NotAPod"
    INTERNAL_ERROR = "InternalError"
    KIND_NOT_HANDLED = "KindNotHandled"
    #: NVIDIA_VISIBLE_DEVICES=void set in containers that ask for no GPU (docs/security.md)
    ACCESS_VOIDED = "GPUAccessVoided"
    # denied
    UNKNOWN_POOL = "UnknownPool"
    POOL_CONFLICT = "PoolConflict"
    EXCLUSIVE_RESOURCE_CONFLICT = "ExclusiveResourceConflict"
    SCHEDULER_MISMATCH = "SchedulerMismatch"
    AFFINITY_MISMATCH = "AffinityMismatch"
    HAMI_RESOURCE_OUTSIDE_POOL = "HAMiResourceOutsidePool"
    CDI_DEVICE_MISSING = "CDIDeviceMissing"
    GPU_UUID_UNAVAILABLE = "GPUUUIDUnavailable"
    NO_CANDIDATE_NODES = "NoCandidateNodes"
    INVENTORY_MISSING = "InventoryMissing"
    GPU_NOT_DELIVERED = "GPUNotDelivered"
    DEVICE_CLASS_MISSING = "DeviceClassMissing"
    NO_MATCHING_DEVICES = "NoMatchingDevices"
    DRA_ADMIN_ACCESS_FORBIDDEN = "DRAAdminAccessForbidden"
    USER_NAMESPACE_UNSUPPORTED = "UserNamespaceUnsupported"
    NODE_VIEW_MISSING = "NodeViewMissing"
    GPU_NOT_ACCOUNTED = "GPUNotAccounted"
    UNKNOWN_DEVICE = "UnknownDevice"
    GPU_NOT_GRANTED = "GPUNotGranted"
    FORGED_ALLOCATION = "ForgedAllocation"
    # after admission (``gpupool scan``): never an admission answer
    SCHEDULER_NOT_RUNNING = "SchedulerNotRunning"
    GPUS_ADVERTISED_TWICE = "GPUsAdvertisedTwice"
    DEVICES_UNVERIFIED = "DevicesUnverified"
    #: its pod sandbox's runtime handler is gone from containerd's config on its node
    RUNTIME_HANDLER_MISSING = "RuntimeHandlerMissing"

    @classmethod
    def codes(cls) -> tuple[str, ...]:
        """Every reason code, in declaration order."""
        return tuple(r.value for r in cls)


#: Nodes a decision names at most (message, audit record, ``check -o json``): enough to act
#: on, bounded whatever the cluster's size.
MAX_FINDINGS = 20
#: Failing nodes a message quotes by name, and devices it quotes per node; messages give
#: the totals beyond them.
SHOW_NODES = 3
SHOW_DEVICES = 3


@dataclass(frozen=True)
class NodeFinding:
    """One node the decision looked at and what it lacked (empty: nothing)."""

    node: str
    missing: tuple[str, ...] = ()
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "missing": list(self.missing)}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Decision:
    allowed: bool
    reason: Reason
    message: str = ""
    gpu: bool = False
    pool: str | None = None
    scheduler_name: str | None = None
    patch: list[Op] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    nodes: list[NodeFinding] = field(default_factory=list)
    #: why the CDI check did not run ("" when it did, or had nothing to check): "no-nodes"
    #: (no node view at all) or "not-synced" (a watch still filling it); the server counts it
    unchecked: str = ""
    #: the patch as encoded, with the list it was encoded from (``encoded_patch``); one
    #: holder shared by a kept decision and every copy ``naming`` makes of it
    _encoded: list[tuple[list[Op], str]] = field(default_factory=list, repr=False,
                                                 compare=False)

    def encoded_patch(self) -> str:
        """The base64 text a response carries for ``patch``. The replicas of a workload share
        their decision's patch (``naming``), so it is encoded for the first that answers
        and kept for the rest; a patch assigned anew is another list, and encoded again."""
        held = self._encoded
        got = held[0] if held else None
        if got is not None and got[0] is self.patch:
            return got[1]
        text = encode_patch(self.patch)
        if got is None:
            held.append((self.patch, text))
        return text

    def warn(self, text: str) -> None:
        text = clean_warning(text)
        if text and text not in self.warnings:
            self.warnings.append(text)

    def naming(self, placeholder: str, who: str) -> Decision:
        """A copy of this decision with ``who`` where it said ``placeholder``: a decision
        kept for a pod shape, told of the pod at hand."""
        # The patch is shared, not copied (no decision's patch is changed in place), and so
        # is its encoding, made when one of them first answers.
        return Decision(self.allowed, self.reason, self.message.replace(placeholder, who),
                        self.gpu, self.pool, self.scheduler_name, self.patch,
                        [w.replace(placeholder, who) for w in self.warnings]
                        if self.warnings else [], list(self.nodes), self.unchecked,
                        self._encoded)

    def to_json(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "gpu": self.gpu,
            "pool": self.pool,
            "schedulerName": self.scheduler_name,
            "patch": self.patch,
            "warnings": self.warnings,
            "reason": self.reason,
            "message": self.message,
            "nodes": [n.to_json() for n in self.nodes],
        }


def allow(reason: Reason, *, message: str = "", gpu: bool = False, pool: str | None = None,
          scheduler_name: str | None = None, patch: list[Op] | None = None,
          nodes: Iterable[NodeFinding] = ()) -> Decision:
    return Decision(allowed=True, reason=reason, message=message, gpu=gpu, pool=pool,
                    scheduler_name=scheduler_name, patch=list(patch or ()), nodes=list(nodes))


def deny(reason: Reason, message: str, *, gpu: bool = False, pool: str | None = None,
         scheduler_name: str | None = None, nodes: Iterable[NodeFinding] = ()) -> Decision:
    """A denial carries no patch: the API server applies none from a denied review."""
    return Decision(allowed=False, reason=reason, message=message, gpu=gpu, pool=pool,
                    scheduler_name=scheduler_name, nodes=list(nodes))


WARNING_LIMIT = 120
#: The longest message a reply or audit record carries (values in it are clipped one by one
#: already; this bounds the whole).
MESSAGE_LIMIT = 8192
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@functools.lru_cache(maxsize=512)
def clean_warning(text: str) -> str:
    """Fit a warning to what the API server passes on: no control characters, < 120 chars.

    Cached: the pods of one workload repeat the same few warnings on every review."""
    text = _CONTROL.sub(" ", text).strip()
    if len(text) >= WARNING_LIMIT:
        text = text[: WARNING_LIMIT - 4].rstrip() + "..."
    return text
