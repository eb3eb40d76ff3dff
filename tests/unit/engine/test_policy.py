"""Policy parsing: the default loads, bad documents fail naming the field."""

from __future__ import annotations

import pytest
import yaml

from webhook.engine.core.policy import PolicyError, load_policy_text
from webhook.files.policyfile import default_policy_text, load_policy_file

BASE = yaml.safe_load(default_policy_text())


def _bad(mutate) -> str:
    doc = yaml.safe_load(default_policy_text())
    mutate(doc)
    with pytest.raises(PolicyError) as exc:
        load_policy_text(yaml.safe_dump(doc), "p.yaml")
    return str(exc.value)


def test_default_policy_is_the_documented_one(policy):
    assert policy.pool_label == "gpupool.io/pool" and policy.default_pool == "operator"
    assert policy.by_name["hami"].scheduler_name == "hami-scheduler"
    assert policy.by_name["operator"].scheduler_name == "default-scheduler"
    assert policy.is_gpu_resource("nvidia.com/gpu")
    assert policy.is_gpu_resource("nvidia.com/mig-1g.10gb")
    assert not policy.is_gpu_resource("cpu")


def test_issue_example_policy_loads_verbatim():
    text = """
apiVersion: gpupool.io/v1alpha1
kind: PoolPolicy
poolLabel: gpupool.io/pool          # node label whose value names the node's pool
defaultPool: operator               # pool of GPU nodes whose label is absent or names no pool
gpuResources: [nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpumem-percentage,
               nvidia.com/gpucores, nvidia.com/priority]
pools:
  - name: hami
    labelValues: [hami]             # nodes whose poolLabel value is one of these
    schedulerName: hami-scheduler
    exclusiveResources: [nvidia.com/gpumem, nvidia.com/gpumem-percentage,
                         nvidia.com/gpucores, nvidia.com/priority]
  - name: operator
    schedulerName: default-scheduler
"""
    p = load_policy_text(text)
    assert [x.name for x in p.pools] == ["hami", "operator"]


@pytest.mark.parametrize("mutate,expected", [
    (lambda d: d.update(apiVersion="v1"), "apiVersion: 'v1' is not supported"),
    (lambda d: d.update(kind="Policy"), "kind: 'Policy' is not PoolPolicy"),
    (lambda d: d.update(poolLable="x"), "poolLable: unknown field"),
    (lambda d: d["pools"][1].update(schedulerNmae="x"), "pools[1].schedulerNmae: unknown field"),
    (lambda d: d["pools"][0].update(schedulerName=3), "pools[0].schedulerName: expected a string"),
    (lambda d: d["pools"][0].pop("name"), "pools[0].name: required field is missing"),
    (lambda d: d["pools"][0].update(name="Hami!"), "pools[0].name: 'Hami!' is not a DNS label"),
    (lambda d: d.update(defaultPool="nope"), "defaultPool: 'nope' is not a pool"),
    (lambda d: d["pools"][1].update(labelValues=["hami"]), "'hami' already belongs to pool"),
    (lambda d: d["pools"].append(dict(d["pools"][0])), "duplicate pool 'hami'"),
    (lambda d: d.update(gpuResources=[]), "gpuResources: at least one"),
    (lambda d: d.update(gpuResources="nvidia.com/gpu"), "gpuResources: expected a list"),
    (lambda d: d["pools"][0]["cdi"].update(require="some"), "pools[0].cdi.require: 'some' is not"),
    (lambda d: d["pools"][0]["cdi"].update(kind="bad kind"), "pools[0].cdi.kind"),
    (lambda d: d.update(onNoCandidates="maybe"), "onNoCandidates: 'maybe' is not one of"),
    (lambda d: d["pools"][0].update(labelValues=[]), "needs at least one label value"),
    (lambda d: d.update(poolLabel="bad key!"), "poolLabel: 'bad key!' is not a valid label key"),
])
def test_bad_policy_names_the_field(mutate, expected):
    message = _bad(mutate)
    assert message.startswith("p.yaml: ")
    assert expected in message


def test_not_yaml_and_not_a_mapping(tmp_path):
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy_text("a: [", "x")
    with pytest.raises(PolicyError, match="expected a mapping, got a list"):
        load_policy_text("- 1", "x")
    with pytest.raises(PolicyError, match="cannot read policy"):
        load_policy_file(str(tmp_path / "missing.yaml"))
