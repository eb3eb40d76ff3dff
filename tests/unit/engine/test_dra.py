"""DRA pods: their demand classified, routed to the pool that serves their DeviceClasses,
and checked against the ResourceSlices of that pool's nodes with the real CEL runtime."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.kit import only_voids
from webhook.engine.admission import admit
from webhook.engine.core.decision import Reason
from webhook.engine.core.policy import PolicyError, load_policy_text
from webhook.engine.pod import nodereach
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import cel
from webhook.engine.view.cluster import view_from_objects

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dra"
POLICY = """
apiVersion: gpupool.io/v1alpha1
kind: PoolPolicy
defaultPool: operator
gpuResources: [nvidia.com/gpu, nvidia.com/gpumem]
pools:
  - name: hami
    labelValues: [hami]
    schedulerName: hami-scheduler
    exclusiveResources: [nvidia.com/gpumem]
  - name: operator
    schedulerName: default-scheduler
  - name: dra
    labelValues: [dra]
    schedulerName: default-scheduler
    dra:
      deviceClasses: [gpu.nvidia.com, mig.nvidia.com]
"""


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def node(name: str, pool: str | None = None, **status: Any) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if pool:
        labels["gpupool.io/pool"] = pool
    return {"kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": status}


@pytest.fixture
def policy():
    return load_policy_text(POLICY)


def make_view(policy, resources=None, nodes=None, namespaces=None):
    nodes = nodes if nodes is not None else [node("dra-node-1", "dra"), node("dra-node-2", "dra"),
                                             node("hami-1", "hami"), node("op-1")]
    resources = resources if resources is not None else docs("nvidia.yaml") + docs("claims.yaml")
    return view_from_objects(nodes, policy, namespaces=namespaces or {"default": {}},
                             resources=resources)


def pod(*templates: str, gpus: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda"}
    if gpus:
        container["resources"] = {"limits": gpus}
    if templates:
        container.setdefault("resources", {})["claims"] = [{"name": f"c{i}"}
                                                            for i in range(len(templates))]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [container], **spec,
                     "resourceClaims": [{"name": f"c{i}", "resourceClaimTemplateName": t}
                                        for i, t in enumerate(templates)]}}


def review(p, view, policy):
    return admit.review_pod(p, "default", view, policy)


def test_a_claim_pod_is_routed_to_the_pool_serving_its_device_class(policy):
    d = review(pod("one-gpu"), make_view(policy), policy)
    assert d.allowed and d.gpu and d.pool == "dra", d.to_json()
    assert d.scheduler_name == "default-scheduler"
    # pinned to the pool like any GPU pod: the mutation adds the pool's node affinity, and
    # no device-plugin steering (the agent's labels say nothing of DRA devices)
    assert any(op["path"].startswith("/spec/affinity") for op in d.patch)
    assert "resolve.gpupool.io" not in str(d.patch)


def test_a_pod_without_claims_or_gpus_is_left_alone(policy):
    """Not routed; where it can reach a node that would hand its containers GPUs anyway,
    they get NVIDIA_VISIBLE_DEVICES=void and nothing else (docs/security.md)."""
    d = review(pod(), make_view(policy), policy)
    assert d.reason in (Reason.NOT_GPU_POD, Reason.ACCESS_VOIDED) and only_voids(d.patch)
    assert not d.gpu and d.pool is None


@pytest.mark.parametrize("template, fits", [
    ("one-gpu", True), ("two-gpus", True), ("all-gpus", True), ("big-gpu", True),
    ("mig-or-gpu", True),  # no MIG device anywhere: the full-GPU alternative serves it
    ("huge-gpu", False),  # no GPU with 100Gi
    ("mig-only", False),
])
def test_claims_are_judged_against_the_published_devices(policy, template, fits):
    d = review(pod(template), make_view(policy), policy)
    assert d.allowed  # onNoCandidates: warn (the default): pending is not a late failure
    if fits:
        assert not d.warnings, d.warnings
    else:
        assert any("no node in pool dra has the DRA devices" in w for w in d.warnings)
        assert {n.node for n in d.nodes} == {"dra-node-1", "dra-node-2"}
        assert all(f"ResourceClaimTemplate {template} request gpu needs" in n.note
                   for n in d.nodes)


def test_the_cel_selector_picks_the_node_with_the_big_gpu(policy):
    """big-gpu (>= 40Gi) fits only dra-node-1's A100s; two-gpus only dra-node-1's pair."""
    for template in ("big-gpu", "two-gpus"):
        d = review(pod(template), make_view(policy), policy)
        able = {n.node for n in d.nodes if n.note == "can allocate its DRA claims"}
        assert able == set() or able == {"dra-node-1"}
        pinned = review(pod(template, nodeSelector={"kubernetes.io/hostname": "dra-node-2"}),
                        make_view(policy), policy)
        assert any("no node in pool dra has the DRA devices" in w for w in pinned.warnings)
        assert [n.node for n in pinned.nodes] == ["dra-node-2"]
        assert pinned.nodes[0].note.endswith(("; 0 found", "; 1 found"))


def test_on_no_candidates_deny_turns_an_unallocatable_claim_away(policy):
    strict = load_policy_text(POLICY + "onNoCandidates: deny\n")
    d = review(pod("huge-gpu"), make_view(strict), strict)
    assert not d.allowed and d.reason == Reason.NO_MATCHING_DEVICES
    assert "ResourceClaimTemplate huge-gpu request gpu needs 1 device of class gpu.nvidia.com "\
           "matching its selectors" in d.message


def test_a_missing_device_class_is_named(policy):
    resources = [o for o in docs("nvidia.yaml") + docs("claims.yaml")
                 if o["metadata"]["name"] != "mig.nvidia.com"]
    d = review(pod("mig-only"), make_view(policy, resources), policy)
    assert d.allowed and any("DeviceClass mig.nvidia.com does not exist" in w
                             for w in d.warnings)
    strict = load_policy_text(POLICY + "onNoCandidates: deny\n")
    d = review(pod("mig-only"), make_view(strict, resources), strict)
    assert not d.allowed and d.reason == Reason.DEVICE_CLASS_MISSING
    assert "gpu.nvidia.com" in d.message  # the classes that do exist


def test_admin_access_needs_the_namespace_label(policy):
    d = review(pod("monitor"), make_view(policy), policy)
    assert not d.allowed and d.reason == Reason.DRA_ADMIN_ACCESS_FORBIDDEN
    assert "resource.kubernetes.io/admin-access=true" in d.message
    allowed_ns = {"default": {"resource.kubernetes.io/admin-access": "true"}}
    d = review(pod("monitor"), make_view(policy, namespaces=allowed_ns), policy)
    assert d.allowed and not d.warnings


def test_a_template_not_created_yet_is_a_warning_never_a_denial(policy):
    p = pod("one-gpu")
    p["spec"]["resourceClaims"].append({"name": "later", "resourceClaimTemplateName": "later"})
    d = review(p, make_view(policy), policy)
    assert d.allowed and d.pool == "dra"
    assert any("ResourceClaimTemplate later not found yet" in w for w in d.warnings)
    # only unknown claims: gpupool cannot tell it is a GPU pod, and says so
    alone = pod("later")
    d = review(alone, make_view(policy), policy)
    assert d.allowed and d.reason == Reason.NOT_GPU_POD
    assert any("ResourceClaimTemplate later not found" in w for w in d.warnings)


def test_a_pod_mixing_shapes_no_pool_serves_is_denied(policy):
    d = review(pod("one-gpu", gpus={"nvidia.com/gpumem": 1000}), make_view(policy), policy)
    assert not d.allowed and d.reason == Reason.EXCLUSIVE_RESOURCE_CONFLICT
    assert "DeviceClass gpu.nvidia.com only in pool 'dra'" in d.message
    assert "nvidia.com/gpumem only in pool 'hami'" in d.message


def test_device_taints_exclude_devices_unless_tolerated(policy):
    resources = copy.deepcopy(docs("nvidia.yaml") + docs("claims.yaml"))
    for o in resources:
        if o["kind"] == "ResourceSlice":
            for dev in o["spec"]["devices"]:
                dev["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    d = review(pod("one-gpu"), make_view(policy, resources), policy)
    assert any("no node in pool dra has the DRA devices" in w for w in d.warnings)
    assert all("2 more behind device taints" in n.note or "1 more behind device taints"
               in n.note for n in d.nodes) and d.nodes
    for o in resources:
        if o["kind"] == "ResourceClaimTemplate" and o["metadata"]["name"] == "one-gpu":
            o["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
                {"key": "maintenance", "operator": "Exists"}]
    d = review(pod("one-gpu"), make_view(policy, resources), policy)
    assert not d.warnings, d.warnings


def test_containerd_without_cdi_means_the_devices_never_arrive(policy, tmp_path):
    from webhook.api.inventory import INVENTORY_ANNOTATION, Inventory, RuntimeInfo
    inv = Inventory(kinds={}, runtime=RuntimeInfo(containerd_cdi=False)).dumps()
    nodes = [node("dra-node-1", "dra"), node("dra-node-2", "dra")]
    for n in nodes:
        n["metadata"]["annotations"] = {INVENTORY_ANNOTATION: inv}
    d = review(pod("one-gpu"), make_view(policy, nodes=nodes), policy)
    assert not d.allowed and d.reason == Reason.GPU_NOT_DELIVERED
    assert "enable_cdi" in d.message


def test_a_selector_that_does_not_compile_is_doubt_not_denial(policy):
    resources = copy.deepcopy(docs("nvidia.yaml") + docs("claims.yaml"))
    for o in resources:
        if o["kind"] == "ResourceClaimTemplate" and o["metadata"]["name"] == "big-gpu":
            o["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"][
                "expression"] = "device.capacity['gpu.nvidia.com'].memory.futureFn()"
    strict = load_policy_text(POLICY + "onNoCandidates: deny\n")
    d = review(pod("big-gpu"), make_view(strict, resources), strict)
    assert d.allowed and any("could not be evaluated" in w for w in d.warnings)


def test_dra_backed_extended_resource(policy):
    """A DeviceClass with extendedResourceName serves nvidia.com/gpu where no device plugin
    does; a node with both is flagged."""
    resources = copy.deepcopy(docs("nvidia.yaml"))
    resources[0]["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    nodes = [node("dra-node-1"), node("dra-node-2", allocatable={"nvidia.com/gpu": "1"})]
    view = make_view(policy, resources, nodes)
    d = review(pod(gpus={"nvidia.com/gpu": 2}), view, policy)
    assert d.allowed and d.pool == "operator"
    assert any("dra-node-2 serves nvidia.com/gpu by device plugin and by DeviceClass "
               "gpu.nvidia.com" in w for w in d.warnings), d.warnings
    # 2 by DRA on dra-node-1 or 1 by device plugin on dra-node-2; 3 by neither is the
    # device plugin's count to judge (the CDI check), so DRA names only its own node
    d = review(pod(gpus={"nvidia.com/gpu": 2}, nodeSelector={"kubernetes.io/hostname":
                                                              "dra-node-1"}), view, policy)
    assert d.allowed and not d.warnings
    d = review(pod(gpus={"nvidia.com/gpu": 3}, nodeSelector={"kubernetes.io/hostname":
                                                              "dra-node-1"}), view, policy)
    assert any("no node in pool operator has the DRA devices" in w for w in d.warnings)
    assert "extended resource nvidia.com/gpu request nvidia.com/gpu needs 3 devices of " \
           "class gpu.nvidia.com; 2 found" in d.nodes[0].note
    # the implicit name routes to the class's pool
    d = review(pod(gpus={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}),
               make_view(policy, resources), policy)
    assert d.pool == "dra"


def test_device_classes_belong_to_one_pool():
    with pytest.raises(PolicyError, match=r"pools\[2\].dra.deviceClasses: 'a.b' is already"):
        load_policy_text(POLICY.replace("    schedulerName: default-scheduler\n  - name: dra",
                                        "    schedulerName: default-scheduler\n    dra: "
                                        "{deviceClasses: [a.b]}\n  - name: dra")
                         .replace("[gpu.nvidia.com, mig.nvidia.com]", "[a.b]"))


#: Kubernetes' CEL libraries as the expected answers say; tests/integration/test_cel_judge.py
#: has Kubernetes' own DRA CEL compiler judge every one.
KUBERNETES_CEL: list[tuple[str, bool]] = [
    ("quantity('80Gi') == quantity('81920Mi')", True),
    ("quantity('1.5').isInteger()", False),
    ("quantity('2k').asInteger() == 2000", True),
    ("quantity('100m').isLessThan(quantity('1'))", True),
    ("quantity('1Gi').add(1).compareTo(quantity('1Gi')) == 1", True),
    ("semver('1.10.0').isGreaterThan(semver('1.9.9'))", True),
    ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", True),
    ("isSemver('v1.2.3')", False), ("isSemver('v1.2', true)", True),
    ("isQuantity('12Zi')", False),
    # cel.bind (cel-go ext.Bindings, which the DRA environment adds)
    ("cel.bind(x, 2, x * x == 4)", True),
    # library.IP (k8s.io/apiserver v0.35.4 pkg/cel/library/ip.go): netip, no zones, no
    # IPv4-mapped IPv6, no leading zeros; Go's idea of global unicast (private counts)
    ("isIP('1.2.3.4')", True), ("isIP('1.2.3')", False), ("isIP('01.2.3.4')", False),
    ("isIP('::ffff:1.2.3.4')", False), ("isIP('fe80::1%eth0')", False),
    ("ip('10.0.0.1').family() == 4 && ip('10.0.0.1').isGlobalUnicast()", True),
    ("ip('::1').isLoopback() && ip('169.254.1.1').isLinkLocalUnicast()", True),
    ("ip('ff02::1').isLinkLocalMulticast() && ip('0.0.0.0').isUnspecified()", True),
    ("ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')", True),
    # library.CIDR (cidr.go)
    ("cidr('10.0.0.0/8').containsIP('10.1.2.3')", True),
    ("cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", False),
    ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')", True),
    ("cidr('10.1.2.3/8').masked() == cidr('10.0.0.0/8')", True),
    ("cidr('10.1.2.3/8').ip() == ip('10.1.2.3') && cidr('10.0.0.0/8').prefixLength() == 8",
     True),
    ("isCIDR('10.0.0.0/33')", False),
    # library.URLs (urls.go: Go's url.ParseRequestURI)
    ("isURL('https://example.com:80/path?a=b') && isURL('/abs/path')", True),
    ("isURL('example.com')", False),
    ("url('https://user@example.com:8080/p').getHostname() == 'example.com'", True),
    ("url('https://[::1]:80/p').getHostname() == '::1' && "
     "url('https://[::1]:80/p').getPort() == '80'", True),
    ("url('https://example.com/p?x=1&x=2').getQuery()['x'] == ['1', '2']", True),
    # library.Lists (lists.go) and ext.Sets
    ("[1, 2, 3].isSorted() && [3, 1].min() == 1 && [1, 2, 3].sum() == 6", True),
    ("sets.contains([1, 2, 3], [2]) && !sets.intersects([1], [2])", True),
]


@pytest.mark.parametrize("expr, expected", KUBERNETES_CEL)
def test_kubernetes_cel_libraries(expr, expected):
    assert cel.evaluate(cel.compile_selector(expr), {}) is expected


MISSING_DOMAIN: list[tuple[str, bool]] = [
    ("device.attributes['other.example.com'].size() == 0", True),
    ("has(device.attributes['other.example.com'].model)", False),
    ('!("model" in device.attributes["other.example.com"])', True),
    ("device.capacity['other.example.com'].size() == 0", True),
    ("device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
]


@pytest.mark.parametrize("expr, expected", MISSING_DOMAIN)
def test_a_domain_the_device_lacks_is_an_empty_map(expr, expected):
    """Kubernetes answers an attribute or capacity domain a device does not have with an
    empty map (k8s.io/dynamic-resource-allocation v0.35.4 cel/compile.go,
    newStringInterfaceMapWithDefault): such selectors evaluate; they are not doubt."""
    device = {"driver": "gpu.nvidia.com", "attributes": {"gpu.nvidia.com": {"type": "gpu"}},
              "capacity": {}, "allowMultipleAllocations": False}
    assert cel.evaluate(cel.compile_selector(expr), device) is expected


def test_decisions_follow_slice_and_class_changes(policy):
    """The per-shape verdicts are kept as slices come and go (node by node), and start over
    when a class changes: each answer equals a fresh view's."""
    from webhook.engine.stacks.dra import DeviceClass, Slice

    view = make_view(policy)
    p = pod("huge-gpu")

    def fresh_equal() -> None:
        again = view_from_objects([], policy)
        again.replace_nodes(view.nodes())
        again.replace_namespaces({"default": {}})
        again.replace_device_classes((view.device_classes() or {}).values())
        again.replace_slices(s for n in ("dra-node-1", "dra-node-2", "dra-node-3")
                             for s in view.slices_for(n, own=True))
        for kind in ("ResourceClaimTemplate",):
            again.replace_claims(kind, {(ns, name): spec for (k, ns, name), spec
                                        in view._dra.claims.items() if k == kind})
        assert review(p, again, policy).to_json() == review(p, view, policy).to_json()

    assert any("DRA devices" in w for w in review(p, view, policy).warnings)
    big = copy.deepcopy(docs("nvidia.yaml")[2])
    big["metadata"]["name"] = "dra-node-2-big"
    big["spec"]["nodeName"] = "dra-node-2"
    big["spec"]["devices"][0]["capacity"]["memory"]["value"] = "141Gi"
    view.set_slice("dra-node-2-big", Slice.from_object(big))
    d = review(p, view, policy)
    assert not d.warnings and [n.node for n in d.nodes] == ["dra-node-2"]
    fresh_equal()
    view.set_slice("dra-node-2-big", None)
    assert any("DRA devices" in w for w in review(p, view, policy).warnings)
    fresh_equal()
    # the class's selector narrowed to another type: nothing matches any more
    gpu = docs("nvidia.yaml")[0]
    gpu["spec"]["selectors"][0]["cel"]["expression"] = "device.attributes['gpu.nvidia.com']" \
        ".type == 'vgpu'"
    view.set_device_class("gpu.nvidia.com", DeviceClass.from_object(gpu))
    d = review(pod("one-gpu"), view, policy)
    assert any("DRA devices" in w for w in d.warnings)
    fresh_equal()


def test_a_pod_hami_dra_rewrote_after_gpupool_routed_it_names_the_rewrite():
    """HAMi-DRA's webhook runs after gpupool's (its configuration sorts later), turns
    nvidia.com/gpu into a ResourceClaim of its class and labels the pod hami.io/dra=true
    (HAMi-DRA pkg/webhook/dra/mutating.go). Routed to the operator pool first, the pod now
    needs HAMi's DRA nodes: the reinvocation says so, with the fix."""
    policy = load_policy_text(POLICY.replace(
        "    exclusiveResources: [nvidia.com/gpumem]\n",
        "    exclusiveResources: [nvidia.com/gpumem]\n"
        "    dra: {deviceClasses: [hami-core-gpu.project-hami.io]}\n"))
    claim = {"kind": "ResourceClaim", "metadata": {"name": "default-p-main",
                                                   "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "hami-core-gpu.project-hami.io", "count": 1}}]}}}
    view = make_view(policy, [*docs("nvidia.yaml"), claim])
    first = admit.decide_pod(admit.Stage.MUTATE, pod(gpus={"nvidia.com/gpu": 1}), "default",
                             view, policy)
    assert first.pool == "operator"
    from webhook.engine.core import patch
    routed = patch.apply(pod(gpus={"nvidia.com/gpu": 1}), first.patch)
    rewritten = copy.deepcopy(routed)
    rewritten["metadata"]["labels"]["hami.io/dra"] = "true"
    rewritten["spec"]["containers"][0]["resources"] = {"claims": [{"name": "default-p-main"}]}
    rewritten["spec"]["resourceClaims"] = [{"name": "default-p-main",
                                            "resourceClaimName": "default-p-main"}]
    again = admit.decide_pod(admit.Stage.MUTATE, rewritten, "default", view, policy)
    assert not again.allowed and again.reason == Reason.EXCLUSIVE_RESOURCE_CONFLICT
    assert "HAMi-DRA's webhook rewrote this pod's GPU resources" in again.message
    assert "excludedNamespaces" in again.message


JUNK: list[Any] = [None, 7, "x", [], {"spec": None}, {"spec": {"devices": "all"}},
                   {"metadata": {"name": 5}}, {"metadata": {"name": "s"}, "spec": {
                       "driver": "gpu.nvidia.com", "nodeName": ["dra-node-1"], "devices": [
                           None, {"name": 3}, {"name": "d", "attributes": {
                               "x": {"string": "a", "int": 1}, "y": {"version": "not.a.v"},
                               "z": {"unknownType": 1}, "w": "flat"},
                               "capacity": {"memory": {"value": "lots"}, "c": 5},
                               "taints": "none"}]}},
                   # values of the wrong type, and junk where the allocator reads partitionable
                   # devices, consumable capacity and shared counters
                   {"metadata": {"name": "s2"}, "spec": {
                       "driver": "gpu.nvidia.com", "nodeName": "dra-node-1",
                       "pool": {"name": 7, "generation": "x", "resourceSliceCount": -2},
                       "nodeSelector": "all", "sharedCounters": [None, {"counters": [1]}],
                       "devices": [{"name": "j", "attributes": {
                           "a": {"string": ["x"]}, "b": {"int": {}}, "c": {"bool": "yes"}},
                           "allowMultipleAllocations": "yes", "consumesCounters": [
                               None, {"counterSet": 5, "counters": {"k": {"value": []}}}],
                           "capacity": {"memory": {"value": "8Gi", "requestPolicy": {
                               "default": {}, "validRange": "wide", "validValues": [1, None]}}},
                           "nodeName": ["n"]}]}}]


@pytest.mark.parametrize("junk", JUNK)
def test_malformed_dra_objects_never_crash_and_never_deny(policy, junk):
    """Bad objects as a cluster file or a watch could carry them: skipped or read for what
    they hold; the pod is judged on the rest, and neither doubt nor junk denies."""
    resources = docs("nvidia.yaml") + docs("claims.yaml")
    for kind in ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"):
        bad = {"kind": kind, **junk} if isinstance(junk, dict) else {"kind": kind,
                                                                      "spec": junk}
        view = make_view(policy, [*resources, bad])
        for template in ("one-gpu", "big-gpu"):
            d = review(pod(template), view, policy)
            # (a device whose attributes the class's selector cannot read fails it at run
            # time, as it would the scheduler's: a warning, never a denial)
            assert d.allowed and all("fails at run time" in w for w in d.warnings), \
                (kind, junk, d.to_json())
    # a claim whose requests are junk asks for nothing gpupool can judge: allowed
    junk_claim = {"kind": "ResourceClaimTemplate", "metadata": {"name": "junk",
                                                                "namespace": "default"},
                  "spec": {"spec": {"devices": {"requests": [junk, {"name": "r"}]}}}}
    d = review(pod("junk"), make_view(policy, [*resources, junk_claim]), policy)
    assert d.allowed


TWO_DRA_POOLS = POLICY.replace("      deviceClasses: [gpu.nvidia.com, mig.nvidia.com]",
                               "      deviceClasses: [gpu.nvidia.com]") + """\
  - name: mig
    labelValues: [mig]
    schedulerName: default-scheduler
    dra:
      deviceClasses: [mig.nvidia.com]
"""


def test_first_available_needs_one_pool_that_serves_an_alternative_of_every_request():
    """``firstAvailable`` asks for any one of its alternatives (in order), so alternatives in
    two pools are no conflict: the pod goes to the first pool the scheduler would try that
    serves an alternative of each request; only requests no single pool can serve together
    are denied."""
    policy = load_policy_text(TWO_DRA_POOLS)
    view = make_view(policy, nodes=[node("dra-node-1", "dra"), node("dra-node-2", "dra"),
                                    node("mig-1", "mig")])
    # mig first, then a full GPU: node mig-1 publishes no MIG device, so the scheduler would
    # take the second alternative, in pool dra (issue 35, item 1)
    d = review(pod("mig-or-gpu"), view, policy)
    assert d.allowed and d.pool == "dra", d.to_json()
    # pinned to pool mig by the pod itself, the alternatives are no conflict
    pinned = pod("mig-or-gpu")
    pinned["spec"]["nodeSelector"] = {"gpupool.io/pool": "mig"}
    d = review(pinned, view, policy)
    assert d.allowed and d.pool == "mig", d.to_json()
    d = review(pod("mig-or-gpu", "one-gpu"), view, policy)  # the other claim needs dra
    assert d.allowed and d.pool == "dra", d.to_json()
    d = review(pod("mig-only", "one-gpu"), view, policy)  # no pool serves both
    assert not d.allowed and d.reason == Reason.EXCLUSIVE_RESOURCE_CONFLICT
    assert "DeviceClass mig.nvidia.com only in pool 'mig'" in d.message
    assert "DeviceClass gpu.nvidia.com only in pool 'dra'" in d.message


def test_a_missing_class_in_a_later_alternative_leaves_the_claim_unallocatable(policy):
    """The allocator looks up every firstAvailable alternative's class before trying any: a
    later alternative naming a class that does not exist fails the claim, though the first
    alternative's devices are there."""
    resources = copy.deepcopy(docs("nvidia.yaml"))
    resources.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                      "metadata": {"name": "gpu-or-ghost", "namespace": "default"},
                      "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                               "firstAvailable": [
                                   {"name": "full", "deviceClassName": "gpu.nvidia.com"},
                                   {"name": "ghost", "deviceClassName": "ghost.example.com"}]}]}}}})
    view = make_view(policy, resources)
    d = review(pod("gpu-or-ghost"), view, policy)  # onNoCandidates: warn, the default
    assert d.allowed and any("DeviceClass ghost.example.com does not exist" in w
                             for w in d.warnings), d.to_json()
    deny_policy = load_policy_text(POLICY + "onNoCandidates: deny\n")
    d = review(pod("gpu-or-ghost"), make_view(deny_policy, resources), deny_policy)
    assert not d.allowed and d.reason == Reason.DEVICE_CLASS_MISSING


def test_all_mode_with_one_tainted_device_cannot_be_allocated_there(policy):
    """allocationMode: All takes every matching device, tainted or not, and then refuses the
    one whose taint it does not tolerate: one tainted GPU fails the request on that node,
    where counting the untainted ones would say it fits."""
    resources = copy.deepcopy(docs("nvidia.yaml") + docs("claims.yaml"))
    first = next(o for o in resources if o["kind"] == "ResourceSlice"
                 and o["spec"]["nodeName"] == "dra-node-1")
    first["spec"]["devices"][0]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    d = review(pod("all-gpus", nodeSelector={"kubernetes.io/hostname": "dra-node-1"}),
               make_view(policy, resources), policy)
    assert any("no node in pool dra has the DRA devices" in w for w in d.warnings), d.warnings
    assert any("asks for all devices of class gpu.nvidia.com, and 1 of them are behind "
               "device taints" in n.note for n in d.nodes), d.to_json()
    d = review(pod("all-gpus"), make_view(policy, resources), policy)  # dra-node-2 can
    assert d.allowed and not d.warnings, d.to_json()


def test_served_two_ways_only_where_the_class_matches_a_device_there(policy):
    """A device plugin beside DRA slices is a hazard only where the class naming the same
    extended resource matches a device on that node: slices of another kind of device there
    advertise nothing twice."""
    from webhook.engine.checks.allocation import mixed_resources

    resources = copy.deepcopy(docs("nvidia.yaml"))
    resources[0]["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    view = make_view(policy, resources,
                     [node("dra-node-2", allocatable={"nvidia.com/gpu": "1"})])
    n = view.node("dra-node-2")
    assert n is not None
    classes = view.device_classes()
    assert mixed_resources(n, classes, view.slices_for("dra-node-2")) == [
        ("nvidia.com/gpu", "gpu.nvidia.com")]
    for s in resources:  # the node's slice now publishes only MIG devices
        if s["kind"] == "ResourceSlice":
            for dev in s["spec"]["devices"]:
                dev["attributes"]["type"] = {"string": "mig"}
    view = make_view(policy, resources,
                     [node("dra-node-2", allocatable={"nvidia.com/gpu": "1"})])
    n = view.node("dra-node-2")
    assert n is not None
    assert view.slices_for("dra-node-2")  # DRA devices there still
    assert mixed_resources(n, view.device_classes(), view.slices_for("dra-node-2")) == []


def test_a_gpu_resource_only_dra_serves_routes_to_the_pool_whose_devices_serve_it(policy):
    """HAMi-DRA's class names nvidia.com/gpu as its extendedResourceName (KEP-5004): where
    only the DRA pool's nodes serve it (no device plugin in the default pool), the pod goes
    to that pool, where the default scheduler alone would have placed it; where the default
    pool serves it too, the default pool stands."""
    resources = copy.deepcopy(docs("nvidia.yaml"))
    resources[0]["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    nodes = [node("dra-node-1", "dra"), node("dra-node-2", "dra"), node("op-1")]
    d = review(pod(gpus={"nvidia.com/gpu": 1}), make_view(policy, resources, nodes), policy)
    assert d.allowed and d.pool == "dra", d.to_json()
    assert "served only in pool 'dra'" in d.message
    nodes[2] = node("op-1", allocatable={"nvidia.com/gpu": "1"})  # a device plugin there
    d = review(pod(gpus={"nvidia.com/gpu": 1}), make_view(policy, resources, nodes), policy)
    assert d.pool == "operator", d.to_json()


def _shared_claim(allocated_to: str | None) -> dict[str, Any]:
    """A ResourceClaim several pods share (``resourceClaimName``), allocated or not yet,
    as the scheduler writes status.allocation (with the node selector of the devices it
    chose: a node's devices pin the claim to that node)."""
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "shared-gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com"}}]}}}
    if allocated_to is not None:
        claim["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
                                     "pool": allocated_to, "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
                "key": "metadata.name", "operator": "In", "values": [allocated_to]}]}]}}}
    return claim


def _shared_pod(**spec: Any) -> dict[str, Any]:
    p = pod(**spec)
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared-gpu"}]
    return p


def test_an_allocated_claim_pins_the_pod_to_its_node(policy):
    """Issue 35, item 8: a shared claim allocated to dra-node-2's devices; a pod that can
    only reach dra-node-1 never schedules (the scheduler filters nodes by the allocation's
    node selector), so it gets onNoCandidates' warning, or a denial under deny."""
    resources = [*docs("nvidia.yaml"), _shared_claim("dra-node-2")]
    on_1 = _shared_pod(nodeSelector={"kubernetes.io/hostname": "dra-node-1"})
    d = review(on_1, make_view(policy, resources), policy)
    assert d.allowed and any("allocated claim pins this pod to nodes outside its reach" in w
                             for w in d.warnings), d.to_json()
    assert not any("waits for devices in use" in w for w in d.warnings)
    assert [n.node for n in d.nodes] == ["dra-node-1"]
    assert "ResourceClaim shared-gpu is allocated already" in d.nodes[0].note
    strict = load_policy_text(POLICY + "onNoCandidates: deny\n")
    d = review(on_1, make_view(strict, resources), strict)
    assert not d.allowed and d.reason == Reason.NO_MATCHING_DEVICES
    assert "status.allocation.nodeSelector" in d.message
    # Issue 46, item 6: where the claim is allocated, and why that blocks the pod
    assert "places on node(s) dra-node-2" in d.message
    assert "no node the pod can reach (dra-node-1) matches it" in d.message
    assert "never schedulable while that allocation stands" in d.message
    # unpinned, or pinned to the claim's node: fine, and only that node can take it
    d = review(_shared_pod(), make_view(policy, resources), policy)
    assert d.allowed and not d.warnings, d.to_json()
    assert {n.node for n in d.nodes} == {"dra-node-2"}
    # not allocated yet: either node whose devices fit
    d = review(on_1, make_view(policy, [*docs("nvidia.yaml"), _shared_claim(None)]), policy)
    assert d.allowed and not d.warnings, d.to_json()


def test_what_keeps_a_pod_off_a_node_is_one_answer(policy):
    """Issue 48: ``Placement.kept_off`` answers for the candidates, the checks and the
    allocated claims alike, and says what is in the way, first found: the pod's own fields,
    then the pool, then a claim allocated to devices elsewhere (the denial above names it
    from there). That an allocated claim keeps its pods to its allocation's nodes is what
    the real kube-scheduler does with such a claim: tests/e2e/test_dra_chain.py,
    ``test_a_claim_allocated_already_pins_its_next_pods_as_the_scheduler_does``."""
    resources = [*docs("nvidia.yaml"), _shared_claim("dra-node-2")]
    view = make_view(policy, resources)
    pinned = PodFacts.parse(_shared_pod(nodeSelector={"kubernetes.io/hostname": "dra-node-1"}),
                            "default", policy, view)
    free = PodFacts.parse(_shared_pod(), "default", policy, view)

    def off(facts: PodFacts, name: str) -> str | None:
        n = view.node(name)
        assert n is not None
        return facts.placement.kept_off(n, "dra", policy, devices=True,
                                        claims=facts.claims.claims)

    assert off(pinned, "dra-node-1") == "ResourceClaim shared-gpu"
    assert off(pinned, "dra-node-2") == nodereach.OWN_FIELDS
    assert off(free, "op-1") == nodereach.OTHER_POOL
    assert off(free, "dra-node-1") == "ResourceClaim shared-gpu"
    assert off(free, "dra-node-2") is None
    assert free.placement.reaches(view.node("dra-node-2"), "dra", policy, devices=True,
                                  claims=free.claims.claims)
    # not allocated yet: nothing but its own fields and the pool
    view = make_view(policy, [*docs("nvidia.yaml"), _shared_claim(None)])
    free = PodFacts.parse(_shared_pod(), "default", policy, view)
    assert off(free, "dra-node-1") is None


def _selecting(name: str, expression: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression": expression}}]}}]}}}}


def test_a_selector_failing_at_run_time_on_one_device_places_the_pod_nowhere(policy):
    """Issue 35, item 4: the allocator returns a CEL runtime error (allocator_stable.go,
    selectorsMatch) and kube-scheduler's Filter ends the whole attempt with it, though
    another node's A100s pass the selector (the real scheduler agrees: test_dra_chain.py).
    A selector that does not compile here stays doubt; one guarded with has() is fine."""
    a100 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"
    templates = [
        _selecting("fails-on-l4", f"{a100} || device.attributes['gpu.nvidia.com'].nope == 1"),
        _selecting("guarded", f"{a100} || (has(device.attributes['gpu.nvidia.com'].nope) "
                              "&& device.attributes['gpu.nvidia.com'].nope == 1)"),
        _selecting("unknown-fn", f"{a100} && device.attributes['gpu.nvidia.com'].productName"
                                 ".someFunctionOfANewerKubernetes()")]
    resources = [*docs("nvidia.yaml"), *templates]
    d = review(pod("fails-on-l4"), make_view(policy, resources), policy)
    assert d.allowed and any("fails at run time on node dra-node-2" in w for w in d.warnings)
    assert [n.node for n in d.nodes] == ["dra-node-2"] and "nope" in d.nodes[0].note
    strict = load_policy_text(POLICY + "onNoCandidates: deny\n")
    d = review(pod("fails-on-l4"), make_view(strict, resources), strict)
    assert not d.allowed and d.reason == Reason.NO_MATCHING_DEVICES
    assert "ends the pod's whole scheduling attempt" in d.message and "has(" in d.message
    d = review(pod("guarded"), make_view(policy, resources), policy)
    assert d.allowed and not d.warnings, d.to_json()
    assert {n.node for n in d.nodes} == {"dra-node-1"}
    d = review(pod("unknown-fn"), make_view(policy, resources), policy)
    assert d.allowed and not any("fails at run time" in w for w in d.warnings)
