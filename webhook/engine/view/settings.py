"""Cluster-wide settings node verdicts read: the Kubernetes release (whose DRA allocator
decides), RuntimeClasses (the handler a class names), DeviceClasses, what the GPU Operator's
ClusterPolicy says, and HAMi's device-plugin DaemonSets. Each but the release is None while
unknown; the release is then the newest supported. A setter says whether anything changed; the view
then lets every fold start over (``caches.Change.SETTING``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.api.delivery import Way
from webhook.engine.stacks import clusterpolicy, dra, hamiplugin, nri
from webhook.engine.stacks.releases import NEWEST_RELEASE, Release


class ClusterSettings:
    def __init__(self) -> None:
        #: RuntimeClass name -> its handler
        self.runtime_classes: dict[str, str] | None = None
        self.device_classes: dict[str, dra.DeviceClass] | None = None
        self.operator: clusterpolicy.Operator | None = None
        self.hami_plugins: tuple[hamiplugin.HamiPlugin, ...] | None = None
        self.release: Release = NEWEST_RELEASE

    def set_release(self, release: Release) -> bool:
        if release == self.release:
            return False
        self.release = release
        return True

    def set_runtime_classes(self, classes: Mapping[str, str] | None) -> bool:
        new = None if classes is None else dict(classes)
        if new == self.runtime_classes:
            return False
        self.runtime_classes = new
        return True

    def set_device_classes(self, classes: Iterable[dra.DeviceClass] | None) -> bool:
        self.device_classes = None if classes is None else {c.name: c for c in classes}
        return True

    def set_device_class(self, name: str, device_class: dra.DeviceClass | None) -> bool:
        classes = self.device_classes = dict(self.device_classes or {})
        if device_class is None:
            classes.pop(name, None)
        else:
            classes[name] = device_class
        return True

    def set_operator(self, operator: clusterpolicy.Operator | None) -> bool:
        if operator == self.operator:
            return False
        self.operator = operator
        return True

    def set_hami_plugins(self, plugins: Iterable[hamiplugin.HamiPlugin] | None) -> bool:
        new = None if plugins is None else tuple(sorted(
            plugins, key=lambda p: (p.node_selector, str(p.way))))
        if new == self.hami_plugins:
            return False
        self.hami_plugins = new
        return True

    def hami_way(self, labels: Mapping[str, str]) -> Way | None:
        plugins = self.hami_plugins
        return hamiplugin.way_on(plugins, labels) if plugins else None

    def hami_plugin_runs(self, labels: Mapping[str, str]) -> bool:
        return bool(self.hami_plugins) and hamiplugin.runs_on(self.hami_plugins or (), labels)

    def operator_way(self) -> Way | None:
        return self.operator.way if self.operator is not None else None

    def operator_nri(self) -> nri.NRIPlugin | None:
        return self.operator.nri if self.operator is not None else None

    def handler_of(self, runtime_class: str | None) -> str | None:
        if runtime_class is None or self.runtime_classes is None:
            return runtime_class
        return self.runtime_classes.get(runtime_class, runtime_class)
