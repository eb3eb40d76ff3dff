"""CDI devices a pod names in its own annotations, for the GPU Operator's NRI plugin.

With ``cdi.nriPluginEnabled`` in its ClusterPolicy, the operator runs NVIDIA's NRI plugin in
containerd on every node it deploys its toolkit to. For each container created, the plugin
reads ``nvidia.cdi.k8s.io/container.<name>``, else ``nvidia.cdi.k8s.io/pod``, else
``nvidia.cdi.k8s.io`` (containerd/nri v0.12.5 ``pkg/plugin.GetEffectiveAnnotation``), splits
the value on commas (without trimming) and asks containerd to inject those CDI devices.
containerd resolves them from the node's spec files: one it cannot resolve fails the
container's creation ('CDI device injection failed: unresolvable CDI devices ...'). A value
that mentions ``management.nvidia.com/gpu`` anywhere is dropped, with one log line and no
error, unless the pod's namespace is the toolkit's own or is listed in
``NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES``: that container starts without any of the devices
its annotation names (nvidia-container-toolkit v1.20.2,
``cmd/nvidia-ctk-installer/container/runtime/nri/plugin.go``, ``parseCDIDevices``; the
plugin is driven by ``tests/oracle/cmd/nri-inject``).

Where gpupool does not know that the plugin runs (no ClusterPolicy in view, or a node the
operator does not deploy its toolkit to), containerd ignores the annotation and so does
gpupool. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from webhook.api.said import Said, said

DOMAIN = "nvidia.cdi.k8s.io"
MANAGEMENT = "management.nvidia.com/gpu"
#: The toolkit container's variable for namespaces allowed management devices, besides its
#: own (``NRI_NAMESPACE``, the operator's namespace).
NAMESPACES_ENV = "NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES"
#: The operator's node label for where it runs its toolkit (and so the NRI plugin).
TOOLKIT_LABEL = "nvidia.com/gpu.deploy.container-toolkit"
#: ``NodeAssessment.way`` for devices the plugin injects (next to the delivery ways).
WAY = "nriAnnotation"


@dataclass(frozen=True)
class NRIPlugin:
    """The operator's NRI plugin, as its ClusterPolicy configures it."""

    #: the operator's namespace (its ClusterPolicy's ``status.namespace``); None: not known
    operator_namespace: str | None
    #: the namespaces ``NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES`` adds
    extra_namespaces: frozenset[str] = frozenset()

    def allows_management(self, namespace: str | None) -> bool | None:
        """May a pod in this namespace get management devices? None: cannot tell."""
        if namespace is not None and (namespace in self.extra_namespaces
                                      or namespace == self.operator_namespace):
            return True
        return None if self.operator_namespace is None else False

    def allowed(self) -> tuple[str, ...]:
        """The namespaces whose pods it gives management devices, as far as known."""
        return tuple(sorted({*self.extra_namespaces,
                             *filter(None, [self.operator_namespace])}))


#: (container name, the annotation value the plugin reads for it)
Requests = tuple[tuple[str, str], ...]


def annotation_requests(annotations: Mapping[str, object], container_names: Iterable[str]
                        ) -> Requests:
    """Per container, the annotation value the plugin would read, as the plugin reads it."""
    if not any(isinstance(k, str) and k.startswith(DOMAIN) for k in annotations):
        return ()
    out = []
    for name in container_names:
        for key in (f"{DOMAIN}/container.{name}", f"{DOMAIN}/pod", DOMAIN):
            value = annotations.get(key)
            if value is not None:
                if isinstance(value, str):
                    out.append((name, value))
                break
    return tuple(out)


def runs_on(labels: Mapping[str, str]) -> bool:
    return labels.get(TOOLKIT_LABEL) == "true"


@dataclass(frozen=True)
class Shortfall:
    """Why the devices a pod's annotations name would not reach it on a node."""

    containers: tuple[str, ...]
    missing: tuple[str, ...] = ()  # names containerd cannot resolve there
    undelivered: bool = False  # dropped by the plugin: the container starts without them
    unknown: bool = False  # whether they are dropped cannot be told
    note: Said | None = None
    fix: Said | None = None


def judge(reqs: Requests, namespace: str | None, plugin: NRIPlugin,
          kinds: Mapping[str, frozenset[str]], containerd_nri: bool | None = None
          ) -> Shortfall | None:
    """What goes wrong, on a node running the plugin whose CDI specs define ``kinds``
    (kind -> device names); None when every named device reaches its container.
    ``containerd_nri`` False: the node's containerd hosts no NRI plugin (containerd v2.2
    ``internal/cri/nri``: a disabled NRI adjusts nothing), so nothing is injected."""
    if containerd_nri is False:
        return Shortfall(
            tuple(c for c, _ in reqs), undelivered=True, note=said("nri.disabled"),
            fix=said("nri.disabledFix"))
    dropped, doubt, missing, failing = [], [], [], []
    for container, value in reqs:
        if MANAGEMENT in value:
            allowed = plugin.allows_management(namespace)
            if allowed is None:
                doubt.append(container)
                continue
            if not allowed:
                dropped.append(container)
                continue
        lost = [n for n in value.split(",") if not _defined(n, kinds)]
        if lost:
            failing.append(container)
            missing += [n for n in lost if n not in missing]
    ns = namespace or "(none)"
    if missing:
        return Shortfall(
            tuple(failing), tuple(missing), note=said("nri.undefined", missing=tuple(missing)),
            fix=said("nri.undefinedFix", missing=tuple(missing)))
    if dropped:
        return Shortfall(
            tuple(dropped), undelivered=True,
            note=said("nri.dropped", namespace=ns, allowed=plugin.allowed(),
                      containers=tuple(dropped)),
            fix=said("nri.droppedFix", namespace=ns))
    if doubt:
        return Shortfall(tuple(doubt), unknown=True,
                         note=said("nri.namespaceUnknown", namespace=ns))
    return None


def _defined(name: str, kinds: Mapping[str, frozenset[str]]) -> bool:
    kind, sep, device = name.partition("=")
    return bool(sep) and device in kinds.get(kind, frozenset())
