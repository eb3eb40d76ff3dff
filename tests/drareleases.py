"""One DRA case per place where Kubernetes releases' allocators decide differently.

Each case is a question for ``dra-judge`` (one node) built to land on one switch of
``webhook.engine.stacks.releases``: the releases on either side of the switch must answer it
differently, and gpupool, told each release, must answer as that release's own allocator
does. The random corpus (``tests.dracorpus``) reaches some of these only by chance; here each
is reached on purpose, and the real allocators say whether the case really lands on its
switch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tests import dracorpus

DRIVER = "gpu.example.com"
NODE = "n0"


class Case(NamedTuple):
    switch: str  # the Release property it lands on
    what: str
    question: dict[str, Any]  # dra-judge's input: classes, slices, allocated, claims, nodes


def _class(name: str, selector: str = "true") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": (
                f"device.driver == '{DRIVER}' && ({selector})")}}]}}


def _device(name: str, kind: str = "gpu", **extra: Any) -> dict[str, Any]:
    attrs = {"type": {"string": kind}, **extra.pop("attributes", {})}
    return {"name": name, "attributes": attrs, **extra}


def _slice(devices: list[dict[str, Any]], counters: list[dict[str, Any]] | None = None
           ) -> list[dict[str, Any]]:
    return dracorpus.pool_slices(DRIVER, NODE, devices, counters)


def _claim(name: str, requests: list[dict[str, Any]],
           constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"devices": devices}}


def _held(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    claim = _claim(name, [{"name": "r", "exactly": {"deviceClassName": "any"}}])
    claim["metadata"]["namespace"] = "other"
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "r", "driver": DRIVER, "pool": NODE, **r} for r in results]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
            "key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}
    return claim


def _question(slices: list[dict[str, Any]], claims: list[dict[str, Any]],
              allocated: list[dict[str, Any]] | None = None,
              classes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
    return {"classes": [_class("any"), *(classes or [])], "slices": slices,
            "allocated": allocated or [], "claims": claims, "nodes": [node]}


def _exactly(count: int = 1, cls: str = "any", **extra: Any) -> dict[str, Any]:
    return {"deviceClassName": cls, "count": count, **extra}


SHARED_CAPACITY = {"memory": {"value": "10Gi", "requestPolicy": {
    "default": "1Gi", "validRange": {"min": "1Gi"}}}}


def cases() -> list[Case]:
    share = {"shareID": "6f1c3c2e-0000-4000-8000-000000000001"}
    return [
        Case("request_takes_a_device_once",
             "one request of two devices, one device that allows multiple allocations",
             _question(_slice([_device("gpu-0", allowMultipleAllocations=True,
                                       capacity=SHARED_CAPACITY)]),
                       [_claim("c", [{"name": "r", "exactly": _exactly(2)}])])),
        Case("rollback_returns_counters",
             "a whole GPU refused for its taint after its counters were charged, then a MIG "
             "placement on the same counters",
             _question(_slice(
                 [_device("gpu-0", consumesCounters=[{"counterSet": "gpu-0", "counters": {
                     "slices": {"value": "7"}}}], taints=[{
                         "key": "example.com/unhealthy", "value": "xid",
                         "effect": "NoSchedule"}]),
                  _device("gpu-0-mig-0", "mig", consumesCounters=[{
                      "counterSet": "gpu-0", "counters": {"slices": {"value": "1"}}}])],
                 [{"name": "gpu-0", "counters": {"slices": {"value": "7"}}}]),
                 [_claim("c", [{"name": "r", "exactly": _exactly()}])])),
        Case("held_shares_charge_counters",
             "a device held through a share consumes the pool's counters another device needs",
             _question(_slice(
                 [_device("shared", allowMultipleAllocations=True, capacity=SHARED_CAPACITY,
                          consumesCounters=[{"counterSet": "cs", "counters": {
                              "slices": {"value": "4"}}}]),
                  _device("whole", "whole", consumesCounters=[{"counterSet": "cs", "counters": {
                      "slices": {"value": "4"}}}])],
                 [{"name": "cs", "counters": {"slices": {"value": "4"}}}]),
                 [_claim("c", [{"name": "r", "exactly": _exactly(cls="whole")}])],
                 [_held("h", [{"device": "shared", **share,
                               "consumedCapacity": {"memory": "1Gi"}}])],
                 [_class("whole", "device.attributes['gpu.example.com'].type == 'whole'")])),
        Case("shares_without_capacity_are_shared",
             "a further share of a device held through a share that records no capacity",
             _question(_slice(
                 [_device("shared", allowMultipleAllocations=True,
                          consumesCounters=[{"counterSet": "cs", "counters": {
                              "slices": {"value": "4"}}}])],
                 [{"name": "cs", "counters": {"slices": {"value": "4"}}}]),
                 [_claim("c", [{"name": "r", "exactly": _exactly()}])],
                 [_held("h", [{"device": "shared", **share}])])),
        Case("all_subrequest_keeps_its_index",
             "firstAvailable: a first subrequest nothing matches, then allocationMode All "
             "over two GPUs, one of them held",
             _question(_slice([_device("gpu-0"), _device("gpu-1")]),
                       [_claim("c", [{"name": "r", "firstAvailable": [
                           {"name": "none", **_exactly(cls="none")},
                           {"name": "all", "deviceClassName": "any",
                            "allocationMode": "All"}]}])],
                       [_held("h", [{"device": "gpu-1"}])],
                       [_class("none", "device.attributes['gpu.example.com'].type == 'x'")])),
        Case("distinct_over_every_device",
             "distinctAttribute over one request of three devices on two PCIe roots",
             _question(_slice([_device(f"gpu-{i}", attributes={"pcieRoot": {"string": root}})
                               for i, root in enumerate(("a", "b", "a"))]),
                       [_claim("c", [{"name": "r", "exactly": _exactly(3)}], [
                           {"distinctAttribute": f"{DRIVER}/pcieRoot"}])])),
        Case("all_takes_capacity_blocked_devices",
             "allocationMode All with a capacity request, one device's capacity mostly held",
             _question(_slice([_device(f"gpu-{i}", allowMultipleAllocations=True,
                                       capacity=SHARED_CAPACITY) for i in range(2)]),
                       [_claim("c", [{"name": "r", "exactly": {
                           "deviceClassName": "any", "allocationMode": "All",
                           "capacity": {"requests": {"memory": "4Gi"}}}}])],
                       [_held("h", [{"device": "gpu-1", **share,
                                     "consumedCapacity": {"memory": "8Gi"}}])])),
    ]
