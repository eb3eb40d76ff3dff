"""``gpupool agent``: publishes a node's CDI inventory on its own Node object, and the
steering labels (``webhook.api.delivery``) that keep pods off it while its GPUs won't resolve.

Runs as a DaemonSet on GPU nodes with the CDI spec directories and runtime configs mounted
read-only. It rescans when the directories change (inotify, with a polling fallback) and
writes the ``gpupool.io/cdi-inventory`` annotation only when what it would write differs
from what the node already carries, so a steady node costs the API server nothing.

A file that stops parsing right after it changed is most likely being rewritten: its last good
parse stands in for ``settle_seconds`` before the file is reported broken, so a half-written
spec never makes devices flicker out of the inventory.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime as dt
import logging
import os
import random
import select
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from webhook.api import delivery
from webhook.api.held import HELD_ANNOTATION, HeldDevices, HeldError, parse_held
from webhook.api.inventory import INVENTORY_ANNOTATION, Inventory, InventoryError, parse_inventory
from webhook.api.pluginconfig import Settled
from webhook.node import specdirs as registry
from webhook.node.driver import DRIVER_GPUS_DIR, driver_gpus
from webhook.node.kubelet import held_devices, mig_devices
from webhook.node.runtime import (
    ContainerdConfig,
    NvidiaConfig,
    RuntimeConfigError,
    read_containerd_config,
    read_nvidia_config,
    runtime_info,
)
from webhook.node.spec import CDIError, Spec

log = logging.getLogger(__name__)
#: Backoff jitter from a private generator: never perturbs anyone else's random state.
_JITTER = random.Random()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class Observer:
    """Turns spec directories and runtime configs into an Inventory."""

    spec_dirs: Sequence[str] | None = None
    nvidia_config: str | None = None
    containerd_config: str | None = None
    #: where the host's root is mounted (``/host`` in the DaemonSet): containerd's absolute
    #: import paths are read under it
    host_root: str = ""
    driver_gpus_dir: str | None = DRIVER_GPUS_DIR
    #: the kubelet's device-manager checkpoint (MIG devices; ``webhook.node.kubelet``)
    kubelet_checkpoint: str | None = None
    #: reads the device-plugin pods on the node (``webhook.node.pluginpods``); None: not
    #: looked at, and the inventory says nothing of them
    plugin_pods: Callable[[], tuple[Settled, ...] | None] | None = None
    settle_seconds: float = 5.0
    clock: Callable[[], float] = time.time
    _last_good: dict[str, tuple[Spec, int]] = field(default_factory=dict)
    pending: bool = False  # a file is mid-rewrite: rescan after it settles

    def _loader(self, path: str) -> Spec:
        try:
            spec = registry.load_file(path)
        except CDIError:
            good = self._last_good.get(path)
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                mtime = 0.0
            if good is not None and self.clock() - mtime < self.settle_seconds:
                self.pending = True
                log.info("%s does not parse yet (being written?); keeping its last good "
                         "content for now", path)
                return good[0]
            self._last_good.pop(path, None)
            raise
        self._last_good[path] = (spec, os.stat(path).st_mtime_ns)
        return spec

    def observe(self) -> Inventory:
        errors: list[tuple[str, str]] = []
        nvidia: NvidiaConfig | None = None
        containerd: ContainerdConfig | None = None
        if self.nvidia_config:
            try:
                nvidia = read_nvidia_config(self.nvidia_config)
            except RuntimeConfigError as exc:
                errors.append((self.nvidia_config, str(exc)))
        if self.containerd_config:
            try:
                containerd = read_containerd_config(self.containerd_config, self.host_root)
            except RuntimeConfigError as exc:
                errors.append((self.containerd_config, str(exc)))
        dirs = list(self.spec_dirs or (containerd.spec_dirs if containerd else
                                       registry.DEFAULT_SPEC_DIRS))
        self.pending = False
        reg = registry.scan(dirs, loader=self._loader)
        live = {s.path for s in reg.specs}
        for path in list(self._last_good):
            if path not in live:
                del self._last_good[path]
        rt = runtime_info(nvidia, containerd, source=self.nvidia_config)
        gpus: tuple[str, ...] = ()
        if self.driver_gpus_dir:
            gpus, gpu_errors = driver_gpus(self.driver_gpus_dir)
            errors += gpu_errors
        mig: dict[str, tuple[str, ...]] | None = None
        if self.kubelet_checkpoint:
            mig, mig_errors = mig_devices(self.kubelet_checkpoint)
            errors += mig_errors
        plugins = self.plugin_pods() if self.plugin_pods is not None else None
        versions, up_to = registry.readable_up_to(dirs, reg)
        inv = Inventory(kinds=reg.kinds(), runtime=rt, errors=tuple(errors + reg.error_list()),
                        observed_at=_now(), gpus=gpus, mig=mig, plugins=plugins,
                        spec_versions=versions, readable_up_to=up_to)
        return dataclasses.replace(inv, resolves=delivery.resolving_gpus(inv, gpus))

    def held(self) -> HeldDevices | None:
        """What each pod on the node holds, from the kubelet's checkpoint (None: the agent
        does not read it)."""
        if not self.kubelet_checkpoint:
            return None
        return dataclasses.replace(held_devices(self.kubelet_checkpoint), observed_at=_now())

    def watch_paths(self) -> list[str]:
        paths = list(self.spec_dirs or registry.DEFAULT_SPEC_DIRS)
        for cfg in (self.nvidia_config, self.containerd_config, self.kubelet_checkpoint):
            if cfg:
                paths.append(os.path.dirname(os.path.abspath(cfg)))
        return paths


# ------------------------------------------------------------------ publishing


#: What the agent keeps on its Node: the inventory annotation and the steering labels.
Published = tuple[str | None, dict[str, str]]


class NodeClient(Protocol):
    def get_state(self) -> Published: ...
    def set_state(self, annotation: str, labels: Mapping[str, str | None]) -> None: ...


@runtime_checkable
class HeldClient(Protocol):
    """A client that also keeps the node's ``gpupool.io/held-devices`` annotation (the
    benchmarks' and some tests' clients keep the inventory alone)."""

    def get_held(self) -> str | None: ...
    def set_held(self, annotation: str) -> None: ...


class KubeNodeClient:
    """Reads and patches one annotation and the steering labels of one Node, nothing else."""

    def __init__(self, api: Any, node_name: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.node_name = node_name

    def get_state(self) -> Published:
        meta = self.core.read_node(self.node_name).metadata
        labels = {k: v for k, v in ((meta and meta.labels) or {}).items() if k in STEERING_KEYS}
        return ((meta and meta.annotations) or {}).get(INVENTORY_ANNOTATION), labels

    def set_state(self, annotation: str, labels: Mapping[str, str | None]) -> None:
        # A merge patch: a label set to None is removed.
        body = {"metadata": {"annotations": {INVENTORY_ANNOTATION: annotation},
                             "labels": dict(labels)}}
        self.core.patch_node(self.node_name, body)

    def get_held(self) -> str | None:
        meta = self.core.read_node(self.node_name).metadata
        return ((meta and meta.annotations) or {}).get(HELD_ANNOTATION)

    def set_held(self, annotation: str) -> None:
        self.core.patch_node(self.node_name,
                             {"metadata": {"annotations": {HELD_ANNOTATION: annotation}}})


STEERING_KEYS = frozenset(delivery.LABELS.values())


def node_labels(inv: Inventory) -> dict[str, str | None]:
    """The steering labels for this inventory, with None for those to remove.

    Only the driver's list of the node's GPUs counts: UUIDs read back from the specs would
    always resolve against the spec that names them, so a stale spec would say "true"."""
    found = delivery.steering_labels(inv, inv.gpus)
    return {k: found.get(k) for k in sorted(STEERING_KEYS)}


def same_content(current: Published, inv: Inventory) -> bool:
    annotation, labels = current
    if annotation is None:
        return False
    want = {k: v for k, v in node_labels(inv).items() if v is not None}
    try:
        return parse_inventory(annotation).content() == inv.content() and labels == want
    except InventoryError:
        return False


@dataclass
class Publisher:
    client: NodeClient
    max_backoff: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    writes: int = 0
    _published: dict[str, Any] | None = None
    _held: dict[str, Any] | None = None

    def publish(self, inv: Inventory, stop: threading.Event | None = None) -> bool:
        """Write the inventory and the labels it implies if they changed; retry API errors
        with backoff. True if written."""
        content = inv.content()
        if self._published == content:
            return False

        def write() -> bool:
            if self._published is None and same_content(self.client.get_state(), inv):
                self._published = content
                return False
            labels = node_labels(inv)
            self.client.set_state(inv.dumps(), labels)
            self._published = content
            log.info("published CDI inventory: %s; labels %s", _brief(inv),
                     ", ".join(f"{k}={v}" for k, v in labels.items() if v) or "none")
            return True

        return self._retrying("inventory", write, stop)

    def publish_held(self, held: HeldDevices, stop: threading.Event | None = None) -> bool:
        """Write what the node's pods hold if it changed (its time aside): a node whose pods
        neither start nor stop costs no write. True if written."""
        client = self.client
        content = held.content()
        if self._held == content or not isinstance(client, HeldClient):
            return False

        def write() -> bool:
            if self._held is None and _held_content(client.get_held()) == content:
                self._held = content
                return False
            client.set_held(held.dumps())
            self._held = content
            log.info("published what %d pod(s) hold%s", len(held.pods),
                     f" (checkpoint unreadable: {held.error})" if held.error else "")
            return True

        return self._retrying("held devices", write, stop)

    def _retrying(self, what: str, write: Callable[[], bool],
                  stop: threading.Event | None) -> bool:
        """``write`` until the API server takes it, with jittered exponential backoff;
        False once ``stop`` is set. A document that cannot be written at all (over its
        budget) is raised, not retried."""
        backoff = 1.0
        while True:
            try:
                written = write()
                self.writes += written
                return written
            except InventoryError:
                raise
            except Exception as exc:
                if stop is not None and stop.is_set():
                    return False
                delay = backoff * (0.5 + _JITTER.random())
                log.warning("publishing %s failed (%s); retrying in %.1fs", what, exc, delay)
                self.sleep(delay)
                backoff = min(backoff * 2, self.max_backoff)


def _held_content(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        return parse_held(text).content()
    except HeldError:
        return None


def _brief(inv: Inventory) -> str:
    kinds = ", ".join(f"{k}: {len(v)}" for k, v in sorted(inv.kinds.items())) or "no devices"
    return f"{kinds}; mode {inv.runtime.mode}; {len(inv.errors)} error(s)"


# ------------------------------------------------------------------ watching

_IN_FLAGS = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
# IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
# | IN_DELETE_SELF | IN_MOVE_SELF


class DirWatcher:
    """inotify on the spec directories; ``wait`` returns early when something changed.
    Where inotify is unavailable (or a directory does not exist yet) polling covers it."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.fd = -1
        self.watched: set[str] = set()
        try:
            self.libc = ctypes.CDLL(None, use_errno=True)
            self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            self.fd = -1
        self.paths = list(paths)
        self._add_missing()

    def _add_missing(self) -> None:
        if self.fd < 0:
            return
        for p in self.paths:
            if (p not in self.watched and os.path.isdir(p)
                    and self.libc.inotify_add_watch(self.fd, p.encode(), _IN_FLAGS) >= 0):
                self.watched.add(p)

    def wait(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """True when an event arrived before ``timeout``; returns early once ``stop`` is set."""
        self._add_missing()
        deadline = time.monotonic() + timeout
        ready: list[Any] = []
        while not ready:
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                return False
            if self.fd < 0:
                time.sleep(min(left, 0.5))
                continue
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
        time.sleep(0.2)  # let a burst of events (write + rename) finish
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass
        # A directory replaced wholesale loses its watch: re-add next time.
        self.watched = {p for p in self.watched if os.path.isdir(p)}
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def run(observer: Observer, publisher: Publisher, *, poll_interval: float = 30.0,
        stop: threading.Event | None = None) -> None:
    stop = stop or threading.Event()
    watcher = DirWatcher(observer.watch_paths())
    try:
        while not stop.is_set():
            inv = observer.observe()
            publisher.publish(inv, stop)
            held = observer.held()
            if held is not None:
                publisher.publish_held(held, stop)
            timeout = min(poll_interval, observer.settle_seconds) if observer.pending \
                else poll_interval
            watcher.wait(timeout, stop)
    finally:
        watcher.close()
