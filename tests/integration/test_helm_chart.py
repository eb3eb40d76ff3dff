"""The Helm chart, rendered by a real helm (built from the Go module proxy): lint, every
value set validated strictly against the Kubernetes schemas, field-by-field parity with the
kustomize self-signed overlay, the values schema agreeing with the policy loader, and what
each value does to the rendered objects."""

from __future__ import annotations

import base64
import copy
import json
import shutil
import subprocess
import sys

import celpy
import kubernetes_validate
import pytest
import yaml

from harness import helm as helmtool
from harness.kit import ROOT, gpu_pod
from tests.integration.test_manifests import VERSIONS
from webhook.engine import PolicyError, parse_policy

CHART = helmtool.CHART
CRD_KINDS = {"Certificate", "Issuer"}  # cert-manager's; no upstream schema to check against
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()

VALUE_SETS: dict[str, dict] = {
    "default": {},
    "cert-manager": {"certificates": {"mode": "certManager"}},
    "own-secret": {"certificates": {"mode": "secret",
                                    "secret": {"name": "my-tls", "caBundle": CA}}},
    "custom-pools": {"policy": {
        "poolLabel": "example.com/gpu-pool", "defaultPool": "shared",
        "gpuResources": ["nvidia.com/gpu", "example.com/vgpu", "amd.com/gpu*"],
        "pools": [{"name": "shared", "schedulerName": "default-scheduler"},
                  {"name": "sliced", "labelValues": ["sliced", "vgpu"],
                   "schedulerName": "hami-scheduler",
                   "exclusiveResources": ["example.com/vgpu"]}],
        "workloadTemplates": "warn"}},
    "fail-open": {"webhook": {"failurePolicy": {"mutatePods": "Ignore", "validatePods": "Ignore",
                                                "validateWorkloads": "Ignore",
                                                "schedulerState": "Ignore"}}},
    "agent-off": {"agent": {"enabled": False}},
    "plugin-pods-off": {"agent": {"pluginPods": False}},
    "audit-stdout-only": {"audit": {"stdout": True, "file": {"enabled": False}}},
}


def template(tmp_path, values: dict, release: str = "gpupool",
             namespace: str = "gpupool-system", check: bool = True
             ) -> list[dict] | subprocess.CompletedProcess:
    f = tmp_path / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.yaml"
    f.write_text(yaml.safe_dump(values))
    r = helmtool.run("template", release, str(CHART), "--namespace", namespace, "-f", str(f),
                     check=check)
    if not check:
        return r
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    """The one object of ``kind`` (named ``name``); unnamed, a Deployment is the webhook's
    (the scan has its own) and a ConfigMap the policy's (the dashboard has its own)."""
    found = [o for o in objs if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    if name is None and kind == "Deployment":
        found = [o for o in found if o["metadata"]["name"].endswith("-webhook")]
    if name is None and kind == "ConfigMap":  # the policy's, not the dashboard's
        found = [o for o in found if o["metadata"]["name"].endswith("-policy")]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


@pytest.fixture(scope="module")
def rendered(helm, tmp_path_factory) -> dict[str, list[dict]]:
    tmp = tmp_path_factory.mktemp("chart")
    return {name: template(tmp, values) for name, values in VALUE_SETS.items()}


def test_helm_lint_strict(helm, tmp_path):
    helmtool.run("lint", "--strict", str(CHART))
    for name, values in VALUE_SETS.items():
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(values))
        helmtool.run("lint", "--strict", str(CHART), "-f", str(f))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_value_set_validates_strictly(rendered, name, version):
    kinds = set()
    for obj in rendered[name]:
        kinds.add(obj["kind"])
        assert obj["metadata"].get("namespace") in (None, "gpupool-system"), obj["metadata"]
        if obj["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(obj, version, strict=True)
    assert {"Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
            "ConfigMap", "Service", "ClusterRole"} <= kinds


# ------------------------------------------------------------------ parity with kustomize


@pytest.fixture(scope="module")
def kustomized(kubectl, tmp_path_factory) -> list[dict]:
    tree = tmp_path_factory.mktemp("kustomize") / "manifests"
    shutil.copytree(ROOT / "manifests", tree, ignore=shutil.ignore_patterns("certs", "helm"))
    subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out",
                    str(tree / "overlays/self-signed/certs")], check=True, capture_output=True)
    out = subprocess.run([str(kubectl), "kustomize", str(tree / "overlays/self-signed")],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _key(o: dict) -> tuple[str, str]:
    return o["kind"], o["metadata"]["name"]


def _webhook_view(wh: dict) -> dict:
    out = copy.deepcopy(wh)
    out["clientConfig"].pop("caBundle", None)  # each install has its own CA
    return out


def _pod_spec_view(spec: dict) -> dict:
    out = copy.deepcopy(spec)
    for c in out["containers"]:
        c.pop("image")  # kustomize's images transformer vs the chart's image values
    return out


def test_default_values_render_what_kustomize_renders(rendered, kustomized):
    """Same kinds and names, and field by field the parts that decide behaviour and safety.
    The one kind the chart leaves out is the Namespace: Helm installs into an existing
    namespace (or --create-namespace)."""
    chart = {_key(o): o for o in rendered["default"]}
    kust = {_key(o): o for o in kustomized}
    assert set(kust) - set(chart) == {("Namespace", "gpupool-system")}
    assert set(chart) - set(kust) == set()
    for key, k in kust.items():
        if key[0] == "Namespace":
            continue
        c = chart[key]
        kind = key[0]
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            assert [_webhook_view(w) for w in c["webhooks"]] == \
                [_webhook_view(w) for w in k["webhooks"]], key
        elif kind in ("ClusterRole",) or kind == "Role":
            assert c["rules"] == k["rules"], key
        elif kind in ("ClusterRoleBinding", "RoleBinding"):
            assert (c["roleRef"], c["subjects"]) == (k["roleRef"], k["subjects"]), key
        elif kind in ("Deployment", "DaemonSet"):
            cs, ks = c["spec"], k["spec"]
            assert _pod_spec_view(cs["template"]["spec"]) == \
                _pod_spec_view(ks["template"]["spec"]), key
            assert cs["selector"] == ks["selector"], key
            assert {x: cs.get(x) for x in ("replicas", "strategy", "updateStrategy")} == \
                {x: ks.get(x) for x in ("replicas", "strategy", "updateStrategy")}, key
        elif kind == "ConfigMap" and "gpupool.json" in k["data"]:
            assert json.loads(c["data"]["gpupool.json"]) == \
                json.loads(k["data"]["gpupool.json"]), key
            assert c["metadata"]["labels"]["grafana_dashboard"] == \
                k["metadata"]["labels"]["grafana_dashboard"], key
        elif kind == "ConfigMap":
            assert yaml.safe_load(c["data"]["policy.yaml"]) == \
                yaml.safe_load(k["data"]["policy.yaml"]), key
        elif kind == "Secret":
            assert c["type"] == k["type"] and set(c["data"]) == set(k["data"]), key
        elif kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                      "Service", "PodDisruptionBudget"):
            assert c["spec"] == k["spec"], key
        elif kind == "PriorityClass":
            assert {x: c.get(x) for x in ("value", "preemptionPolicy", "globalDefault")} == \
                {x: k.get(x) for x in ("value", "preemptionPolicy", "globalDefault")}, key
        elif kind == "ServiceAccount":
            assert c.get("automountServiceAccountToken") == \
                k.get("automountServiceAccountToken"), key
        else:
            pytest.fail(f"no parity rule for {kind}: add one")


# ------------------------------------------------------------------ the policy, two checkers

BAD_POLICIES = {
    "unknown top-level field": {"poolLabl": "x"},
    "unknown pool field": {"pools": [{"name": "hami", "labelValues": ["hami"],
                                      "schedulerName": "hami-scheduler", "sheduler": "x"},
                                     {"name": "operator", "schedulerName": "default-scheduler"}]},
    "pool without schedulerName": {"pools": [{"name": "operator"}]},
    "pool name not a DNS label": {"pools": [{"name": "Op_1", "schedulerName": "s"}],
                                  "defaultPool": "Op_1"},
    "bad cdi.require": {"pools": [{"name": "operator", "schedulerName": "default-scheduler",
                                   "cdi": {"require": "sometimes"}}]},
    "bad cdi.kind": {"pools": [{"name": "operator", "schedulerName": "default-scheduler",
                                "cdi": {"kind": "not a kind"}}]},
    "bad workloadTemplates": {"workloadTemplates": "maybe"},
    "gpuResources empty": {"gpuResources": []},
    "gpuResources not a list": {"gpuResources": "nvidia.com/gpu"},
    "audit.mutations not a bool": {"audit": {"mutations": "yes"}},
    "defaultPool not a pool": {"defaultPool": "nowhere"},
    "duplicate pool": {"pools": [{"name": "operator", "schedulerName": "default-scheduler"},
                                 {"name": "operator", "schedulerName": "default-scheduler"}]},
    "label value in two pools": {"pools": [
        {"name": "operator", "schedulerName": "default-scheduler", "labelValues": ["a"]},
        {"name": "hami", "schedulerName": "hami-scheduler", "labelValues": ["a"]}]},
    "non-default pool without labelValues": {"pools": [
        {"name": "operator", "schedulerName": "default-scheduler"},
        {"name": "hami", "schedulerName": "hami-scheduler"}]},
}


def _chart_policy(overrides: dict) -> dict:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]
    values.update(overrides)
    return values


def test_default_policy_values_load(helm):
    parse_policy({"apiVersion": "gpupool.io/v1alpha1", "kind": "PoolPolicy",
                  **_chart_policy({})})


@pytest.mark.parametrize("case", list(BAD_POLICIES))
def test_bad_policy_is_refused_by_both_the_chart_and_the_loader(helm, tmp_path, case):
    policy = _chart_policy(BAD_POLICIES[case])
    with pytest.raises(PolicyError):
        parse_policy({"apiVersion": "gpupool.io/v1alpha1", "kind": "PoolPolicy", **policy})
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump({"policy": policy}))
    r = helmtool.run("template", "gpupool", str(CHART), "-f", str(f), check=False)
    assert r.returncode != 0, f"helm accepted a policy the loader refuses: {case}"
    assert "policy" in r.stderr


def test_typo_in_values_fails_at_install(helm, tmp_path):
    for bad in ({"webhok": {}}, {"webhook": {"replicas": "three"}},
                {"certificates": {"mode": "selfsigned"}},
                {"webhook": {"failurePolicy": {"mutatePods": "fail"}}}):
        f = tmp_path / "bad.yaml"
        f.write_text(yaml.safe_dump(bad))
        r = helmtool.run("template", "gpupool", str(CHART), "-f", str(f), check=False)
        assert r.returncode != 0 and "values don't meet the specifications" in r.stderr, bad


# ------------------------------------------------------------------ what values do


def test_mutating_configuration_sorts_before_hami_whatever_the_release(helm, tmp_path):
    for release in ("gpupool", "zz-platform", "my-gpupool"):
        objs = template(tmp_path, {}, release=release)
        name = one(objs, "MutatingWebhookConfiguration")["metadata"]["name"]
        assert name == "gpupool-mutating" and name < "hami-webhook"


def test_release_name_and_namespace_flow_into_names_and_identities(helm, tmp_path):
    objs = template(tmp_path, {}, release="platform", namespace="gpu-admission")
    dep = one(objs, "Deployment", "platform-gpupool-webhook")
    assert dep["metadata"]["namespace"] == "gpu-admission"
    vap = one(objs, "ValidatingAdmissionPolicy", "platform-gpupool-agent-inventory-only")
    assert "system:serviceaccount:gpu-admission:platform-gpupool-agent" in \
        vap["spec"]["matchConditions"][0]["expression"]
    # the webhook's pod creates are its routing canary's dry runs, whatever its name
    dry = one(objs, "ValidatingAdmissionPolicy", "platform-gpupool-webhook-dry-run-only")
    assert "system:serviceaccount:gpu-admission:platform-gpupool-webhook" in \
        dry["spec"]["matchConditions"][0]["expression"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--routing-canary-namespace=gpu-admission" in args
    for wh in one(objs, "ValidatingWebhookConfiguration")["webhooks"]:
        assert "gpu-admission" in wh["namespaceSelector"]["matchExpressions"][0]["values"]
        assert wh["clientConfig"]["service"]["namespace"] == "gpu-admission"


def test_match_conditions_follow_policy_gpu_resources(rendered):
    """The CEL selects pods by the policy's own resource names, patterns included."""
    mut = one(rendered["custom-pools"], "MutatingWebhookConfiguration")
    env = celpy.Environment()
    prog = env.program(env.compile(mut["webhooks"][0]["matchConditions"][0]["expression"]))

    def selects(limits: dict) -> bool:
        pod = gpu_pod(limits=limits)
        return bool(prog.evaluate({"object": celpy.json_to_cel(pod)}))

    assert selects({"example.com/vgpu": 1}) and selects({"amd.com/gpu-mi300": 1})
    assert selects({"nvidia.com/gpu": 1})
    assert not selects({"nvidia.com/gpumem": 1000}) and not selects({"cpu": 1})
    claims = gpu_pod(limits={"cpu": 1})
    claims["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    assert bool(prog.evaluate({"object": celpy.json_to_cel(claims)}))


def test_cert_modes(rendered):
    gen = rendered["default"]
    secret = one(gen, "Secret", "gpupool-webhook-tls")
    ca = secret["data"]["caBundle"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for wh in one(gen, kind)["webhooks"]:
            assert wh["clientConfig"]["caBundle"] == ca
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpupool-webhook.gpupool-system.svc" in sans.get_values_for_type(x509.DNSName)

    cm = rendered["cert-manager"]
    assert not [o for o in cm if o["kind"] == "Secret"]
    assert one(cm, "Certificate", "gpupool-webhook")["spec"]["secretName"] == \
        "gpupool-webhook-tls"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        cfg = one(cm, kind)
        assert cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            "gpupool-system/gpupool-webhook"
        assert all("caBundle" not in wh["clientConfig"] for wh in cfg["webhooks"])

    own = rendered["own-secret"]
    assert not [o for o in own if o["kind"] in ("Secret", "Certificate")]
    assert one(own, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"][
        "secretName"] == "my-tls"
    assert all(wh["clientConfig"]["caBundle"] == CA
               for wh in one(own, "MutatingWebhookConfiguration")["webhooks"])


def test_secret_mode_without_ca_bundle_fails_with_the_reason(helm, tmp_path):
    r = template(tmp_path, {"certificates": {"mode": "secret", "secret": {"name": "x"}}},
                 check=False)
    assert r.returncode != 0 and "certificates.secret.caBundle" in r.stderr


def test_failure_policies_and_url(rendered, helm, tmp_path):
    for wh in one(rendered["fail-open"], "ValidatingWebhookConfiguration")["webhooks"]:
        assert wh["failurePolicy"] == "Ignore"
    # the grant check on every other pod fails open by default (docs/security.md), the
    # narrow check of HAMi's scheduler-owned annotations closed
    by_name = {wh["name"]: wh for kind in ("MutatingWebhookConfiguration",
                                           "ValidatingWebhookConfiguration")
               for wh in one(rendered["default"], kind)["webhooks"]}
    assert by_name["access.gpupool.io"]["failurePolicy"] == "Ignore"
    assert by_name["scheduler-state.gpupool.io"]["failurePolicy"] == "Fail"
    assert one(rendered["fail-open"], "MutatingWebhookConfiguration")["webhooks"][0][
        "failurePolicy"] == "Ignore"
    objs = template(tmp_path, {"webhook": {"url": "https://127.0.0.1:9443/"}})
    for kind, path in (("MutatingWebhookConfiguration", "/mutate"),
                       ("ValidatingWebhookConfiguration", "/validate")):
        for wh in one(objs, kind)["webhooks"]:
            assert wh["clientConfig"]["url"] == f"https://127.0.0.1:9443{path}"
            assert "service" not in wh["clientConfig"]


def test_agent_off_renders_no_agent_objects(rendered):
    names = {o["metadata"]["name"] for o in rendered["agent-off"]}
    assert not {n for n in names if "agent" in n}
    assert not [o for o in rendered["agent-off"] if o["kind"] == "DaemonSet"
                or (o["kind"] == "ValidatingAdmissionPolicy" and "agent" in o["metadata"]["name"])]


def test_plugin_pods_off_drops_the_flag_and_the_read_access(rendered):
    """agent.pluginPods: false runs the agent with --no-plugin-pods, and its ClusterRole then
    reads no pods and no ConfigMaps; on (the default), both are there."""
    for name, on in (("default", True), ("plugin-pods-off", False)):
        ds = one(rendered[name], "DaemonSet", "gpupool-agent")
        args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        assert ("--no-plugin-pods" in args) is not on, args
        role = one(rendered[name], "ClusterRole", "gpupool-agent")
        resources = {r for rule in role["rules"] for r in rule["resources"]}
        assert ({"pods", "configmaps"} <= resources) is on, role


def test_audit_and_policy_values_reach_the_server(rendered):
    args = one(rendered["audit-stdout-only"], "Deployment")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert not [a for a in args if a.startswith("--audit-file")]
    volumes = one(rendered["audit-stdout-only"], "Deployment")["spec"]["template"]["spec"][
        "volumes"]
    assert "audit" not in {v["name"] for v in volumes}
    policy = yaml.safe_load(one(rendered["custom-pools"], "ConfigMap")["data"]["policy.yaml"])
    loaded = parse_policy(policy)
    assert loaded.workload_templates == "warn" and loaded.default_pool == "shared"
    assert loaded.pool_label == "example.com/gpu-pool"


def test_policy_change_does_not_touch_the_pod_template(helm, tmp_path):
    """`helm upgrade` with a new policy must not roll the replicas: the ConfigMap reloads in
    place, so nothing in the Deployment may depend on the policy's content."""
    a = one(template(tmp_path, {}), "Deployment")
    b = one(template(tmp_path, {"policy": {**_chart_policy({}), "workloadTemplates": "warn"}}),
            "Deployment")
    assert a["spec"]["template"] == b["spec"]["template"]


def test_notes_tell_how_to_check_the_install(helm):
    r = helmtool.run("install", "gpupool", str(CHART), "--dry-run=client", "--namespace",
                     "gpupool-system")
    assert "gpupool doctor" in r.stdout and "--dry-run=server" in r.stdout
