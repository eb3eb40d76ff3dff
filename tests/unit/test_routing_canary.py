"""The routing policy proved before it routes real pods (``webhook.cluster.routingpolicy.sync``,
``webhook.engine.native.canary``): the order of the writes, a failed canary
unbinding everything, and the proof made again when the API server changes.

The API server here is ``ApiServerDouble``, a test double: it keeps the objects the keeper
writes and answers a dry-run create of a canary pod as the installed policy would route it,
or as a broken release would. The real API servers of each release run the same keeper in
tests/e2e/test_native_routing.py and tests/e2e/test_patch_lines.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from webhook.cluster.routingpolicy import (
    CONFIGURATION,
    PROOF_ANNOTATION,
    WEBHOOK,
    CanaryFailed,
    Installed,
    read,
    sync,
    target,
)
from webhook.engine import (
    CANARY_BINDING,
    CANARY_LABEL,
    ROUTING_NAME,
    canary_pods,
    disagreement,
    routing_facts,
    view_from_objects,
)
from webhook.files.policyfile import default_policy

Answer = Callable[[dict[str, Any], dict[str, Any]], "dict[str, Any] | str"]


def _as_the_webhook(pod: dict[str, Any], webhook: dict[str, Any]) -> dict[str, Any] | str:
    return webhook


class ApiServerDouble:
    """Objects by (kind, name); ``answer`` routes a canary pod given what the webhook writes
    for it (the keeper's own expectation is not visible to it: it is looked up by pod)."""

    def __init__(self, answer: Answer = _as_the_webhook, version: str = "v1.37.2") -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {
            ("MutatingWebhookConfiguration", CONFIGURATION): {
                "metadata": {"name": CONFIGURATION, "resourceVersion": "1", "annotations": {}},
                "webhooks": [{"name": WEBHOOK, "matchConditions": [
                    {"name": "gpu-pods", "expression": "true"}]}]}}
        self.answer = answer
        self.server = version
        self.log: list[str] = []
        self.expected: dict[str, dict[str, Any]] = {}

    # -- what routingpolicy.Cluster offers
    def served(self) -> bool:
        return True

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        got = self.objects.get((kind, name))
        return copy.deepcopy(got) if got is not None else None

    def put(self, obj: dict[str, Any]) -> None:
        self.log.append(f"put {obj['kind']} {obj['metadata']['name']}")
        self.objects[(obj["kind"], obj["metadata"]["name"])] = copy.deepcopy(obj)

    def delete(self, kind: str, name: str) -> None:
        if self.objects.pop((kind, name), None) is not None:
            self.log.append(f"delete {kind} {name}")

    def patch_conditions(self, config: Mapping[str, Any], conditions: list[dict[str, Any]]
                         ) -> None:
        cfg = self.objects[("MutatingWebhookConfiguration", CONFIGURATION)]
        cfg["webhooks"][0]["matchConditions"] = conditions
        self.log.append(f"conditions {sorted(c['name'] for c in conditions)}")

    def version(self) -> str:
        return self.server

    def record_proof(self, proof: Mapping[str, Any]) -> None:
        cfg = self.objects[("MutatingWebhookConfiguration", CONFIGURATION)]
        cfg["metadata"]["annotations"][PROOF_ANNOTATION] = json.dumps(dict(proof))
        self.log.append(f"proof {proof['result']}")

    def dry_run(self, pod: Mapping[str, Any]) -> dict[str, Any] | str:
        bound = ("MutatingAdmissionPolicyBinding", CANARY_BINDING) in self.objects
        self.log.append(f"dry-run (bound to real pods: {self.bound_to_real_pods()})")
        if not bound or ("MutatingAdmissionPolicy", ROUTING_NAME) not in self.objects:
            return dict(pod)  # nothing routes it
        return self.answer(dict(pod), self.expected[json.dumps(pod, sort_keys=True)])

    # -- for the tests
    def bound_to_real_pods(self) -> bool:
        return ("MutatingAdmissionPolicyBinding", ROUTING_NAME) in self.objects

    def installed(self) -> Installed:
        return read(self)[0]  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch):
    """A canary that keeps failing is tried for CANARY_PATIENCE seconds: not here."""
    monkeypatch.setattr("webhook.cluster.routingpolicy.CANARY_PATIENCE", 0.05)
    monkeypatch.setattr("webhook.cluster.routingpolicy.time.sleep", lambda s: None)


def _sync(api: ApiServerDouble, proofs: list[tuple[str, str]] | None = None) -> list[str]:
    policy = default_policy()
    view = view_from_objects([], policy)

    def want(cfg: dict[str, Any] | None) -> Any:
        t = target(policy, view, cfg)
        api.expected = {json.dumps(p, sort_keys=True): w for _, p, w in t.canaries}
        return t

    return sync(api, "policy", want,  # type: ignore[arg-type]
                (lambda r, why: proofs.append((r, why))) if proofs is not None else None)


def test_canaries_cover_every_claimed_pool_and_each_shape_of_patch():
    policy = default_policy()
    pods = canary_pods(policy, routing_facts(view_from_objects([], policy), policy), "gs")
    whats = [w for w, _ in pods]
    assert "pool hami, by its label, two required terms" in whats
    assert "pool operator, no routing evidence" in whats
    for _, pod in pods:
        assert pod["metadata"]["namespace"] == "gs"
        assert pod["metadata"]["labels"][CANARY_LABEL] == "true"
        c = pod["spec"]["containers"][0]
        # the restricted Pod Security Standard, so a namespace enforcing it takes them
        assert c["securityContext"] == {"allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}}
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_a_policy_routes_real_pods_only_after_its_canaries_agree():
    api, proofs = ApiServerDouble(), []
    done = _sync(api, proofs)
    assert proofs == [("passed", "")]
    # every canary was sent before the policy was bound to any real pod
    first_bind = api.log.index(f"put MutatingAdmissionPolicyBinding {ROUTING_NAME}")
    dry = [i for i, line in enumerate(api.log) if line.startswith("dry-run")]
    assert dry and max(dry) < first_bind
    assert all("bound to real pods: False" in api.log[i] for i in dry)
    # ...and the webhook skips pods only once the binding is there
    assert api.log[-1] == "conditions ['gpu-pods', 'not-routed-by-policy']"
    assert any(line.startswith("proved policy") for line in done)
    # in sync: nothing is sent or written again
    api.log.clear()
    assert _sync(api) == [] and api.log == []


def test_a_canary_routed_otherwise_unbinds_everything_and_is_not_retried():
    def wrong_scheduler(pod: dict[str, Any], webhook: dict[str, Any]) -> dict[str, Any]:
        got = copy.deepcopy(webhook)
        got["spec"]["schedulerName"] = "someone-else"
        return got

    api, proofs = ApiServerDouble(wrong_scheduler), []
    with pytest.raises(CanaryFailed, match="schedulerName: the policy wrote 'someone-else'"):
        _sync(api, proofs)
    assert [r for r, _ in proofs] == ["failed"]
    assert not api.bound_to_real_pods()
    assert ("MutatingAdmissionPolicy", ROUTING_NAME) not in api.objects
    installed = api.installed()
    assert installed.condition is None and installed.proof is not None
    assert installed.proof["result"] == "failed" and installed.proof["server"] == "v1.37.2"
    # the record holds every replica back: no canary is sent again for this policy here
    api.log.clear()
    with pytest.raises(CanaryFailed, match="the canary failed for policy"):
        _sync(api)
    assert not any(line.startswith(("dry-run", "put")) for line in api.log)


def test_a_dropped_connection_fails_the_canary():
    api = ApiServerDouble(lambda p, w: "the API server dropped the connection "
                                       "(ProtocolError: Connection aborted.)")
    with pytest.raises(CanaryFailed, match="dropped the connection"):
        _sync(api)
    assert not api.bound_to_real_pods()


def test_a_new_api_server_is_proved_again_and_a_bad_one_unbinds_in_the_safe_order():
    api = ApiServerDouble()
    _sync(api)
    assert api.bound_to_real_pods()
    # the same policy, an upgraded API server that drops the patch
    api.server = "v1.38.0"
    api.answer = lambda p, w: "the API server dropped the connection"
    api.log.clear()
    with pytest.raises(CanaryFailed):
        _sync(api)
    # proved while still bound (the fastest way off), then: condition off, binding, policy
    order = [line.split(" (")[0] for line in api.log if not line.startswith("dry-run")]
    assert order == ["proof failed", "conditions ['gpu-pods']",
                     f"delete MutatingAdmissionPolicyBinding {ROUTING_NAME}",
                     f"delete MutatingAdmissionPolicyBinding {CANARY_BINDING}",
                     f"delete MutatingAdmissionPolicy {ROUTING_NAME}"]
    # fixed in the next patch: proved, bound again
    api.server, api.answer = "v1.38.1", _as_the_webhook
    _sync(api)
    assert api.bound_to_real_pods() and api.installed().condition is not None


def test_a_policy_slow_to_take_effect_is_waited_for(monkeypatch):
    monkeypatch.setattr("webhook.cluster.routingpolicy.CANARY_PATIENCE", 60.0)
    seen = {"n": 0}

    def late(pod: dict[str, Any], webhook: dict[str, Any]) -> dict[str, Any]:
        seen["n"] += 1
        return pod if seen["n"] <= 2 else webhook  # the informer follows after two tries

    api = ApiServerDouble(late)
    _sync(api)
    assert api.bound_to_real_pods()


def test_disagreement_names_what_differs():
    webhook = {"metadata": {"annotations": {"gpupool.io/pool": "hami"}},
               "spec": {"schedulerName": "hami-scheduler"}}
    assert disagreement(webhook, webhook) is None
    assert disagreement({"metadata": {}, "spec": {}}, webhook) == "the policy left it unrouted"
    moved = {"metadata": {"annotations": {"gpupool.io/pool": "operator"}},
             "spec": {"schedulerName": "hami-scheduler"}}
    assert "pool: the policy wrote 'operator', the webhook writes 'hami'" in \
        str(disagreement(moved, webhook))
