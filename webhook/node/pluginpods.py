"""The device-plugin pods running on the agent's own node, read from the API server.

The agent lists the pods bound to its node (a field selector: the API server filters), and
reads the ConfigMaps a plugin's configuration comes from, each at most once per look.
``webhook.api.pluginconfig`` turns them into the strategy each plugin settles on. RBAC: pods
``list``, configmaps ``get``. A look that fails keeps what the last good look found, so a
blip at the API server never flips what the node publishes.

It looks at most once per ``interval`` (300 s by default, ``agent --plugin-pods-interval``),
however often the agent rescans its files: a plugin's strategy changes only when its pod is
replaced, and a cluster of 5,000 nodes then costs the API server about 17 filtered lists a
second rather than 170.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.api.pluginconfig import Settled, settle_pods

log = logging.getLogger(__name__)


class KubePluginPods:
    """``__call__`` reads the node's device-plugin pods now (None: the look failed)."""

    def __init__(self, api: Any, node_name: str, interval: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from kubernetes import client

        self.api = api
        self.core = client.CoreV1Api(api)
        self.node_name = node_name
        self.interval = interval
        self.clock = clock
        self._last: tuple[Settled, ...] | None = None
        self._looked: float | None = None

    def _plain(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    def __call__(self) -> tuple[Settled, ...] | None:
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        if self._looked is not None and now - self._looked < self.interval:
            return self._last
        self._looked = now
        try:
            pods = self._plain(self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node_name}")).get("items") or []
            node = self._plain(self.core.read_node(self.node_name))
        except (ApiException, OSError, ValueError) as exc:
            log.warning("cannot list the pods on node %s to learn its device plugin's "
                        "strategy (%s); keeping what the last look found", self.node_name,
                        getattr(exc, "reason", None) or exc)
            return self._last
        labels = ((node.get("metadata") or {}).get("labels")) or {}
        read: dict[tuple[str, str], Mapping[str, str] | None] = {}

        def config_map(namespace: str, name: str) -> Mapping[str, str] | None:
            if (namespace, name) not in read:
                try:
                    doc = self._plain(self.core.read_namespaced_config_map(name, namespace))
                    read[(namespace, name)] = {str(k): str(v) for k, v in
                                               (doc.get("data") or {}).items()}
                except (ApiException, OSError, ValueError) as exc:
                    status = getattr(exc, "status", None)
                    # a ConfigMap that does not exist is one the plugin's pod waits for
                    read[(namespace, name)] = {} if status == 404 else None
                    if status != 404:
                        log.warning("node %s: cannot read ConfigMap %s/%s for its device "
                                    "plugin's configuration (%s)", self.node_name, namespace,
                                    name, getattr(exc, "reason", None) or exc)
            return read[(namespace, name)]

        found = settle_pods(pods, labels, config_map)
        for s in found:
            if s.strategies is None:
                log.warning("node %s: device plugin %s", self.node_name, s.describe())
        self._last = found
        return found
