"""The node's real GPUs, as the NVIDIA driver lists them: no NVML, no device plugin.

The driver writes one directory per GPU under ``/proc/driver/nvidia/gpus/<pci-bus-id>/``; its
``information`` file has a ``GPU UUID:`` line. That list is what a spec on the node has to
cover: a spec naming other (stale) UUIDs, or only some of them, does not make the node's GPUs
resolve.
"""

from __future__ import annotations

import os

from webhook.api.inventory import is_gpu_uuid

DRIVER_GPUS_DIR = "/proc/driver/nvidia/gpus"


def driver_gpus(root: str = DRIVER_GPUS_DIR) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """The GPU UUIDs the driver lists, sorted, and (path, reason) for what could not be read.
    No directory at all (no driver loaded, or not a GPU node) is not an error: nothing."""
    try:
        entries = sorted(os.listdir(root))
    except FileNotFoundError:
        return (), []
    except OSError as exc:
        return (), [(root, exc.strerror or str(exc))]
    uuids: set[str] = set()
    errors: list[tuple[str, str]] = []
    for entry in entries:
        path = os.path.join(root, entry, "information")
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read(65536).splitlines()
        except OSError as exc:
            errors.append((path, exc.strerror or str(exc)))
            continue
        found = [line.split(":", 1)[1].strip() for line in lines
                 if line.startswith("GPU UUID:")]
        if found and is_gpu_uuid(found[0]):
            uuids.add(found[0])
        else:
            errors.append((path, "no GPU UUID line"))
    return tuple(sorted(uuids)), errors
