"""The node annotation ``gpupool.io/held-devices``: what each running pod on a node holds,
and how the kubelet will hand it back when a container restarts.

The kubelet allocates a container's devices once, when it admits the pod, and keeps the
device plugin's answer in its device-manager checkpoint; a restarted container gets that
same answer back, never a new one (Kubernetes v1.35 ``pkg/kubelet/cm/devicemanager``:
``devicesToAllocate`` returns nothing to allocate for a container that already holds its
devices, and ``GetDeviceRunContainerOptions`` builds the container's options from
``podDevices.deviceRunContainerOptions``, the cached ``ContainerAllocateResponse``). So what
decides a restart is that cached answer, not what the plugin would answer today. The agent
reads it from the checkpoint (``webhook.node.kubelet``) and publishes the parts the runtime
acts on: the device ids, ``NVIDIA_VISIBLE_DEVICES``, the CDI device names and the CDI
annotations. The scan and ``check --running`` judge exactly those against the node as it
is now (``engine.aftercare.restart``). Format: docs/cdi-inventory.md.

Size: a Node's annotations share 256 KiB. An 8-GPU node with 110 pods is about 30 KiB as
plain JSON; beyond ``PLAIN_BYTES`` the document is gzip-compressed (its device names repeat,
so it shrinks several times over), and beyond ``MAX_BYTES`` the pods that do not fit are
left out and listed as such, so their answer is doubt with that reason, never a guess.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

HELD_ANNOTATION = "gpupool.io/held-devices"
SCHEMA_VERSION = 1
#: Up to this size the document is published as plain JSON, readable with kubectl.
PLAIN_BYTES = 48 * 1024
#: Never more than this, compressed: with the inventory's own 200 KiB budget
#: (``inventory.MAX_ANNOTATION_BYTES``) the two stay within the API server's 256 KiB for all
#: of a Node's annotations.
MAX_BYTES = 48 * 1024
#: The environment variable the NVIDIA runtime reads devices from.
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
#: Annotations the runtime and containerd read CDI device names from (the device plugin's
#: ``cdi-annotations`` strategy writes ``cdi.k8s.io/<plugin>_<id>``).
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


class HeldError(ValueError):
    pass


@dataclass(frozen=True)
class Held:
    """One container's allocation of one resource, as the kubelet will hand it back."""

    container: str
    resource: str
    #: the device ids the plugin allocated (time-slicing's ``::<n>`` replica suffix kept)
    ids: tuple[str, ...]
    #: ``NVIDIA_VISIBLE_DEVICES`` in the cached answer (None: not set)
    visible_devices: str | None = None
    #: CDI device names in the cached answer (the ``cdi-cri`` strategy)
    cdi_devices: tuple[str, ...] = ()
    #: CDI annotations in the cached answer (the ``cdi-annotations`` strategy)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: device nodes or mounts the answer hands besides (the ``volume-mounts`` strategy, a
    #: vendor's own plugin): gpupool does not judge those
    other: bool = False

    @property
    def cdi_names(self) -> tuple[str, ...]:
        """Every fully qualified CDI name the runtime or containerd will look up."""
        return tuple(dict.fromkeys((*self.cdi_devices, *self.annotation_names)))

    @property
    def annotation_keys(self) -> tuple[str, ...]:
        """The answer's ``cdi.k8s.io/`` annotations (the ``cdi-annotations`` strategy)."""
        return tuple(k for k in sorted(self.annotations) if k.startswith(CDI_ANNOTATION_PREFIX))

    @property
    def annotation_names(self) -> tuple[str, ...]:
        """The CDI names those annotations hold."""
        return tuple(dict.fromkeys(n.strip() for k in self.annotation_keys
                                   for n in self.annotations[k].split(",") if n.strip()))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"container": self.container, "resource": self.resource,
                               "ids": list(self.ids)}
        if self.visible_devices is not None:
            out["visibleDevices"] = self.visible_devices
        if self.cdi_devices:
            out["cdiDevices"] = list(self.cdi_devices)
        if self.annotations:
            out["annotations"] = dict(sorted(self.annotations.items()))
        if self.other:
            out["other"] = True
        return out


@dataclass(frozen=True)
class HeldDevices:
    """Per pod UID, what its containers hold."""

    pods: Mapping[str, tuple[Held, ...]]
    observed_at: str = ""
    #: pods held on the node whose entries did not fit the budget (their answer is doubt)
    left_out: tuple[str, ...] = ()
    #: why the checkpoint could not be read (then ``pods`` is empty and says nothing)
    error: str = ""

    def content(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schemaVersion": SCHEMA_VERSION,
            "pods": {uid: [h.to_json() for h in held]
                     for uid, held in sorted(self.pods.items())}}
        if self.left_out:
            doc["leftOut"] = sorted(self.left_out)
        if self.error:
            doc["error"] = self.error
        return doc

    def dumps(self) -> str:
        """The annotation's value, within the budget: plain, compressed, or with the pods
        that do not fit left out (the largest first, so the most pods stay known)."""
        doc = self.content()
        text = _encode(doc, self.observed_at)
        if len(text) <= MAX_BYTES:
            return text
        pods = doc["pods"]
        order = sorted(pods, key=lambda u: (len(json.dumps(pods[u])), u))

        def keeping(n: int) -> str:
            kept = order[:n]
            left = sorted({*doc.get("leftOut", ()), *order[n:]})
            return _encode({**doc, "pods": {u: pods[u] for u in kept}, "leftOut": left},
                           self.observed_at)

        lo, hi = 0, len(order) - 1  # the most pods that fit: keeping(lo) always does
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(keeping(mid)) <= MAX_BYTES:
                lo = mid
            else:
                hi = mid - 1
        return keeping(lo)


def _encode(doc: Mapping[str, Any], observed_at: str) -> str:
    full = {**doc, "observedAt": observed_at}
    text = json.dumps(full, separators=(",", ":"), sort_keys=True)
    if len(text) <= PLAIN_BYTES:
        return text
    packed = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
    return json.dumps({"schemaVersion": SCHEMA_VERSION, "encoding": "gzip+base64",
                       "data": packed}, separators=(",", ":"))


def _strs(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HeldError(f"{what}: expected a list of strings")
    return tuple(value)


def _entry(raw: Any, where: str) -> Held:
    if not isinstance(raw, dict):
        raise HeldError(f"{where}: expected an object")
    container, resource = raw.get("container"), raw.get("resource")
    if not isinstance(container, str) or not isinstance(resource, str):
        raise HeldError(f"{where}: container and resource must be strings")
    visible = raw.get("visibleDevices")
    if visible is not None and not isinstance(visible, str):
        raise HeldError(f"{where}.visibleDevices: expected a string")
    annotations = raw.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()):
        raise HeldError(f"{where}.annotations: expected an object of strings")
    return Held(container, resource, _strs(raw.get("ids") or [], f"{where}.ids"), visible,
                _strs(raw.get("cdiDevices") or [], f"{where}.cdiDevices"), annotations,
                raw.get("other") is True)


@functools.lru_cache(maxsize=256)
def parse_held(text: str) -> HeldDevices:
    """The annotation's value; a scan re-judging a node's pods reads it once for them all.
    Raises HeldError for a value that is not this document."""
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and doc.get("encoding") == "gzip+base64":
            data = doc.get("data")
            if not isinstance(data, str):
                raise HeldError("data: expected base64 text")
            doc = json.loads(gzip.decompress(base64.b64decode(data, validate=True)))
    except (ValueError, OSError, EOFError) as exc:
        raise HeldError(f"not valid JSON (or gzip+base64 JSON): {exc}") from exc
    if not isinstance(doc, dict):
        raise HeldError("expected a JSON object")
    if doc.get("schemaVersion") != SCHEMA_VERSION:
        raise HeldError(f"schemaVersion {doc.get('schemaVersion')!r} is not supported "
                        f"(want {SCHEMA_VERSION})")
    pods_raw = doc.get("pods") or {}
    if not isinstance(pods_raw, dict):
        raise HeldError("pods: expected an object of pod UID -> entries")
    pods: dict[str, tuple[Held, ...]] = {}
    for uid, entries in pods_raw.items():
        if not isinstance(entries, list):
            raise HeldError(f"pods[{uid}]: expected a list")
        pods[str(uid)] = tuple(_entry(e, f"pods[{uid}][{i}]") for i, e in enumerate(entries))
    observed = doc.get("observedAt")
    error = doc.get("error")
    return HeldDevices(pods, observed if isinstance(observed, str) else "",
                       _strs(doc.get("leftOut") or [], "leftOut"),
                       error if isinstance(error, str) else "")
