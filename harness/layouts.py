"""The three real node layouts of domain.md, written into a directory for tests.

- operator management spec only: what the GPU Operator's toolkit writes with CDI enabled
  (kind management.nvidia.com/gpu, one device 'all'), runtime in cdi mode with that default kind;
- device-plugin spec: the NVIDIA/HAMi device plugin's CDI strategies (kind
  k8s.device-plugin.nvidia.com/gpu, a device per GPU UUID, no 'all');
- nvidia-ctk full spec: `nvidia-ctk cdi generate` on the host (kind nvidia.com/gpu; index, UUID
  and 'all' devices).

The runtime configs start from the upstream toolkit config in fixtures/upstream and apply the
overrides the operator's toolkit installer writes (domain.md, "NVIDIA stack").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.kit import UPSTREAM

UUIDS = ("GPU-59ab2c0d-7c4e-4d4a-9f1e-1a2b3c4d5e6f", "GPU-8e1f0a3b-2d4c-4e5f-8a9b-0c1d2e3f4a5b")
RUNTIME_CONFIG_SRC = (UPSTREAM / "runtime-config/from-go-literals/"
                      "nvidia-ctk-installer-toolkit-config.cdi-enabled.toml")
CONTAINERD_SRC = (UPSTREAM / "runtime-config/from-go-literals/"
                  "nvidia-ctk-installer-containerd-dropin.cdi-enabled.toml")


def _device_edits(i: int) -> dict[str, Any]:
    return {"deviceNodes": [{"path": f"/dev/nvidia{i}", "hostPath": f"/dev/nvidia{i}"}]}


def management_spec(gpus: int = 2) -> str:
    """The GPU Operator's management spec on a node with ``gpus`` GPUs: ``all`` holds every
    GPU's device node."""
    nodes = "".join(f"        - path: /dev/nvidia{i}\n" for i in range(gpus))
    return """---
cdiVersion: 0.5.0
kind: management.nvidia.com/gpu
devices:
  - name: all
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia-modeset
        - path: /dev/nvidia-uvm
        - path: /dev/nvidiactl
""" + nodes + """containerEdits:
  env:
    - NVIDIA_VISIBLE_DEVICES=void
  hooks:
    - hookName: createContainer
      path: /usr/local/nvidia/toolkit/nvidia-cdi-hook
      args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
"""


def device_plugin_spec(uuids: tuple[str, ...] = UUIDS) -> str:
    return json.dumps({
        "cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu",
        "devices": [{"name": u, "containerEdits": _device_edits(i)} for i, u in enumerate(uuids)],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}})


def per_uuid_spec(kind: str = "management.nvidia.com/gpu", uuids: tuple[str, ...] = UUIDS) -> str:
    lines = ["cdiVersion: 0.5.0", f"kind: {kind}", "devices:"]
    for i, u in enumerate(uuids):
        lines += [f"  - name: {u}", "    containerEdits:", "      deviceNodes:",
                  f"        - path: /dev/nvidia{i}"]
    return "\n".join(lines) + "\n"


def nvidia_ctk_spec(uuids: tuple[str, ...] = UUIDS) -> str:
    lines = ["cdiVersion: 0.5.0", "kind: nvidia.com/gpu", "devices:"]
    for i, u in enumerate(uuids):
        for name in (f'"{i}"', u):
            lines += [f"  - name: {name}", "    containerEdits:", "      deviceNodes:",
                      f"        - path: /dev/nvidia{i}", f"          hostPath: /dev/nvidia{i}"]
    lines += ["  - name: all", "    containerEdits:", "      deviceNodes:"]
    lines += [f"        - path: /dev/nvidia{i}" for i in range(len(uuids))]
    return "\n".join(lines) + "\n"


def nvidia_config(mode: str, default_kind: str | None) -> str:
    """The upstream toolkit config with the operator installer's overrides applied."""
    text = RUNTIME_CONFIG_SRC.read_text().replace('mode = "auto"', f'mode = "{mode}"')
    if default_kind:
        text = text.replace('default-kind = "nvidia.com/gpu"', f'default-kind = "{default_kind}"')
    return text.replace("{{ .toolkitRoot }}", "/usr/local/nvidia")


def write_layout(root: Path, name: str) -> dict[str, Path]:
    """Write one layout; returns paths for the agent's flags."""
    etc_cdi, run_cdi, cfg_dir = root / "etc/cdi", root / "var/run/cdi", root / "config"
    for d in (etc_cdi, run_cdi, cfg_dir):
        d.mkdir(parents=True, exist_ok=True)
    if name == "operator-management":
        (run_cdi / "management.nvidia.com-gpu.yaml").write_text(management_spec())
        cfg = nvidia_config("cdi", "management.nvidia.com/gpu")
    elif name == "device-plugin":
        (run_cdi / "management.nvidia.com-gpu.yaml").write_text(management_spec())
        (run_cdi / "k8s.device-plugin.nvidia.com-gpu.json").write_text(device_plugin_spec())
        cfg = nvidia_config("cdi", "management.nvidia.com/gpu")
    elif name == "nvidia-ctk":
        (run_cdi / "nvidia.yaml").write_text(nvidia_ctk_spec())
        cfg = nvidia_config("cdi", None)
    else:
        raise ValueError(name)
    (cfg_dir / "config.toml").write_text(cfg)
    (cfg_dir / "containerd.toml").write_text(
        CONTAINERD_SRC.read_text().replace("{{ .toolkitRoot }}", "/usr/local/nvidia"))
    return {"etc": etc_cdi, "run": run_cdi, "config": cfg_dir / "config.toml",
            "containerd": cfg_dir / "containerd.toml"}


def hami_register(uuids: tuple[str, ...] = UUIDS) -> str:
    return json.dumps([{"id": u, "count": 10, "devmem": 15360, "devcore": 100,
                        "type": "NVIDIA-Tesla T4", "numa": 0, "health": True, "index": i,
                        "mode": "hami-core"} for i, u in enumerate(uuids)])


# The shape of /proc/driver/nvidia/gpus/<bus id>/information (driver 5xx).
INFORMATION = """Model: \t\t NVIDIA H100 80GB HBM3
IRQ:   \t\t 142
GPU UUID: \t {uuid}
Video BIOS: \t 96.00.5e.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t {bus}
Device Minor: \t {minor}
GPU Excluded:\t No
"""


def fake_driver(root: Path, uuids: tuple[str, ...] = UUIDS) -> Path:
    gpus = root / "proc/driver/nvidia/gpus"
    for i, uuid in enumerate(uuids):
        bus = f"0000:{0x17 + i:02x}:00.0"
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(INFORMATION.format(uuid=uuid, bus=bus, minor=i))
    return gpus
