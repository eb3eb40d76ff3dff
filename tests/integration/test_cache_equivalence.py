"""The engine's caches keep answers, never change them.

A stream of the corpus's pods (``tests.corpus``: HAMi and GPU Operator pools, plugins learned
or not, NRI, MIG, requireInventory) goes through one view per cluster that keeps everything
it may (decisions per pod shape, routes, candidates, per-node folds), with each pod's
copies that differ where no rule reads (a name, an image, a label no rule reads) and where
one does (its pool label, HAMi's GPU picking), while nodes change under the stream (cordoned,
moved to the other pool, their inventory gone and back). Every answer must be the one a view
built fresh for that pod, from the cluster as it is then, gives: the view that keeps nothing.

``review`` (``gpupool check``, a workload's pods) keeps a pod's two stages as one pair; the
server decides each stage on its own request. The same stream shows they answer alike.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import jsonpatch

from tests import corpus
from tests.conftest import report
from webhook.engine import NodeInfo, Stage, Subject, decide, review, view_from_objects

SEED, PODS, CLUSTERS = 20261206, 400, 4
INVENTORY = "gpupool.io/cdi-inventory"


def _fresh(c: corpus.Cluster) -> Any:
    return view_from_objects([o for o in c.objects if o["kind"] == "Node"], c.policy,
                             {"ml": {}}, resources=[o for o in c.objects if o["kind"] != "Node"])


def _variants(rng: random.Random, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod, copies no rule tells apart, and copies a rule does."""
    out = [pod]
    renamed = copy.deepcopy(pod)
    renamed["metadata"]["name"] += "-b"
    renamed["metadata"].setdefault("labels", {})["app"] = f"a{rng.randrange(9)}"
    for c in renamed["spec"]["containers"]:
        c["image"] = "cuda:other"
    out.append(renamed)
    pooled = copy.deepcopy(pod)
    pooled["metadata"].setdefault("labels", {})["gpupool.io/pool"] = rng.choice(
        ("hami", "operator"))
    out.append(pooled)
    picked = copy.deepcopy(pod)
    picked["metadata"].setdefault("annotations", {})["nvidia.com/use-gputype"] = "A100"
    out.append(picked)
    return out


def _change_a_node(rng: random.Random, c: corpus.Cluster, stash: dict[str, str]) -> str:
    """Change one node of ``c`` in place, the way clusters change: what changed. (An
    inventory taken off waits in ``stash`` to be put back.)"""
    node = rng.choice([o for o in c.objects if o["kind"] == "Node"])
    meta = node["metadata"]
    what = rng.choice(("cordon", "pool", "inventory"))
    if what == "cordon":
        node.setdefault("spec", {})["unschedulable"] = not node["spec"].get("unschedulable")
    elif what == "pool":
        labels = meta["labels"]
        labels["gpupool.io/pool"] = "operator" if labels.get("gpupool.io/pool") == "hami" \
            else "hami"
    else:
        annotations = meta.setdefault("annotations", {})
        if INVENTORY in annotations:
            stash[meta["name"]] = annotations.pop(INVENTORY)
        elif meta["name"] in stash:
            annotations[INVENTORY] = stash.pop(meta["name"])
    return f"{meta['name']}: {what}"


def _answer(rv: Any) -> tuple[Any, ...]:
    final = rv.final
    return (rv.mutation.to_json(), None if rv.validation is None else rv.validation.to_json(),
            final.to_json())


def test_a_view_that_keeps_its_answers_decides_as_a_fresh_one(tmp_path):
    rng = random.Random(SEED)
    clusters = [corpus.make_cluster(rng, tmp_path / f"cluster{i}", i) for i in range(CLUSTERS)]
    kept = [_fresh(c) for c in clusters]
    compared, changes, wrong = 0, [], []
    stash: dict[str, str] = {}
    for i in range(PODS):
        k = i % CLUSTERS
        c, view = clusters[k], kept[k]
        if i % 25 == 24:
            changes.append(_change_a_node(rng, c, stash))
            for o in c.objects:
                if o["kind"] == "Node":
                    view.upsert_node(NodeInfo.from_object(o))
        pod = corpus.make_pod(rng, i, c.nodes)
        for variant in _variants(rng, pod):
            subject = Subject(kind="Pod", group="", operation="CREATE",
                              object=copy.deepcopy(variant), namespace="ml")
            warm = _answer(review(subject, view, c.policy))
            fresh = _answer(review(subject, _fresh(c), c.policy))
            compared += 1
            if warm != fresh:
                wrong.append((variant["metadata"]["name"], changes[-3:], warm, fresh))
    report("Kept answers against a fresh view's", f"{compared} reviews of {PODS} pods and "
           f"their copies, {len(changes)} node changes under the stream; "
           f"{len(wrong)} differ")
    assert not wrong, wrong[:2]
    assert compared == PODS * 4 and len(changes) >= PODS // 25


def test_review_answers_as_the_served_stages_do(tmp_path):
    """A pod's mutation, then the validation of the pod its patch makes (applied by
    jsonpatch, as the API server applies it): what the server answers on two requests.
    ``review`` must give the same two decisions, and where it skips validation (it would
    only repeat the mutation) the served validation must not turn a denial into anything
    else, nor deny what the mutation let through."""
    rng = random.Random(SEED + 1)
    clusters = [corpus.make_cluster(rng, tmp_path / f"cluster{i}", i) for i in range(CLUSTERS)]
    views = [_fresh(c) for c in clusters]
    compared, validated, wrong = 0, 0, []
    stash: dict[str, str] = {}
    for i in range(PODS):
        k = i % CLUSTERS
        c, view = clusters[k], views[k]
        if i % 25 == 24:
            _change_a_node(rng, c, stash)
            for o in c.objects:
                if o["kind"] == "Node":
                    view.upsert_node(NodeInfo.from_object(o))
        for variant in _variants(rng, corpus.make_pod(rng, i, c.nodes)):
            subject = Subject(kind="Pod", operation="CREATE", object=copy.deepcopy(variant),
                              namespace="ml")
            rv = review(subject, view, c.policy)
            m = decide(Stage.MUTATE, subject, view, c.policy)
            patched = jsonpatch.apply_patch(variant, list(m.patch)) if m.allowed else variant
            v = decide(Stage.VALIDATE, Subject(kind="Pod", operation="CREATE", object=patched,
                                               namespace="ml"), view, c.policy)
            compared += 1
            assert rv.mutation is not None
            same = rv.mutation.to_json() == m.to_json() and (
                rv.validation.to_json() == v.to_json() if rv.validation is not None
                else not m.allowed or v.allowed)
            validated += rv.validation is not None
            if not same:
                wrong.append((variant["metadata"]["name"], rv, m, v))
    report("review against the served stages", f"{compared} pods and copies, {validated} "
           f"validated; {len(wrong)} differ")
    assert not wrong, wrong[:2]
    assert compared == PODS * 4 and validated > PODS
