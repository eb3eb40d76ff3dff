"""DRA device selectors judged by Kubernetes itself: every expression of gpupool's CEL tables
(tests/unit/engine/test_dra.py) and a runtime failure, on a device from the NVIDIA fixture,
evaluated by ``cel-judge`` (tests/celjudge: k8s.io/dynamic-resource-allocation/cel v0.35.4,
the compiler and environment kube-scheduler's allocator uses) and by gpupool. Where gpupool
gives an answer it must be Kubernetes', and there is no expression it cannot compile (doubt)
left among them."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import yaml

from harness.gobuild import built
from harness.kit import ROOT
from tests.unit.engine.test_dra import KUBERNETES_CEL, MISSING_DOMAIN
from tests.unit.engine.test_routing import OTHER_QUANTITIES, ZERO_QUANTITIES
from webhook.engine import Slice, resource_names, selector_verdict

BUILD = ROOT / "tests" / "celjudge" / "build.sh"
FIXTURE = ROOT / "tests" / "fixtures" / "dra" / "nvidia.yaml"
#: what gpupool cannot compile though Kubernetes can (docs/dra.md): doubt, never a verdict
KNOWN_GAPS: tuple[str, ...] = ()
EXTRA = [
    # reads a missing attribute after a false left side: a runtime failure in both
    "device.attributes['gpu.nvidia.com'].productName == 'none' || "
    "device.attributes['gpu.nvidia.com'].nope == 1",
    "cel.bind(g, device.attributes['gpu.nvidia.com'], g.productName.startsWith('NVIDIA'))",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('a100')",
    "[1, 2, 3].indexOf(2) == 1",
    # corners of the URL library this judge corrected: a fragment is dropped, a space is
    # allowed, the scheme is lower-cased
    "url('/p#x').getEscapedPath() == '/p' && isURL('/p#x')",
    "url('https://e.com/a?b=1#f').getQuery()['b'] == ['1']",
    "isURL('https://e.com/a b') && url('HTTPS://E.com/').getScheme() == 'https'",
    "url('https://e.com/a%20b').getEscapedPath() == '/a%20b'",
    "url('https://e.com').getEscapedPath() == '' && !isURL('example.com')",
    # corners of the IP, CIDR, lists and sets libraries
    "isIP('192.168.001.1')",
    "isIP('::ffff:1.2.3.4')",
    "isIP('fe80::1%eth0')",
    "ip('192.168.1.1').isGlobalUnicast()",
    "ip('255.255.255.255').isGlobalUnicast()",
    "ip('ff02::1').isLinkLocalMulticast()",
    "ip('224.0.0.255').isLinkLocalMulticast()",
    "ip('224.0.1.1').isLinkLocalMulticast()",
    "ip.isCanonical('::ffff:1.2.3.4')",
    "ip.isCanonical('2001:db8:0:0:0:0:0:1')",
    "isCIDR('10.1.2.3/8')",
    "isCIDR('10.0.0.0/08')",
    "isCIDR('::ffff:1.2.3.4/120')",
    "cidr('10.0.0.0/8').containsIP('::1')",
    "cidr('::/0').containsIP('1.2.3.4')",
    "cidr('10.0.0.0/8').containsCIDR('10.0.0.0/4')",
    "ip('127.0.0.2').isLoopback()",
    "ip('0.0.0.0').isUnspecified()",
    "ip('fe80::1').isLinkLocalUnicast()",
    "[1.0, 2.5].sum() == 3.5",
    "[].isSorted()",
    "['b','a'].isSorted()",
    "sets.equivalent([1,2],[2,1,1])",
    "[2,1].max() == 2",
    "ip('1.2.3.4').family() == 4",
    "cidr('192.168.0.0/16').ip() == ip('192.168.0.0')",
    "cidr('2001:db8::/32').prefixLength() == 32",
    # the regex library, the strings' format, and comprehensions over a domain's map
    "device.attributes['gpu.nvidia.com'].productName.find('A[0-9]+') == 'A100'",
    "device.attributes['gpu.nvidia.com'].productName.findAll('[0-9]+').size() >= 1",
    "'x1y22'.findAll('[0-9]+', 1) == ['1']",
    "'%s has %d'.format(['gpu', 2]) == 'gpu has 2'",
    "device.attributes['gpu.nvidia.com'].exists(k, k == 'productName')",
    "device.attributes['gpu.nvidia.com'].all(k, k != 'nope')",
    "device.capacity['gpu.nvidia.com'].exists_one(k, k == 'memory')",
    "device.attributes['gpu.nvidia.com'].filter(k, k.startsWith('product')).size() == 1",
    "device.attributes['no.such.domain'].size() == 0",
    # the lists' indexOf and lastIndexOf beside the strings' own
    "[1, 2, 1].lastIndexOf(1) == 2 && ['a', 'b'].indexOf('b') == 1",
    "[1.5, 2.5].indexOf(3.5) == -1 && 'gpu-gpu'.lastIndexOf('gpu') == 4",
    "[device.attributes['gpu.nvidia.com'].index].indexOf(0) == 0",
]


def _slice_device() -> tuple[dict[str, Any], dict[str, Any]]:
    """The first device of the fixture's first slice: as the judge takes it (the slice's
    JSON, names qualified by the driver) and as gpupool reads it (``Slice.device``)."""
    obj = next(d for d in yaml.safe_load_all(FIXTURE.read_text())
               if d and d.get("kind") == "ResourceSlice")
    raw = obj["spec"]["devices"][0]
    driver = obj["spec"]["driver"]
    qualified = {(k if "/" in k else f"{driver}/{k}"): v
                 for k, v in (raw.get("attributes") or {}).items()}
    capacity = {(k if "/" in k else f"{driver}/{k}"): v["value"]
                for k, v in (raw.get("capacity") or {}).items()}
    judge = {"driver": driver, "attributes": qualified, "capacity": capacity}
    s = Slice.from_object(obj)
    assert s is not None
    return judge, s.device(0)


def test_gpupool_evaluates_selectors_as_kubernetes_does():
    judge_device, ours = _slice_device()
    exprs = [e for e, _ in KUBERNETES_CEL] + [e for e, _ in MISSING_DOMAIN] + EXTRA
    lines = "\n".join(json.dumps({"expression": e, "device": judge_device}) for e in exprs)
    r = subprocess.run([str(built(BUILD, "cel-judge") / "cel-judge")], input=lines + "\n",
                       capture_output=True, text=True, timeout=120, check=True)
    answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(answers) == len(exprs)
    gaps, agreed = [], 0
    for expr, k8s in zip(exprs, answers, strict=True):
        assert "compileError" not in k8s, (expr, k8s)  # every case is valid Kubernetes CEL
        got = selector_verdict(expr, ours)
        if got is None:  # gpupool cannot compile it: doubt
            gaps.append(expr)
            assert any(g in expr for g in KNOWN_GAPS), (expr, k8s)
            continue
        if "runtimeError" in k8s:
            assert isinstance(got, str), (expr, got, k8s)
        else:
            assert got is k8s["match"], (expr, got, k8s)
        agreed += 1
    print(f"{agreed} agreed with Kubernetes, {len(gaps)} doubt: {gaps}")
    assert agreed == len(exprs) and not gaps


def test_which_quantities_ask_for_nothing_is_kubernetes_parsers_answer():
    """Whether a container's request asks for nothing (so the pod is no GPU pod) follows
    k8s.io/apimachinery's own quantity parser, reached through CEL's ``quantity()``: every
    quantity string the API server accepts is zero for gpupool exactly when it equals 0.
    Strings it refuses never reach a webhook in a created pod; gpupool counts them as asking."""
    judge_device, _ = _slice_device()
    texts = [q for q in ZERO_QUANTITIES + OTHER_QUANTITIES if isinstance(q, str)]
    exprs = [e for q in texts for e in (
        f"isQuantity('{q}')",
        f"isQuantity('{q}') && quantity('{q}').compareTo(quantity('0')) == 0")]
    lines = "\n".join(json.dumps({"expression": e, "device": judge_device}) for e in exprs)
    r = subprocess.run([str(built(BUILD, "cel-judge") / "cel-judge")], input=lines + "\n",
                       capture_output=True, text=True, timeout=120, check=True)
    answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(answers) == len(exprs) and all("match" in a for a in answers), answers
    def asks_nothing(q: str) -> bool:
        return not resource_names({"containers": [{"resources": {"limits": {"x/y": q}}}]})

    judged = 0
    for i, q in enumerate(texts):
        parses, zero = answers[2 * i]["match"], answers[2 * i + 1]["match"]
        if parses:
            assert asks_nothing(q) is zero, (q, zero)
            judged += 1
        else:
            assert not asks_nothing(q) or q.strip() != q, q  # refused: asks, or padded
    print(f"{judged} of {len(texts)} quantities judged by Kubernetes' parser")
    assert judged >= len(texts) - 2, judged  # only " 0 " and "junk" are refused
