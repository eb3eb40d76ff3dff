"""Names the GPU stacks define, spelled here as their sources spell them.

Judges and corpora take these from upstream, not from the engine, so a misspelling in the
engine cannot hide behind the same misspelling in its tests.
"""

from __future__ import annotations

#: The NRI plugin's annotation domain: nvidia-container-toolkit v1.20.2,
#: cmd/nvidia-ctk-installer/container/runtime/nri/plugin.go (``nriCDIAnnotationDomain``).
NRI_DOMAIN = "nvidia.cdi.k8s.io"
#: The device kind the same plugin injects only in allowed namespaces (plugin.go,
#: ``parseCDIDevices``).
MANAGEMENT_KIND = "management.nvidia.com/gpu"
#: Its allowed namespaces, from the installer's environment (cmd/nvidia-ctk-installer/main.go).
NRI_NAMESPACES_ENV = "NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES"
#: The GPU Operator's per-node deploy labels: the toolkit DaemonSet selects on the first
#: (fixtures/upstream/runtime-config/gpu-operator-container-toolkit-daemonset.yaml); the
#: operator's documented nodes carry both (fixtures/upstream/nodes/gpu-operator-docs-*).
TOOLKIT_DEPLOY_LABEL = "nvidia.com/gpu.deploy.container-toolkit"
DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
