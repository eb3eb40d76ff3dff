"""Keeping the routing the API server does itself installed and current (``--routing-mode``).

``gpupool serve`` compiles the PoolPolicy and what of the cluster decides which pools the
API server may route (``webhook.engine.compile_policy``, ``routing_facts``) and keeps three
things as compiled: the MutatingAdmissionPolicy, its binding, and the matchCondition on the
``mutate.gpupool.io`` webhook that skips the pods the policy routed. A change of either input
(a policy edit, a ClusterPolicy, MIG devices, a DeviceClass) recompiles them.

The order of the writes never lets the webhook skip a pod the policy does not route: a
condition that changes is taken off first, then the policy is written, then the new condition
put on. Between the steps a pod is at worst routed by both (the webhook's patch on a routed pod
is empty). Every replica and worker does the same, and writes only what differs, so they
agree without a leader: the objects are a function of the policy and the cluster alone.

Modes: ``webhook`` (routing in the webhook alone: installed objects of an earlier mode are
removed), ``policy`` (in the API server), ``auto`` (``policy`` where the API server serves
``admissionregistration.k8s.io/v1`` MutatingAdmissionPolicy, Kubernetes 1.36 and newer; else
``webhook``). ``doctor`` reads the same state through ``read``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine import (
    CONDITION,
    DIGEST_ANNOTATION,
    ROUTING_NAME,
    ClusterView,
    Policy,
    compile_policy,
    routing_facts,
    webhook_condition,
)

log = logging.getLogger(__name__)

GROUP_VERSION = "admissionregistration.k8s.io/v1"
#: gpupool's mutating webhook configuration and the webhook in it that routes GPU pods
#: (manifests/base/webhooks.yaml; the name sorts before HAMi's, so it is fixed)
CONFIGURATION = "gpupool-mutating"
WEBHOOK = "mutate.gpupool.io"


class Conflict(Exception):
    """Another replica or worker wrote first: read again and retry."""


@dataclass
class Installed:
    """What the cluster holds of API-server routing."""

    served: bool
    digest: str | None = None  # the installed policy's, None where absent
    binding: bool = False
    condition: str | None = None  # the expression on mutate.gpupool.io, None where absent


@dataclass
class Target:
    objects: list[dict[str, Any]]
    condition: dict[str, str]

    @property
    def digest(self) -> str:
        return str(self.objects[0]["metadata"]["annotations"][DIGEST_ANNOTATION])


def _webhook_entry(config: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    for i, w in enumerate(config.get("webhooks") or []):
        if isinstance(w, dict) and w.get("name") == WEBHOOK:
            return i, w
    return None


def target(policy: Policy, view: ClusterView, config: Mapping[str, Any] | None) -> Target:
    """The objects as compiled now, matching the pods the webhook would see (its
    namespaceSelector and objectSelector)."""
    entry = _webhook_entry(config) if config else None
    selectors: dict[str, Any] = {k: entry[1][k] for k in ("namespaceSelector",
                                                          "objectSelector")
                                 if entry is not None and k in entry[1]}
    facts = routing_facts(view, policy)
    return Target(compile_policy(policy, facts, selectors=selectors),
                  webhook_condition(policy, facts))


class Cluster:
    """The few calls this needs, through the dynamic client (any client version that
    discovers the API server's resources)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes.dynamic import DynamicClient

        self.dyn = DynamicClient(api_client)

    def served(self) -> bool:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            self.dyn.resources.get(api_version=GROUP_VERSION, kind="MutatingAdmissionPolicy")
        except ResourceNotFoundError:
            return False
        return True

    def _res(self, kind: str) -> Any:
        return self.dyn.resources.get(api_version=GROUP_VERSION, kind=kind)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            return dict(self._res(kind).get(name=name).to_dict())
        except NotFoundError:
            return None

    def put(self, obj: dict[str, Any]) -> None:
        """Create, or replace what is there."""
        res = self._res(obj["kind"])
        current = self.get(obj["kind"], obj["metadata"]["name"])
        if current is None:
            res.create(body=obj)
        else:
            body = {**obj, "metadata": {**obj["metadata"], "resourceVersion":
                                        current["metadata"]["resourceVersion"]}}
            res.replace(body=body)

    def delete(self, kind: str, name: str) -> None:
        from kubernetes.dynamic.exceptions import NotFoundError

        with contextlib.suppress(NotFoundError):
            self._res(kind).delete(name=name)

    def patch_conditions(self, config: Mapping[str, Any], conditions: list[dict[str, Any]]
                         ) -> None:
        """Set the matchConditions of mutate.gpupool.io, only if nothing changed since
        ``config`` was read (JSON patch ``test`` on its resourceVersion and position)."""
        entry = _webhook_entry(config)
        assert entry is not None
        i = entry[0]
        ops = [{"op": "test", "path": "/metadata/resourceVersion",
                "value": config["metadata"]["resourceVersion"]},
               {"op": "test", "path": f"/webhooks/{i}/name", "value": WEBHOOK},
               {"op": "add", "path": f"/webhooks/{i}/matchConditions", "value": conditions}]
        from kubernetes.client.exceptions import ApiException

        try:
            self._res("MutatingWebhookConfiguration").patch(
                name=CONFIGURATION, body=ops, content_type="application/json-patch+json")
        except ApiException as exc:
            if exc.status in (409, 422):  # a test failed: another writer came first
                raise Conflict(f"{CONFIGURATION} changed while being written") from exc
            raise


def read(cluster: Cluster) -> tuple[Installed, dict[str, Any] | None]:
    """The installed state, and the webhook configuration it was read from."""
    config = cluster.get("MutatingWebhookConfiguration", CONFIGURATION)
    if not cluster.served():
        return Installed(False), config
    policy = cluster.get("MutatingAdmissionPolicy", ROUTING_NAME)
    binding = cluster.get("MutatingAdmissionPolicyBinding", ROUTING_NAME)
    entry = _webhook_entry(config) if config else None
    condition = next((str(c.get("expression")) for c in
                      (entry[1].get("matchConditions") or [] if entry else [])
                      if c.get("name") == CONDITION), None)
    ann = ((policy or {}).get("metadata") or {}).get("annotations") or {}
    return Installed(True, ann.get(DIGEST_ANNOTATION), binding is not None, condition), config


def _without_ours(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(c) for c in entry.get("matchConditions") or []
            if c.get("name") != CONDITION]


def sync(cluster: Cluster, mode: str, want: Callable[[dict[str, Any] | None], Target]
         ) -> list[str]:
    """Make the cluster hold what ``mode`` asks; the writes made, in words."""
    done: list[str] = []
    installed, config = read(cluster)
    use_policy = mode == "policy" or (mode == "auto" and installed.served)
    if mode == "policy" and not installed.served:
        raise RuntimeError("the API server does not serve admissionregistration.k8s.io/v1 "
                           "MutatingAdmissionPolicy (Kubernetes 1.36 or newer): routing "
                           "stays in the webhook; use --routing-mode auto or webhook")
    entry = _webhook_entry(config) if config else None
    if not use_policy:
        if installed.condition is not None and config is not None and entry is not None:
            cluster.patch_conditions(config, _without_ours(entry[1]))
            done.append(f"removed the {CONDITION} condition from {WEBHOOK}")
        if installed.served and (installed.digest is not None or installed.binding):
            cluster.delete("MutatingAdmissionPolicyBinding", ROUTING_NAME)
            cluster.delete("MutatingAdmissionPolicy", ROUTING_NAME)
            done.append(f"deleted MutatingAdmissionPolicy {ROUTING_NAME} and its binding")
        return done
    if config is None or entry is None:
        raise RuntimeError(f"MutatingWebhookConfiguration {CONFIGURATION} with webhook "
                           f"{WEBHOOK} not found: install gpupool's webhook configurations")
    t = want(config)
    cond = t.condition["expression"]
    if installed.condition is not None and installed.condition != cond:
        cluster.patch_conditions(config, _without_ours(entry[1]))
        done.append(f"took the old {CONDITION} condition off {WEBHOOK}")
        installed.condition = None
        config = cluster.get("MutatingWebhookConfiguration", CONFIGURATION)
        entry = _webhook_entry(config) if config else None
        assert config is not None and entry is not None
    if installed.digest != t.digest or not installed.binding:
        for obj in t.objects:
            cluster.put(obj)
        done.append(f"wrote MutatingAdmissionPolicy {ROUTING_NAME} ({t.digest}) and its "
                    "binding")
    if installed.condition is None:
        cluster.patch_conditions(config, [*_without_ours(entry[1]), dict(t.condition)])
        done.append(f"put the {CONDITION} condition on {WEBHOOK}")
    return done


class Keeper:
    """The server's loop: sync at start, when the policy changes, and every ``period``
    seconds (a cluster change the facts read: a ClusterPolicy, MIG devices, DeviceClasses).
    Errors are logged and retried; admission never waits on this."""

    def __init__(self, mode: str, api_client: Any, policy: Callable[[], Policy],
                 view: ClusterView, ready: Callable[[], bool], period: float = 30.0) -> None:
        self.mode = mode
        self.api_client = api_client
        self.policy = policy
        self.view = view
        self.ready = ready
        self.period = period
        self.last: str = "not synced yet"
        self.ok = False
        self._cluster: Cluster | None = None  # (made once: its discovery is kept)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="routing-policy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def poke(self) -> None:
        self._wake.set()

    def status(self) -> tuple[bool, str]:
        return self.ok, self.last

    def once(self) -> list[str]:
        if self._cluster is None:
            self._cluster = Cluster(self.api_client)
        return sync(self._cluster, self.mode,
                    lambda cfg: target(self.policy(), self.view, cfg))

    def _run(self) -> None:
        """In ``webhook`` mode, one pass once the watch is settled: only what an earlier mode
        left behind goes, and a server that may not read admission policies (the kustomize
        base and chart grant it only for the other modes) has nothing of it to remove."""
        alone = self.mode == "webhook"
        while not self._stop.is_set():
            if self.ready():
                try:
                    for line in self.once():
                        log.info("routing (--routing-mode %s): %s", self.mode, line)
                    self.ok, self.last = True, f"--routing-mode {self.mode}: in sync"
                except Conflict as exc:
                    log.debug("routing: %s; retrying", exc)
                    self._wake.wait(0.5)
                    continue
                except Exception as exc:  # logged and retried: admission never waits on it
                    if alone:
                        log.debug("routing in the webhook alone: nothing removed (%s)", exc)
                        self.ok, self.last = True, "--routing-mode webhook"
                    else:
                        self.ok, self.last = False, f"--routing-mode {self.mode}: {exc}"
                        log.warning("routing in the API server: %s", exc)
                if alone:
                    return
            self._wake.wait(1.0 if not self.ready() else
                            self.period if self.ok else min(self.period, 5.0))
            self._wake.clear()
