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

import json

from webhook.api.inventory import is_mig_resource

CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
_MAX_BYTES = 8 << 20


class CheckpointError(ValueError):
    pass


def registered_devices(path: str = CHECKPOINT) -> dict[str, tuple[str, ...]] | None:
    """Resource name -> the unique device ids registered for it, or None when the kubelet has
    written no checkpoint there (no device plugin ever registered). Raises CheckpointError
    for a file that cannot be read or is not a device-manager checkpoint."""
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
    registered = data.get("RegisteredDevices") if isinstance(data, dict) else None
    if registered is None and isinstance(data, dict):
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
