"""Kubernetes Events on the pods and nodes whose answer turned bad, with the reason code
admission uses (``CDIDeviceMissing``, ``SchedulerMismatch``...) or the scan's own
(``SchedulerNotRunning``, ``GPUsAdvertisedTwice``).

One Event per object and answer: its name is derived from the object's uid and the answer,
so a second replica, or this one after a restart, that reports the same answer gets 409
AlreadyExists instead of a duplicate. A pod whose answer turns fine again gets no Event (the
report says so); an Event is never rewritten.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from webhook.engine import NodeHazard, clip
from webhook.scan.scanner import Answer

log = logging.getLogger(__name__)

COMPONENT = "gpupool-scan"
CONTROLLER = "gpupool.io/scan"
#: Event messages the API server accepts (it refuses beyond 1 KiB).
MESSAGE_LIMIT = 1024


def _name(obj_name: str, uid: str, key: tuple[Any, ...]) -> str:
    digest = hashlib.sha256(repr((uid, key)).encode()).hexdigest()[:16]
    return f"{obj_name[:200]}.gpupool.{digest}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_event(a: Answer, instance: str) -> dict[str, Any]:
    ans = a.answer
    message = f"{ans.message} (found after: {a.cause})"
    return _event(ans.namespace, _name(ans.name, ans.uid, ans.key),
                  {"apiVersion": "v1", "kind": "Pod", "name": ans.name,
                   "namespace": ans.namespace, "uid": ans.uid},
                  ans.reason, message, instance)


def node_event(h: NodeHazard, uid: str, instance: str) -> dict[str, Any]:
    return _event("default", _name(h.node, uid, h.key),
                  {"apiVersion": "v1", "kind": "Node", "name": h.node, "uid": uid},
                  h.reason, h.message, instance)


def _event(namespace: str, name: str, involved: Mapping[str, Any], reason: str, message: str,
           instance: str) -> dict[str, Any]:
    now = _now()
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpupool"}},
            "involvedObject": dict(involved), "reason": reason, "type": "Warning",
            "message": clip(message, MESSAGE_LIMIT), "source": {"component": COMPONENT},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": CONTROLLER, "reportingInstance": instance[:128]}


class EventWriter:
    def __init__(self, api_client: Any, instance: str) -> None:
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api_client)
        self.instance = instance
        self.sent: dict[str, tuple[Any, ...]] = {}  # object uid -> the answer last evented
        self.writes = 0
        self.failures = 0
        self.problem = ""

    def send(self, key_uid: str, key: tuple[Any, ...], event: dict[str, Any]) -> bool:
        """Create ``event`` unless this answer was already evented; False when the API
        server refused (tried again on the next change or leadership)."""
        from kubernetes.client.exceptions import ApiException

        if self.sent.get(key_uid) == key:
            return True
        try:
            self.core.create_namespaced_event(event["metadata"]["namespace"], event)
            self.writes += 1
        except ApiException as exc:
            if exc.status != 409:  # 409: already there (another replica, an earlier run)
                self.failures += 1
                self.problem = f"creating Event {event['metadata']['name']}: {exc.status} " \
                               f"{exc.reason}"
                log.warning("%s", self.problem)
                return False
        except Exception as exc:
            self.failures += 1
            self.problem = f"creating Event: {exc}"
            log.warning("%s", self.problem)
            return False
        self.sent[key_uid] = key
        self.problem = ""
        return True

    def forget(self, key_uid: str) -> None:
        self.sent.pop(key_uid, None)
