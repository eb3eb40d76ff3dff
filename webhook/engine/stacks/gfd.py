"""Whether a node's GPUs have MIG enabled, as the labels GPU feature discovery and the GPU
Operator's MIG manager put on the Node say it.

It matters under the device plugin's ``single`` MIG strategy, the GPU Operator's default
(ClusterPolicy ``mig.strategy: single``, so its plugin pod carries ``MIG_STRATEGY=single`` on
every node, MIG or not): the plugin registers MIG devices as ``nvidia.com/gpu`` only where
the GPUs have MIG enabled, and hands whole GPUs where it is disabled. The strategy alone says
nothing of the mode.

What each label means (k8s-device-plugin v0.19.3, ``internal/lm``, which GFD runs):

- ``nvidia.com/mig.capable``: ``true`` if any GPU on the node is MIG-capable (``nvml.go``,
  ``newMigCapabilityLabeler``); ``false``: no GPU can have MIG enabled.
- ``nvidia.com/mig.strategy``: the strategy GFD labels by (``migStrategyLabeler``), set for
  ``single`` and ``mixed``.
- ``nvidia.com/gpu.product`` under the ``single`` strategy: ``<model>-MIG-<profile>`` where
  the GPUs have MIG enabled (``newMigStrategySingleLabeler`` -> ``NewMIGResourceLabeler``,
  which also sets ``nvidia.com/gpu.slices.gi`` and ``.ci``), ``<model>-MIG-INVALID`` for a
  mix of enabled and disabled GPUs or of profiles (``newInvalidMigStrategyLabeler``), and the
  plain model where no GPU has MIG enabled (the full-GPU labeler alone;
  ``mig-strategy_test.go``: "single no-mig device returns no mig labels").
- ``nvidia.com/mig.config`` and ``nvidia.com/mig.config.state`` (the MIG manager): the layout
  asked for, and ``success`` once applied; ``all-disabled`` is the layout with MIG off on
  every GPU (the operator's default ``default-mig-parted-config``).

Pure: a node's labels in, the mode out.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

CAPABLE = "nvidia.com/mig.capable"
STRATEGY = "nvidia.com/mig.strategy"
PRODUCT = "nvidia.com/gpu.product"
SLICES = "nvidia.com/gpu.slices.ci"
CONFIG = "nvidia.com/mig.config"
CONFIG_STATE = "nvidia.com/mig.config.state"
ALL_DISABLED = "all-disabled"


class MigMode(Enum):
    ENABLED = "enabled"
    DISABLED = "disabled"
    #: the labels do not say (GFD not run, or an older one; a layout being applied)
    UNKNOWN = "unknown"


def mig_mode(labels: Mapping[str, str]) -> MigMode:
    """The MIG mode of the node's GPUs, as far as its labels say."""
    if labels.get(CAPABLE) == "false":
        return MigMode.DISABLED
    product = labels.get(PRODUCT)
    if labels.get(SLICES) is not None or (product is not None and "-MIG-" in product):
        return MigMode.ENABLED
    state, config = labels.get(CONFIG_STATE), labels.get(CONFIG)
    if state is not None or config is not None:
        if state == "success" and config == ALL_DISABLED:
            return MigMode.DISABLED
        # A layout with MIG on that GFD does not show yet, or one still being applied.
        return MigMode.UNKNOWN
    if labels.get(STRATEGY) == "single" and product is not None:
        return MigMode.DISABLED  # GFD labels MIG-enabled GPUs by their profile under single
    return MigMode.UNKNOWN
