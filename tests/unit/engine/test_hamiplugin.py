"""HAMi's device plugin as its DaemonSet configures it (``webhook.engine.stacks.hamiplugin``), and
the node ``delivery: detect`` misreads without it: a plugin set to a CDI strategy that has
not written its spec looks, on disk, like one in envvar."""

from __future__ import annotations

import copy

import pytest
import yaml

from harness.kit import UPSTREAM, gpu_pod
from tests.unit.engine.test_steering import decide, hami_pod, terms
from webhook.api.delivery import CDI_DEVICES, VISIBLE_DEVICES
from webhook.engine.core.decision import Reason
from webhook.engine.stacks.hamiplugin import HamiPlugin, hami_plugin_from, way_on


def agent_node(*args, **kwargs):
    """A node whose agent did not look at the device-plugin pods (unless told what it
    learned): how the plugin hands GPUs comes from the cluster's objects, or the disk."""
    from tests.unit.engine import test_steering

    return test_steering.agent_node(*args, **{"plugins": None, **kwargs})

CHART_VALUES = yaml.safe_load((UPSTREAM / "hami-chart/values.yaml").read_text())


def daemonset(strategy: str | None = None, *, args: list[str] | None = None,
              selector: dict | None = None, component: str = "hami-device-plugin") -> dict:
    """HAMi's device-plugin DaemonSet as its chart renders it
    (templates/device-plugin/daemonsetnvidia.yaml: the component label, the
    device-plugin container's command and env, the nodeSelector from
    devicePlugin.nvidiaNodeSelector), for one deviceListStrategy value."""
    plugin = CHART_VALUES["devicePlugin"]
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"}]
    if strategy is not False:
        env.append({"name": "DEVICE_LIST_STRATEGY",
                    "value": strategy or plugin["deviceListStrategy"]})
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "hami-device-plugin", "namespace": "kube-system",
                         "labels": {"app.kubernetes.io/component": component}},
            "spec": {"template": {"spec": {
                "containers": [{"name": "device-plugin",
                                "command": ["nvidia-device-plugin",
                                            "--config-file=/device-config.yaml",
                                            *(args or [])],
                                "env": env}],
                "nodeSelector": selector if selector is not None
                else copy.deepcopy(plugin["nvidiaNodeSelector"])}}}}


def test_the_charts_default_is_envvar_on_the_nodes_it_selects():
    assert CHART_VALUES["devicePlugin"]["deviceListStrategy"] == "envvar"
    p = hami_plugin_from(daemonset())
    assert p == HamiPlugin(tuple(CHART_VALUES["devicePlugin"]["nvidiaNodeSelector"].items()),
                       VISIBLE_DEVICES)


@pytest.mark.parametrize("obj, way", [
    (daemonset("cdi-annotations"), CDI_DEVICES),
    (daemonset("cdi-annotations,cdi-cri"), CDI_DEVICES),
    (daemonset("envvar", args=["--device-list-strategy=cdi-cri"]), CDI_DEVICES),  # flag wins
    (daemonset("envvar", args=["--device-list-strategy", "cdi-cri"]), CDI_DEVICES),
    (daemonset(False), VISIBLE_DEVICES),  # unset: the plugin's own default
    (daemonset("volume-mounts"), None),  # not modelled
])
def test_the_way_as_the_daemonset_sets_it(obj, way):
    p = hami_plugin_from(obj)
    assert p is not None and p.way == way


def test_other_daemonsets_and_junk_are_not_hamis_plugin():
    assert hami_plugin_from(daemonset(component="nvidia-device-plugin")) is None
    assert hami_plugin_from({"metadata": {"labels": "junk"}}) is None
    junk = daemonset()
    junk["spec"] = {"template": {"spec": {"containers": "x", "nodeSelector": []}}}
    assert hami_plugin_from(junk) == HamiPlugin((), VISIBLE_DEVICES)


def test_a_node_takes_the_way_of_the_daemonsets_that_run_there_when_they_agree():
    on = HamiPlugin((("gpu", "on"),), CDI_DEVICES)
    assert way_on([on], {"gpu": "on"}) == CDI_DEVICES
    assert way_on([on], {"gpu": "off"}) is None
    assert way_on([on, HamiPlugin((), VISIBLE_DEVICES)], {"gpu": "on"}) is None


def test_a_cdi_strategy_plugin_without_its_spec_is_caught(tmp_path):
    """A HAMi node whose plugin was set to cdi-annotations through HAMi's chart and has not
    written its spec: on disk it looks like envvar, where its per-UUID spec resolves every
    GPU; the DaemonSet says CDI names, which containerd cannot resolve without the spec."""
    node = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    node["metadata"]["labels"]["gpu"] = "on"
    rv, _, _ = decide([node], hami_pod())
    assert rv.final.allowed  # what detect alone concludes
    rv, view, _ = decide([node, daemonset("cdi-annotations")], hami_pod())
    assert view.hami_way({"gpu": "on"}) == CDI_DEVICES
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "k8s.device-plugin.nvidia.com/gpu=GPU-" in rv.final.message
    # its chart's default (envvar) agrees with the disk: admitted, and steered node by node
    pod = hami_pod()
    rv, _, _ = decide([node, daemonset()], pod)
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    assert not any(e["key"].startswith("resolve.gpupool.io/")
                   for t in terms(pod, rv.mutation.patch) for e in t["matchExpressions"])
    # a node the DaemonSet does not select is read from disk
    node["metadata"]["labels"]["gpu"] = "off"
    rv, _, _ = decide([node, daemonset("cdi-annotations")], hami_pod())
    assert rv.final.allowed


def test_the_daemonsets_way_holds_on_every_node_it_schedules_to_whatever_the_pool(tmp_path):
    """HAMi's DaemonSet selects nodes by its own nodeSelector, not by gpupool's pools: where
    it also lands on a node of the operator's pool, HAMi's plugin hands that node's GPUs,
    and a CDI strategy without its spec fails a plain GPU pod there too."""
    node = agent_node(tmp_path, "op-1", None, "operator-management", per_uuid=True,
                      register=False)
    node["metadata"]["labels"]["gpu"] = "on"  # HAMi's chart's selector
    pod = gpu_pod("g", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([node], pod)
    assert rv.final.allowed and rv.final.pool == "operator"  # what the disk alone says
    rv, _, _ = decide([node, daemonset("cdi-annotations")], pod)
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "k8s.device-plugin.nvidia.com/gpu=GPU-" in rv.final.message
    node["metadata"]["labels"]["gpu"] = "off"  # not scheduled there: the disk decides
    rv, _, _ = decide([node, daemonset("cdi-annotations")], pod)
    assert rv.final.allowed


# ------------------------------------------------------------------ a way only inferred


def _stale(node: dict, keep: int = 1) -> dict:
    """The node's device-plugin spec, as its agent published it, left over from an earlier
    setup: it names only the first ``keep`` GPUs."""
    import json

    ann = node["metadata"]["annotations"]
    inv = json.loads(ann["gpupool.io/cdi-inventory"])
    kind = "k8s.device-plugin.nvidia.com/gpu"
    inv["kinds"][kind] = sorted(inv["kinds"][kind])[:keep]
    ann["gpupool.io/cdi-inventory"] = json.dumps(inv)
    # and the steering labels the agent publishes from it
    from webhook.api.delivery import steering_labels
    from webhook.api.inventory import parse_inventory

    parsed = parse_inventory(ann["gpupool.io/cdi-inventory"])
    node["metadata"]["labels"].update(steering_labels(parsed, parsed.gpus))
    return node


def test_an_inferred_way_that_alone_fails_is_doubt_and_steers_off(tmp_path):
    """Issue 34, item 7: nothing says how the plugin hands GPUs; a spec left on disk makes
    detect infer CDI names, which fail (the spec is stale), while UUIDs would resolve (the
    runtime's auto mode): a warning naming the node and the spec, and steering keeps the pod
    off the node, not a denial."""
    stale = _stale(agent_node(tmp_path / "a", "op-1", None, "device-plugin", mode="auto"))
    good = agent_node(tmp_path / "b", "op-2", None, "device-plugin", mode="auto")
    pod = gpu_pod("p", limits={"nvidia.com/gpu": 1})
    rv, _, _ = decide([stale], pod)
    assert rv.final.allowed, rv.final.message  # was CDIDeviceMissing
    assert any(f.node == "op-1" and "only inferred" in f.note
               and "k8s.device-plugin.nvidia.com/gpu spec" in f.note for f in rv.final.nodes)
    assert rv.final.warnings
    # beside a node that runs it: steered off op-1 (its agent's label says the detected way
    # fails there), onto op-2, without a word
    rv, _, _ = decide([stale, good], pod)
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    assert stale["metadata"]["labels"]["resolve.gpupool.io/detected"] == "false"
    [term] = terms(pod, rv.mutation.patch)
    assert {"key": "resolve.gpupool.io/detected", "operator": "NotIn", "values": ["false"]} \
        in term["matchExpressions"]
    # the pool's way pinned in the policy: no inference, the stale spec is a missing device
    rv, _, _ = decide([stale], pod, policy_text=_pinned("cdiDevices"))
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING


def _pinned(way: str) -> str:
    from webhook.files.policyfile import default_policy_text

    doc = yaml.safe_load(default_policy_text())
    for p in doc["pools"]:
        if p["name"] == "operator":
            p.setdefault("cdi", {})["delivery"] = way
    return yaml.safe_dump(doc)


def test_hami_gpus_beside_a_device_plugin_spec_are_doubt_unless_its_daemonset_says(tmp_path):
    """HAMi registered the GPUs, a device-plugin spec is on disk, the runtime is in CDI mode:
    handed as CDI names they resolve, as HAMi's default UUIDs they do not (the real runtime
    refuses them: tests/integration/test_scan_restart.py). Nothing says which: doubt. HAMi's
    DaemonSet saying cdi-annotations decides it."""
    node = agent_node(tmp_path, "hami-1", "hami", "device-plugin")
    rv, _, _ = decide([node], hami_pod())
    assert rv.final.allowed and rv.final.warnings
    assert any("only inferred" in f.note for f in rv.final.nodes)
    rv, _, _ = decide([node, daemonset("cdi-annotations", selector={"gpupool.io/pool": "hami"})],
                      hami_pod())
    assert rv.final.allowed and not rv.final.warnings
    rv, _, _ = decide([node, daemonset("envvar", selector={"gpupool.io/pool": "hami"})],
                      hami_pod())
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING


# ------------------------------------------------------------------ a node stored again


def test_a_node_stored_again_is_judged_anew_exactly_when_what_the_checks_read_changes(
        tmp_path, monkeypatch):
    """The folds keep the node checks' finding for a node stored again when nothing they
    read changed (a team's label, the agent's steering labels), and ask again when it did:
    here the label HAMi's DaemonSet selects by, which decides how that node's plugin hands
    GPUs. After every change the warm view decides as a fresh one does."""
    from webhook.engine.admission import admit
    from webhook.engine.checks import nodechecks
    from webhook.engine.view.nodes import NodeInfo

    node = agent_node(tmp_path, "hami-1", "hami", "operator-management", per_uuid=True)
    node["metadata"]["labels"].update(gpu="on", team="a")
    plugin = daemonset("cdi-annotations")
    pods = [hami_pod(), gpu_pod("g", limits={"nvidia.com/gpu": 1}, nodeSelector={"gpu": "on"}),
            hami_pod(nodeSelector={"team": "a"})]
    warm, view, policy = decide([node, plugin], pods[0])
    assert not warm.final.allowed and warm.final.reason == Reason.CDI_DEVICE_MISSING
    for p in pods[1:]:
        admit.review(admit.Subject(kind="Pod", object=p, namespace="default"), view, policy)
    asked: list[str] = []
    spec: dict = {}
    real_judge = nodechecks.judge
    monkeypatch.setattr(nodechecks, "judge",
                        lambda n, *a: asked.append(n.name) or real_judge(n, *a))

    def store(change) -> list:
        change(node["metadata"]["labels"])
        node["spec"] = spec
        view.upsert_node(NodeInfo.from_object(copy.deepcopy(node)))
        out = [admit.review_pod(p, "default", view, policy) for p in pods]
        seen = len(asked)  # (the fresh views below judge every node, as they must)
        for p, got in zip(pods, out, strict=True):
            fresh = decide([node, plugin], p)[0].final
            assert got.to_json() == fresh.to_json(), (got.to_json(), fresh.to_json())
        del asked[seen:]
        return out

    decided = store(lambda labels: labels.update(owner="x"))
    assert asked == [], "a label no check reads made the folds judge the node again"
    assert not decided[0].allowed
    decided = store(lambda labels: labels.update(gpu="off"))  # the DaemonSet leaves it
    assert "hami-1" in asked
    assert decided[0].allowed  # the disk decides again: per-UUID specs resolve
    asked.clear()
    decided = store(lambda labels: labels.update(gpu="on"))
    # (a fold is judged when it is read: one the allowed pods did not read while the label
    # was off is asked of the node against what it last judged, "on", and holds)
    assert not decided[0].allowed
    # What only reach reads: a taint the pods do not tolerate, then a label a pod's
    # nodeSelector reads. The checks' finding stands; each decision follows, as fresh.
    asked.clear()
    spec = {"taints": [{"key": "maintenance", "value": "x", "effect": "NoSchedule"}]}
    decided = store(lambda labels: None)
    assert asked == [] and decided[2].reason != Reason.CDI_DEVICE_MISSING  # none reachable
    spec = {}  # back among the pods' candidates: judged again, as a node new to them
    decided = store(lambda labels: None)
    assert decided[2].reason == Reason.CDI_DEVICE_MISSING
    asked.clear()
    decided = store(lambda labels: labels.update(team="b"))  # what the selector reads
    assert asked == [] and decided[2].reason != Reason.CDI_DEVICE_MISSING
    decided = store(lambda labels: labels.update(rack="r1"))  # what nothing reads
    assert asked == [] and decided[0].reason == Reason.CDI_DEVICE_MISSING
    decided = store(lambda labels: labels.update({"gpupool.io/pool": "operator"}))
    assert decided[0].reason != Reason.CDI_DEVICE_MISSING  # HAMi's pool has no node left
