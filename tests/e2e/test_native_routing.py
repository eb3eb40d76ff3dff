"""Routing in the API server, judged by a real kube-apiserver (Kubernetes 1.36 or newer):
the MutatingAdmissionPolicy ``gpupool policy compile`` writes against gpupool's own webhook.

Every pod of the routing corpus (``tests.routingcorpus``) is sent, as ``kubectl apply
--dry-run=server`` sends it, through four set-ups of one API server:

- nothing of gpupool's: the pod as it would be stored untouched;
- the compiled policy alone: the pods it changes are the pods it *claims*;
- gpupool's mutating webhook alone, served: what the webhook writes;
- the policy, and the webhook with the compiled condition while every replica is down
  (its URL refuses connections): the outage.

The policy and the webhook must agree field by field on every pod the policy claims; those
pods must be created during the outage, untouched by the dead webhook; and every other GPU
pod must still be sent to the webhook (refused in the outage, as ``failurePolicy: Fail``
says): no pod routed by both, none by neither.
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
import yaml
from kubernetes import client, config

from harness import install
from harness.controlplane import ControlPlane, release
from harness.servers import free_port, stop_server
from tests import routingcorpus
from tests.conftest import report

pytestmark = pytest.mark.e2e
SERVED = tuple(int(x) for x in release().split(".")) >= (1, 36)
needs_policy = pytest.mark.skipif(not SERVED,
                                  reason="MutatingAdmissionPolicy is GA from Kubernetes 1.36")

SEED, COUNT = 20261206, 400
MUTATING = "gpupool-mutating"
#: what the API server says when a webhook it must call cannot be reached
UNREACHABLE = "failed calling webhook"
#: what Judge.create answers where the API server gave no answer at all
DROPPED = "no answer, the connection dropped"


def _cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


class Judge:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.api = client.CoreV1Api(config.new_client_from_config(str(cp.kubeconfig)))

    def create(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any] | str:
        """The pod as the API server would store it, or the error it answers."""
        try:
            r = self.api.create_namespaced_pod(namespace, copy.deepcopy(pod), dry_run="All",
                                               _preload_content=False)
        except client.ApiException as exc:
            return json.loads(exc.body).get("message", str(exc)) if exc.body else str(exc)
        except urllib3.exceptions.HTTPError as exc:
            # The API server dropped the connection (a panic in admission does that,
            # whatever failurePolicy says).
            return f"{DROPPED}: {exc}"
        stored = json.loads(r.data)
        meta = stored["metadata"]
        for generated in ("uid", "creationTimestamp", "resourceVersion", "managedFields"):
            meta.pop(generated, None)
        stored.pop("status", None)
        return stored

    def all(self, corpus: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any] | str]:
        return [self.create(ns, p) for ns, p in corpus]


def _is_gpu_pod(pod: dict[str, Any]) -> bool:
    """The mutating webhook's own matchCondition (manifests/base/webhooks.yaml), read here
    as a user would: a GPU resource named, a DRA claim, or a DeviceClass's resource."""
    spec = pod["spec"]
    names = {k for c in spec["containers"] + spec.get("initContainers", [])
             for part in ("limits", "requests")
             for k in (c.get("resources", {}).get(part) or {})}
    return bool(spec.get("resourceClaims")) or any(
        k.startswith("nvidia.com/") for k in names)


Judged = tuple[list[tuple[str, dict[str, Any]]], list[Any], list[Any], list[Any], list[Any]]


def operator_cluster(cp: ControlPlane, tmp: Path) -> list[dict[str, Any]]:
    """HAMi beside the GPU Operator, as ``kubectl get nodes,clusterpolicies,daemonsets``
    shows such a cluster: the operator's ClusterPolicy (CDI on), HAMi's device-plugin
    DaemonSet as its chart labels it, and nodes whose agents learned each plugin's way from
    its pod (HAMi's on ``gpu=on`` nodes, the operator's where it deploys its plugin)."""
    from harness.kit import UPSTREAM
    from tests.unit.engine.test_steering import agent_node

    cp.create_crd(UPSTREAM / "crds/nvidia.com_clusterpolicies.yaml")
    hami = agent_node(tmp / "hami-1", "hami-1", "hami", "operator-management", per_uuid=True)
    # (the operator's deploy label, as it sets it on the nodes it runs its plugin on)
    deploy = "nvidia.com/gpu.deploy.device-plugin"
    hami["metadata"]["labels"].update({"gpu": "on", deploy: "false"})
    op = agent_node(tmp / "op-1", "op-1", None, "device-plugin", register=False)
    op["metadata"]["labels"][deploy] = "true"
    labels = {"app.kubernetes.io/component": "hami-device-plugin"}
    # the operator's own sample, CDI on (the real CRD requires its every section)
    policy = yaml.safe_load((UPSTREAM / "runtime-config/gpu-operator-sample-clusterpolicy.yaml")
                            .read_text())
    policy["spec"]["cdi"] = {"enabled": True}
    return [
        policy,
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": "hami-device-plugin", "namespace": "kube-system",
                      "labels": labels},
         "spec": {"selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"nodeSelector": {"gpu": "on"}, "containers": [{
                 "name": "device-plugin", "image": "projecthami/hami:v2.10.0",
                 "env": [{"name": "DEVICE_LIST_STRATEGY", "value": "envvar"}]}]}}}},
        hami, op]


@contextlib.contextmanager
def judging(bin_dir: Path, tmp: Path, operator: bool = False) -> Iterator[Judged]:
    """The routing corpus through the four set-ups above, on the API server in ``bin_dir``:
    the corpus, and the pods as stored (or the errors answered) untouched, by the policy, by
    the webhook and in the outage. ``operator``: in a cluster of HAMi beside the GPU
    Operator (``operator_cluster``)."""
    cp = ControlPlane(tmp / "cp", bin_dir).start()
    server = None
    try:
        objs = install.prepare(cp, tmp)
        for ns, labels in routingcorpus.NAMESPACES.items():
            r = install.apply(cp, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": ns, "labels": labels}})
            assert r.returncode == 0, r.stderr
        nodes = operator_cluster(cp, tmp) if operator else [
            {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "labels": {**labels, "nvidia.com/gpu.present": "true"}}}
            for name, labels in (("hami-1", {"gpupool.io/pool": "hami"}), ("op-1", {}))]
        # The runtime classes the GPU Operator installs (the API server refuses a pod that
        # names one it does not have).
        nodes += [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                   "metadata": {"name": h}, "handler": h}
                  for h in ("nvidia", "nvidia-legacy")]
        assert install.apply(cp, nodes).returncode == 0
        corpus = routingcorpus.pods(SEED, COUNT)
        judge = Judge(cp)
        untouched = judge.all(corpus)

        # The policy as the CLI compiles it from this cluster, applied as a user would.
        kubeconfig = ["--kubeconfig", str(cp.kubeconfig)]
        compiled = _cli("policy", "compile", *kubeconfig)
        r = cp.kubectl("apply", "-f", "-", input=compiled, check=False)
        assert r.returncode == 0, r.stderr
        probe = corpus_probe()
        install.wait_until(lambda: isinstance(got := judge.create("rc-plain", probe), dict)
                           and "annotations" in got["metadata"], "the policy to take effect")
        by_policy = judge.all(corpus)

        # The webhook alone, served, as installed (validation off: it would deny some pods
        # the comparison is about).
        cp.kubectl("delete", "mutatingadmissionpolicybinding", "gpupool-routing")
        cp.kubectl("delete", "mutatingadmissionpolicy", "gpupool-routing")
        mutating = [o for o in objs if o["kind"] != "ValidatingWebhookConfiguration"]
        server = install.serve(cp, tmp, mutating)
        install.wait_until(lambda: isinstance(got := judge.create("rc-plain", probe), dict)
                           and "annotations" in got["metadata"], "the webhook to take effect")
        install.wait_until(lambda: not _policy_listed(cp), "the policy to be gone")
        time.sleep(2)  # (the admission plugin's informer follows the deletion)
        by_webhook = judge.all(corpus)

        # The outage: every replica gone (nothing listens at the webhook's URL), the policy
        # back, and the webhook told which pods the policy routed.
        stop_server(server)
        server = None
        dead = f"https://127.0.0.1:{free_port()}"
        install.register(cp, mutating, dead)
        condition = json.loads(_cli("policy", "compile", *kubeconfig, "--webhook-condition"))
        cfg = json.loads(cp.kubectl("get", "mutatingwebhookconfiguration", MUTATING,
                                    "-o", "json").stdout)
        index = [w["name"] for w in cfg["webhooks"]].index("mutate.gpupool.io")
        r = cp.kubectl("patch", "mutatingwebhookconfiguration", MUTATING, "--type=json",
                       "-p", json.dumps([{"op": "add", "path": f"/webhooks/{index}/"
                                          "matchConditions/-", "value": condition}]),
                       check=False)
        assert r.returncode == 0, r.stderr
        r = cp.kubectl("apply", "-f", "-", input=compiled, check=False)
        assert r.returncode == 0, r.stderr
        install.wait_until(lambda: isinstance(got := judge.create("rc-plain", probe), dict)
                           and "annotations" in got["metadata"], "the policy in the outage")
        in_outage = judge.all(corpus)
        yield corpus, untouched, by_policy, by_webhook, in_outage
    finally:
        if server is not None:
            stop_server(server)
        cp.stop()


@pytest.fixture(scope="module")
def judged(k8s_bin, tmp_path_factory):
    with judging(k8s_bin, tmp_path_factory.mktemp("native")) as j:
        yield j


@needs_policy
def test_in_hami_beside_the_gpu_operator_the_policy_routes_plain_pods_of_both_pools(
        k8s_bin, tmp_path_factory):
    """A ClusterPolicy and HAMi's device-plugin DaemonSet declare each plugin's way; where
    every agent learned it from the plugin's pod, the steering label carries it, so the
    policy claims the plain GPU pods of both pools and agrees with the webhook on each, and
    routes them in an outage."""
    with judging(k8s_bin, tmp_path_factory.mktemp("operator"), operator=True) as j:
        agreement(j, "HAMi beside the GPU Operator")
        outage(j)
        corpus, untouched, by_policy, _, _ = j
        pools = Counter(by_policy[i]["metadata"]["annotations"]["gpupool.io/pool"]
                        for i in range(len(corpus)) if by_policy[i] != untouched[i])
        assert pools["hami"] and pools["operator"], pools


def corpus_probe() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _policy_listed(cp: ControlPlane) -> bool:
    r = cp.kubectl("get", "mutatingadmissionpolicy", "-o", "name", check=False)
    return bool(r.stdout.strip())


@needs_policy
def test_policy_and_webhook_agree_on_every_pod_the_policy_claims(judged):
    agreement(judged)


@needs_policy
def test_in_an_outage_the_policys_pods_are_created_and_every_other_gpu_pod_waits(judged):
    outage(judged)


def agreement(judged: Judged, cluster: str = "nodes without inventory") -> None:
    """Field by field, on every pod the policy claims; and no request the policy was in
    answered with an error the webhook alone did not give (a dropped connection, an API
    server that failed the patch)."""
    corpus, untouched, by_policy, by_webhook, _ = judged
    failed = [(corpus[i][1]["metadata"]["name"], by_policy[i]) for i in range(len(corpus))
              if isinstance(by_policy[i], str) and by_policy[i] != untouched[i]]
    assert not failed, failed[:3]
    claimed = [i for i in range(len(corpus)) if by_policy[i] != untouched[i]]
    gpu = [i for i, (_, p) in enumerate(corpus) if _is_gpu_pod(p)]
    report(f"routing in the API server, Kubernetes {release()}, {cluster}",
           f"the policy claims {len(claimed)} of {len(gpu)} GPU pods of the routing corpus "
           f"(seed {SEED}); the webhook routes the rest")
    # The corpus must exercise both sides, or agreement would prove nothing.
    assert len(claimed) >= len(gpu) // 6, (len(claimed), len(gpu))
    assert len(gpu) - len(claimed) >= len(gpu) // 3, (len(claimed), len(gpu))
    differ = [(corpus[i][1]["metadata"]["name"], by_policy[i], by_webhook[i])
              for i in claimed if by_policy[i] != by_webhook[i]]
    assert not differ, json.dumps(differ[:3], indent=1)
    # Claimed pods are GPU pods the webhook routes (no pod is made a GPU pod by the policy).
    assert set(claimed) <= set(gpu)
    assert all(isinstance(by_webhook[i], dict) for i in claimed)


def outage(judged: Judged) -> None:
    corpus, untouched, by_policy, _, in_outage = judged
    claimed = {i for i in range(len(corpus)) if by_policy[i] != untouched[i]}
    outcomes: Counter[str] = Counter()
    for i, (_, p) in enumerate(corpus):
        name = p["metadata"]["name"]
        if i in claimed:
            # Routed in the API server, and the dead webhook was never called.
            assert in_outage[i] == by_policy[i], name
            outcomes["routed by the policy"] += 1
        elif _is_gpu_pod(p):
            # The webhook's: its match took it, so the outage refuses it (never unrouted).
            assert isinstance(in_outage[i], str) and UNREACHABLE in in_outage[i], \
                (name, in_outage[i])
            outcomes["refused: the webhook's, which is down"] += 1
        else:
            assert in_outage[i] == untouched[i], name
            outcomes["not a GPU pod"] += 1
    assert outcomes["routed by the policy"] and outcomes["refused: the webhook's, which is down"]


# ------------------------------------------------------------------ kept by the server


def _plain(name: str, limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": limits}}], **spec}}


def _doctor(cp: ControlPlane, policy: Any) -> tuple[int, dict[str, Any]]:
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--kubeconfig",
                        str(cp.kubeconfig), "--policy", str(policy), "-o", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def _compiled_digest(cp: ControlPlane, policy: Any) -> str:
    out = _cli("policy", "compile", "--kubeconfig", str(cp.kubeconfig), "--policy", str(policy))
    return str(next(yaml.safe_load_all(out))["metadata"]["annotations"][
        "gpupool.io/routing-digest"])


class _Installed:
    """A control plane with gpupool's manifests applied, namespace ``ml``, the kustomize
    base's PoolPolicy in a file, and at most one gpupool server at a time."""

    def __init__(self, k8s_bin: Any, tmp: Any) -> None:
        self.tmp = tmp
        self.cp = ControlPlane(tmp / "cp", k8s_bin).start()
        self.server: Any = None
        try:
            self.objs = install.prepare(self.cp, tmp)
            self.cp.kubectl("create", "namespace", "ml")
        except BaseException:
            self.cp.stop()
            raise
        self.policy = tmp / "policy.yaml"
        self.base = (install.ROOT / "manifests/base/policy.yaml").read_text()
        self.policy.write_text(self.base)

    def serve(self, mode: str) -> None:
        self.stop_server()
        self.server = install.serve(self.cp, self.tmp, self.objs, policy=self.policy,
                                    extra=["--routing-mode", mode])

    def stop_server(self) -> None:
        if self.server is not None:
            stop_server(self.server)
            self.server = None

    def __enter__(self) -> _Installed:
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop_server()
        self.cp.stop()


@needs_policy
def test_the_server_keeps_the_policy_current_and_routing_survives_its_outage(
        k8s_bin, tmp_path_factory):
    """``--routing-mode auto`` with gpupool's own ServiceAccount (the kustomize base's
    RBAC): the server installs the compiled policy and the webhook's condition, recompiles
    them when the PoolPolicy changes, ``doctor`` says which mode is live and whether it
    matches; with every replica stopped and validation set to Ignore (the outage choice
    docs/install.md describes), plain GPU pods are still created and routed; with
    ``--routing-mode webhook`` the server takes it all away again."""
    with _Installed(k8s_bin, tmp_path_factory.mktemp("kept")) as g:
        cp, policy, base = g.cp, g.policy, g.base
        g.serve("auto")
        want = _compiled_digest(cp, policy)
        install.wait_until(lambda: install.routing_installed(cp) == (want, True),
                           "the server to install the compiled policy")
        # It was proved first, by canary pods dry-run in gpupool's own namespace, on this
        # API server, and the proof is recorded where every replica reads it.
        proof = _proof(cp)
        assert proof["result"] == "passed" and proof["digest"] == want, proof
        assert proof["server"] == _server_version(cp)
        assert "routing-canary" not in _pods_in(cp, "gpupool-system")  # nothing was stored
        code, doc = _doctor(cp, policy)
        assert doc["routing"]["mode"] == "api-server" and doc["routing"]["matches"] is True
        assert doc["routing"]["pools"] == ["hami", "operator"]

        # A policy edit: the server recompiles; doctor with the old policy says it differs.
        old = g.tmp / "old-policy.yaml"
        old.write_text(base)
        policy.write_text(base.replace("      - hami.io/node-scheduler-policy\n",
                                       "      - hami.io/node-scheduler-policy\n"
                                       "      - example.com/hami-only\n"))
        changed = _compiled_digest(cp, policy)
        assert changed != want
        install.wait_until(lambda: install.routing_installed(cp)[0] == changed,
                           "the recompiled policy", 60)
        assert _doctor(cp, policy)[1]["routing"]["matches"] is True
        code, doc = _doctor(cp, old)
        assert code == 1 and doc["routing"]["matches"] is False
        assert "is not what --policy" in doc["routing"]["message"]

        # The outage: every replica gone; validation's failurePolicy set to Ignore.
        g.stop_server()
        install.validation_fails_open(cp)
        judge = Judge(cp)
        hami = judge.create("ml", _plain("train", {"nvidia.com/gpu": "1",
                                                   "nvidia.com/gpumem": "3000"}))
        op = judge.create("ml", _plain("infer", {"nvidia.com/gpu": "1"}))
        annotated = _plain("picky", {"nvidia.com/gpu": "1"})
        annotated["metadata"]["annotations"] = {"example.com/hami-only": "yes"}
        picky = judge.create("ml", annotated)
        pinned = judge.create("ml", _plain("pinned", {"nvidia.com/gpu": "1"},
                                           nodeName="op-1"))
        assert isinstance(hami, dict) and hami["spec"]["schedulerName"] == "hami-scheduler"
        assert isinstance(op, dict) and op["spec"]["schedulerName"] == "default-scheduler"
        assert op["metadata"]["labels"]["hami.io/webhook"] == "ignore"
        # (the edited policy's annotation routes it: the policy in force is the new one)
        assert isinstance(picky, dict) and picky["spec"]["schedulerName"] == "hami-scheduler"
        assert isinstance(pinned, str) and UNREACHABLE in pinned

        # Back to the webhook alone: the server removes what it installed.
        g.serve("webhook")
        install.wait_until(lambda: install.routing_installed(cp) == (None, False),
                           "the server to remove the policy and the condition", 60)
        assert _doctor(cp, policy)[1]["routing"]["mode"] == "webhook"


def _proof(cp: ControlPlane) -> dict[str, Any]:
    cfg = json.loads(cp.kubectl("get", "mutatingwebhookconfiguration", MUTATING, "-o",
                                "json").stdout)
    recorded = cfg["metadata"].get("annotations", {}).get("gpupool.io/routing-proof")
    return json.loads(recorded) if recorded else {}


def _server_version(cp: ControlPlane) -> str:
    return str(json.loads(cp.kubectl("version", "-o", "json").stdout)["serverVersion"][
        "gitVersion"])


def _pods_in(cp: ControlPlane, namespace: str) -> str:
    return cp.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout


#: A neighbour's MutatingAdmissionPolicy that changes the canary pods' required node affinity
#: after gpupool's policy (an API server that routes otherwise than the webhook, as a release
#: with a bug in the policy's patches would): it adds a term gpupool's webhook never adds.
NEIGHBOUR = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
     "metadata": {"name": "neighbour-adds-a-term"},
     "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
              "matchConstraints": {"resourceRules": [{
                  "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                  "resources": ["pods"]}]},
              "matchConditions": [{"name": "canaries", "expression":
                                   "'gpupool.io/routing-canary' in "
                                   "object.metadata.?labels.orValue({})"}],
              "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                  "[JSONPatch{op: 'add', path: '/spec/affinity/nodeAffinity/"
                  "requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/-', "
                  "value: {'matchExpressions': [{'key': 'example.com/elsewhere', "
                  "'operator': 'Exists'}]}}]")}}]}},
    {"apiVersion": "admissionregistration.k8s.io/v1",
     "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "neighbour-adds-a-term"},
     "spec": {"policyName": "neighbour-adds-a-term"}},
]


@needs_policy
def test_a_canary_the_api_server_routes_otherwise_keeps_routing_in_the_webhook(
        k8s_bin, tmp_path_factory):
    """The policy is bound to real pods only after its canary pods, dry-run on this API
    server, are routed exactly as the webhook routes them. Where they are not (here a
    neighbour's policy changes their affinity; a release's bug would do the same, or drop
    the connection), the server unbinds it, records why, counts it, and ``doctor`` says so;
    every pod is routed by the webhook meanwhile. Once the cause is gone and the record
    cleared, the policy is proved and bound."""
    with _Installed(k8s_bin, tmp_path_factory.mktemp("canary")) as g:
        cp, policy = g.cp, g.policy
        # The webhook's identity may create pods in its namespace for the canary (RBAC), and
        # gpupool-webhook-dry-run-only keeps that to dry runs.
        who = ["--as=system:serviceaccount:gpupool-system:gpupool-webhook",
               "--as-group=system:serviceaccounts"]
        borrowed = _plain("borrowed", {"cpu": "1"})
        borrowed["metadata"] = {"generateName": "borrowed-"}
        pod = json.dumps(borrowed)

        def refused() -> bool:  # (once the admission plugin's informer has the policy)
            r = cp.kubectl("create", "-n", "gpupool-system", "-f", "-", *who, input=pod,
                           check=False)
            return r.returncode != 0 and "may only dry-run pods" in r.stderr

        install.wait_until(refused, "gpupool-webhook-dry-run-only to refuse a real create")
        r = cp.kubectl("create", "-n", "gpupool-system", "-f", "-", "--dry-run=server", *who,
                       input=pod, check=False)
        assert r.returncode == 0, r.stderr
        r = cp.kubectl("create", "-n", "ml", "-f", "-", "--dry-run=server", *who, input=pod,
                       check=False)
        assert r.returncode != 0 and "forbidden" in r.stderr.lower(), r.stderr
        assert install.apply(cp, NEIGHBOUR).returncode == 0
        time.sleep(2)  # (the admission plugin's informer follows the new policy)
        g.serve("auto")
        install.wait_until(lambda: _proof(cp).get("result") == "failed", "the canary to fail")
        proof = _proof(cp)
        why = proof["reason"]
        # (routed otherwise where gpupool's policy ran first; refused where the neighbour's
        # patch met a pod without affinity yet)
        assert why.startswith("canary pod") and ("requiredAffinity" in why
                                                 or "answered" in why), proof
        assert install.routing_installed(cp) == (None, False)
        assert cp.kubectl("get", "mutatingadmissionpolicybinding", "gpupool-routing",
                          check=False).returncode != 0
        code, doc = _doctor(cp, policy)
        assert code == 1 and doc["routing"]["mode"] == "webhook"
        assert "canary pods" in doc["routing"]["message"] and proof["reason"][:40] in \
            doc["routing"]["message"]
        metrics = requests.get(f"{g.server.url}/metrics", verify=g.server.ca, timeout=10).text
        assert 'gpupool_routing_canary_total{result="failed"}' in metrics
        # Real pods meanwhile: the webhook routes them.
        got = Judge(cp).create("ml", _plain("infer", {"nvidia.com/gpu": "1"}))
        assert isinstance(got, dict) and got["metadata"]["annotations"]["gpupool.io/pool"]
        # The cause gone and the record cleared by hand (docs/install.md): proved, bound.
        for obj in reversed(NEIGHBOUR):
            cp.kubectl("delete", obj["kind"], obj["metadata"]["name"])
        time.sleep(2)
        cp.kubectl("annotate", "mutatingwebhookconfiguration", MUTATING,
                   "gpupool.io/routing-proof-")
        want = _compiled_digest(cp, policy)
        install.wait_until(lambda: install.routing_installed(cp) == (want, True),
                           "the proved policy to be bound", 90)
        assert _proof(cp)["result"] == "passed"


@pytest.mark.skipif(SERVED, reason="Kubernetes 1.36 and newer serve the policy: tests above")
def test_auto_mode_keeps_routing_in_the_webhook_where_the_api_server_has_no_policy(
        k8s_bin, tmp_path_factory):
    """Kubernetes 1.35 serves no MutatingAdmissionPolicy v1: ``--routing-mode auto`` (the
    chart's and the kustomize base's) routes in the webhook alone, writes nothing, and
    ``doctor`` says why."""
    with _Installed(k8s_bin, tmp_path_factory.mktemp("auto")) as g:
        g.serve("auto")
        install.wait_for_webhooks(g.cp, g.server, "ml")
        got = Judge(g.cp).create("ml", _plain("infer", {"nvidia.com/gpu": "1"}))
        assert isinstance(got, dict) and got["metadata"]["annotations"]["gpupool.io/pool"]
        _, doc = _doctor(g.cp, g.policy)
        assert doc["routing"]["mode"] == "webhook", doc["routing"]
        assert "does not serve MutatingAdmissionPolicy v1" in doc["routing"]["message"]
        assert install.routing_installed(g.cp) == (None, False)
