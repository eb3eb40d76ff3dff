"""DRA pods decided as Kubernetes' allocator decides them, judged by the allocator itself.

``dra-judge`` (tests/drajudge) runs ``k8s.io/dynamic-resource-allocation/structured``
v0.35.4, the code kube-scheduler's DRA plugin runs node by node, on the seeded corpus of
``tests.dracorpus``: NVIDIA's driver's whole GPUs and partitionable MIG placements, HAMi-DRA's
shared devices with consumable capacity, taints, held devices, templates and claims,
``firstAvailable``, ``All``, constraints, claims allocated already that pods share, extended
resources a DeviceClass serves (KEP-5004). Node by node gpupool's allocator must give the
allocator's answer; pod by pod, nothing is admitted silently that no node of its pool can
ever allocate, nothing is denied that some node can, nothing is routed to a pool that cannot
serve it while another can, and a pod that only waits for devices in use is told so.
"""

from __future__ import annotations

import os
import random
from collections import Counter

from tests import dracorpus
from tests.conftest import report
from webhook.engine import allocation_on_nodes, load_policy_text, view_from_objects

SEED = int(os.environ.get("GPUPOOL_DRA_CORPUS_SEED", "20261205"))
PODS = int(os.environ.get("GPUPOOL_DRA_CORPUS_PODS", "1000"))


def test_node_by_node_gpupool_allocates_as_kubernetes_does():
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
        nodes = [n for n in c.nodes if c.pools[n["metadata"]["name"]] != "operator"]
        for held in (True, False):
            questions.append({"classes": c.classes, "slices": c.slices, "claims": claims,
                              "nodes": nodes, "allocated": c.held if held else []})
            ours.append(allocation_on_nodes(claims, view, in_use=held))
    said: Counter[tuple[str, str]] = Counter()
    wrong = []
    for real, mine in zip(dracorpus.Judge().ask(questions), ours, strict=True):
        for node, answer in real.items():
            k8s = answer.split(":")[0]
            got = mine[node].split(":")[0]
            said[(k8s, got)] += 1
            if k8s != "panic" and got != "doubt" and k8s != got:
                wrong.append((node, answer, mine[node]))
    table = "\n".join(f"Kubernetes {k:<6} gpupool {g:<6} {n}" for (k, g), n in
                      sorted(said.items()))
    report(f"DRA allocation, node by node (seed {SEED}, {PODS} pods, held devices in use "
           "and free)", table)
    assert not wrong, wrong[:5]
    total = sum(said.values())
    # doubt only where the search ran out of steps; every answer kind on both sides
    assert sum(n for (_, g), n in said.items() if g == "doubt") < total // 1000, table
    for kind in ("ok", "no", "error"):
        assert said[(kind, kind)] > total // 50, table


def test_pod_by_pod_nothing_silent_nothing_denied_that_could_run():
    for text, name in ((dracorpus.POLICY, "onNoCandidates: warn"),
                       (dracorpus.POLICY + "onNoCandidates: deny\n", "onNoCandidates: deny")):
        judged = dracorpus.run(SEED, PODS, policy_text=text)
        table = dracorpus.table(judged)
        report(f"DRA corpus, {name} (seed {SEED}, {PODS} pods, the real allocator)", table)
        wrong = [j for j in judged if j.outcome in dracorpus.WRONG]
        assert not wrong, table + "\n\n" + "\n".join(dracorpus.explain(j) for j in wrong[:3])
        counted = Counter(j.outcome for j in judged)
        # not vacuous: pods that run, that wait, that never can, both told and turned away
        for outcome in ("fine", "waits for devices in use", "never allocatable, denied"):
            assert counted[outcome] > PODS // 100, table
        assert counted[dracorpus.PANICS] < PODS // 10, table
        # ...among them pods sharing a claim allocated already, and pods asking for an
        # extended resource a DeviceClass serves (by name, and implicitly)
        kinds = Counter(dracorpus.kind_of(j.pod) for j in judged if j.outcome == "fine")
        assert all(kinds[k] for k in ("shared claim", dracorpus.EXTENDED,
                                      dracorpus.IMPLICIT)), kinds
