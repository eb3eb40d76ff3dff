"""List-and-watch of Nodes, Namespaces, RuntimeClasses and DRA objects into the ClusterView.

The admission path never calls the API server; it reads the view this keeps current. A watch
that expires (410 Gone) or breaks is followed by a full relist, so the view converges after
any outage; ``staleness()`` says how long since the cache was last known to be in sync, which
readiness and metrics expose.

Each listing of the nodes (at start, and after every reconnect or expiry) also reads the API
server's ``/version``: a cluster upgraded under a running webhook is then decided as its new
release decides (the DRA allocator's switches, ``webhook.engine.Release``).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from webhook.cluster.kube import DRA_GROUP, SOURCE, SOURCES, server_version
from webhook.engine import (
    ClusterView,
    DeviceClass,
    NodeInfo,
    Slice,
    claims_of,
    cluster_operator,
    hami_plugin_from,
    release_from_version,
    release_note,
    runtime_classes_of,
)

log = logging.getLogger(__name__)
#: Backoff jitter from a private generator: never perturbs anyone else's random state.
_JITTER = random.Random()


class Reflector:
    """One resource's list+watch loop in a daemon thread."""

    def __init__(self, name: str, list_fn: Callable[..., Any],
                 on_list: Callable[[list[Any]], None],
                 on_event: Callable[[str, Any], None], api_client: Any,
                 *, watch_timeout: int = 300, max_backoff: float = 30.0,
                 page_size: int = 500,
                 convert: Callable[[dict[str, Any]], Any] | None = None,
                 optional: bool = False) -> None:
        """``on_list`` and ``on_event`` get objects as ``convert`` returns them. An
        ``optional`` resource the API server does not serve, or gpupool may not list, is
        logged once and retried at the longest backoff."""
        self.name = name
        self.list_fn = list_fn
        self.on_list = on_list
        self.on_event = on_event
        self.api_client = api_client
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.page_size = page_size
        self.convert = convert or _same
        self.optional = optional
        self.unavailable = False
        self.synced = threading.Event()
        self.last_sync = 0.0  # monotonic time the cache was last known current
        self.relists = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"reflector-{self.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def running(self) -> bool:
        return self._thread is None or self._thread.is_alive()

    def staleness(self) -> float:
        return time.monotonic() - self.last_sync if self.last_sync else float("inf")

    def _list_pages(self) -> tuple[list[Any], str]:
        """List in pages of raw JSON, each item converted as it arrives: the client's model
        objects for a 5,000-node cluster would cost hundreds of MiB, held at once."""
        items: list[Any] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            resp = self.list_fn(**kwargs)
            page = json.loads(resp.data)
            items.extend(self.convert(i) for i in page.get("items") or ())
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, meta.get("resourceVersion", "")

    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        backoff = 0.5
        while not self._stop.is_set():
            try:
                items, rv = self._list_pages()
                self.on_list(items)
                self.relists += 1
                self.last_sync = time.monotonic()
                self.synced.set()
                backoff = 0.5
                while not self._stop.is_set():
                    self._watch = watch.Watch()
                    for event in self._watch.stream(self.list_fn, resource_version=rv,
                                                    timeout_seconds=self.watch_timeout,
                                                    allow_watch_bookmarks=True,
                                                    deserialize=False):
                        etype = event["type"]
                        # Undecoded events (deserialize=False) carry the object as a dict.
                        raw = event.get("raw_object") or event.get("object") or {}
                        if etype == "ERROR":
                            code = raw.get("code") if isinstance(raw, dict) else None
                            raise ApiException(status=code or 500, reason=str(raw))
                        rv = (raw.get("metadata") or {}).get("resourceVersion") or rv
                        if etype != "BOOKMARK":
                            self.on_event(etype, raw)
                        self.last_sync = time.monotonic()
                    # A clean timeout: the cache was current up to here.
                    self.last_sync = time.monotonic()
            except ApiException as exc:
                self.errors += 1
                if exc.status == 410:
                    log.info("%s watch expired (410 Gone); relisting", self.name)
                    continue
                if self.optional and exc.status in (403, 404):
                    if not self.unavailable:
                        log.info("%s not readable (%s): gpupool decides without them; "
                                 "retrying every %.0fs", self.name, exc.status,
                                 self.max_backoff)
                    self.unavailable = True
                    backoff = self.max_backoff
                    self._stop.wait(backoff)
                    continue
                log.warning("%s list/watch failed (%s); retrying in %.1fs", self.name,
                            exc.status, backoff)
            except KeyError as exc:
                # The client library fails on an undecoded ERROR event (the watch expired,
                # usually 410 Gone) before handing it over: relist at once.
                self.errors += 1
                if exc.args == ("raw_object",):
                    log.info("%s watch ended with an error event; relisting", self.name)
                    continue
                log.warning("%s list/watch failed (%r); retrying in %.1fs", self.name, exc,
                            backoff)
            except Exception as exc:  # network errors, decode errors: relist after a pause
                self.errors += 1
                log.warning("%s list/watch failed (%s); retrying in %.1fs", self.name, exc,
                            backoff)
            self._stop.wait(backoff * (0.5 + _JITTER.random()))
            backoff = min(backoff * 2, self.max_backoff)


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


class ClusterInformer:
    """Keeps a ClusterView in sync with the API server: Nodes and Namespaces (required: the
    view is ``synced`` and the server ready only once both are listed), and, where the API
    and the permission exist, RuntimeClasses, DRA objects, ClusterPolicies and HAMi's
    device-plugin DaemonSets.

    The optional kinds are not needed for readiness: until they are listed (a cluster role
    without them, say) the view does not know them and decides as before (a class names its
    handler, any class may be suggested; DRA claims are not judged)."""

    def __init__(self, view: ClusterView, api_client: Any, *, watch_timeout: int = 300,
                 keep_held: bool = False) -> None:
        self.view = view
        self.api_client = api_client
        #: the API server's /version document (a function, so tests can script it)
        self.read_version: Callable[[], Any] = functools.partial(
            server_version, api_client, _request_timeout=10)
        #: keep each node's ``gpupool.io/held-devices``: the scan reads it, admission never
        #: does, and at a cluster's size it would cost the webhook's every worker memory
        self.keep_held = keep_held
        # Not trusted until nodes and namespaces are listed: an empty view would route by
        # the wrong namespace labels and check nothing (engine: ``onNoNodeView``).
        view.set_synced(False)
        self._listed: set[str] = set()
        def reflector(kind: str, listed: Callable[[list[Any]], None],
                      event: Callable[[str, dict[str, Any]], None],
                      convert: Callable[[dict[str, Any]], Any] | None = None) -> Reflector:
            """The watch of one of ``SOURCES``, as the table says to list it."""
            src = SOURCE[kind]
            return Reflector(src.resource, src.lister(api_client), listed, event, api_client,
                             watch_timeout=watch_timeout, optional=not src.required,
                             convert=convert)

        self.nodes = reflector("Node", self._nodes_listed, self._node_event, self._node_info)
        self.namespaces = reflector("Namespace", self._ns_listed, self._ns_event)
        self.runtime_classes = reflector("RuntimeClass", self._rc_listed, self._rc_event)
        # Slices are reduced as each page arrives, as nodes are: 50,000 raw slices at once
        # would cost gigabytes.
        self.dra = tuple(
            reflector(s.kind, functools.partial(self._dra_listed, s.kind),
                      functools.partial(self._dra_event, s.kind),
                      Slice.from_object if s.kind == "ResourceSlice" else None)
            for s in SOURCES if s.group == DRA_GROUP)
        self._policies = KeyedListing(self._set_operator)
        self._daemonsets = KeyedListing(self._set_hami_plugins)
        self.cluster_policies = reflector("ClusterPolicy", self._policies.listed,
                                          self._policies.event)
        # HAMi's device-plugin DaemonSets (its chart's component label): how its plugin
        # hands GPUs, on which nodes.
        self.hami_plugins = reflector("DaemonSet", self._daemonsets.listed,
                                      self._daemonsets.event)
        #: what readiness does not wait for: without them gpupool decides as before
        self.optional = (*self.dra, self.cluster_policies, self.hami_plugins)

    def _reflectors(self) -> tuple[Reflector, ...]:
        return (self.nodes, self.namespaces, self.runtime_classes, *self.optional)

    def _set_operator(self, policies: Iterable[dict[str, Any]]) -> None:
        self.view.set_operator(cluster_operator(policies))

    def _set_hami_plugins(self, daemonsets: Iterable[dict[str, Any]]) -> None:
        self.view.set_hami_plugins(p for o in daemonsets
                                   if (p := hami_plugin_from(o)) is not None)

    def start(self) -> None:
        for r in self._reflectors():
            r.start()

    def settled(self) -> bool:
        """Every resource listed, or known not to be there: what the routing policy's facts
        read (a ClusterPolicy or a DeviceClass not yet listed would compile it wrong)."""
        return all(r.synced.is_set() or r.unavailable for r in self._reflectors())

    def stop(self) -> None:
        for r in self._reflectors():
            r.stop()

    def _node_info(self, obj: dict[str, Any]) -> NodeInfo | None:
        try:
            return NodeInfo.from_object(obj, keep_held=self.keep_held)
        except ValueError as exc:
            log.warning("skipping node: %s", exc)
            return None

    def _nodes_listed(self, items: list[NodeInfo | None]) -> None:
        self.view.replace_nodes(n for n in items if n is not None)
        self.discover_version()
        self._now_listed("nodes")

    def discover_version(self) -> None:
        """Read the API server's release into the view. Failing that, the view keeps the
        release it had (at start, the newest supported), and says so in the log."""
        try:
            found = release_from_version(self.read_version())
        except Exception as exc:  # an outage or a proxy that hides /version: keep deciding
            log.warning("could not read the API server's version (%s); deciding DRA "
                        "allocation as Kubernetes %s", exc, self.view.release())
            return
        if found is None or found == self.view.release():
            return
        self.view.set_release(found)
        note = release_note(found)
        if note:
            log.warning("%s", note)
        else:
            log.info("Kubernetes %s: DRA allocation decided as its scheduler decides it",
                     found)

    def _now_listed(self, what: str) -> None:
        self._listed.add(what)
        if self._listed >= {"nodes", "namespaces"}:
            self.view.set_synced(True)

    def _node_event(self, etype: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if etype == "DELETED":
            if name:
                self.view.delete_node(name)
            return
        try:
            self.view.upsert_node(NodeInfo.from_object(obj, keep_held=self.keep_held))
        except ValueError as exc:
            log.warning("skipping node event: %s", exc)

    def _ns_listed(self, items: list[dict[str, Any]]) -> None:
        self.view.replace_namespaces({
            i["metadata"]["name"]: i["metadata"].get("labels") or {} for i in items
            if isinstance(i.get("metadata"), dict) and i["metadata"].get("name")})
        self._now_listed("namespaces")

    def _ns_event(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if not meta.get("name"):
            return
        self.view.set_namespace(meta["name"], None if etype == "DELETED"
                                else meta.get("labels") or {})

    def _rc_listed(self, items: list[dict[str, Any]]) -> None:
        self.view.replace_runtime_classes(runtime_classes_of(items))

    def _rc_event(self, etype: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if name:
            self.view.set_runtime_class(
                name, None if etype == "DELETED" else runtime_classes_of([obj]).get(name))

    def _dra_listed(self, kind: str, items: list[Any]) -> None:
        """Listed objects (slices already reduced to ``Slice``, or None for a bad one)."""
        if kind == "DeviceClass":
            self.view.replace_device_classes(
                c for i in items if (c := DeviceClass.from_object(i)) is not None)
        elif kind == "ResourceSlice":
            self.view.replace_slices(s for s in items if s is not None)
        else:
            self.view.replace_claims(kind, claims_of(kind, items))

    def _dra_event(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            return
        gone = etype == "DELETED"
        if kind == "DeviceClass":
            self.view.set_device_class(name, None if gone else DeviceClass.from_object(obj))
        elif kind == "ResourceSlice":
            self.view.set_slice(name, None if gone else Slice.from_object(obj))
        elif isinstance(meta.get("namespace"), str):
            spec = None if gone else claims_of(kind, [obj]).get((meta["namespace"], name))
            self.view.set_claim(kind, meta["namespace"], name, spec)

    def alive(self) -> tuple[bool, str]:
        """For /livez: a reflector thread that died never comes back by itself."""
        dead = [r.name for r in self._reflectors() if not r.running()]
        return (False, f"watch thread(s) stopped: {', '.join(dead)}") if dead else (True, "")

    def ready(self, max_staleness: float) -> tuple[bool, str]:
        if not (self.nodes.synced.is_set() and self.namespaces.synced.is_set()):
            return False, "nodes/namespaces not synced yet"
        stale = max(self.nodes.staleness(), self.namespaces.staleness())
        if stale > max_staleness:
            return False, f"node cache last in sync {stale:.0f}s ago"
        return True, f"{len(self.view)} nodes synced"


def _ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


class KeyedListing:
    """Whole objects of one kind kept by namespace and name, from a listing and its watch
    events; after each change the view setting they make is derived again from all of them
    (a few ClusterPolicies or DaemonSets: cheaper to recompute than to patch)."""

    def __init__(self, derive: Callable[[Iterable[dict[str, Any]]], None]) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        self.derive = derive

    def listed(self, items: list[dict[str, Any]]) -> None:
        self.items = {_ns_name(i): i for i in items}
        self.derive(self.items.values())

    def event(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "DELETED":
            self.items.pop(_ns_name(obj), None)
        else:
            self.items[_ns_name(obj)] = obj
        self.derive(self.items.values())
