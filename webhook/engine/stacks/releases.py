"""Which Kubernetes release the cluster runs, and where releases decide differently.

A pod is placed by the scheduler of the cluster's own release, so gpupool asks "could this be
allocated?" as that release's DRA allocator answers it. The allocator is one port
(``stacks.allocator``) with each difference a named switch here, citing the upstream code it
follows, rather than one copy per release. ``k8s.io/dynamic-resource-allocation/structured``
picks its implementation by the features the scheduler enables; with the DRA features a GPU
cluster turns on (admin access, prioritized lists, device taints, partitionable devices,
consumable capacity) that is ``internal/experimental`` in v0.35 and ``internal/incubating``
in v0.36 and v0.37 (``structured/allocator.go``, ``availableAllocators``: the first whose
``SupportedFeatures`` cover the enabled ones).

Supported: 1.35 to 1.37, the three minors upstream maintains; DRA allocation is decided as
each of their allocators decides, each judged by that release's own
code. 1.34 is not supported: its allocator is another one again (judged by v0.34.13 on the
suite's DRA corpus it disagrees with 1.35's on 279 of 11,000 node answers:
``distinctAttribute`` counted over every device, and panics on devices that allow multiple
allocations, an alpha feature there). On 1.34, and on a release newer than 1.37, gpupool
does not claim to know the allocator's answer: a DRA pod's allocation is doubt (a warning,
never a denial), and the log and ``doctor`` say so. Routing, CDI, NRI and MIG checks do not
depend on the release. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the oldest and newest minor gpupool supports (Kubernetes 1.x)
OLDEST, NEWEST = 35, 37
#: every supported release, oldest first, as "1.x"
SUPPORTED_RELEASES = tuple(f"1.{m}" for m in range(OLDEST, NEWEST + 1))


@dataclass(frozen=True)
class Release:
    """A Kubernetes minor (1.``minor``) and the allocator switches it implies."""

    minor: int
    #: where it came from: "discovered" (the API server's /version), "given" (a flag),
    #: or "assumed" (neither: the newest supported)
    source: str = "assumed"

    def __str__(self) -> str:
        return f"1.{self.minor}"

    @property
    def supported(self) -> bool:
        """Whether gpupool supports it, and so decides DRA allocation as its allocator
        does."""
        return OLDEST <= self.minor <= NEWEST


    # ------------------------------------------------------------ allocator switches
    # Each is False where the release decides as v0.35.4's experimental allocator does.

    @property
    def request_takes_a_device_once(self) -> bool:
        """A request's next device is searched from after the one it just took
        (v0.36.0 ``allocateOne(..., startLocation deviceLocation)``: combinations, not
        permutations), so one request never takes a device that allows multiple
        allocations twice; v0.35.4 starts every device of a request from the first and
        hands such a device out as often as its capacity allows."""
        return self.minor >= 36

    @property
    def rollback_returns_counters(self) -> bool:
        """A device refused after its counters were charged (a taint, a constraint) or
        given up while backtracking gives them back (v0.36.0 ``rollbackDevice``, called on
        every rejection path and by the undo closure: kubernetes#140437, #139040, #140663);
        v0.35.4's ``allocateDevice`` returns without ``deallocateCountersForDevice``, and its
        undo gives them back only for devices that do not allow multiple allocations, so
        later devices of the pool see them charged."""
        return self.minor >= 36

    @property
    def held_shares_charge_counters(self) -> bool:
        """Devices held only through shares (``shareID``) count against their pool's
        shared counters (v0.36.0 ``availableCounters``: ``internal.IsDeviceAllocated``
        reads ``AllocatedSharedDeviceIDs``); v0.35.4 counts ``AllocatedDevices`` alone."""
        return self.minor >= 36

    @property
    def all_subrequest_keeps_its_index(self) -> bool:
        """In ``allocationMode: All`` under ``firstAvailable``, the next device stays with
        the subrequest being allocated (v0.36.0 passes ``subRequestIndex``); v0.35.4's
        ``deviceIndices{claimIndex, requestIndex, deviceIndex + 1}`` falls back to the first
        subrequest's devices and count."""
        return self.minor >= 36

    @property
    def distinct_over_every_device(self) -> bool:
        """``distinctAttribute`` compares a device with every device the constraint holds
        (v0.37.0 ``constraint.go``: ``attributes []*DeviceAttribute``); v0.35 and v0.36 keep
        one value per request name, so devices of one request are compared only with the
        request's latest one."""
        return self.minor >= 37

    @property
    def all_takes_capacity_blocked_devices(self) -> bool:
        """``allocationMode: All`` gathers devices by their static capacity only, so a
        matching device whose capacity is taken stays in the set and the request fails
        (v0.37.0 ``Allocate``: "Static capacity only: remaining capacity is checked in
        allocateDevice"); v0.35 and v0.36 leave such a device out and allocate the rest."""
        return self.minor >= 37

    @property
    def shares_without_capacity_are_shared(self) -> bool:
        """A held share that records no consumed capacity still marks its device as shared,
        so a further share is not charged the device's counters again (v0.37.0
        ``isDeviceShared`` reads ``AllocatedSharedDeviceIDs``); before, only
        ``AggregatedCapacity`` did."""
        return self.minor >= 37


NEWEST_RELEASE = Release(NEWEST)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:[.+\-].*)?$")


def parse_release(version: str, source: str = "given") -> Release:
    """A release from ``1.37``, ``v1.37.2`` or a gitVersion such as ``v1.36.3-eks-1a2b``.
    Raises ValueError, naming the input, for anything else or a major other than 1."""
    m = _VERSION.match(version.strip())
    if m is None or m.group(1) != "1":
        raise ValueError(f"{version!r} is not a Kubernetes version: give one such as 1.37 or "
                         "v1.37.2")
    return Release(int(m.group(2)), source)


def release_from_version(info: object) -> Release | None:
    """The release the API server's ``/version`` reports (``gitVersion``, else
    ``major``/``minor``, whose minor may carry a ``+``); None when it says neither."""
    if not isinstance(info, dict):
        return None
    git = info.get("gitVersion")
    if isinstance(git, str):
        try:
            return parse_release(git, "discovered")
        except ValueError:
            pass
    major, minor = info.get("major"), info.get("minor")
    if isinstance(major, str) and isinstance(minor, str):
        try:
            return parse_release(f"{major}.{minor.rstrip('+')}", "discovered")
        except ValueError:
            return None
    return None

