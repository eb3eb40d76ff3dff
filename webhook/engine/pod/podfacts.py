"""A pod, or a workload's pod template, read once at the engine's entry.

Every rule (routing, steering, the CDI check, the decision) reads these facts instead of the
raw object, so a malformed field (a list where a mapping belongs, a number for a name) is
judged the same way by all of them, and in one place. Its placement (``placement``,
``unsteered``) is an ``Placement``: the fields the scheduler reads, parsed once, and
the one answer to whether the pod can reach a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

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
from webhook.engine.core.resources import asked_by, container_list
from webhook.engine.pod import affinity, podclaims
from webhook.engine.pod.nodereach import Placement
from webhook.engine.stacks import dra, hami, nri
from webhook.engine.view.cluster import ClusterView

DEFAULT_SCHEDULER = "default-scheduler"
#: HAMi's annotations that pick among a node's GPUs.
NARROWING_ANNOTATIONS = (hami.USE_UUID_ANNOTATION, hami.NOUSE_UUID_ANNOTATION,
                         hami.USE_TYPE_ANNOTATION, hami.NOUSE_TYPE_ANNOTATION)
_USE_UUID, _NOUSE_UUID, _USE_TYPE, _NOUSE_TYPE = NARROWING_ANNOTATIONS
_VISIBLE = "NVIDIA_VISIBLE_DEVICES"
#: Added capabilities that make a container privileged as the NVIDIA toolkit counts it
#: (``internal/config/image/privileged.go``: CAP_SYS_ADMIN), with or without ``CAP_``.
PRIVILEGED_CAPABILITIES = ("SYS_ADMIN", "ALL")

#: The pod's labels a decision reads: the pool it names, HAMi's opt-out (the patch sets it),
#: HAMi-DRA's mark. ``PodFacts`` holds no other, so no rule can read another without
#: declaring it here; and pods that differ only in labels no rule reads (a Job's
#: ``job-name``, a ReplicaSet's ``pod-template-hash``) are decided once (``decision_metadata``).
READ_LABELS = frozenset({POOL_LABEL, HAMI_IGNORE_LABEL, HAMI_DRA_LABEL})
#: Likewise its annotations: the pool gpupool recorded, HAMi's GPU picking, the NRI
#: plugin's (by prefix), and every pool's ``exclusiveAnnotations`` (``_read_annotations``).
READ_ANNOTATIONS = frozenset({POOL_ANNOTATION, *NARROWING_ANNOTATIONS})


def _read_labels(labels: Mapping[str, Any]) -> dict[str, Any]:
    if READ_LABELS.isdisjoint(labels):  # (the usual pod: one C call, no comprehension)
        return {}
    return {k: labels[k] for k in READ_LABELS if k in labels}


def _read_annotations(annotations: Mapping[str, Any], policy: Policy) -> dict[str, Any]:
    """Those of a pod's annotations a rule reads: ``READ_ANNOTATIONS``, the NRI plugin's,
    and every pool's ``exclusiveAnnotations`` (one test inline per annotation, on every pod
    parsed)."""
    exclusive = policy.exclusive_annotations
    return {k: v for k, v in annotations.items() if isinstance(k, str) and (
        k in READ_ANNOTATIONS or k.startswith(nri.DOMAIN) or k in exclusive)}


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
    """What the engine knows of one pod, worked out whole when it is parsed and never
    changed: every rule reads these values, none works one out and keeps it. ``obj`` is the
    object as received: only the patch builder reads it, because a JSON patch must address
    the object's actual shape. ``claims`` is what it asks of DRA as the view resolved its
    claims when it was parsed: the snapshot every rule of one decision reads. (A named
    tuple: every review of a new pod shape builds two, and a frozen dataclass costs several
    times more to build.)"""

    obj: Mapping[str, Any]
    namespace: str | None
    has_metadata: bool
    labels: Mapping[str, Any]  # those a decision reads (``READ_LABELS``)
    annotations: Mapping[str, Any]  # likewise (``_read_annotations``)
    spec: Mapping[str, Any]  # {} when absent or not a mapping
    #: spec.schedulerName as sent (any JSON value); ``scheduler`` is what it means
    scheduler_field: object
    scheduler: str
    runtime_class: str | None
    #: its init and regular containers (those that are mappings), in that order
    containers: tuple[Mapping[str, Any], ...]
    resources: frozenset[str]  # the extended resources it asks for (a non-zero quantity)
    gpus: frozenset[str]  # those of them the policy counts as GPUs
    #: where its own fields let it run, steering included (as it will be scheduled)
    placement: Placement
    #: HAMi's GPU-picking annotations, as sent (None where absent)
    narrowing: tuple[object, ...]
    #: what its GPU containers say (``gpu_containers`` and the properties after it)
    gpu: _GPUContainers
    #: per container, the CDI devices its ``nvidia.cdi.k8s.io`` annotations name for the
    #: GPU Operator's NRI plugin (empty for nearly every pod)
    nri_requests: nri.Requests
    #: everything its GPU demand is computed from (its containers' resources and HAMi's
    #: narrowing annotations), as one string: part of the verdicts' key
    demand_key: str
    #: what it asks of DRA, as the view resolves its claims (``podclaims.resolve``)
    claims: dra.ClaimDemand

    @classmethod
    def parse(cls, obj: Mapping[str, Any], namespace: str | None, policy: Policy,
              view: ClusterView | None = None) -> PodFacts:
        """``view``: where its claims and the DeviceClasses are looked up (None: it asks
        nothing of DRA as far as this decision knows)."""
        meta = objects.meta_of(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = {}
        scheduler = spec.get("schedulerName")
        runtime_class = spec.get("runtimeClassName")
        labels, annotations = meta.get("labels"), meta.get("annotations")
        items = container_list(spec)
        asked = tuple([asked_by(c) for c in items])
        names = frozenset().union(*asked)
        gpus = policy.gpus_among(names)
        # (nearly every pod: no annotation, or none a rule reads, so no narrowing either)
        read_annotations = _read_annotations(annotations, policy) \
            if isinstance(annotations, dict) and annotations else {}
        placement = Placement(spec)
        narrowing = _narrowing(read_annotations) if read_annotations else _NO_NARROWING
        return cls(
            obj, namespace, isinstance(obj.get("metadata"), dict),
            _read_labels(labels) if isinstance(labels, dict) else {},
            read_annotations, spec, scheduler,
            scheduler if isinstance(scheduler, str) and scheduler else DEFAULT_SCHEDULER,
            runtime_class if isinstance(runtime_class, str) else None,
            items, names, gpus, placement, narrowing,
            _gpu_containers(items, asked, gpus),
            _nri_requests(read_annotations, items) if read_annotations else (),
            json_key([[c.get("resources") for c in items], narrowing]),
            podclaims.resolve(spec, names, namespace, view))

    @property
    def is_gpu_pod(self) -> bool:
        return bool(self.gpus)

    @property
    def asks_mig(self) -> bool:
        """It asks for MIG devices, which the agent's per-GPU labels say nothing about."""
        return any(r.startswith(MIG_RESOURCE_PREFIX) for r in self.gpus)

    @property
    def unsteered(self) -> Placement:
        """Its placement without gpupool's own steering requirements: the nodes the pod
        could reach had gpupool not kept it off the failing ones. (Worked out when asked:
        only a fold of its verdicts, made once per pod shape, asks.)"""
        bare = affinity.without_steering(self.spec)
        return self.placement if bare is self.spec else Placement(bare)

    @property
    def node_name(self) -> str | None:
        """spec.nodeName: a non-empty string, or None."""
        return self.placement.node_name

    @property
    def gpu_containers(self) -> tuple[Mapping[str, Any], ...]:
        """Its containers (init containers included) that ask for one of its GPUs."""
        return self.gpu.containers

    @property
    def privileged_gpus(self) -> bool:
        """Every container that asks for GPUs is privileged as the NVIDIA toolkit counts it
        (it has CAP_SYS_ADMIN: ``privileged: true`` or the capability added)."""
        return self.gpu.privileged

    @property
    def own_visible_devices(self) -> tuple[str, ...]:
        """The NVIDIA_VISIBLE_DEVICES values its GPU containers set themselves, literally
        (one from ``valueFrom`` cannot be known, and is left out): they override the device
        plugin's (``delivery.resolve_own``)."""
        return self.gpu.own_visible

    @property
    def own_visible_unknown(self) -> bool:
        """A GPU container takes NVIDIA_VISIBLE_DEVICES from ``valueFrom``: it overrides the
        device plugin's with a value that cannot be known at admission."""
        return self.gpu.own_visible_unknown

    @property
    def only_own_visible_devices(self) -> bool:
        """Every GPU container sets NVIDIA_VISIBLE_DEVICES itself: the plugin's value reaches
        none of them."""
        return self.gpu.only_own_visible


def who_of(obj: Mapping[str, Any], namespace: str | None) -> str:
    """"pod ns/name", as every message names the pod (or the workload's template)."""
    kind = obj.get("kind")
    return objects.describe(obj, namespace, kind.lower() if isinstance(kind, str) and kind
                            else "pod")


def _narrowing(annotations: Mapping[str, Any]) -> tuple[object, ...]:
    get = annotations.get
    return get(_USE_UUID), get(_NOUSE_UUID), get(_USE_TYPE), get(_NOUSE_TYPE)


_NO_NARROWING = _narrowing({})


def _nri_requests(annotations: Mapping[str, Any], items: tuple[Mapping[str, Any], ...]
                  ) -> nri.Requests:
    return nri.annotation_requests(annotations, (
        name for c in items if isinstance(name := c.get("name"), str)))


class _GPUContainers(NamedTuple):
    """What its GPU containers say, read in one pass: every review of a GPU pod asks."""

    containers: tuple[Mapping[str, Any], ...]
    privileged: bool  # every one is (and there is one)
    own_visible: tuple[str, ...]  # the literal NVIDIA_VISIBLE_DEVICES values they set
    only_own_visible: bool  # every one sets one, literally
    own_visible_unknown: bool  # one takes it from valueFrom


_NO_GPU_CONTAINERS = _GPUContainers((), False, (), False, False)


def _gpu_containers(items: tuple[Mapping[str, Any], ...], asked: tuple[frozenset[str], ...],
                    gpus: frozenset[str]) -> _GPUContainers:
    """``asked``: what each of ``items`` asks for."""
    if not gpus:
        return _NO_GPU_CONTAINERS
    gpu: list[Mapping[str, Any]] = []
    privileged = every = True
    referenced = False
    values: set[str] = set()
    for c, names in zip(items, asked, strict=True):
        if gpus.isdisjoint(names):
            continue
        gpu.append(c)
        # (nearly every container sets no securityContext: no call to learn it is not)
        privileged = privileged and c.get("securityContext") is not None and _privileged(c)
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
    if not isinstance(ctx, dict):  # (JSON's mappings are dicts; an ABC's test costs more)
        return False
    if ctx.get("privileged") is True:
        return True
    caps = ctx.get("capabilities")
    added = caps.get("add") if isinstance(caps, Mapping) else None
    return isinstance(added, list) and any(
        isinstance(c, str) and c.upper().removeprefix("CAP_") in PRIVILEGED_CAPABILITIES
        for c in added)
