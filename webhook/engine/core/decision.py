"""What the engine decides about one object, and the stable reason codes that name why.

Reason codes are part of gpupool's interface: they appear in admission responses, audit
records, metrics labels and ``gpupool check -o json``, and dashboards and alerts key on them.
Add codes; never rename one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

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
    UNKNOWN_GPU_RESOURCE = "UnknownGPUResource"
    GPU_NOT_ACCOUNTED = "GPUNotAccounted"
    UNKNOWN_DEVICE = "UnknownDevice"
    GPU_NOT_GRANTED = "GPUNotGranted"
    FORGED_ALLOCATION = "ForgedAllocation"
    #: HAMi's device plugin serves the node, and HAMi's scheduler does not bind the pod
    NOT_BOUND_BY_HAMI = "NotBoundByHAMi"
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


class Decision(NamedTuple):
    """What the engine decided, immutable: a decision kept for a pod shape is handed to
    every pod of that shape (``about``), so nothing may change it after it is made; a later
    stage that adds to it makes a new one (``_replace``, ``warned``). (A named tuple: one is
    built for every review, and a frozen dataclass costs several times more to build.)

    The message is rendered here, once, from what was said: a statement either stands alone
    or continues a sentence whose subject is the object decided on (``of_subject``). The
    engine decides for a pod shape and names no pod; ``about`` names the pod at hand, so the
    replicas of a workload share one decision and each reads its own name."""

    allowed: bool
    reason: Reason
    #: what is said; when ``of_subject``, what follows the subject (": ...", " is in ...")
    statement: str = ""
    gpu: bool = False
    pool: str | None = None
    scheduler_name: str | None = None
    patch: tuple[Op, ...] = ()
    warnings: tuple[str, ...] = ()
    nodes: tuple[NodeFinding, ...] = ()
    #: why the CDI check did not run ("" when it did, or had nothing to check): "no-nodes"
    #: (no node view at all) or "not-synced" (a watch still filling it); the server counts it
    unchecked: str = ""
    #: the statement continues a sentence about the object (``subject``)
    of_subject: bool = False
    #: how the message names the object ("pod ns/name"), once ``about`` told it
    subject: str = ""

    @property
    def message(self) -> str:
        """The statement, after its subject where it continues one."""
        return self.subject + self.statement if self.of_subject else self.statement

    def encoded_patch(self) -> str:
        """The base64 text a response carries for ``patch``."""
        return encode_patch(self.patch)

    def about(self, subject: str) -> Decision:
        """This decision, naming ``subject`` (a decision kept for a pod shape, told of the
        pod at hand): every field as it is, the last (``subject``) anew. (Not ``_replace``,
        which costs several times more: every review of a known shape makes one.)"""
        return _as_decision((*self[:-1], subject))

    def warned(self, *texts: str) -> Decision:
        """This decision with ``texts`` among its warnings (each fitted, none twice)."""
        warnings = with_warnings(self.warnings, texts)
        return self if warnings is self.warnings else self._replace(warnings=warnings)

    def saying(self, statement: str, *, of_subject: bool | None = None) -> Decision:
        """This decision with another statement (about the subject as before, unless told)."""
        return self._replace(statement=statement,
                             of_subject=self.of_subject if of_subject is None else of_subject)

    def to_json(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "gpu": self.gpu,
            "pool": self.pool,
            "schedulerName": self.scheduler_name,
            "patch": list(self.patch),
            "warnings": list(self.warnings),
            "reason": self.reason,
            "message": self.message,
            "nodes": [n.to_json() for n in self.nodes],
        }


assert Decision._fields[-1] == "subject", "about() replaces the last field"
_as_decision = Decision._make


def with_warnings(held: tuple[str, ...], texts: Iterable[str]) -> tuple[str, ...]:
    """``held`` and then ``texts``, each fitted to what the API server passes on
    (``clean_warning``), none twice, none empty; ``held`` itself when nothing is added."""
    out: list[str] | None = None
    for text in texts:
        text = clean_warning(text)
        if not text or text in (held if out is None else out):
            continue
        if out is None:
            out = list(held)
        out.append(text)
    return held if out is None else tuple(out)


def joined(held: tuple[str, ...], more: tuple[str, ...]) -> tuple[str, ...]:
    """Two decisions' warnings, each once (both fitted already: made by ``with_warnings``)."""
    if not more:
        return held
    if not held:
        return more
    return held + tuple(w for w in more if w not in held)


def allow(reason: Reason, *, message: str = "", of_subject: bool = False, gpu: bool = False,
          pool: str | None = None, scheduler_name: str | None = None,
          patch: Iterable[Op] = (), nodes: Iterable[NodeFinding] = (),
          warnings: Iterable[str] = (), unchecked: str = "") -> Decision:
    """``message`` stands alone, or with ``of_subject`` follows the object's name."""
    return Decision(allowed=True, reason=reason, statement=message, gpu=gpu, pool=pool,
                    scheduler_name=scheduler_name, patch=tuple(patch),
                    warnings=with_warnings((), warnings), nodes=tuple(nodes),
                    unchecked=unchecked, of_subject=of_subject)


def deny(reason: Reason, message: str, *, of_subject: bool = False, gpu: bool = False,
         pool: str | None = None, scheduler_name: str | None = None,
         nodes: Iterable[NodeFinding] = (), warnings: Iterable[str] = ()) -> Decision:
    """A denial carries no patch: the API server applies none from a denied review."""
    return Decision(allowed=False, reason=reason, statement=message, gpu=gpu, pool=pool,
                    scheduler_name=scheduler_name, warnings=with_warnings((), warnings),
                    nodes=tuple(nodes), of_subject=of_subject)


WARNING_LIMIT = 120
#: The longest message a reply or audit record carries (values in it are clipped one by one
#: already; this bounds the whole).
MESSAGE_LIMIT = 8192
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean_warning(text: str) -> str:
    """Fit a warning to what the API server passes on: no control characters, < 120 chars."""
    text = _CONTROL.sub(" ", text).strip()
    if len(text) >= WARNING_LIMIT:
        text = text[: WARNING_LIMIT - 4].rstrip() + "..."
    return text
