"""Is a scheduler running? Read from its leader-election Lease, as its own instances keep it.

kube-scheduler (and HAMi's scheduler, which is kube-scheduler with HAMi's extender) renews
``<namespace>/<name>`` every few seconds while an instance leads
(``--leader-elect-resource-name``/``-namespace``; HAMi's chart names it after its
``schedulerName`` in its release namespace). A Lease whose ``renewTime`` is older than its
``leaseDurationSeconds`` has no live holder: no instance of that scheduler will bind a pod.
No Lease at all says nothing (the scheduler may run without leader election), so no pod is
reported waiting then. HAMi's scheduler runs as pods its chart labels
``app.kubernetes.io/component=hami-scheduler``: with none Ready it is not running either,
whether or not it elects a leader. Only reads: a scan writes nothing here.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine import SchedulerState

#: Slack for clocks that disagree between the scheduler's node and the scanner's.
CLOCK_SKEW = 5.0


@dataclass(frozen=True)
class LeaseRef:
    scheduler: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PodsRef:
    """Where a scheduler's own pods are: a namespace and a label selector."""

    scheduler: str
    namespace: str
    selector: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.selector}"


#: HAMi's chart labels its scheduler's pods so (templates/scheduler/deployment.yaml).
HAMI_SCHEDULER_PODS = "app.kubernetes.io/component=hami-scheduler"


def _split(text: str, flag: str, what: str, example: str) -> tuple[str, str, str]:
    """``SCHEDULER=NAMESPACE/<what>`` as the flag takes it."""
    scheduler, eq, rest = text.partition("=")
    namespace, slash, tail = rest.partition("/")
    if not (eq and slash and scheduler and namespace and tail):
        raise ValueError(f"{flag} {text!r}: use SCHEDULER=NAMESPACE/{what}, e.g. {example}")
    return scheduler, namespace, tail


def parse_pods_ref(text: str) -> PodsRef:
    """``SCHEDULER=NAMESPACE/SELECTOR`` as ``--scheduler-pods`` takes it."""
    return PodsRef(*_split(text, "--scheduler-pods", "SELECTOR",
                           f"hami-scheduler=kube-system/{HAMI_SCHEDULER_PODS}"))


def default_pod_refs(schedulers: Sequence[str], hami_namespace: str) -> list[PodsRef]:
    """HAMi's scheduler runs as pods its chart labels; kube-scheduler's are not looked for
    (a managed control plane runs it where no pod of the cluster shows it)."""
    return [PodsRef(s, hami_namespace, HAMI_SCHEDULER_PODS) for s in sorted(schedulers)
            if s != "default-scheduler"]


def pods_state(pods: Sequence[Mapping[str, Any]] | None, ref: PodsRef) -> SchedulerState:
    """Its pods as listed (None: they could not be listed): running while one is Ready."""
    if pods is None:
        return SchedulerState(None, f"pods {ref} could not be listed")
    ready = [p for p in pods if _ready(p)]
    if ready:
        return SchedulerState(True, f"{len(ready)} Ready pod(s) match {ref}")
    return SchedulerState(False, f"no Ready pod matches {ref}")


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in conds or ())


def combined(states: Sequence[SchedulerState]) -> SchedulerState:
    """Not running when any signal says so (a Lease that lapsed, no Ready pod), running when
    one says so and none says otherwise, unknown when none can tell."""
    stopped = [s for s in states if s.running is False]
    if stopped:
        return SchedulerState(False, "; ".join(s.detail for s in stopped))
    running = [s for s in states if s.running]
    if running:
        return SchedulerState(True, "; ".join(s.detail for s in running))
    return SchedulerState(None, "; ".join(s.detail for s in states))


def parse_ref(text: str) -> LeaseRef:
    """``SCHEDULER=NAMESPACE/NAME`` as ``--scheduler-lease`` takes it."""
    return LeaseRef(*_split(text, "--scheduler-lease", "NAME",
                            "hami-scheduler=kube-system/hami-scheduler"))


def default_refs(schedulers: Sequence[str], hami_namespace: str) -> list[LeaseRef]:
    """Where each pool's scheduler keeps its Lease by default: kube-scheduler's own in
    kube-system, HAMi's named after its scheduler in HAMi's namespace."""
    return [LeaseRef(s, "kube-system", "kube-scheduler") if s == "default-scheduler"
            else LeaseRef(s, hami_namespace, s) for s in sorted(schedulers)]


def state_of(lease: Mapping[str, Any] | None, ref: LeaseRef, now: dt.datetime
             ) -> SchedulerState:
    """One Lease (None: not found) read at ``now``."""
    if lease is None:
        return SchedulerState(None, f"no Lease {ref}: cannot tell whether it runs")
    spec = lease.get("spec") if isinstance(lease.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    holder = spec.get("holderIdentity")
    duration = spec.get("leaseDurationSeconds")
    renewed = _time(spec.get("renewTime")) or _time(spec.get("acquireTime"))
    if not holder:
        return SchedulerState(False, f"Lease {ref} has no holder")
    if not isinstance(duration, int) or renewed is None:
        return SchedulerState(None, f"Lease {ref} has no renewTime or duration")
    age = (now - renewed).total_seconds()
    if age > duration + CLOCK_SKEW:
        # the renewal's time, not its age: an answer that changed every poll would be
        # written every poll
        return SchedulerState(False, f"Lease {ref} held by {holder} was last renewed at "
                                     f"{renewed.strftime('%Y-%m-%dT%H:%M:%SZ')} and lapsed "
                                     f"after {duration}s")
    return SchedulerState(True, f"Lease {ref} held by {holder}")


def _time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def poll(refs: Sequence[LeaseRef], read: Callable[[str, str], Any],
         now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
         pod_refs: Sequence[PodsRef] = (),
         list_pods: Callable[[str, str], Any] | None = None) -> dict[str, SchedulerState]:
    """Each scheduler's state from its Lease and, where configured, its pods;
    ``read(name, namespace)`` is the client's ``read_namespaced_lease`` with raw content,
    ``list_pods(namespace, selector)`` ``list_namespaced_pod`` likewise. A Lease or pods that
    cannot be read (forbidden, the API server down) say nothing."""
    leases = _poll_leases(refs, read, now)
    out = dict(leases)
    for ref in pod_refs:
        pods: list[Any] | None = None
        if list_pods is not None:
            try:
                pods = json.loads(list_pods(ref.namespace, ref.selector).data).get("items")
            except Exception:  # forbidden, unreachable: this signal says nothing
                pods = None
        states = [pods_state(pods if isinstance(pods, list) else None, ref)]
        if ref.scheduler in leases:
            states.insert(0, leases[ref.scheduler])
        out[ref.scheduler] = combined(states)
    return out


def _poll_leases(refs: Sequence[LeaseRef], read: Callable[[str, str], Any],
                 now: Callable[[], dt.datetime]) -> dict[str, SchedulerState]:
    from kubernetes.client.exceptions import ApiException

    out: dict[str, SchedulerState] = {}
    for ref in refs:
        try:
            raw = read(ref.name, ref.namespace)
            lease = json.loads(raw.data)
        except ApiException as exc:
            out[ref.scheduler] = SchedulerState(None, f"Lease {ref}: {exc.status} {exc.reason}"
                                                ) if exc.status != 404 \
                else state_of(None, ref, now())
            continue
        except Exception as exc:  # unreachable API server: keep silent rather than guess
            out[ref.scheduler] = SchedulerState(None, f"Lease {ref}: {exc}")
            continue
        out[ref.scheduler] = state_of(lease, ref, now())
    return out
