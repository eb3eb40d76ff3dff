"""A pod, or a workload's pod template, read once at the engine's entry.

Every rule (routing, steering, the CDI check, the decision) reads these facts instead of the
raw object, so a malformed field (a list where a mapping belongs, a number for a name) is
judged the same way by all of them, and in one place. Its placement (``placement``,
``unsteered``) is an ``Placement``: the fields the scheduler reads, parsed once, and
the one answer to whether the pod can reach a node.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar, cast

from webhook.api.inventory import MIG_RESOURCE_PREFIX
from webhook.engine.core import objects
from webhook.engine.core.objects import json_key
from webhook.engine.core.policy import (
    HAMI_DRA_LABEL,
    HAMI_IGNORE_LABEL,
    POOL_ANNOTATION,
    POOL_LABEL,
    Policy,
)
from webhook.engine.core.resources import container_list, is_zero_quantity, requested_names
from webhook.engine.pod import affinity
from webhook.engine.pod.placement import Placement
from webhook.engine.stacks import hami, nri

DEFAULT_SCHEDULER = "default-scheduler"
#: HAMi's annotations that pick among a node's GPUs.
NARROWING_ANNOTATIONS = (hami.USE_UUID_ANNOTATION, hami.NOUSE_UUID_ANNOTATION,
                         hami.USE_TYPE_ANNOTATION, hami.NOUSE_TYPE_ANNOTATION)
_USE_UUID, _NOUSE_UUID, _USE_TYPE, _NOUSE_TYPE = NARROWING_ANNOTATIONS
_VISIBLE = "NVIDIA_VISIBLE_DEVICES"
#: Added capabilities that make a container privileged as the NVIDIA toolkit counts it
#: (``internal/config/image/privileged.go``: CAP_SYS_ADMIN), with or without ``CAP_``.
PRIVILEGED_CAPABILITIES = ("SYS_ADMIN", "ALL")
T = TypeVar("T")

#: The pod's labels a decision reads: the pool it names, HAMi's opt-out (the patch sets it),
#: HAMi-DRA's mark. ``PodFacts`` holds no other, so no rule can read another without
#: declaring it here; and pods that differ only in labels no rule reads (a Job's
#: ``job-name``, a ReplicaSet's ``pod-template-hash``) are decided once (``decision_metadata``).
READ_LABELS = frozenset({POOL_LABEL, HAMI_IGNORE_LABEL, HAMI_DRA_LABEL})
#: Likewise its annotations: the pool gpupool recorded, HAMi's GPU picking, the NRI
#: plugin's (by prefix), and every pool's ``exclusiveAnnotations`` (``reads_annotation``).
READ_ANNOTATIONS = frozenset({POOL_ANNOTATION, *NARROWING_ANNOTATIONS})


def reads_annotation(key: object, policy: Policy) -> bool:
    return isinstance(key, str) and (key in READ_ANNOTATIONS or key.startswith(nri.DOMAIN)
                                     or key in policy.exclusive_annotations)


def _read_labels(labels: Mapping[str, Any]) -> dict[str, Any]:
    return {k: labels[k] for k in READ_LABELS if k in labels}


def _read_annotations(annotations: Mapping[str, Any], policy: Policy) -> dict[str, Any]:
    return {k: v for k, v in annotations.items() if reads_annotation(k, policy)}


def decision_metadata(meta: Mapping[str, Any], policy: Policy) -> dict[str, Any]:
    """A pod's metadata as far as any decision reads it: its namespace, and the labels and
    annotations ``PodFacts`` holds. A map that is there stays there, emptied or not (a patch
    adds an entry to a map that exists and creates one that does not), so a decision made
    for it holds, patch included, for every pod with the same: the key of decisions kept
    per pod shape (``admit``)."""
    out: dict[str, Any] = {}
    if "namespace" in meta:
        out["namespace"] = meta["namespace"]
    labels, annotations = meta.get("labels"), meta.get("annotations")
    if "labels" in meta:
        out["labels"] = _read_labels(labels) if isinstance(labels, dict) else labels
    if "annotations" in meta:
        out["annotations"] = _read_annotations(annotations, policy) \
            if isinstance(annotations, dict) else annotations
    return out


class PodFacts(NamedTuple):
    """What the engine knows of one pod; immutable. ``obj`` is the object as received: only
    the patch builder reads it, because a JSON patch must address the object's actual shape.
    (A named tuple: every review builds two, and a frozen dataclass costs several times
    more to build.)"""

    obj: Mapping[str, Any]
    namespace: str | None
    has_metadata: bool
    labels: Mapping[str, Any]  # those a decision reads (``READ_LABELS``)
    annotations: Mapping[str, Any]  # likewise (``reads_annotation``)
    spec: Mapping[str, Any]  # {} when absent or not a mapping
    #: spec.schedulerName as sent (any JSON value); ``scheduler`` is what it means
    scheduler_field: object
    scheduler: str
    runtime_class: str | None
    #: its init and regular containers (those that are mappings), in that order
    containers: tuple[Mapping[str, Any], ...]
    resources: frozenset[str]  # the extended resources it asks for (a non-zero quantity)
    gpus: frozenset[str]  # those of them the policy counts as GPUs
    #: what the properties below worked out, each at most once (not part of the facts)
    memo: dict[str, Any]

    @classmethod
    def parse(cls, obj: Mapping[str, Any], namespace: str | None, policy: Policy) -> PodFacts:
        meta = objects.meta_of(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = {}
        scheduler = spec.get("schedulerName")
        runtime_class = spec.get("runtimeClassName")
        labels, annotations = meta.get("labels"), meta.get("annotations")
        items = container_list(spec)
        names = frozenset(requested_names(items))
        return cls(
            obj, namespace,
            isinstance(obj.get("metadata"), dict),
            _read_labels(labels) if isinstance(labels, dict) else {},
            _read_annotations(annotations, policy) if isinstance(annotations, dict) else {},
            spec, scheduler,
            scheduler if isinstance(scheduler, str) and scheduler else DEFAULT_SCHEDULER,
            runtime_class if isinstance(runtime_class, str) else None,
            items, names, frozenset(r for r in names if policy.is_gpu_resource(r)), {})

    @property
    def is_gpu_pod(self) -> bool:
        return bool(self.gpus)

    @property
    def asks_mig(self) -> bool:
        """It asks for MIG devices, which the agent's per-GPU labels say nothing about."""
        return _asks_mig(self.gpus)

    def once(self, key: str, compute: Callable[..., T], *args: Any) -> T:
        """``compute(*args)``, worked out on the first call only (kept in ``memo``). (Its
        arguments are passed, not closed over: a closure would be built on every call.)"""
        memo = self.memo
        if key in memo:
            return cast(T, memo[key])
        value = memo[key] = compute(*args)
        return value

    @property
    def placement(self) -> Placement:
        """Where its own fields let it run, steering included (as it will be scheduled)."""
        hit = self.memo.get("placement")
        if hit is None:  # (read on every review: no closure)
            hit = self.memo["placement"] = Placement(self.spec)
        return cast(Placement, hit)

    @property
    def unsteered(self) -> Placement:
        """Its placement without gpupool's own steering requirements: the nodes the pod
        could reach had gpupool not kept it off the failing ones."""
        return self.once("unsteered", _unsteered, self)

    @property
    def node_name(self) -> str | None:
        """spec.nodeName: a non-empty string, or None."""
        return self.placement.node_name

    @property
    def narrowing(self) -> tuple[object, ...]:
        """HAMi's GPU-picking annotations, as sent (None where absent)."""
        return self.once("narrowing", _narrowing, self.annotations)

    @property
    def _gpu(self) -> _GPUContainers:
        hit = self.memo.get("gpu")
        if hit is None:  # (on every review of a GPU pod: no closure, one pass)
            hit = self.memo["gpu"] = _gpu_containers(self.containers, self.gpus)
        return cast(_GPUContainers, hit)

    @property
    def gpu_containers(self) -> tuple[Mapping[str, Any], ...]:
        """Its containers (init containers included) that ask for one of its GPUs."""
        return self._gpu.containers

    @property
    def privileged_gpus(self) -> bool:
        """Every container that asks for GPUs is privileged as the NVIDIA toolkit counts it
        (it has CAP_SYS_ADMIN: ``privileged: true`` or the capability added)."""
        return self._gpu.privileged

    @property
    def own_visible_devices(self) -> tuple[str, ...]:
        """The NVIDIA_VISIBLE_DEVICES values its GPU containers set themselves, literally
        (one from ``valueFrom`` cannot be known, and is left out): they override the device
        plugin's (``delivery.resolve_own``)."""
        return self._gpu.own_visible

    @property
    def own_visible_unknown(self) -> bool:
        """A GPU container takes NVIDIA_VISIBLE_DEVICES from ``valueFrom``: it overrides the
        device plugin's with a value that cannot be known at admission."""
        return self._gpu.own_visible_unknown

    @property
    def only_own_visible_devices(self) -> bool:
        """Every GPU container sets NVIDIA_VISIBLE_DEVICES itself: the plugin's value reaches
        none of them."""
        return self._gpu.only_own_visible

    @property
    def nri_requests(self) -> nri.Requests:
        """Per container, the CDI devices its ``nvidia.cdi.k8s.io`` annotations name for the
        GPU Operator's NRI plugin (empty for nearly every pod)."""
        if not self.annotations:
            return ()
        return self.once("nri_requests", _nri_requests, self)

    @property
    def demand_key(self) -> str:
        """Everything a pod's GPU demand is computed from (its containers' resources and
        HAMi's narrowing annotations), as one string: a cache key for what it decides."""
        hit = self.memo.get("demand_key")
        if hit is None:
            hit = self.memo["demand_key"] = json_key(
                [[c.get("resources") for c in self.containers], self.narrowing])
        return cast(str, hit)


def who_of(obj: Mapping[str, Any], namespace: str | None) -> str:
    """"pod ns/name", as every message names the pod (or the workload's template)."""
    kind = obj.get("kind")
    return objects.describe(obj, namespace, kind.lower() if isinstance(kind, str) and kind
                            else "pod")


@functools.lru_cache(maxsize=256)
def _asks_mig(gpus: frozenset[str]) -> bool:
    return any(r.startswith(MIG_RESOURCE_PREFIX) for r in gpus)


def _asks_for(container: Mapping[str, Any], names: frozenset[str]) -> bool:
    """Does the container ask for one of ``names`` (a non-zero request or limit)?"""
    res = container.get("resources")
    if not isinstance(res, dict):
        return False
    for part in ("limits", "requests"):
        values = res.get(part)
        if isinstance(values, dict) and any(
                k in names and not is_zero_quantity(v) for k, v in values.items()):
            return True
    return False


def _unsteered(facts: PodFacts) -> Placement:
    spec = affinity.without_steering(facts.spec)
    return facts.placement if spec is facts.spec else Placement(spec)


def _narrowing(annotations: Mapping[str, Any]) -> tuple[object, ...]:
    get = annotations.get
    return get(_USE_UUID), get(_NOUSE_UUID), get(_USE_TYPE), get(_NOUSE_TYPE)


def _nri_requests(facts: PodFacts) -> nri.Requests:
    return nri.annotation_requests(facts.annotations, (
        name for c in facts.containers if isinstance(name := c.get("name"), str)))


class _GPUContainers(NamedTuple):
    """What its GPU containers say, read in one pass: every review of a GPU pod asks."""

    containers: tuple[Mapping[str, Any], ...]
    privileged: bool  # every one is (and there is one)
    own_visible: tuple[str, ...]  # the literal NVIDIA_VISIBLE_DEVICES values they set
    only_own_visible: bool  # every one sets one, literally
    own_visible_unknown: bool  # one takes it from valueFrom


_NO_GPU_CONTAINERS = _GPUContainers((), False, (), False, False)


def _gpu_containers(items: tuple[Mapping[str, Any], ...], gpus: frozenset[str]
                    ) -> _GPUContainers:
    if not gpus:
        return _NO_GPU_CONTAINERS
    gpu: list[Mapping[str, Any]] = []
    privileged = every = True
    referenced = False
    values: set[str] = set()
    for c in items:
        if not _asks_for(c, gpus):
            continue
        gpu.append(c)
        privileged = privileged and _privileged(c)
        env = c.get("env")
        entry = objects.env_entry(env, _VISIBLE) if env else None
        if entry is None:
            every = False
            continue
        referenced = referenced or entry.get("valueFrom") is not None
        value = objects.literal_value(entry)
        if value is None:
            every = False
        else:
            values.add(value)
    if not gpu:
        return _NO_GPU_CONTAINERS
    return _GPUContainers(tuple(gpu), privileged, tuple(sorted(values)),
                          bool(values) and every, referenced)


def _privileged(container: Mapping[str, Any]) -> bool:
    ctx = container.get("securityContext")
    if not isinstance(ctx, Mapping):
        return False
    if ctx.get("privileged") is True:
        return True
    caps = ctx.get("capabilities")
    added = caps.get("add") if isinstance(caps, Mapping) else None
    return isinstance(added, list) and any(
        isinstance(c, str) and c.upper().removeprefix("CAP_") in PRIVILEGED_CAPABILITIES
        for c in added)
