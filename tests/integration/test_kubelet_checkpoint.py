"""The kubelet's device-manager checkpoint as the kubelet's own code writes it
(``tests/e2e/controlplane/kubeletcheckpoint``: k8s.io/kubernetes v1.35
``devicemanager/checkpoint`` and the device plugin API's protobuf types), read by the agent:
every field the runtime acts on comes back as written, whatever else the answer holds."""

from __future__ import annotations

import json
import subprocess

from harness.layouts import UUIDS
from tests.restartcorpus import kubelet_checkpoint
from webhook.node.kubelet import held_devices, mig_devices

MIG = "MIG-0a1b2c3d-0000-5000-8000-000000000001"
NAME = f"k8s.device-plugin.nvidia.com/gpu={UUIDS[0]}"


def test_what_the_kubelet_writes_the_agent_reads(tmp_path):
    doc = {"registered": {"nvidia.com/gpu": [f"{UUIDS[0]}::0", f"{UUIDS[0]}::1", UUIDS[1]],
                          "nvidia.com/mig-1g.10gb": [MIG]},
           "entries": [
               {"podUID": "u-envvar", "container": "train", "resource": "nvidia.com/gpu",
                "ids": {"0": [f"{UUIDS[0]}::1"], "1": [UUIDS[1]]},
                "envs": {"NVIDIA_VISIBLE_DEVICES": ",".join(UUIDS), "CUDA_DEVICE_MEMORY_LIMIT_0":
                         "1000m", "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"},
                "mounts": [{"containerPath": "/usr/local/vgpu", "hostPath": "/usr/local/vgpu"}]},
               {"podUID": "u-cdi", "container": "infer", "resource": "nvidia.com/gpu",
                "ids": {"-1": [UUIDS[0]]}, "cdiDevices": [NAME],
                "annotations": {"cdi.k8s.io/nvidia-device-plugin_1f": NAME}},
               {"podUID": "u-cdi", "container": "sidecar", "resource": "nvidia.com/mig-1g.10gb",
                "ids": {"-1": [MIG]}, "envs": {"NVIDIA_VISIBLE_DEVICES": MIG}},
               {"podUID": "u-volumes", "container": "c", "resource": "nvidia.com/gpu",
                "ids": {"-1": [UUIDS[1]]},
                "devices": [{"containerPath": "/dev/nvidia1", "hostPath": "/dev/nvidia1"}]}]}
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text(subprocess.run([str(kubelet_checkpoint())], input=json.dumps(doc),
                                   text=True, capture_output=True, check=True).stdout)
    held = held_devices(str(path))
    assert not held.error, held.error
    [envvar] = held.pods["u-envvar"]
    assert envvar.visible_devices == ",".join(UUIDS)
    assert set(envvar.ids) == {f"{UUIDS[0]}::1", UUIDS[1]} and not envvar.other
    cdi, sidecar = held.pods["u-cdi"]
    assert (cdi.container, cdi.cdi_devices, cdi.cdi_names) == ("infer", (NAME,), (NAME,))
    assert cdi.annotations == {"cdi.k8s.io/nvidia-device-plugin_1f": NAME}
    assert (sidecar.resource, sidecar.visible_devices) == ("nvidia.com/mig-1g.10gb", MIG)
    [volumes] = held.pods["u-volumes"]
    assert volumes.other and volumes.visible_devices is None
    # the same file still gives the MIG devices the plugin registered
    assert mig_devices(str(path)) == ({"nvidia.com/mig-1g.10gb": (MIG,)}, [])
