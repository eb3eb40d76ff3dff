"""One node as admission needs it, reduced on the way in: labels (interned, shared across
nodes of one kind), taints, extended resources, HAMi's registered GPUs and device cordon, and
the agent's CDI inventory. Status heartbeats leave its fingerprint unchanged.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.api.cdireaders import containerd_reader
from webhook.api.held import HELD_ANNOTATION
from webhook.api.inventory import INVENTORY_ANNOTATION, Inventory, InventoryError, parse_inventory
from webhook.engine.core import objects
from webhook.engine.core.policy import Policy
from webhook.engine.core.resources import whole_number
from webhook.engine.stacks import hami
from webhook.engine.view.labels import NodeLabels

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"


def intern_map(m: Any) -> dict[str, str]:
    if not isinstance(m, Mapping):
        return {}
    return {sys.intern(k): sys.intern(v) for k, v in m.items()
            if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What admission needs to know about one node."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...] = ()
    extended_resources: frozenset[str] = frozenset()
    #: Extended resources' allocatable counts (None: the node reported no allocatable).
    allocatable: Mapping[str, int] | None = None
    gpus: tuple[hami.RegisteredGPU, ...] = ()
    register_error: str | None = None
    inventory: Inventory | None = None
    inventory_error: str | None = None
    #: GPUs HAMi's device cordon takes out of new allocations (``hami.io/device-cordon``)
    cordoned: frozenset[str] = frozenset()
    fingerprint: Any = field(default=None, compare=False, repr=False)
    #: a digest of the node's devices alone, as the node checks read them (the registered
    #: and inventoried GPUs, the cordon, the extended resources): the same digest, and the
    #: same labels those checks read, is the same answer (``NodeCheck.node_key``). None for
    #: a node not built from its object: never taken as unchanged.
    devices: bytes | None = field(default=None, compare=False, repr=False)
    #: the agent's ``gpupool.io/held-devices`` as published (None: none): only re-checks of
    #: running pods read it (``aftercare.restart``), parsed when one does; in the
    #: fingerprint, so a node whose pods changed what they hold is stored again, but not in
    #: ``devices``: admission's verdicts never read it
    held: str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], keep_held: bool = True) -> NodeInfo:
        """Build from a Node as the API returns it (camelCase dict); tolerant of missing parts.
        ``keep_held``: keep what its pods hold (the scan and ``check --running`` read it;
        the webhook's view leaves it out, and its changes with it)."""
        meta = objects.meta_of(obj)
        spec = objects.as_mapping(obj.get("spec"))
        status = objects.as_mapping(obj.get("status"))
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("node has no metadata.name")
        annotations = meta.get("annotations")
        if not isinstance(annotations, Mapping):
            annotations = {}
        gpus: tuple[hami.RegisteredGPU, ...] = ()
        register_error = None
        raw_register = annotations.get(hami.REGISTER_ANNOTATION)
        if isinstance(raw_register, str):
            try:
                gpus = hami.parse_register(raw_register)
            except hami.RegisterError as exc:
                register_error = f"{hami.REGISTER_ANNOTATION}: {exc}"
        inventory = None
        inventory_error = None
        raw_inventory = annotations.get(INVENTORY_ANNOTATION)
        node_info = objects.as_mapping(status.get("nodeInfo"))
        runtime_version = node_info.get("containerRuntimeVersion")
        runtime_version = runtime_version if isinstance(runtime_version, str) else None
        if isinstance(raw_inventory, str):
            try:
                inventory = parse_inventory(raw_inventory)
            except InventoryError as exc:
                inventory_error = f"{INVENTORY_ANNOTATION}: {exc}"
        reader = containerd_reader(runtime_version)
        if inventory is not None and reader is not None:
            # containerd resolves CDI names with the library it was built with, which reads
            # spec versions up to its own (webhook.api.cdireaders)
            inventory = inventory.read_by_containerd(reader.reads)
        extended: set[str] = set()
        for part in ("capacity", "allocatable"):
            res = status.get(part)
            if isinstance(res, Mapping):
                extended.update(sys.intern(k) for k in res if isinstance(k, str) and "/" in k)
        allocatable = None
        raw_alloc = status.get("allocatable")
        if isinstance(raw_alloc, Mapping):
            allocatable = {sys.intern(k): n for k, v in raw_alloc.items()
                           if isinstance(k, str) and "/" in k
                           and (n := whole_number(v)) is not None}
        taints = tuple(t for t in spec.get("taints") or () if isinstance(t, Mapping))
        labels = NodeLabels.build(meta.get("labels"), name)
        # A digest of exactly what decisions read: status heartbeats leave it unchanged, so
        # they never invalidate the view's memo.
        cordoned = hami.cordoned(annotations.get(hami.CORDON_ANNOTATION))
        devices = hashlib.blake2b(repr((raw_register, raw_inventory, runtime_version,
                                        sorted(extended),
                                        sorted((allocatable or {}).items()),
                                        sorted(cordoned))).encode(), digest_size=16).digest()
        raw_held = annotations.get(HELD_ANNOTATION) if keep_held else None
        held = raw_held if isinstance(raw_held, str) else None
        fingerprint = hashlib.blake2b(repr((sorted(labels.items()), taints, held)).encode()
                                      + devices, digest_size=16).digest()
        return cls(name=sys.intern(name), labels=labels, taints=taints,
                   extended_resources=frozenset(extended), allocatable=allocatable, gpus=gpus,
                   register_error=register_error, inventory=inventory,
                   inventory_error=inventory_error, cordoned=cordoned,
                   fingerprint=fingerprint, devices=devices, held=held)

    def is_gpu_node(self, policy: Policy) -> bool:
        return (self.labels.get(GPU_PRESENT_LABEL) == "true" or bool(self.gpus)
                or self.inventory is not None or policy.pool_label in self.labels
                or any(policy.is_gpu_resource(r) for r in self.extended_resources))

    def pool(self, policy: Policy) -> str:
        """The pool its labels put it in (the default pool without the pool label)."""
        return policy.node_pool(self.labels)

    def in_pool(self, pool: str, policy: Policy, devices: bool = False) -> bool:
        """Is it a node of ``pool``: one its labels put there that is a GPU node, or, with
        ``devices``, one that publishes DRA devices (a DRA node need not look like a GPU
        node). The one membership rule: candidates, checks, the view's pool index and the
        scanner all ask it."""
        return self.pool(policy) == pool and (devices or self.is_gpu_node(policy))

    @staticmethod
    def pool_reads(policy: Policy) -> frozenset[str]:
        """The node labels ``in_pool`` reads (besides its devices)."""
        return frozenset({GPU_PRESENT_LABEL, policy.pool_label})

    def gpu_types(self) -> Mapping[str, str]:
        """GPU UUID -> model, as HAMi's register annotation names them (empty: unknown)."""
        return {g.uuid: g.type for g in self.gpus if g.type}

    def hami_mig_gpus(self) -> frozenset[str]:
        """The GPUs HAMi runs in MIG mode: it creates the MIG device it hands out."""
        return frozenset(g.uuid for g in self.gpus if g.mode == hami.MIG_MODE)

    def runs_hami_mig(self) -> bool:
        """Whether HAMi runs any GPU here in MIG mode (asked on every node judged)."""
        return any(g.mode == hami.MIG_MODE for g in self.gpus)

    def gpu_uuids(self) -> tuple[str, ...]:
        """The node's GPUs: as its driver lists them (the agent reads them), else as HAMi
        registered them, else the UUIDs its CDI specs name."""
        if self.inventory is not None and self.inventory.gpus:
            return self.inventory.gpus
        if self.gpus:
            return tuple(g.uuid for g in self.gpus)
        if self.inventory is not None:
            return self.inventory.gpu_uuids
        return ()
