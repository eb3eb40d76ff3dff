"""One writer among the scan's replicas: leader election on a coordination.k8s.io Lease, as
client-go's ``leaderelection`` does it.

A candidate takes the Lease when it has no holder, or when its record has not changed for
``leaseDurationSeconds`` by the candidate's own clock (client-go's rule: it never compares
its clock with the holder's). The leader renews every ``retry`` seconds and gives up
leading when it could not renew for ``renew_deadline``, before another can take over, so
two replicas never write at once. Every update carries the resourceVersion it read: of two
candidates racing for an expired Lease, one gets 409 and stays a follower.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Elector:
    def __init__(self, api_client: Any, namespace: str, name: str, identity: str, *,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0,
                 retry: float = 2.0,
                 on_change: Callable[[bool], None] | None = None) -> None:
        from kubernetes import client

        self.api: Any = client.CoordinationV1Api(api_client)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry = (lease_duration,
                                                                renew_deadline, retry)
        self.on_change = on_change
        self.leading = threading.Event()
        self.holder = ""  # who holds the Lease, as last read
        self.transitions = 0
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop; a leader releases the Lease so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry + 5)
        if release and self.leading.is_set():
            try:
                self._write(self._read(), holder="", release=True)
            except Exception as exc:  # the standby takes over at expiry instead
                log.info("could not release Lease %s/%s: %s", self.namespace, self.name, exc)
            self._set_leading(False)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ok = self._try()
            except Exception as exc:
                log.warning("leader election on Lease %s/%s failed: %s", self.namespace,
                            self.name, exc)
                ok = False
            now = time.monotonic()
            if ok:
                self._last_renew = now
                self._set_leading(True)
            elif self.leading.is_set() and now - self._last_renew > self.renew_deadline:
                log.warning("could not renew Lease %s/%s for %.0fs: no longer leading",
                            self.namespace, self.name, self.renew_deadline)
                self._set_leading(False)
            self._stop.wait(self.retry)

    def _set_leading(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        if leading:
            self.leading.set()
            log.info("%s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
        else:
            self.leading.clear()
            log.info("%s no longer leads", self.identity)
        if self.on_change is not None:
            self.on_change(leading)

    def _read(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            raw = self.api.read_namespaced_lease(self.name, self.namespace,
                                                 _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        out: dict[str, Any] = json.loads(raw.data)
        return out

    def _try(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        lease = self._read()
        now = time.monotonic()
        if lease is None:
            try:
                self._write(None, holder=self.identity)
            except ApiException as exc:
                if exc.status == 409:  # another candidate created it first
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self.holder = holder
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and now - self._observed_at < duration:
            return False  # held, and renewed within its duration as we saw it
        try:
            self._write(lease, holder=self.identity)
        except ApiException as exc:
            if exc.status == 409:  # someone else wrote it since we read it
                return False
            raise
        self.holder = self.identity
        return True

    def _write(self, lease: dict[str, Any] | None, *, holder: str,
               release: bool = False) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = dict((lease or {}).get("spec") or {})
        taking = spec.get("holderIdentity") != holder
        spec.update(holderIdentity=holder or None,
                    leaseDurationSeconds=int(self.lease_duration), renewTime=now)
        if taking and not release:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + \
                (1 if lease is not None else 0)
            self.transitions = spec["leaseTransitions"]
        if release:
            spec["leaseDurationSeconds"] = 1
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             **({"resourceVersion": lease["metadata"]["resourceVersion"]}
                                if lease is not None else {}),
                             "labels": {"app.kubernetes.io/part-of": "gpupool",
                                        "app.kubernetes.io/component": "scan"}},
                "spec": spec}
        if lease is None:
            self.api.create_namespaced_lease(self.namespace, body)
        else:
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
