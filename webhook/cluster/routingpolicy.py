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
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine import (
    CANARY_BINDING,
    CONDITION,
    DIGEST_ANNOTATION,
    ROUTING_NAME,
    ClusterView,
    Policy,
    as_webhook_routes,
    canary_binding,
    canary_pods,
    compile_policy,
    disagreement,
    routing_facts,
    webhook_condition,
)

log = logging.getLogger(__name__)

GROUP_VERSION = "admissionregistration.k8s.io/v1"
#: gpupool's mutating webhook configuration and the webhook in it that routes GPU pods
#: (manifests/base/webhooks.yaml; the name sorts before HAMi's, so it is fixed)
CONFIGURATION = "gpupool-mutating"
WEBHOOK = "mutate.gpupool.io"


#: The annotation on gpupool's mutating webhook configuration that records the last proof:
#: the compiled policy's digest, the API server's version, and what the canary found. Every
#: replica reads it, so a policy that failed on this API server stays unbound everywhere
#: until the policy or the API server changes.
PROOF_ANNOTATION = "gpupool.io/routing-proof"
#: How long the canary keeps trying before a disagreement counts (the API server's admission
#: plugin follows a new policy or binding through an informer: a second or two).
CANARY_PATIENCE = 15.0


class Conflict(Exception):
    """Another replica or worker wrote first: read again and retry."""


class CanaryFailed(Exception):
    """The API server did not route the canary pods as the webhook does: the policy routes
    no real pod."""


@dataclass
class Installed:
    """What the cluster holds of API-server routing."""

    served: bool
    digest: str | None = None  # the installed policy's, None where absent
    binding: bool = False
    condition: str | None = None  # the expression on mutate.gpupool.io, None where absent
    canary: bool = False  # the binding that applies the policy to canary pods alone
    #: the last proof recorded (``PROOF_ANNOTATION``), None where none is
    proof: dict[str, Any] | None = None


@dataclass
class Target:
    objects: list[dict[str, Any]]  # the policy and its binding
    condition: dict[str, str]
    #: the binding to canary pods alone, and the canaries: (what each tries, the pod, the
    #: pod as the webhook routes it)
    canary: dict[str, Any] = field(default_factory=dict)
    canaries: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    @property
    def digest(self) -> str:
        return str(self.objects[0]["metadata"]["annotations"][DIGEST_ANNOTATION])


def _webhook_entry(config: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    for i, w in enumerate(config.get("webhooks") or []):
        if isinstance(w, dict) and w.get("name") == WEBHOOK:
            return i, w
    return None


def target(policy: Policy, view: ClusterView, config: Mapping[str, Any] | None,
           canary_namespace: str = "gpupool-system") -> Target:
    """The objects as compiled now, matching the pods the webhook would see (its
    namespaceSelector and objectSelector), and the canaries that prove them in
    ``canary_namespace`` (gpupool's own, which its webhooks never see)."""
    entry = _webhook_entry(config) if config else None
    selectors: dict[str, Any] = {k: entry[1][k] for k in ("namespaceSelector",
                                                          "objectSelector")
                                 if entry is not None and k in entry[1]}
    facts = routing_facts(view, policy)
    canaries = [(what, pod, as_webhook_routes(pod, view, policy))
                for what, pod in canary_pods(policy, facts, canary_namespace)]
    return Target(compile_policy(policy, facts, selectors=selectors),
                  webhook_condition(policy, facts), canary_binding(canary_namespace),
                  canaries)


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

    def version(self) -> str:
        """The API server's ``gitVersion`` ("" where it does not say)."""
        from webhook.cluster.kube import server_version

        doc = server_version(self.dyn.client, _request_timeout=10) or {}
        return str(doc.get("gitVersion") or "")

    def dry_run(self, pod: Mapping[str, Any]) -> dict[str, Any] | str:
        """The pod as the API server would store it (a server-side dry-run create: nothing
        is stored), or why it gave no pod: its error, or a dropped connection."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        api: Any = client.CoreV1Api(self.dyn.client)
        try:
            r = api.create_namespaced_pod(pod["metadata"]["namespace"], dict(pod),
                                          dry_run="All", _preload_content=False,
                                          _request_timeout=15)
        except ApiException as exc:
            return f"the API server answered {exc.status}: {_message(exc)}"
        except HTTPError as exc:
            return f"the API server dropped the connection ({type(exc).__name__}: {exc})"
        got = json.loads(r.data)
        return got if isinstance(got, dict) else "the API server answered no object"

    def record_proof(self, proof: Mapping[str, Any]) -> None:
        """``PROOF_ANNOTATION`` on gpupool's mutating webhook configuration."""
        self._res("MutatingWebhookConfiguration").patch(
            name=CONFIGURATION, body={"metadata": {"annotations": {
                PROOF_ANNOTATION: json.dumps(dict(proof), sort_keys=True)}}},
            content_type="application/merge-patch+json")

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


def _message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", exc))


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
    canary = cluster.get("MutatingAdmissionPolicyBinding", CANARY_BINDING)
    recorded = (((config or {}).get("metadata") or {}).get("annotations") or {}).get(
        PROOF_ANNOTATION)
    try:
        proof = json.loads(recorded) if recorded else None
    except ValueError:
        proof = None  # (written by hand: proved again)
    return Installed(True, ann.get(DIGEST_ANNOTATION), binding is not None, condition,
                     canary is not None, proof if isinstance(proof, dict) else None), config


def _without_ours(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(c) for c in entry.get("matchConditions") or []
            if c.get("name") != CONDITION]


def _unbind(cluster: Cluster, installed: Installed, config: Mapping[str, Any] | None,
            done: list[str], policy_too: bool) -> None:
    """Take routing away from the API server in the safe order: the webhook's condition
    first (it routes every pod again), then the binding to real pods, then (``policy_too``)
    the policy and its canary binding."""
    entry = _webhook_entry(config) if config else None
    if installed.condition is not None and config is not None and entry is not None:
        cluster.patch_conditions(config, _without_ours(entry[1]))
        done.append(f"removed the {CONDITION} condition from {WEBHOOK}")
        installed.condition = None
    if installed.binding:
        cluster.delete("MutatingAdmissionPolicyBinding", ROUTING_NAME)
        done.append(f"deleted MutatingAdmissionPolicyBinding {ROUTING_NAME}")
        installed.binding = False
    if policy_too and (installed.digest is not None or installed.canary):
        cluster.delete("MutatingAdmissionPolicyBinding", CANARY_BINDING)
        cluster.delete("MutatingAdmissionPolicy", ROUTING_NAME)
        done.append(f"deleted MutatingAdmissionPolicy {ROUTING_NAME} and its canary binding")
        installed.digest, installed.canary = None, False


def prove(cluster: Cluster, t: Target, patience: float | None = None) -> str | None:
    """Send every canary until all are routed as the webhook routes them (None), or until
    ``patience`` runs out: then why the last round failed. (A new policy or binding reaches
    the API server's admission plugin through an informer, so the first rounds may meet the
    one before.)"""
    if not t.canaries:
        return "no canary pod: the policy names no exact GPU resource to ask for"
    deadline = time.monotonic() + (CANARY_PATIENCE if patience is None else patience)
    while True:
        why = None
        for what, pod, webhook in t.canaries:
            stored = cluster.dry_run(pod)
            found = stored if isinstance(stored, str) else disagreement(stored, webhook)
            if found is not None:
                why = f"canary pod ({what}): {found}"
                break
        if why is None or time.monotonic() >= deadline:
            return why
        time.sleep(1.0)


def sync(cluster: Cluster, mode: str, want: Callable[[dict[str, Any] | None], Target],
         on_proof: Callable[[str, str], None] | None = None) -> list[str]:
    """Make the cluster hold what ``mode`` asks; the writes made, in words. In the API
    server's modes a compiled policy routes real pods only once its canaries agree with the
    webhook on this API server (``prove``); each proof is recorded (``PROOF_ANNOTATION``) and
    made again when the policy or the API server's version changes. A failed proof leaves
    routing in the webhook and raises ``CanaryFailed`` (``on_proof``: told each result)."""
    done: list[str] = []
    installed, config = read(cluster)
    use_policy = mode == "policy" or (mode == "auto" and installed.served)
    if mode == "policy" and not installed.served:
        raise RuntimeError("the API server does not serve admissionregistration.k8s.io/v1 "
                           "MutatingAdmissionPolicy (Kubernetes 1.36 or newer): routing "
                           "stays in the webhook; use --routing-mode auto or webhook")
    if not use_policy:
        if installed.served:
            _unbind(cluster, installed, config, done, policy_too=True)
        return done
    entry = _webhook_entry(config) if config else None
    if config is None or entry is None:
        raise RuntimeError(f"MutatingWebhookConfiguration {CONFIGURATION} with webhook "
                           f"{WEBHOOK} not found: install gpupool's webhook configurations")
    t = want(config)
    cond = t.condition["expression"]
    version = cluster.version()
    proof = installed.proof or {}
    same = proof.get("digest") == t.digest and proof.get("server") == version
    if same and proof.get("result") == "failed":
        # Proved wrong on this API server: routing stays in the webhook until either changes.
        _unbind(cluster, installed, config, done, policy_too=True)
        raise CanaryFailed(f"the canary failed for policy {t.digest} on API server "
                           f"{version or '(version unknown)'}: {proof.get('reason')}")
    if installed.condition is not None and installed.condition != cond:
        cluster.patch_conditions(config, _without_ours(entry[1]))
        done.append(f"took the old {CONDITION} condition off {WEBHOOK}")
        installed.condition = None
    if installed.digest != t.digest:
        # Never a new policy under a binding to real pods: unbound first, proved, then bound.
        _unbind(cluster, installed, config, done, policy_too=False)
        cluster.put(t.objects[0])
        done.append(f"wrote MutatingAdmissionPolicy {ROUTING_NAME} ({t.digest})")
        installed.digest = t.digest
    if not installed.canary:
        cluster.put(t.canary)
        done.append(f"wrote MutatingAdmissionPolicyBinding {CANARY_BINDING} (canary pods "
                    "alone)")
        installed.canary = True
    if not (same and proof.get("result") == "passed"):
        why = prove(cluster, t)
        record = {"digest": t.digest, "server": version,
                  "result": "failed" if why else "passed",
                  "at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        if why:
            record["reason"] = why[:1000]
        cluster.record_proof(record)
        config = cluster.get("MutatingWebhookConfiguration", CONFIGURATION)
        if on_proof is not None:
            on_proof(record["result"], why or "")
        if why:
            _unbind(cluster, installed, config, done, policy_too=True)
            raise CanaryFailed(f"the canary failed for policy {t.digest} on API server "
                               f"{version or '(version unknown)'}: {why}; routing stays "
                               "in the webhook")
        done.append(f"proved policy {t.digest} on API server {version or '(version unknown)'}"
                    f" with {len(t.canaries)} canary pods")
    if not installed.binding:
        cluster.put(t.objects[1])
        done.append(f"wrote MutatingAdmissionPolicyBinding {ROUTING_NAME} ({t.digest})")
    if installed.condition is None:
        config = cluster.get("MutatingWebhookConfiguration", CONFIGURATION)
        entry = _webhook_entry(config) if config else None
        assert config is not None and entry is not None
        cluster.patch_conditions(config, [*_without_ours(entry[1]), dict(t.condition)])
        done.append(f"put the {CONDITION} condition on {WEBHOOK}")
    return done


class Keeper:
    """The server's loop: sync at start, when the policy changes, and every ``period``
    seconds (a cluster change the facts read: a ClusterPolicy, MIG devices, DeviceClasses).
    Errors are logged and retried; admission never waits on this."""

    def __init__(self, mode: str, api_client: Any, policy: Callable[[], Policy],
                 view: ClusterView, ready: Callable[[], bool], period: float = 30.0,
                 canary_namespace: str = "gpupool-system",
                 on_proof: Callable[[str, str], None] | None = None) -> None:
        self.mode = mode
        self.canary_namespace = canary_namespace
        self.on_proof = on_proof
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
                    lambda cfg: target(self.policy(), self.view, cfg, self.canary_namespace),
                    self.on_proof)

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
                except CanaryFailed as exc:
                    # Said once per failure, not at every pass: the record keeps it.
                    if self.last != f"--routing-mode {self.mode}: {exc}":
                        log.warning("routing in the API server: %s", exc)
                    self.ok, self.last = False, f"--routing-mode {self.mode}: {exc}"
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
