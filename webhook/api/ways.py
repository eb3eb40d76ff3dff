"""The ways a device plugin hands GPUs to containers, and the way a node's plugin was
learned to hand them (from its pod, ``Inventory.plugins``): the words ``inventory`` and
``delivery`` share, kept below both so an inventory knows its plugin's way from the moment
it is made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from webhook.api.pluginconfig import Settled


class Way(StrEnum):
    """How a pool's device plugin hands GPUs to containers (the policy's ``delivery``)."""

    DETECT = "detect"
    VISIBLE_DEVICES = "visibleDevices"
    CDI_DEVICES = "cdiDevices"
    NONE = "none"


VISIBLE_DEVICES = Way.VISIBLE_DEVICES
CDI_DEVICES = Way.CDI_DEVICES
DETECT = Way.DETECT
NONE = Way.NONE
WAYS = tuple(w.value for w in Way)
#: The device plugins' ``DEVICE_LIST_STRATEGY`` values that hand containers CDI names.
CDI_STRATEGIES = frozenset({"cdi-annotations", "cdi-cri"})


def strategy_way(strategy: str) -> Way | None:
    """The way a device plugin set to this ``DEVICE_LIST_STRATEGY`` (comma-separated, as
    NVIDIA's and HAMi's plugins take it) hands GPUs; None for what gpupool does not model
    (``volume-mounts``, or envvar together with a CDI strategy)."""
    names = {s.strip() for s in strategy.split(",") if s.strip()}
    if names and names <= CDI_STRATEGIES:
        return CDI_DEVICES
    if names == {"envvar"}:
        return VISIBLE_DEVICES
    return None


@dataclass(frozen=True)
class Learned:
    """How the device plugin running on a node hands GPUs, as the agent learned it from the
    plugin's pod (``Inventory.plugins``). ``way`` None: not known; ``why`` then says what is
    unknown (empty: the agent did not look)."""

    way: Way | None
    why: str = ""


#: what an inventory whose agent did not look at the plugin's pods says of it
NOT_LOOKED = Learned(None)


def learned_from(plugins: Sequence[Settled] | None) -> Learned:
    """How the plugins the agent found on a node hand GPUs (``Inventory.learned``, worked
    out once, as the inventory is made)."""
    if plugins is None:
        return NOT_LOOKED
    if not plugins:
        return Learned(None, "the agent found no device-plugin pod on the node")
    unknown = [p for p in plugins if p.strategies is None]
    if unknown:
        return Learned(None, "; ".join(p.describe() for p in unknown))
    ways = {strategy_way(",".join(p.strategies or ())) for p in plugins}
    if len(ways) > 1:
        return Learned(None, "device plugins there hand GPUs in different ways: "
                             + "; ".join(p.describe() for p in plugins))
    way = ways.pop()
    if way is None:
        return Learned(None, f"{plugins[0].describe()}, a way gpupool does not model")
    return Learned(way)
