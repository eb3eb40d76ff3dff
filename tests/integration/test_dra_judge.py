"""DRA pods decided as Kubernetes' allocator decides them, judged by the allocator itself,
release by release.

``dra-judge`` (tests/drajudge) runs ``k8s.io/dynamic-resource-allocation/structured`` of
1.35 (v0.35.4), 1.36 (v0.36.6) and 1.37 (v0.37.2), each built from its own module: the code
kube-scheduler's DRA plugin runs node by node. gpupool, told the release, must answer as
that release's allocator does, on the seeded corpus of
``tests.dracorpus``: NVIDIA's driver's whole GPUs and partitionable MIG placements, HAMi-DRA's
shared devices with consumable capacity, taints, held devices, templates and claims,
``firstAvailable``, ``All``, constraints, claims allocated already that pods share, extended
resources a DeviceClass serves (KEP-5004). Node by node gpupool's allocator must give the
allocator's answer; pod by pod, nothing is admitted silently that no node of its pool can
ever allocate, nothing is denied that some node can, nothing is routed to a pool that cannot
serve it while another can, and a pod that only waits for devices in use is told so. Where
releases decide differently, one case per switch (``tests.drareleases``) shows the real
allocators on either side of it disagree, and gpupool agrees with each.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest

from tests import dracorpus, drareleases
from tests.conftest import report
from webhook.engine import (
    Release,
    allocation_on_nodes,
    load_policy_text,
    parse_release,
    view_from_objects,
)

SEED = int(os.environ.get("GPUPOOL_DRA_CORPUS_SEED", "20261205"))
PODS = int(os.environ.get("GPUPOOL_DRA_CORPUS_PODS", "1000"))


@pytest.mark.parametrize("release", dracorpus.RELEASES)
def test_node_by_node_gpupool_allocates_as_kubernetes_does(release):
    rng = random.Random(SEED)
    clusters = [dracorpus.make_cluster(rng, i) for i in range(10)]
    drawn = [(clusters[i % 10], *dracorpus.make_pod(rng, i, clusters[i % 10]))
             for i in range(PODS)]
    policy = load_policy_text(dracorpus.POLICY)
    questions, ours = [], []
    for c, pod, objs in drawn:
        claims = dracorpus.pod_claims(pod, objs)
        view = view_from_objects(c.nodes, policy, {dracorpus.NS: {}, "other": {}},
                                 resources=[*c.classes, *c.slices, *c.held, *objs])
        view.set_release(parse_release(release))
        nodes = [n for n in c.nodes if c.pools[n["metadata"]["name"]] != "operator"]
        for held in (True, False):
            questions.append({"classes": c.classes, "slices": c.slices, "claims": claims,
                              "nodes": nodes, "allocated": c.held if held else []})
            ours.append(allocation_on_nodes(claims, view, in_use=held))
    said: Counter[tuple[str, str]] = Counter()
    wrong = []
    for real, mine in zip(dracorpus.Judge(release).ask(questions), ours, strict=True):
        for node, answer in real.items():
            k8s = answer.split(":")[0]
            got = mine[node].split(":")[0]
            said[(k8s, got)] += 1
            if k8s != "panic" and got != "doubt" and k8s != got:
                wrong.append((node, answer, mine[node]))
    table = "\n".join(f"Kubernetes {k:<6} gpupool {g:<6} {n}" for (k, g), n in
                      sorted(said.items()))
    report(f"DRA allocation on Kubernetes {release}, node by node (seed {SEED}, {PODS} pods, "
           "held devices in use and free)", table)
    assert not wrong, wrong[:5]
    total = sum(said.values())
    # doubt only where the search ran out of steps; every answer kind on both sides
    assert sum(n for (_, g), n in said.items() if g == "doubt") < total // 1000, table
    for kind in ("ok", "no", "error"):
        assert said[(kind, kind)] > total // 50, table


@pytest.mark.parametrize("release", dracorpus.RELEASES)
def test_pod_by_pod_nothing_silent_nothing_denied_that_could_run(release):
    for text, name in ((dracorpus.POLICY, "onNoCandidates: warn"),
                       (dracorpus.POLICY + "onNoCandidates: deny\n", "onNoCandidates: deny")):
        judged = dracorpus.run(SEED, PODS, policy_text=text, release=release)
        table = dracorpus.table(judged)
        report(f"DRA corpus on Kubernetes {release}, {name} (seed {SEED}, {PODS} pods, "
               "its own allocator)", table)
        wrong = [j for j in judged if j.outcome in dracorpus.WRONG]
        assert not wrong, table + "\n\n" + "\n".join(dracorpus.explain(j) for j in wrong[:3])
        counted = Counter(j.outcome for j in judged)
        # not vacuous: pods that run, that wait, that never can, both told and turned away
        for outcome in ("fine", "waits for devices in use", "never allocatable, denied"):
            assert counted[outcome] > PODS // 100, table
        assert counted[dracorpus.PANICS] < PODS // 10, table
        if release != "1.35":  # kubernetes#138882: fixed by #138885 in 1.36
            assert not counted[dracorpus.PANICS], table
        # ...among them pods sharing a claim allocated already, and pods asking for an
        # extended resource a DeviceClass serves (by name, and implicitly)
        kinds = Counter(dracorpus.kind_of(j.pod) for j in judged if j.outcome == "fine")
        assert all(kinds[k] for k in ("shared claim", dracorpus.EXTENDED,
                                      dracorpus.IMPLICIT)), kinds


def test_each_release_difference_is_decided_as_that_release_decides():
    cases = drareleases.cases()
    real = {r: [a[drareleases.NODE] for a in dracorpus.Judge(r).ask(
        [c.question for c in cases])] for r in dracorpus.RELEASES}
    rows, wrong = [], []
    for i, case in enumerate(cases):
        q = case.question
        view = view_from_objects(q["nodes"], None, {"ml": {}, "other": {}},
                                 resources=[*q["classes"], *q["slices"], *q["allocated"]])
        ours = {}
        for r in dracorpus.RELEASES:
            view.set_release(parse_release(r))
            ours[r] = allocation_on_nodes(q["claims"], view, in_use=True)[drareleases.NODE]
            if ours[r] != real[r][i]:
                wrong.append((case.switch, r, real[r][i], ours[r]))
        # the case lands on its switch: the release that turns it on and the one before
        # answer differently
        on = [r for r in dracorpus.RELEASES if getattr(parse_release(r), case.switch)]
        assert on and on[0] != dracorpus.RELEASES[0], case.switch
        before = dracorpus.RELEASES[dracorpus.RELEASES.index(on[0]) - 1]
        assert real[before][i] != real[on[0]][i], (case.switch, real)
        rows.append(f"{case.switch:<36} " + " ".join(
            f"{r}: {real[r][i]:<3}" for r in dracorpus.RELEASES) + f"  ({case.what})")
    report("Where releases' allocators differ, each judged by its own allocator",
           "\n".join(rows))
    assert not wrong, wrong
    # every switch has its case
    switches = {n for n, v in vars(Release).items() if isinstance(v, property)
                and n != "supported"}
    assert switches == {c.switch for c in cases}
