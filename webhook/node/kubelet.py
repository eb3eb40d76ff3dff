"""The devices a node's device plugins registered, as the kubelet keeps them.

The NVIDIA driver's procfs lists whole GPUs but not MIG devices (their UUIDs come only from
NVML). The kubelet's device manager writes every healthy device each plugin registered, per
resource, to its checkpoint whenever the list changes (Kubernetes
``pkg/kubelet/cm/devicemanager``: ``writeCheckpoint``; format in ``checkpoint/checkpoint.go``:
``{"Data": {"PodDeviceEntries": [...], "RegisteredDevices": {resource: [ids]}},
"Checksum": n}``). Those ids are what the plugin hands containers: the NVIDIA plugin turns an
id into ``NVIDIA_VISIBLE_DEVICES`` or into the CDI name ``<kind>=<id>``, after dropping the
``::<n>`` replica suffix time-slicing adds (k8s-device-plugin
``uniqueDeviceIDsFromAnnotatedDeviceIDs``). After a MIG reconfiguration the plugin registers
the new devices, so this list follows the node where a CDI spec may not.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from webhook.api.held import CDI_ANNOTATION_PREFIX, VISIBLE_DEVICES, Held, HeldDevices
from webhook.api.inventory import is_mig_resource

CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
_MAX_BYTES = 8 << 20
#: NVIDIA's resources (``nvidia.com/gpu``, ``nvidia.com/mig-*``, HAMi's ``nvidia.com/gpu``)
NVIDIA_PREFIX = "nvidia.com/"


class CheckpointError(ValueError):
    pass


def registered_devices(path: str = CHECKPOINT) -> dict[str, tuple[str, ...]] | None:
    """Resource name -> the unique device ids registered for it, or None when the kubelet has
    written no checkpoint there (no device plugin ever registered). Raises CheckpointError
    for a file that cannot be read or is not a device-manager checkpoint."""
    data = _load(path)
    if data is None:
        return None
    registered = data.get("RegisteredDevices")
    if registered is None:
        registered = {}  # a checkpoint from before any plugin registered
    if not isinstance(registered, dict):
        raise CheckpointError("no Data.RegisteredDevices object: not a kubelet device-manager "
                              "checkpoint")
    out: dict[str, tuple[str, ...]] = {}
    for resource, ids in registered.items():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise CheckpointError(f"RegisteredDevices[{resource}]: expected a list of ids")
        out[str(resource)] = tuple(sorted({i.split("::", 1)[0] for i in ids if i}))
    return out


def mig_devices(path: str = CHECKPOINT
                ) -> tuple[dict[str, tuple[str, ...]] | None, list[tuple[str, str]]]:
    """The MIG devices per resource (None: not known): ``nvidia.com/mig-*`` under the
    device plugin's mixed strategy, ``nvidia.com/gpu`` when it registered MIG devices under
    that name (its single strategy); and (path, reason) for a checkpoint that could not be
    read."""
    try:
        registered = registered_devices(path)
    except CheckpointError as exc:
        return None, [(path, str(exc))]
    if registered is None:
        return None, []
    return {r: ids for r, ids in registered.items() if is_mig_resource(r, ids)}, []


# ------------------------------------------------------------------ what pods hold
#
# The checkpoint's ``PodDeviceEntries`` (checkpoint.go ``PodDevicesEntry``): ``PodUID``,
# ``ContainerName``, ``ResourceName``, ``DeviceIDs`` (NUMA node -> ids) and ``AllocResp``,
# the plugin's ``ContainerAllocateResponse`` as protobuf bytes (base64 in the JSON). The
# message (k8s.io/kubelet ``pkg/apis/deviceplugin/v1beta1/api.proto``): 1 ``envs`` and
# 4 ``annotations`` (maps of strings, each entry a message of key 1 and value 2),
# 2 ``mounts`` and 3 ``devices`` (messages), 5 ``cdi_devices`` (messages whose field 1 is
# the name).


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise CheckpointError("AllocResp: truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """A protobuf message's fields in order: (number, value) with bytes for
    length-delimited fields and ints for varints; fixed-width fields are skipped."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > len(buf):
                raise CheckpointError("AllocResp: truncated field")
            out.append((number, buf[i:i + size]))
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise CheckpointError(f"AllocResp: wire type {wire} is not protobuf's")
    if i != len(buf):
        raise CheckpointError("AllocResp: truncated field")
    return out


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise CheckpointError("AllocResp: a string field holds a number")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise CheckpointError("AllocResp: a string field is not UTF-8") from exc


def _map_entry(value: int | bytes) -> tuple[str, str]:
    if not isinstance(value, bytes):
        raise CheckpointError("AllocResp: a map entry holds a number")
    kv = dict(_fields(value))
    return _text(kv.get(1, b"")), _text(kv.get(2, b""))


@dataclass(frozen=True)
class AllocResponse:
    """The parts of a cached ``ContainerAllocateResponse`` the runtime acts on."""

    envs: dict[str, str]
    annotations: dict[str, str]
    cdi_devices: tuple[str, ...]
    mounts: int
    devices: int


def alloc_response(blob: bytes) -> AllocResponse:
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    cdi: list[str] = []
    mounts = devices = 0
    for number, value in _fields(blob):
        if number == 1:
            k, v = _map_entry(value)
            envs[k] = v
        elif number == 4:
            k, v = _map_entry(value)
            annotations[k] = v
        elif number == 5:
            if not isinstance(value, bytes):
                raise CheckpointError("AllocResp: a CDI device holds a number")
            cdi += [_text(v) for n, v in _fields(value) if n == 1]
        elif number == 2:
            mounts += 1
        elif number == 3:
            devices += 1
    return AllocResponse(envs, annotations, tuple(cdi), mounts, devices)


def _load(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            blob = fh.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(exc.strerror or str(exc)) from exc
    if len(blob) > _MAX_BYTES:
        raise CheckpointError(f"larger than {_MAX_BYTES} bytes")
    try:
        doc = json.loads(blob)
    except ValueError as exc:
        raise CheckpointError(f"not JSON: {exc}") from exc
    data = doc.get("Data") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        raise CheckpointError("no Data object: not a kubelet device-manager checkpoint")
    return data


def held_devices(path: str = CHECKPOINT) -> HeldDevices:
    """What each pod's containers hold, as the kubelet cached it: NVIDIA's resources, and
    any other whose answer names devices the NVIDIA runtime or CDI resolves (a NIC's
    entries, say, are left out: they cost budget and decide nothing here). No checkpoint:
    nothing held (no device plugin ever registered). A checkpoint that cannot be read, or an
    entry whose answer cannot be decoded, is an ``error`` for the whole node: a partial
    list would pass a pod's missing entry off as "not started yet"."""
    try:
        data = _load(path)
    except CheckpointError as exc:
        return HeldDevices({}, error=f"{path}: {exc}")
    if data is None:
        return HeldDevices({})
    entries = data.get("PodDeviceEntries") or []
    if not isinstance(entries, list):
        return HeldDevices({}, error=f"{path}: PodDeviceEntries is not a list")
    pods: dict[str, list[Held]] = {}
    for n, e in enumerate(entries):
        try:
            held = _held(e)
        except (CheckpointError, ValueError) as exc:
            return HeldDevices({}, error=f"{path}: PodDeviceEntries[{n}]: {exc}")
        if held is not None:
            pods.setdefault(held[0], []).append(held[1])
    return HeldDevices({uid: tuple(sorted(h, key=lambda x: (x.container, x.resource)))
                        for uid, h in pods.items()})


def _held(e: Any) -> tuple[str, Held] | None:
    if not isinstance(e, dict):
        raise CheckpointError("not an object")
    uid, container, resource = e.get("PodUID"), e.get("ContainerName"), e.get("ResourceName")
    if not all(isinstance(x, str) and x for x in (uid, container, resource)):
        raise CheckpointError("PodUID, ContainerName and ResourceName must be strings")
    assert isinstance(uid, str) and isinstance(container, str) and isinstance(resource, str)
    per_numa = e.get("DeviceIDs") or {}
    if isinstance(per_numa, list):  # the v1 checkpoint: a flat list
        per_numa = {"": per_numa}
    if not isinstance(per_numa, dict):
        raise CheckpointError("DeviceIDs: expected an object of NUMA node -> ids")
    ids: list[str] = []
    for numa in sorted(per_numa, key=str):
        group = per_numa[numa]
        if not isinstance(group, list) or not all(isinstance(i, str) for i in group):
            raise CheckpointError("DeviceIDs: expected lists of ids")
        ids += group
    raw = e.get("AllocResp") or ""
    if not isinstance(raw, str):
        raise CheckpointError("AllocResp: expected base64 text")
    resp = alloc_response(base64.b64decode(raw, validate=True))
    cdi_annotations = {k: v for k, v in resp.annotations.items()
                       if k.startswith(CDI_ANNOTATION_PREFIX)}
    if not resource.startswith(NVIDIA_PREFIX) and VISIBLE_DEVICES not in resp.envs \
            and not resp.cdi_devices and not cdi_annotations:
        return None
    return uid, Held(
        container, resource, tuple(ids), resp.envs.get(VISIBLE_DEVICES),
        resp.cdi_devices, cdi_annotations,
        other=bool(resp.mounts or resp.devices) and VISIBLE_DEVICES not in resp.envs
        and not resp.cdi_devices and not cdi_annotations)
