"""``gpupool policy compile``: what it writes and what of the cluster it reads. Whether the
API server routes as the webhook does is judged by a real kube-apiserver
(``tests/e2e/test_native_routing.py``); here, what a user sees of the command."""

from __future__ import annotations

import json

import yaml

from webhook.cli.main import main
from webhook.engine import RoutingFacts, claimable_pools, compile_policy, webhook_condition
from webhook.files.policyfile import default_policy


def test_compile_writes_the_policy_and_its_binding_for_kubectl_apply(capsys):
    assert main(["policy", "compile", "--no-cluster"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["MutatingAdmissionPolicy",
                                         "MutatingAdmissionPolicyBinding"]
    assert all(d["apiVersion"] == "admissionregistration.k8s.io/v1" for d in docs)
    assert docs[1]["spec"]["policyName"] == docs[0]["metadata"]["name"]
    spec = docs[0]["spec"]
    # The binding, not the policy, says which namespaces: a canary binding gives the policy
    # gpupool's own canary pods (webhook.engine.native.canary).
    assert "namespaceSelector" not in spec["matchConstraints"]
    match = docs[1]["spec"]["matchResources"]
    assert match["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system", "kube-node-lease", "gpupool-system"]
    # Both pools' schedulers are what the mutation can write.
    text = spec["mutations"][0]["jsonPatch"]["expression"]
    assert '"hami-scheduler"' in text and '"default-scheduler"' in text


def test_a_cluster_that_steers_node_by_node_leaves_those_pools_to_the_webhook(capsys):
    """A GPU Operator ClusterPolicy declares the plugin's way: pools that detect it are
    steered node by node, which the API server cannot do; the note says so."""
    policy = default_policy()
    facts = RoutingFacts(by_name=frozenset({"operator"}))
    assert claimable_pools(policy, facts) == ("hami",)
    text = compile_policy(policy, facts)[0]["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert '"default-scheduler"' not in text
    assert '"operator"' not in webhook_condition(policy, facts)["expression"]
    none = RoutingFacts(by_name=frozenset({"operator", "hami"}))
    assert webhook_condition(policy, none)["expression"] == "true"


def test_the_installed_objects_record_the_digest_doctor_compares(capsys):
    a = compile_policy(default_policy(), RoutingFacts())
    b = compile_policy(default_policy(), RoutingFacts(dra_extended=frozenset({"x.com/gpu"})))
    key = "gpupool.io/routing-digest"
    assert a[0]["metadata"]["annotations"][key] != b[0]["metadata"]["annotations"][key]
    assert json.loads(b[0]["metadata"]["annotations"]["gpupool.io/routing-facts"])[
        "draExtended"] == ["x.com/gpu"]


def test_webhook_condition_prints_one_match_condition(capsys):
    assert main(["policy", "compile", "--no-cluster", "--webhook-condition"]) == 0
    cond = json.loads(capsys.readouterr().out)
    assert cond["name"] == "not-routed-by-policy" and cond["expression"].startswith("!(")


def test_two_cluster_sources_are_a_usage_error(capsys):
    assert main(["policy", "compile", "--cluster", "x.yaml", "--context", "c"]) == 2
    err = capsys.readouterr().err
    assert "--cluster and --kubeconfig/--context" in err and len(err.splitlines()) == 1


def test_gpu_resource_patterns_match_in_cel_as_fnmatch_matches_them():
    """The policy's ``gpuResources`` patterns are fnmatch's (``Policy.is_gpu_resource``);
    the compiled policy matches them with RE2 regular expressions. fnmatch judges."""
    import fnmatch
    import re

    from webhook.engine import glob_regex

    cases = {"nvidia.com/mig-*": ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-", "nvidia.com/gpu"],
             "vendor.io/gpu-[ab]?": ["vendor.io/gpu-a1", "vendor.io/gpu-c1", "vendor.io/gpu-b"],
             "x.io/[!0-9]*": ["x.io/a", "x.io/1", "x.io/"], "a.io/b[": ["a.io/b[", "a.io/b"]}
    for pattern, names in cases.items():
        for name in names:
            got = bool(re.match(glob_regex(pattern), name))
            assert got == fnmatch.fnmatchcase(name, pattern), (pattern, name)
