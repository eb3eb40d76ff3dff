"""A pod, or a workload's pod template, read once at the engine's entry.

Every rule (routing, steering, the CDI check, the decision) reads these facts instead of the
raw object, so a malformed field (a list where a mapping belongs, a number for a name) is
judged the same way by all of them, and in one place. The node-affinity evaluators
(``webhook.engine.affinity``) still walk the placement fields' structure, which is theirs to
interpret; they get it from here, already shaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from webhook.engine import affinity, hami, objects
from webhook.engine.policy import Policy
from webhook.engine.resources import containers, gpu_resources

DEFAULT_SCHEDULER = "default-scheduler"
#: HAMi's annotations that pick among a node's GPUs.
NARROWING_ANNOTATIONS = (hami.USE_UUID_ANNOTATION, hami.NOUSE_UUID_ANNOTATION,
                         hami.USE_TYPE_ANNOTATION, hami.NOUSE_TYPE_ANNOTATION)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _string(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class PodFacts:
    """What the engine knows of one pod. ``obj`` is the object as received: only the patch
    builder reads it, because a JSON patch must address the object's actual shape."""

    obj: Mapping[str, Any]
    namespace: str | None
    who: str  # "pod ns/name", as every message names it
    has_metadata: bool
    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    spec: Mapping[str, Any]  # {} when absent or not a mapping
    #: spec.schedulerName as sent (any JSON value); ``scheduler`` is what it means
    scheduler_field: object
    scheduler: str
    node_name: str | None  # a non-empty string, or None
    runtime_class: str | None
    gpus: frozenset[str] = field(default_factory=frozenset)  # GPU resources it asks for

    @classmethod
    def parse(cls, obj: Mapping[str, Any], namespace: str | None, policy: Policy) -> PodFacts:
        meta = objects.meta_of(obj)
        spec = _mapping(obj.get("spec"))
        kind = _string(obj.get("kind")) or "Pod"
        scheduler = spec.get("schedulerName")
        node_name = _string(spec.get("nodeName"))
        return cls(
            obj=obj, namespace=namespace, who=objects.describe(obj, namespace, kind.lower()),
            has_metadata=isinstance(obj.get("metadata"), dict),
            labels=_mapping(meta.get("labels")), annotations=_mapping(meta.get("annotations")),
            spec=spec, scheduler_field=scheduler,
            scheduler=scheduler if isinstance(scheduler, str) and scheduler
            else DEFAULT_SCHEDULER,
            node_name=node_name or None, runtime_class=_string(spec.get("runtimeClassName")),
            gpus=frozenset(gpu_resources(spec, policy)))

    @property
    def is_gpu_pod(self) -> bool:
        return bool(self.gpus)

    @cached_property
    def unsteered(self) -> Mapping[str, Any]:
        """The placement fields without gpupool's own steering requirements: the nodes the
        pod could reach had gpupool not kept it off the failing ones."""
        return affinity.without_steering(self.spec)

    @cached_property
    def narrowing(self) -> tuple[object, ...]:
        """HAMi's GPU-picking annotations, as sent (None where absent)."""
        return tuple(self.annotations.get(k) for k in NARROWING_ANNOTATIONS)

    @cached_property
    def demand_key(self) -> tuple[Any, ...]:
        """Everything a pod's GPU demand is computed from: a cache key for what it decides."""
        return ([c.get("resources") for _, _, c in containers(self.spec)], self.narrowing)

    def annotation_list(self, key: str) -> tuple[str, ...]:
        return hami.uuid_list(self.annotations.get(key))
