"""What the engine decides about one object, and the stable reason codes that name why.

Reason codes are part of gpupool's interface: they appear in admission responses, audit
records, metrics labels and ``gpupool check -o json``, and dashboards and alerts key on them.
Add codes; never rename one.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.patch import Op


class Reason:
    # allowed
    NOT_GPU_POD = "NotGPUPod"
    ROUTED = "Routed"
    CUSTOM_SCHEDULER = "CustomScheduler"
    NOT_A_POD = "NotAPod"
    INTERNAL_ERROR = "InternalError"
    KIND_NOT_HANDLED = "KindNotHandled"
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

    @classmethod
    def codes(cls) -> tuple[str, ...]:
        """Every reason code, in declaration order."""
        return tuple(v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str))


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
    reason: str
    message: str = ""
    gpu: bool = False
    pool: str | None = None
    scheduler_name: str | None = None
    patch: list[Op] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    nodes: list[NodeFinding] = field(default_factory=list)

    def warn(self, text: str) -> None:
        text = clean_warning(text)
        if text and text not in self.warnings:
            self.warnings.append(text)

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


def allow(reason: str, **kw: Any) -> Decision:
    return Decision(allowed=True, reason=reason, **kw)


def deny(reason: str, message: str, **kw: Any) -> Decision:
    return Decision(allowed=False, reason=reason, message=message, **kw)


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
