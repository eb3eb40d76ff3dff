"""The MIG devices the device plugin registered, from the kubelet's device-manager
checkpoint (``webhook.node.kubelet``). The files here follow the kubelet's own struct
(Kubernetes v1.35 ``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go``: ``Data`` with
``PodDeviceEntries`` and ``RegisteredDevices``, and a ``Checksum`` gpupool does not read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.layouts import UUIDS
from webhook.api.inventory import parse_inventory
from webhook.node.agent import Observer
from webhook.node.kubelet import CheckpointError, mig_devices, registered_devices

MIGS = ("MIG-0a1b2c3d-0000-5000-8000-000000000001", "MIG-0a1b2c3d-0000-5000-8000-000000000002")
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"


def checkpoint(path: Path, registered: dict | None, entries: list | None = None) -> Path:
    data: dict = {"PodDeviceEntries": entries or []}
    if registered is not None:
        data["RegisteredDevices"] = registered
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"Data": data, "Checksum": 1234567890}))
    return path


def test_registered_devices_per_resource_with_replicas_folded(tmp_path):
    """Time-slicing registers ``<id>::<n>`` replicas; the plugin hands the id itself."""
    path = checkpoint(tmp_path / "cp", {
        "nvidia.com/gpu": [f"{UUIDS[0]}::0", f"{UUIDS[0]}::1", UUIDS[1]],
        MIG_RESOURCE: list(reversed(MIGS))},
        entries=[{"PodUID": "u", "ContainerName": "c", "ResourceName": MIG_RESOURCE,
                  "DeviceIDs": {"0": [MIGS[0]]}, "AllocResp": "eyJ9"}])
    assert registered_devices(str(path)) == {"nvidia.com/gpu": tuple(sorted(UUIDS[:2])),
                                             MIG_RESOURCE: MIGS}
    assert mig_devices(str(path)) == ({MIG_RESOURCE: MIGS}, [])


def test_no_checkpoint_is_not_known_and_no_error(tmp_path):
    assert mig_devices(str(tmp_path / "absent")) == (None, [])
    # a checkpoint written before any plugin registered: known, and empty
    assert mig_devices(str(checkpoint(tmp_path / "cp", None))) == ({}, [])


@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"),
    ('{"Data": {"RegisteredDevices": []}}', "not a kubelet device-manager checkpoint"),
    ('{"Data": {"RegisteredDevices": {"nvidia.com/mig-1g.10gb": [1]}}}', "list of ids"),
    ("[]", "not a kubelet device-manager checkpoint"),
])
def test_a_file_that_is_not_a_checkpoint_is_an_error_never_a_guess(tmp_path, text, why):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=why):
        registered_devices(str(path))
    mig, errors = mig_devices(str(path))
    assert mig is None and errors and errors[0][0] == str(path) and why in errors[0][1]


def test_a_checkpoint_that_cannot_be_read_is_reported(tmp_path):
    """(A directory in its place: the same OSError path as a file the agent may not read.)"""
    (tmp_path / "cp").mkdir()
    mig, errors = mig_devices(str(tmp_path / "cp"))
    assert mig is None and errors == [(str(tmp_path / "cp"), "Is a directory")]


def test_the_agent_publishes_them_and_admission_reads_them_back(tmp_path):
    path = checkpoint(tmp_path / "cp", {MIG_RESOURCE: list(MIGS), "nvidia.com/gpu": []})
    inv = Observer([str(tmp_path / "cdi")], driver_gpus_dir=None,
                   kubelet_checkpoint=str(path)).observe()
    assert inv.mig == {MIG_RESOURCE: MIGS}
    assert parse_inventory(inv.dumps()).mig == {MIG_RESOURCE: MIGS}
    # without the flag, or with a broken file, nothing is said of MIG devices
    bare = Observer([str(tmp_path / "cdi")], driver_gpus_dir=None).observe()
    assert bare.mig is None and "mig" not in json.loads(bare.dumps())
    path.write_text("junk")
    broken = Observer([str(tmp_path / "cdi")], driver_gpus_dir=None,
                      kubelet_checkpoint=str(path)).observe()
    assert broken.mig is None and any(p == str(path) for p, _ in broken.errors)


def test_the_single_strategy_lists_mig_devices_under_nvidia_com_gpu(tmp_path):
    from webhook.node.kubelet import mig_devices

    single = checkpoint(tmp_path / "single", {"nvidia.com/gpu": [f"{m}::0" for m in MIGS]})
    assert mig_devices(str(single)) == ({"nvidia.com/gpu": MIGS}, [])
    whole = checkpoint(tmp_path / "whole", {"nvidia.com/gpu": ["GPU-1", "GPU-2"],
                                            MIG_RESOURCE: list(MIGS)})
    assert mig_devices(str(whole)) == ({MIG_RESOURCE: MIGS}, [])
