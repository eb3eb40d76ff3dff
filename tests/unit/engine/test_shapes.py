"""A pod's decision kept for its shape: the replicas of a workload are each told the
decision under their own name, and nothing the decision reads can leave a kept one stale
(``admit._pod_stage``). Each kept answer is checked against a view built fresh for the pod,
which keeps nothing; how often the kept one is used is bench's to measure
(tests/integration/test_cache_equivalence.py compares the two on a whole corpus)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.unit.engine.test_dra import docs, make_view, node, pod
from tests.unit.engine.test_dra import policy as dra_policy  # noqa: F401  (a fixture)
from tests.unit.engine.test_steering import agent_node, hami_pod
from webhook.engine.admission import admit
from webhook.engine.core.decision import Reason
from webhook.engine.stacks.dra import Slice
from webhook.engine.view.cluster import view_from_objects
from webhook.engine.view.nodes import NodeInfo
from webhook.files.policyfile import default_policy


def replica(name: str) -> dict:
    p = hami_pod()
    p["metadata"].update(name=name, uid=f"uid-{name}", generateName="train-",
                         managedFields=[{"manager": "kube-controller-manager",
                                         "time": f"2026-12-05T08:00:0{len(name) % 10}Z"}])
    return p


def test_replicas_are_each_named_in_the_decision_they_share(tmp_path):
    policy = default_policy()
    bad = agent_node(tmp_path, "hami-1", "hami", "operator-management")  # no per-UUID spec
    view = view_from_objects([bad], policy)
    first = admit.review_pod(replica("train-a"), "default", view, policy)
    second = admit.review_pod(replica("train-bb"), "default", view, policy)
    assert not first.allowed and first.reason == second.reason == Reason.CDI_DEVICE_MISSING
    assert "pod default/train-a " in first.message and "train-bb" not in first.message
    assert "pod default/train-bb " in second.message and "train-a " not in second.message
    assert first.message.replace("train-a", "train-bb") == second.message
    fresh = admit.review_pod(replica("train-bb"), "default", view_from_objects([bad], policy),
                             policy)
    assert second.to_json() == fresh.to_json()
    with pytest.raises(AttributeError):  # shared: no shell may change it
        second.warnings = ("a shell's own",)  # type: ignore[misc]  # (the error is the test)
    assert second.warned("a shell's own").warnings[-1] == "a shell's own"
    assert "a shell's own" not in admit.review_pod(replica("c"), "default", view,
                                                   policy).warnings


def _job_pod(job: str, **meta) -> dict:
    """A pod of one Job among many made from one template: its own name, labels and owner."""
    p = hami_pod()
    p["metadata"].update(name=f"{job}-x", labels={"job-name": job, "controller-uid": job,
                                                  "batch.kubernetes.io/job-name": job},
                         annotations={"batch.kubernetes.io/job-tracking": ""},
                         ownerReferences=[{"kind": "Job", "name": job, "uid": job}])
    for part, entries in meta.items():
        p["metadata"].setdefault(part, {}).update(entries)
    return p


def test_pods_that_differ_only_where_no_rule_reads_each_get_their_own_patch(tmp_path):
    """The pods of a CronJob's Jobs differ in their names, labels, annotations and owners,
    none of which a decision reads: each is told the decision under its own name, patch
    included, and it patches each as it is."""
    policy = default_policy()
    good = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    view = view_from_objects([good], policy)
    out = [admit.decide_pod(admit.Stage.MUTATE, _job_pod(f"train-{i}"), "default", view, policy)
           for i in range(3)]
    assert all(d.allowed and d.pool == "hami" for d in out)
    for i, d in enumerate(out):
        fresh = admit.decide_pod(admit.Stage.MUTATE, _job_pod(f"train-{i}"), "default",
                                 view_from_objects([good], policy), policy)
        assert d.to_json() == fresh.to_json()
    assert "pod default/train-2-x " in out[2].message
    patched = jsonpatch.apply_patch(_job_pod("train-2"), out[2].patch)
    assert patched["metadata"]["labels"]["job-name"] == "train-2"  # its labels kept
    assert patched["metadata"]["annotations"]["gpupool.io/pool"] == "hami"
    # A pod with no labels at all is another shape: its patch creates the map.
    bare = hami_pod()
    bare["metadata"].pop("labels", None)
    d = admit.decide_pod(admit.Stage.MUTATE, bare, "default", view, policy)
    assert jsonpatch.apply_patch(bare, d.patch)["metadata"]["annotations"] == {
        "gpupool.io/pool": "hami"}


@pytest.mark.parametrize("meta, differs", [
    ({"labels": {"gpupool.io/pool": "operator"}}, "the pool it names"),
    ({"annotations": {"nvidia.com/use-gpuuuid": "GPU-none"}}, "HAMi's GPU picking"),
    ({"annotations": {"nvidia.cdi.k8s.io/pod": "management.nvidia.com/gpu=all"}}, "NRI"),
    ({"labels": {"hami.io/webhook": "ignore"}}, "HAMi's opt-out, which the patch sets"),
])
def test_pods_that_differ_where_a_rule_reads_get_their_own_decision(tmp_path, meta, differs):
    policy = default_policy()
    good = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    view = view_from_objects([good], policy)
    admit.review_pod(_job_pod("a"), "default", view, policy)  # the plain pod, kept
    other = _job_pod("a", **meta)
    got = admit.review_pod(other, "default", view, policy)
    fresh = admit.review_pod(other, "default", view_from_objects([good], policy), policy)
    assert got.to_json() == fresh.to_json(), f"{differs}: told the decision of a pod without it"


def _reordered(value):
    """``value`` with every mapping's keys in reverse order."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(value)}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def test_a_pod_sent_with_its_keys_in_another_order_is_decided_alike(tmp_path):
    """The kept decision's digest is over the pod as sent, its keys unsorted: the same pod
    in another key order is another entry, decided as a fresh view decides it, never told
    the decision of a pod it differs from."""
    policy = default_policy()
    bad = agent_node(tmp_path, "hami-1", "hami", "operator-management")  # no per-UUID spec
    good = agent_node(tmp_path, "hami-2", "hami", "operator-management", per_uuid=True)
    view = view_from_objects([bad, good], policy)
    plain = _job_pod("a")
    turned = _reordered(plain)
    assert list(turned) != list(plain) and turned == plain
    first = admit.review_pod(plain, "default", view, policy)
    again = admit.review_pod(turned, "default", view, policy)
    fresh = admit.review_pod(turned, "default", view_from_objects([bad, good], policy), policy)
    assert first.allowed and first.pool == "hami"
    assert again.to_json() == fresh.to_json() == first.to_json()
    steered = jsonpatch.apply_patch(copy.deepcopy(turned), again.patch)
    terms = steered["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and steered["spec"]["schedulerName"] == "hami-scheduler"


def test_the_engine_holds_only_the_labels_and_annotations_it_declares_reading():
    from webhook.engine.pod.podfacts import READ_LABELS, PodFacts

    policy = default_policy()
    facts = PodFacts.parse(_job_pod("a", labels={"gpupool.io/pool": "hami"},
                                    annotations={"nvidia.cdi.k8s.io/pod": "x"}),
                           "default", policy)
    assert dict(facts.labels) == {"gpupool.io/pool": "hami"}
    assert set(facts.labels) <= READ_LABELS
    assert dict(facts.annotations) == {"nvidia.cdi.k8s.io/pod": "x"}


def test_a_node_change_is_seen_by_the_next_replica(tmp_path):
    policy = default_policy()
    bad = agent_node(tmp_path / "a", "hami-1", "hami", "operator-management")
    good = agent_node(tmp_path / "b", "hami-1", "hami", "operator-management", per_uuid=True)
    view = view_from_objects([bad], policy)
    assert not admit.review_pod(replica("a"), "default", view, policy).allowed
    view.upsert_node(NodeInfo.from_object(good))
    assert admit.review_pod(replica("b"), "default", view, policy).allowed


def test_a_slice_change_is_seen_though_it_leaves_the_view_version(dra_policy):  # noqa: F811
    """ResourceSlices do not clear the view's memo; the decision's key holds their count."""
    policy = dra_policy
    resources = copy.deepcopy(docs("nvidia.yaml"))
    resources[0]["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    view = make_view(policy, resources, [node("dra-node-1"), node("dra-node-2")])
    p = pod(gpus={"nvidia.com/gpu": 3}, nodeSelector={"kubernetes.io/hostname": "dra-node-1"})
    before = admit.review_pod(p, "default", view, policy)
    assert any("no node in pool operator has the DRA devices" in w for w in before.warnings)
    more = copy.deepcopy(resources[2])
    more["metadata"]["name"] = "dra-node-1-more"
    more["spec"]["pool"]["name"] = "dra-node-1-more"
    view.set_slice("dra-node-1-more", Slice.from_object(more))
    after = admit.review_pod(p, "default", view, policy)
    assert not any("DRA devices" in w for w in after.warnings), after.warnings


def test_a_claim_pod_is_always_decided_in_full(dra_policy):  # noqa: F811
    """Claims change with no change to the view's version: a pod naming one is never told a
    kept decision."""
    policy = dra_policy
    view = make_view(policy, docs("nvidia.yaml"))  # no templates yet
    p = pod("one-gpu")
    assert any("not found" in w for w in admit.review_pod(p, "default", view, policy).warnings)
    from webhook.engine.view.cluster import claims_of

    view.replace_claims("ResourceClaimTemplate", claims_of("ResourceClaimTemplate",
                                                           docs("claims.yaml")))
    d = admit.review_pod(p, "default", view, policy)
    assert d.allowed and d.pool == "dra" and not any("not found" in w for w in d.warnings)


def test_replicas_share_one_patch_and_each_response_carries_its_own_decisions(tmp_path):
    """The replicas of a workload share their kept decision's patch; the text a response
    carries is that patch, and a decision given another patch answers with that one."""
    import base64
    import json

    policy = default_policy()
    view = view_from_objects([agent_node(tmp_path, "hami-1", "hami", "operator-management",
                                              per_uuid=True)], policy)
    first = admit.decide_pod(admit.Stage.MUTATE, replica("train-a"), "default", view, policy)
    second = admit.decide_pod(admit.Stage.MUTATE, replica("train-bb"), "default", view, policy)
    assert first.patch and first.patch is second.patch  # one kept patch, shared
    assert json.loads(base64.b64decode(first.encoded_patch())) == list(first.patch)
    second = second._replace(
        patch=({"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},))
    assert json.loads(base64.b64decode(second.encoded_patch())) == list(second.patch)
    assert json.loads(base64.b64decode(first.encoded_patch())) == list(first.patch) \
        != list(second.patch)


def test_kept_decisions_under_threads_end_as_a_fresh_view_decides(tmp_path):
    """Reviews that find kept decisions without the view's lock, in threads (gthread
    workers), while the watch stores the node again and again: none fails, and once the
    node stands still every answer is the one a fresh view gives."""
    import sys
    import threading

    policy = default_policy()
    bad_obj = agent_node(tmp_path / "a", "hami-1", "hami", "operator-management")
    bad = NodeInfo.from_object(bad_obj)
    good_obj = agent_node(tmp_path / "b", "hami-1", "hami", "operator-management",
                          per_uuid=True)
    good = NodeInfo.from_object(good_obj)
    view = view_from_objects([good_obj], policy)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reviews(k: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                admit.review_pod(replica(f"r{k}-{i % 7}"), "default", view, policy)
            except BaseException as exc:  # any failure is the finding
                errors.append(exc)
                return
            i += 1

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter lets them
    try:
        threads = [threading.Thread(target=reviews, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for n in range(150):
            view.upsert_node(bad if n % 2 else good)
        view.upsert_node(bad)  # where it ends: every decision kept before is stale
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        sys.setswitchinterval(before)
    assert not errors, errors[:1]
    fresh = view_from_objects([bad_obj], policy)
    for k in range(7):
        got = admit.review_pod(replica(f"after-{k}"), "default", view, policy)
        assert got.to_json() == admit.review_pod(replica(f"after-{k}"), "default", fresh,
                                                 policy).to_json()
        assert not got.allowed and got.reason == Reason.CDI_DEVICE_MISSING
