"""How a device plugin hands out GPUs, learned from its pod, judged by the plugin's own code.

Every pod ``tests.plugincases`` draws (the standalone chart's variable and config file picked by
config-manager, flags, the GPU Operator's own DaemonSet started through its entrypoint
script at each release teams run, HAMi's chart, and the corners a plugin
refuses) is read by gpupool (``webhook.api.pluginconfig``) and by ``plugin-judge``
(tests/pluginjudge: NVIDIA's device plugin's ``NewConfig`` and CLI library, v0.19.3), given the
same arguments, environment and config file text. Where gpupool names strategies they must be
the plugin's; where the plugin stops at start-up gpupool must not name any.
"""

from __future__ import annotations

import random
from collections import Counter

from harness.gobuild import built
from tests.plugincases import BUILD, Judge, plugin_pod
from webhook.api.pluginconfig import settle_pods


def test_gpupool_reads_the_strategy_the_plugin_settles_on():
    rng = random.Random(34)
    cases = [plugin_pod(rng, f"node-{i}") for i in range(400)]
    answers = Judge(built(BUILD, "plugin-judge")).ask([c.request for c in cases])
    seen: Counter[str] = Counter()
    for case, real in zip(cases, answers, strict=True):
        (ours,) = settle_pods([case.pod], case.labels,
                              lambda ns, name, c=case: c.config_maps.get((ns, name)))
        if "error" in real:
            assert ours.strategies is None, (case.what, case.pod, real, ours)
            assert "never starts" in ours.unknown, (case.what, ours)
            seen["refused"] += 1
        else:
            assert ours.strategies == tuple(real["strategies"]), (case.what, case.pod, real)
            assert ours.mig_strategy == real["migStrategy"], (case.what, case.pod, real)
            seen[f"MIG {ours.mig_strategy}"] += 1
            seen[ours.source.split(" ")[0]] += 1
            if case.what.startswith("plugin operator"):
                seen["operator"] += 1
                assert ours.deployed_by == "the GPU Operator", ours
    print(dict(seen))
    # every way a plugin is told, and the plugin's refusals, are exercised
    assert {"flag", "variable", "config", "the", "refused", "MIG none", "MIG single",
            "MIG mixed", "operator"} <= set(seen), seen


def test_unreadable_inputs_are_doubt_with_the_reason():
    """A strategy from ``valueFrom``, a Secret, a ConfigMap gpupool cannot read, a file in the
    image: unknown, never a guess, and the reason names the input."""
    rng = random.Random(1)
    case = plugin_pod(rng, "n", corners=False)
    c = case.pod["spec"]["containers"][0]
    c["env"] = [{"name": "DEVICE_LIST_STRATEGY",
                 "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]
    (s,) = settle_pods([case.pod], {}, lambda ns, name: None)
    assert s.strategies is None and "valueFrom" in s.unknown
    c["env"] = []
    c["envFrom"] = [{"secretRef": {"name": "plugin-env"}}]
    (s,) = settle_pods([case.pod], {}, lambda ns, name: None)
    assert s.strategies is None and "Secret" in s.unknown
    c.pop("envFrom")
    c["env"] = [{"name": "CONFIG_FILE", "value": "/etc/plugin/config.yaml"}]
    c.pop("command", None), c.pop("args", None)
    (s,) = settle_pods([case.pod], {}, lambda ns, name: None)
    assert s.strategies is None and "in the image" in s.unknown
    c["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/plugin"}]
    case.pod["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "dp"}}]
    (s,) = settle_pods([case.pod], {}, lambda ns, name: None)
    assert s.strategies is None and "ConfigMap nvidia-device-plugin/dp" in s.unknown
    # ...and a strategy flag set beside it is what the plugin runs with, if it starts
    c["args"] = ["--device-list-strategy=cdi-cri"]
    c["command"] = ["nvidia-device-plugin"]
    (s,) = settle_pods([case.pod], {}, lambda ns, name: None)
    assert s.strategies == ("cdi-cri",)
