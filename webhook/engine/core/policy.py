"""The PoolPolicy: which node pools exist, how nodes and pods map to them, what each needs.

Parsing is strict on purpose: a typo in a policy that silently falls back to defaults would
route pods to the wrong scheduler on every create, so every unknown or ill-typed field is an
error that names its path (``pools[1].schedulerName``).
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import yaml

from webhook.api.delivery import (
    CDI_DEVICES,
    DETECT,
    DEVICE_PLUGIN_KIND,
    NONE,
    VISIBLE_DEVICES,
    WAYS,
    Way,
)
from webhook.api.said import Said, said
from webhook.api.yamltext import LOADER, yaml_error

API_VERSION = "gpupool.io/v1alpha1"
KIND = "PoolPolicy"

#: Pod and namespace label that names a pool explicitly; the annotation records our choice.
POOL_LABEL = "gpupool.io/pool"
POOL_ANNOTATION = "gpupool.io/pool"
#: HAMi's webhook skips objects carrying this label (its objectSelector excludes them).
HAMI_IGNORE_LABEL = "hami.io/webhook"
HAMI_IGNORE_VALUE = "ignore"
#: The label HAMi-DRA's webhook puts on every pod whose GPU resources it turned into claims.
HAMI_DRA_LABEL = "hami.io/dra"

#: Fields of the first policy version, still read (docs/policy.md, "Deprecated fields").
CDI_REQUIRE = ("perGPU", "anyDevice", "none")
CDI_WHEN = ("runtimeUsesCDI", "always")


class OnFinding(StrEnum):
    """What a policy switch does when its finding occurs (``onNoCandidates``,
    ``onMissingInventory``, ``onUserNamespace``, ``onNoNodeView``)."""

    WARN = "warn"
    DENY = "deny"


class WorkloadTemplates(StrEnum):
    """What a workload whose pods would be denied gets (``workloadTemplates``)."""

    DENY = "deny"
    WARN = "warn"
    OFF = "off"


class Ungranted(StrEnum):
    """What a container that asks for no GPU gets where its pod can reach a node that would
    hand it GPUs anyway (``access.ungranted``)."""

    VOID = "void"  # NVIDIA_VISIBLE_DEVICES=void set in it, with a warning
    DENY = "deny"
    WARN = "warn"
    OFF = "off"


#: The namespaces whose pods may see every GPU by default: the GPU Operator's, HAMi's (its
#: chart's documented namespace is kube-system) and NVIDIA's standalone device plugin's (its
#: chart's documented namespace), whose own components see every GPU by design.
DEFAULT_EXEMPT_NAMESPACES = ("gpu-operator", "kube-system", "nvidia-device-plugin")
#: Who may write HAMi's scheduler-owned pod annotations: its scheduler and device plugin
#: (HAMi v2.10's chart: ServiceAccounts ``<release>-scheduler`` and
#: ``<release>-device-plugin``, release ``hami`` in kube-system by its docs).
DEFAULT_SCHEDULER_IDENTITIES = ("system:serviceaccount:kube-system:hami-scheduler",
                                "system:serviceaccount:kube-system:hami-device-plugin")
#: In ``Access.scheduler_identities``: every writer (a pod re-judged after its admission,
#: whose annotations were judged then: ``aftercare.podrisk``).
ANY_WRITER = "*"


@dataclass(frozen=True)
class Access:
    """Who may reach GPUs without a grant (``access`` in the policy, docs/security.md)."""

    ungranted: Ungranted = Ungranted.VOID
    exempt_namespaces: tuple[str, ...] = DEFAULT_EXEMPT_NAMESPACES
    scheduler_identities: tuple[str, ...] = DEFAULT_SCHEDULER_IDENTITIES


ON_FINDING = tuple(v.value for v in OnFinding)
UNGRANTED = tuple(v.value for v in Ungranted)
WORKLOAD_TEMPLATES = tuple(v.value for v in WorkloadTemplates)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CDI_NAME = r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
_CDI_KIND = re.compile(rf"^{_CDI_NAME}/{_CDI_NAME}$")


class PolicyError(ValueError):
    """A policy document that cannot be used; the message names the offending field."""


def is_qualified_name(key: str) -> bool:
    """Kubernetes qualified name (label/annotation key): optional DNS prefix, name <= 63."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_LABEL_NAME.match(value)))


@dataclass(frozen=True)
class CDIRequirement:
    """What a pool's pods need from their node's CDI specs (``webhook.api.delivery``).

    ``delivery``: how the pool's device plugin hands GPUs to containers: ``visibleDevices``
    (UUIDs in NVIDIA_VISIBLE_DEVICES, resolved by the NVIDIA runtime as its mode says),
    ``cdiDevices`` (the plugin's CDI names, resolved by containerd), ``detect`` (per node,
    from whether the plugin's spec is there) or ``none`` (no check). ``device_kind``: the kind
    of the plugin's CDI spec. ``steer``: the mutating webhook keeps the pool's pods off nodes
    whose agent says their GPUs will not resolve.
    """

    delivery: Way = Way.NONE
    device_kind: str = DEVICE_PLUGIN_KIND
    steer: bool = True
    #: set a non-CDI RuntimeClass where that provably makes the pod run (``cdi.repair``)
    repair: bool = False

    @property
    def checked(self) -> bool:
        return self.delivery != NONE


@dataclass(frozen=True)
class Pool:
    name: str
    scheduler_name: str
    label_values: tuple[str, ...] = ()
    exclusive_resources: tuple[str, ...] = ()
    exclusive_annotations: tuple[str, ...] = ()
    cdi: CDIRequirement = field(default_factory=CDIRequirement)
    #: DeviceClasses (names or glob patterns) whose DRA devices this pool's nodes publish
    device_classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    pool_label: str
    default_pool: str
    gpu_resources: tuple[str, ...]
    pools: tuple[Pool, ...]
    hami_scheduler_name: str = "hami-scheduler"
    non_cdi_runtime_classes: tuple[str, ...] = ("nvidia-legacy",)
    on_no_candidates: OnFinding = OnFinding.WARN
    on_missing_inventory: OnFinding = OnFinding.WARN
    on_user_namespace: OnFinding = OnFinding.DENY
    #: a GPU pod decided with no node view: the server's watch has not synced yet, or
    #: ``--no-cluster`` (docs/reliability.md, "Fail-open cases")
    on_no_node_view: OnFinding = OnFinding.WARN
    #: a pod asking for a resource that looks like a GPU resource but that no node, no
    #: DeviceClass and no policy name serves (``checks.resourcenames``)
    on_unknown_gpu_resource: OnFinding = OnFinding.WARN
    require_inventory: bool = False
    workload_templates: WorkloadTemplates = WorkloadTemplates.DENY
    audit_mutations: bool = False
    access: Access = field(default_factory=Access)

    # What the fields imply, worked out once when the policy is made (it never changes):
    #: the policy's content as a SHA-256 digest of every field above: the fold and
    #: per-shape keys use it instead of hashing the whole policy on each lookup, and a key
    #: must never stand for two policies (a 64-bit ``hash`` could)
    cache_key: bytes = field(init=False, compare=False, repr=False)
    #: every pool's ``exclusiveAnnotations``: pod annotations routing reads
    exclusive_annotations: frozenset[str] = field(init=False, compare=False, repr=False)
    #: every pool's ``exclusiveResources``: a pod asking for none of them (nearly every pod)
    #: skips routing's look for them pool by pool
    exclusive_resources: frozenset[str] = field(init=False, compare=False, repr=False)
    by_name: Mapping[str, Pool] = field(init=False, compare=False, repr=False)
    #: every pool's name: what a pod's placement admits when it says nothing of the pool
    pool_set: frozenset[str] = field(init=False, compare=False, repr=False)
    pool_by_label_value: Mapping[str, str] = field(init=False, compare=False, repr=False)
    schedulers: frozenset[str] = field(init=False, compare=False, repr=False)
    exact_gpu_resources: frozenset[str] = field(init=False, compare=False, repr=False)
    gpu_resource_patterns: tuple[str, ...] = field(init=False, compare=False, repr=False)
    #: whether any pool serves DRA DeviceClasses
    serves_dra: bool = field(init=False, compare=False, repr=False)
    #: routing's evidence for a pod its required node affinity on the pool label pins
    #: (``affinity.pool_constraint_source``): the same for every such pod
    affinity_evidence: Said = field(init=False, compare=False, repr=False)
    _gpu_patterns: tuple[re.Pattern[str], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        patterns = tuple(r for r in self.gpu_resources if _is_pattern(r))
        derived: dict[str, object] = {
            "exclusive_annotations": frozenset(
                a for p in self.pools for a in p.exclusive_annotations),
            "exclusive_resources": frozenset(
                r for p in self.pools for r in p.exclusive_resources),
            "by_name": MappingProxyType({p.name: p for p in self.pools}),
            "pool_set": frozenset(p.name for p in self.pools),
            "pool_by_label_value": MappingProxyType(
                {v: p.name for p in self.pools for v in p.label_values}),
            "schedulers": frozenset(p.scheduler_name for p in self.pools),
            "exact_gpu_resources": frozenset(
                r for r in self.gpu_resources if not _is_pattern(r)),
            "gpu_resource_patterns": patterns,
            "serves_dra": any(p.device_classes for p in self.pools),
            "affinity_evidence": said("evidence.nodeAffinity", key=self.pool_label),
        }
        derived["_gpu_patterns"] = tuple(re.compile(fnmatch.translate(p)) for p in patterns)
        for name, value in derived.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "cache_key", hashlib.sha256(repr(self).encode()).digest())

    def is_gpu_resource(self, name: str) -> bool:
        return name in self.exact_gpu_resources or any(
            p.match(name) for p in self._gpu_patterns)

    def gpus_among(self, names: frozenset[str]) -> frozenset[str]:
        """Those of ``names`` the policy counts as GPUs (``is_gpu_resource``). (A set
        operation first: every pod parsed asks, for each resource it names.)"""
        exact = names & self.exact_gpu_resources
        if not self._gpu_patterns or len(exact) == len(names):
            return exact
        return exact | frozenset([r for r in names - exact if self.is_gpu_resource(r)])

    def pool_for_label_value(self, value: str | None) -> str:
        """The pool of a node whose ``poolLabel`` has this value (None: label absent)."""
        if value is None:
            return self.default_pool
        return self.pool_by_label_value.get(value, self.default_pool)

    def node_pool(self, labels: Mapping[str, str]) -> str:
        """The pool of a node with these labels: the one question every reader of a node's
        pool asks."""
        return self.pool_for_label_value(labels.get(self.pool_label))

    def pool_for_device_class(self, name: str) -> str | None:
        """The pool that serves a DeviceClass (``pools[].dra.deviceClasses``), if any."""
        return next((pool.name for pool in self.pools if any(
            name == p or (_is_pattern(p) and fnmatch.fnmatchcase(name, p))
            for p in pool.device_classes)), None)

    def is_hami_pool(self, pool: str) -> bool:
        return self.by_name[pool].scheduler_name == self.hami_scheduler_name

    @property
    def pool_names(self) -> list[str]:
        return [p.name for p in self.pools]


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


# --------------------------------------------------------------------------- parsing


class _Fields:
    """Reads a mapping field by field and fails on what is left over or ill-typed."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise PolicyError(f"{path or 'policy'}: expected a mapping, got {_type(data)}")
        self.data = dict(data)
        self.path = path
        self.seen: set[str] = set()

    def _p(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., *,
            required: bool = False) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                # A typo of this very field reads better as the typo than as a missing field.
                typo = difflib.get_close_matches(key, [str(k) for k in self.data], n=1)
                if typo:
                    raise PolicyError(f"{self._p(typo[0])}: unknown field (did you mean "
                                      f"{key}?)")
                raise PolicyError(f"{self._p(key)}: required field is missing")
            return default
        value = self.data[key]
        if kind is str and not isinstance(value, str):
            raise PolicyError(f"{self._p(key)}: expected a string, got {_type(value)}")
        if kind is bool and not isinstance(value, bool):
            raise PolicyError(f"{self._p(key)}: expected true or false, got {_type(value)}")
        if kind is list and not isinstance(value, list):
            raise PolicyError(f"{self._p(key)}: expected a list, got {_type(value)}")
        if kind is dict and not isinstance(value, Mapping):
            raise PolicyError(f"{self._p(key)}: expected a mapping, got {_type(value)}")
        return value

    def strings(self, key: str, default: Iterable[str] = (), *,
                check: Any = None, what: str = "") -> tuple[str, ...]:
        value = self.get(key, list, None)
        if value is None:
            return tuple(default)
        out: list[str] = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise PolicyError(f"{self._p(key)}[{i}]: expected a string, got {_type(item)}")
            if check is not None and not check(item):
                raise PolicyError(f"{self._p(key)}[{i}]: {item!r} is not a valid {what}")
            if item in out:
                raise PolicyError(f"{self._p(key)}[{i}]: duplicate value {item!r}")
            out.append(item)
        return tuple(out)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.get(key, str, default)
        if value not in choices:
            raise PolicyError(f"{self._p(key)}: {value!r} is not one of {', '.join(choices)}")
        return str(value)

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            close = difflib.get_close_matches(str(extra[0]), sorted(self.seen), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise PolicyError(f"{self._p(extra[0])}: unknown field{hint}")


def _type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _resource_name(name: str) -> bool:
    return is_qualified_name(name.replace("*", "x").replace("?", "x"))


def _parse_cdi(data: Any, path: str) -> CDIRequirement:
    f = _Fields(data, path)
    delivery = Way(f.choice("delivery", WAYS, DETECT)) if "delivery" in f.data else None
    device_kind = f.get("deviceKind", str, DEVICE_PLUGIN_KIND)
    steer = f.get("steer", bool, True)
    repair = f.get("repair", bool, False)
    # The first version's fields, mapped onto the delivery ways they meant.
    require = f.choice("require", CDI_REQUIRE, "none") if "require" in f.data else ""
    kind = f.get("kind", str, "")
    f.choice("when", CDI_WHEN, "runtimeUsesCDI")
    f.done()
    for name, value in (("deviceKind", device_kind), ("kind", kind)):
        if value and value != "runtimeDefault" and not _CDI_KIND.match(value):
            raise PolicyError(f"{path}.{name}: {value!r} is not a CDI kind "
                              "(vendor/class, e.g. k8s.device-plugin.nvidia.com/gpu)")
    if delivery is not None and (require or kind):
        raise PolicyError(f"{path}: delivery replaces require/kind/when; drop those")
    if delivery is None:
        if require in ("", "none"):
            delivery = NONE
        elif kind in ("", "runtimeDefault"):
            delivery = VISIBLE_DEVICES
        else:
            delivery, device_kind = CDI_DEVICES, kind
    return CDIRequirement(delivery=delivery, device_kind=device_kind, steer=steer,
                          repair=repair)


def _parse_pool(data: Any, path: str) -> Pool:
    f = _Fields(data, path)
    name = f.get("name", str, required=True)
    if not _DNS_LABEL.match(name) or len(name) > 63:
        raise PolicyError(f"{path}.name: {name!r} is not a DNS label (lowercase, digits, '-')")
    scheduler = f.get("schedulerName", str, required=True)
    if not _DNS_SUBDOMAIN.match(scheduler):
        raise PolicyError(f"{path}.schedulerName: {scheduler!r} is not a valid scheduler name")
    values = f.strings("labelValues", check=lambda v: v != "" and is_label_value(v),
                       what="label value")
    exclusive = f.strings("exclusiveResources", check=_resource_name, what="resource name")
    annotations = f.strings("exclusiveAnnotations", check=is_qualified_name,
                            what="annotation key")
    cdi_raw = f.get("cdi", dict, None)
    cdi = _parse_cdi(cdi_raw, f"{path}.cdi") if cdi_raw is not None else CDIRequirement()
    classes: tuple[str, ...] = ()
    dra_raw = f.get("dra", dict, None)
    if dra_raw is not None:
        df = _Fields(dra_raw, f"{path}.dra")
        classes = df.strings("deviceClasses", check=_device_class_name,
                             what="DeviceClass name or pattern")
        df.done()
    f.done()
    return Pool(name=name, scheduler_name=scheduler, label_values=values,
                exclusive_resources=exclusive, exclusive_annotations=annotations, cdi=cdi,
                device_classes=classes)


def _device_class_name(name: str) -> bool:
    return len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(
        name.replace("*", "x").replace("?", "x")))


def _one_owner(pools: tuple[Pool, ...], items: Any, field_path: str, clash: str) -> None:
    """Each item (an exclusive resource, a DeviceClass) names one pool at most."""
    owner: dict[str, str] = {}
    for i, pool in enumerate(pools):
        for item in items(pool):
            if item in owner:
                raise PolicyError(f"pools[{i}].{field_path}: {item!r} "
                                  + clash.format(owner=owner[item]))
            owner[item] = pool.name


def parse_policy(data: Any) -> Policy:
    """Build a Policy from a decoded YAML/JSON document, or raise PolicyError."""
    f = _Fields(data, "")
    api_version = f.get("apiVersion", str, required=True)
    if api_version != API_VERSION:
        raise PolicyError(f"apiVersion: {api_version!r} is not supported (want {API_VERSION})")
    kind = f.get("kind", str, required=True)
    if kind != KIND:
        raise PolicyError(f"kind: {kind!r} is not {KIND}")
    pool_label = f.get("poolLabel", str, POOL_LABEL)
    if not is_qualified_name(pool_label):
        raise PolicyError(f"poolLabel: {pool_label!r} is not a valid label key")
    gpu_resources = f.strings("gpuResources", check=_resource_name, what="resource name")
    if not gpu_resources:
        raise PolicyError("gpuResources: at least one GPU resource name is required")
    raw_pools = f.get("pools", list, required=True)
    pools = tuple(_parse_pool(p, f"pools[{i}]") for i, p in enumerate(raw_pools))
    if not pools:
        raise PolicyError("pools: at least one pool is required")
    names: dict[str, int] = {}
    owner: dict[str, str] = {}
    for i, pool in enumerate(pools):
        if pool.name in names:
            raise PolicyError(f"pools[{i}].name: duplicate pool {pool.name!r} "
                              f"(also pools[{names[pool.name]}])")
        names[pool.name] = i
        for v in pool.label_values:
            if v in owner:
                raise PolicyError(f"pools[{i}].labelValues: {v!r} already belongs to pool "
                                  f"{owner[v]!r}; a label value names one pool")
            owner[v] = pool.name
    default_pool = f.get("defaultPool", str, required=True)
    if default_pool not in names:
        raise PolicyError(f"defaultPool: {default_pool!r} is not a pool "
                          f"(pools: {', '.join(names)})")
    for i, pool in enumerate(pools):
        if pool.name != default_pool and not pool.label_values:
            raise PolicyError(f"pools[{i}].labelValues: pool {pool.name!r} is not the default "
                              "pool, so it needs at least one label value to find its nodes")
    _one_owner(pools, lambda p: p.exclusive_resources, "exclusiveResources",
               "is already exclusive to pool {owner!r}")
    _one_owner(pools, lambda p: p.device_classes, "dra.deviceClasses",
               "is already served by pool {owner!r}; a DeviceClass belongs to one pool")
    hami_scheduler = f.get("hamiSchedulerName", str, "hami-scheduler")
    non_cdi = f.strings("nonCDIRuntimeClasses", default=("nvidia-legacy",),
                        check=lambda v: bool(_DNS_SUBDOMAIN.match(v)), what="RuntimeClass name")
    on_no_candidates = OnFinding(f.choice("onNoCandidates", ON_FINDING, "warn"))
    on_missing_inventory = OnFinding(f.choice("onMissingInventory", ON_FINDING, "warn"))
    on_user_namespace = OnFinding(f.choice("onUserNamespace", ON_FINDING, "deny"))
    on_no_node_view = OnFinding(f.choice("onNoNodeView", ON_FINDING, "warn"))
    on_unknown_gpu_resource = OnFinding(f.choice("onUnknownGPUResource", ON_FINDING, "warn"))
    require_inventory = f.get("requireInventory", bool, False)
    workload_templates = WorkloadTemplates(
        f.choice("workloadTemplates", WORKLOAD_TEMPLATES, "deny"))
    audit_raw = f.get("audit", dict, None)
    audit_mutations = False
    if audit_raw is not None:
        af = _Fields(audit_raw, "audit")
        audit_mutations = af.get("mutations", bool, False)
        af.done()
    access = _parse_access(f.get("access", dict, None))
    f.done()
    return Policy(pool_label=pool_label, default_pool=default_pool, gpu_resources=gpu_resources,
                  pools=pools, hami_scheduler_name=hami_scheduler,
                  non_cdi_runtime_classes=non_cdi, on_no_candidates=on_no_candidates,
                  on_missing_inventory=on_missing_inventory,
                  on_user_namespace=on_user_namespace, on_no_node_view=on_no_node_view,
                  on_unknown_gpu_resource=on_unknown_gpu_resource,
                  require_inventory=require_inventory, workload_templates=workload_templates,
                  audit_mutations=audit_mutations, access=access)


def _parse_access(data: Any) -> Access:
    if data is None:
        return Access()
    f = _Fields(data, "access")
    if isinstance(data, Mapping) and data.get("ungranted") is False:
        # YAML 1.1 reads a bare `off` as false: what the user wrote is the choice "off"
        f = _Fields({**data, "ungranted": "off"}, "access")
    ungranted = Ungranted(f.choice("ungranted", UNGRANTED, "void"))
    exempt = f.strings("exemptNamespaces", DEFAULT_EXEMPT_NAMESPACES,
                       check=lambda v: bool(_DNS_LABEL.match(v)), what="namespace name")
    owners = f.strings("schedulerIdentities", DEFAULT_SCHEDULER_IDENTITIES,
                       check=lambda v: bool(v.strip()), what="user name")
    f.done()
    return Access(ungranted, exempt, owners)


def load_policy_text(text: str, source: str = "policy") -> Policy:
    try:
        data = yaml.load(text, Loader=LOADER)  # LOADER is a safe loader
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {yaml_error(exc)}") from exc
    try:
        return parse_policy(data)
    except PolicyError as exc:
        raise PolicyError(f"{source}: {exc}") from None
