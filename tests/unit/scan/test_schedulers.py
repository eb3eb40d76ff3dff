"""Is a pool's scheduler running? Its leader-election Lease says (``webhook.scan.schedulers``).
The end-to-end test stops a real kube-scheduler and watches its Lease lapse; here, the
readings of a Lease and of the flag."""

from __future__ import annotations

import datetime as dt

import pytest

from webhook.scan.schedulers import LeaseRef, default_refs, parse_ref, state_of

NOW = dt.datetime(2026, 12, 5, 12, 0, 0, tzinfo=dt.UTC)
REF = LeaseRef("hami-scheduler", "kube-system", "hami-scheduler")


def lease(holder: str | None, renewed_ago: float, duration: int = 15) -> dict:
    renew = (NOW - dt.timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": renew}}


def test_a_lease_renewed_within_its_duration_is_a_running_scheduler():
    assert state_of(lease("hami-scheduler-abc", 3), REF, NOW).running is True
    # clock skew between the nodes is forgiven for a few seconds
    assert state_of(lease("hami-scheduler-abc", 18), REF, NOW).running is True


def test_a_lapsed_or_released_lease_is_a_stopped_scheduler_and_says_when():
    s = state_of(lease("hami-scheduler-abc", 60), REF, NOW)
    assert s.running is False and "kube-system/hami-scheduler" in s.detail
    assert "2026-12-05T11:59:00Z" in s.detail and "15s" in s.detail
    # the detail does not move while nothing changes: a report is not rewritten every poll
    lapsed = lease("hami-scheduler-abc", 60)
    later = NOW + dt.timedelta(seconds=30)
    assert state_of(lapsed, REF, NOW).detail == state_of(lapsed, REF, later).detail
    assert state_of(lease(None, 1), REF, NOW).running is False


def test_no_lease_or_a_broken_one_says_nothing():
    assert state_of(None, REF, NOW).running is None  # may run without leader election
    assert state_of({"spec": {"holderIdentity": "a"}}, REF, NOW).running is None
    assert state_of({"spec": "junk"}, REF, NOW).running is False  # no holder at all


def test_where_each_schedulers_lease_is_by_default_and_by_flag():
    assert default_refs(["default-scheduler", "hami-scheduler"], "hami-system") == [
        LeaseRef("default-scheduler", "kube-system", "kube-scheduler"),
        LeaseRef("hami-scheduler", "hami-system", "hami-scheduler")]
    assert parse_ref("hami-scheduler=hami/hami-scheduler") == LeaseRef(
        "hami-scheduler", "hami", "hami-scheduler")
    for bad in ("hami-scheduler", "x=y", "=ns/name", "x=/name"):
        with pytest.raises(ValueError, match="SCHEDULER=NAMESPACE/NAME"):
            parse_ref(bad)


def _pod(ready: bool) -> dict:
    return {"status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_hamis_scheduler_with_no_ready_pod_is_not_running_whatever_its_lease():
    """The issue's second signal: no live lease holder, or no Ready pod. HAMi's chart may
    run its scheduler without leader election (no Lease at all)."""
    from webhook.scan.schedulers import (
        HAMI_SCHEDULER_PODS,
        PodsRef,
        combined,
        default_pod_refs,
        parse_pods_ref,
        pods_state,
    )

    ref = PodsRef("hami-scheduler", "kube-system", HAMI_SCHEDULER_PODS)
    assert pods_state([_pod(True), _pod(False)], ref).running is True
    gone = pods_state([_pod(False)], ref)
    assert gone.running is False and "no Ready pod matches kube-system/" in gone.detail
    assert pods_state(None, ref).running is None  # could not list: says nothing
    fresh = state_of(lease("a", 1), REF, NOW)
    assert combined([fresh, gone]).running is False
    assert combined([state_of(None, REF, NOW), pods_state([_pod(True)], ref)]).running
    assert combined([state_of(None, REF, NOW), pods_state(None, ref)]).running is None
    # kube-scheduler's pods are not looked for: a managed control plane shows none
    assert [r.scheduler for r in default_pod_refs(["default-scheduler", "hami-scheduler"],
                                                  "hami")] == ["hami-scheduler"]
    assert parse_pods_ref("s=ns/app=x,tier=y") == PodsRef("s", "ns", "app=x,tier=y")
    with pytest.raises(ValueError, match="SCHEDULER=NAMESPACE/SELECTOR"):
        parse_pods_ref("s=ns")
