"""HAMi's node annotation ``hami.io/node-nvidia-register``: the GPUs its device plugin
registered on a node, which are the UUIDs HAMi may hand to a container there.

HAMi writes JSON since v2.8 and colon-separated CSV records before that; clusters mid-upgrade
carry both, so both are read.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
USE_UUID_ANNOTATION = "nvidia.com/use-gpuuuid"
NOUSE_UUID_ANNOTATION = "nvidia.com/nouse-gpuuuid"
USE_TYPE_ANNOTATION = "nvidia.com/use-gputype"
NOUSE_TYPE_ANNOTATION = "nvidia.com/nouse-gputype"
#: Node annotation: GPU UUIDs (comma-separated) HAMi's scheduler allocates no new pod to, a
#: live per-GPU ``kubectl cordon`` (HAMi pkg/device/nvidia/device.go, cordonedDevices).
CORDON_ANNOTATION = "hami.io/device-cordon"
#: HAMi counts physical GPUs in this resource; a container asking only for a memory or core
#: share gets one added by HAMi's webhook.
COUNT_RESOURCE = "nvidia.com/gpu"
IMPLIES_ONE_GPU = frozenset({"nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                             "nvidia.com/gpucores"})


#: A GPU HAMi runs in MIG mode (the register annotation's ``mode``): its device plugin
#: creates a MIG instance when it allocates, and hands the container that instance's UUID.
MIG_MODE = "mig"


@dataclass(frozen=True, slots=True)
class RegisteredGPU:
    uuid: str
    type: str = ""
    healthy: bool = True
    mode: str = ""  # hami-core, mig or mps (HAMi pkg/device/nvidia: HamiCoreMode, ...)


class RegisterError(ValueError):
    pass


def parse_register(value: str) -> tuple[RegisteredGPU, ...]:
    """Parse either format; raise RegisterError with the reason when it is neither."""
    text = value.strip()
    if not text:
        return ()
    if text[0] in "[{":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RegisterError(f"not valid JSON: {exc}") from exc
        if not isinstance(data, list):
            raise RegisterError("expected a JSON list of devices")
        gpus = []
        for i, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                raise RegisterError(f"device {i} has no string 'id'")
            mode = item.get("mode")
            gpus.append(RegisteredGPU(uuid=item["id"], type=sys.intern(str(item.get("type", ""))),
                                      healthy=item.get("health", True) is not False,
                                      mode=sys.intern(mode) if isinstance(mode, str) else ""))
        return tuple(gpus)
    gpus = []
    for i, record in enumerate(r for r in text.split(":") if r.strip()):
        fields = record.split(",")
        if len(fields) < 7 or not fields[0]:
            raise RegisterError(f"CSV record {i} has {len(fields)} fields, want at least 7")
        # (HAMi's EncodeNodeDevices: nine fields, the index and mode last)
        gpus.append(RegisteredGPU(uuid=fields[0].strip(), type=fields[4],
                                  healthy=fields[6].strip().lower() != "false",
                                  mode=sys.intern(fields[8].strip()) if len(fields) > 8 else ""))
    return tuple(gpus)


def uuid_list(value: object) -> tuple[str, ...]:
    """The comma-separated UUID lists of ``nvidia.com/use-gpuuuid`` and friends."""
    if not isinstance(value, str):
        return ()
    return tuple(u.strip() for u in value.split(",") if u.strip())


def type_allowed(card_type: str, use: tuple[str, ...], nouse: tuple[str, ...]) -> bool:
    """HAMi's ``CheckType``: case-insensitive substring match of the GPU model against
    ``nvidia.com/use-gputype`` (must match one) and ``nouse-gputype`` (must match none)."""
    card = card_type.upper()
    if use and not any(t.upper() in card for t in use):
        return False
    return not any(t.upper() in card for t in nouse)


def cordoned(value: object) -> frozenset[str]:
    """The UUIDs a ``hami.io/device-cordon`` value names, parsed as HAMi parses it: split on
    commas, spaces trimmed, empty entries skipped; anything but a string cordons nothing."""
    if not isinstance(value, str):
        return frozenset()
    return frozenset(u for u in (part.strip() for part in value.split(",")) if u)


#: Where HAMi's scheduler records the GPUs it allocated a pod, per container (v2.10
#: ``pkg/device/nvidia/device.go``, ``AssignedIDsAnnotations``).
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"


def allocated(value: object) -> tuple[tuple[str, ...], ...] | None:
    """The GPU UUIDs per container (in the order of the pod's containers) that
    ``hami.io/vgpu-devices-allocated`` names: HAMi v2.10 ``pkg/device/devices.go``
    ``EncodePodSingleDevice`` joins containers with ``;`` and ``EncodeContainerDevices``
    writes each GPU as ``<uuid>,<type>,<mem>,<cores>:``; an empty entry is a container
    without GPUs, kept so that the order holds (``DecodePodDevices``). None for a value
    that is not that."""
    if not isinstance(value, str) or not value:
        return None
    out = []
    for container in value.split(";")[:-1] if value.endswith(";") else value.split(";"):
        uuids = []
        for device in container.split(":"):
            if not device:
                continue
            fields = device.split(",")
            if len(fields) < 4 or not fields[0]:
                return None
            uuids.append(fields[0])
        out.append(tuple(uuids))
    return tuple(out)
