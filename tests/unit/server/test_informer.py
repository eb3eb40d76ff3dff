"""The reflector's list/watch/relist cycle against a test double of the Node API (the real
API server is exercised end to end in tests/e2e): events apply, an expired watch (410
Gone) relists at once, other failures back off."""

from __future__ import annotations

import json
import threading
import time

from webhook.cluster.watch import ClusterInformer, KeyedListing
from webhook.engine import ClusterView


class _Resp:
    def __init__(self, data: bytes = b"", lines: list[dict] | None = None,
                 hold: threading.Event | None = None) -> None:
        self.data = data
        self.status = 200
        self._lines = lines or []
        self._hold = hold

    def stream(self, amt=None, decode_content=False):
        for line in self._lines:
            yield json.dumps(line).encode() + b"\n"
        if self._hold is not None:
            self._hold.wait(5)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def _node(name: str, rv: str, pool: str | None = None) -> dict:
    labels = {"nvidia.com/gpu.present": "true"}
    if pool:
        labels["gpupool.io/pool"] = pool
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": labels}}


class FakeNodeAPI:
    """Test double: scripted list pages and watch sessions."""

    def __init__(self, lists: list[list[dict]], watches: list[list[dict]]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[str] = []
        self.idle = threading.Event()

    def __call__(self, **kwargs):
        if kwargs.get("watch"):
            self.calls.append(f"watch@{kwargs.get('resource_version')}")
            if self.watches:
                return _Resp(lines=self.watches.pop(0))
            return _Resp(hold=self.idle)
        self.calls.append("list")
        items = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        return _Resp(data=json.dumps({"metadata": {"resourceVersion": "10"},
                                      "items": items}).encode())


def _informer(nodes: FakeNodeAPI) -> tuple[ClusterInformer, ClusterView]:
    view = ClusterView()
    inf = ClusterInformer.__new__(ClusterInformer)
    inf.view = view
    view.set_synced(False)  # as __init__ does: not trusted until listed
    inf._listed = set()
    inf.keep_held = False  # the webhook's view
    inf.read_version = lambda: {"gitVersion": "v1.36.3"}
    from webhook.cluster.watch import Reflector

    empty_ns = FakeNodeAPI([[]], [])
    inf.nodes = Reflector("nodes", nodes, inf._nodes_listed, inf._node_event, None,
                          convert=inf._node_info, max_backoff=0.2)
    inf.namespaces = Reflector("namespaces", empty_ns, inf._ns_listed, inf._ns_event, None)
    inf.runtime_classes = Reflector("runtimeclasses", FakeNodeAPI([[]], []), inf._rc_listed,
                                    inf._rc_event, None)
    inf.optional = ()  # DRA and ClusterPolicy reflectors: tests/e2e runs them for real
    return inf, view


def _wait(cond, timeout=5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_events_apply_and_expired_watch_relists_at_once():
    api = FakeNodeAPI(
        lists=[[_node("a", "5")], [_node("a", "20"), _node("c", "21", "hami")]],
        watches=[[{"type": "ADDED", "object": _node("b", "11", "hami")},
                  {"type": "MODIFIED", "object": _node("a", "12", "hami")},
                  {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}},
                  {"type": "DELETED", "object": _node("b", "14")},
                  {"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                               "reason": "Expired", "message": "too old"}}]])
    inf, view = _informer(api)
    inf.start()
    try:
        # The relist counter moves just after the view is replaced: wait for both (and for
        # the namespaces' own thread, which readiness needs too).
        _wait(lambda: view.node("c") is not None and inf.nodes.relists == 2
              and inf.namespaces.synced.is_set())
        assert view.node("a").labels.get("gpupool.io/pool") is None  # from the relist
        assert view.node("b") is None
        assert inf.ready(60)[0]
        assert api.calls[:3] == ["list", "watch@10", "list"]  # no backoff pause between
    finally:
        api.idle.set()
        inf.stop()


def test_events_between_lists_are_applied():
    api = FakeNodeAPI(lists=[[]], watches=[[{"type": "ADDED", "object": _node("x", "11")}]])
    inf, view = _informer(api)
    inf.start()
    try:
        _wait(lambda: view.node("x") is not None)
        assert inf.nodes.relists == 1
    finally:
        api.idle.set()
        inf.stop()


def test_not_ready_until_synced_and_when_stale():
    api = FakeNodeAPI(lists=[[]], watches=[])
    inf, view = _informer(api)
    assert inf.ready(60) == (False, "nodes/namespaces not synced yet")
    assert not view.synced  # decisions say the view is missing (onNoNodeView)
    inf.start()
    try:
        _wait(lambda: inf.ready(60)[0])
        assert view.synced
        inf.nodes.last_sync -= 120
        ok, detail = inf.ready(60)
        assert not ok and "last in sync" in detail
    finally:
        api.idle.set()
        inf.stop()


def test_dra_objects_list_and_watch_into_the_view():
    """DeviceClasses, slices and templates as the resource.k8s.io/v1 lists and watch events
    carry them (list items without a kind)."""
    import functools

    from tests.unit.engine.test_dra import docs
    from webhook.cluster.watch import Reflector

    objs = docs("nvidia.yaml") + docs("claims.yaml")
    plain = [{k: v for k, v in o.items() if k != "kind"} for o in objs]
    classes = [o for o, raw in zip(plain, objs, strict=True) if raw["kind"] == "DeviceClass"]
    slices = [o for o, raw in zip(plain, objs, strict=True) if raw["kind"] == "ResourceSlice"]
    templates = [o for o, raw in zip(plain, objs, strict=True)
                 if raw["kind"] == "ResourceClaimTemplate"]
    added = json.loads(json.dumps(slices[1]))
    added["metadata"] = {"name": "dra-node-3-slice", "resourceVersion": "11"}
    added["spec"]["nodeName"] = "dra-node-3"
    view = ClusterView()
    inf = ClusterInformer.__new__(ClusterInformer)
    inf.view = view
    view.set_synced(False)  # as __init__ does: not trusted until listed
    inf._listed = set()
    inf.keep_held = False  # the webhook's view
    inf.read_version = lambda: {"gitVersion": "v1.36.3"}
    apis = {
        "DeviceClass": FakeNodeAPI([classes], [[{"type": "DELETED", "object": classes[1]}]]),
        "ResourceSlice": FakeNodeAPI([slices], [[{"type": "ADDED", "object": added},
                                                 {"type": "DELETED", "object": slices[0]}]]),
        "ResourceClaimTemplate": FakeNodeAPI([templates], [[
            {"type": "DELETED", "object": templates[0]}]]),
    }
    from webhook.engine import Slice

    reflectors = [Reflector(kind, api, functools.partial(inf._dra_listed, kind),
                            functools.partial(inf._dra_event, kind), None,
                            **({"convert": Slice.from_object} if kind == "ResourceSlice"
                               else {}))
                  for kind, api in apis.items()]
    for r in reflectors:
        r.start()
    try:
        _wait(lambda: view.device_classes() is not None
              and "mig.nvidia.com" not in (view.device_classes() or {})
              and [s.name for s in view.slices_for("dra-node-3")] == ["dra-node-3-slice"]
              and not view.slices_for("dra-node-1")
              and view.claim("ResourceClaimTemplate", "default", "one-gpu") is None
              and view.claim("ResourceClaimTemplate", "default", "two-gpus") is not None)
        assert set(view.device_classes() or {}) == {"gpu.nvidia.com"}
        assert [s.name for s in view.slices_for("dra-node-2")] == ["dra-node-2-gpu.nvidia.com"]
        spec = view.claim("ResourceClaimTemplate", "default", "two-gpus")
        assert spec is not None and spec.requests[0][0].amount == 2
    finally:
        for r in reflectors:
            r.stop()
        for api in apis.values():
            api.idle.set()


def test_cluster_policy_events_set_the_operator_way():
    """The GPU Operator's ClusterPolicy, as listed and as its watch changes it."""
    from webhook.api.delivery import CDI_DEVICES, VISIBLE_DEVICES

    view = ClusterView()
    inf = ClusterInformer.__new__(ClusterInformer)
    inf.view = view
    view.set_synced(False)  # as __init__ does: not trusted until listed
    inf._listed = set()
    inf.keep_held = False  # the webhook's view
    inf.read_version = lambda: {"gitVersion": "v1.36.3"}
    policies = KeyedListing(inf._set_operator)
    policies.listed([{"metadata": {"name": "cluster-policy"}, "spec": {}}])
    assert view.operator_way() == CDI_DEVICES
    policies.event("MODIFIED", {"metadata": {"name": "cluster-policy"},
                               "spec": {"cdi": {"enabled": False}}})
    assert view.operator_way() == VISIBLE_DEVICES
    policies.event("ADDED", {"metadata": {"name": "second"}, "spec": {}})
    assert view.operator_way() is None  # two policies: no guess
    policies.event("DELETED", {"metadata": {"name": "second"}})
    policies.event("DELETED", {"metadata": {"name": "cluster-policy"}})
    assert view.operator_way() is None


def test_hami_device_plugin_daemonset_events_set_hamis_way():
    from tests.unit.engine.test_hamiplugin import daemonset
    from webhook.api.delivery import CDI_DEVICES, VISIBLE_DEVICES

    view = ClusterView()
    inf = ClusterInformer.__new__(ClusterInformer)
    inf.view = view
    view.set_synced(False)  # as __init__ does: not trusted until listed
    inf._listed = set()
    inf.keep_held = False  # the webhook's view
    inf.read_version = lambda: {"gitVersion": "v1.36.3"}
    daemonsets = KeyedListing(inf._set_hami_plugins)
    daemonsets.listed([daemonset()])
    assert view.hami_way({"gpu": "on"}) == VISIBLE_DEVICES
    daemonsets.event("MODIFIED", daemonset("cdi-annotations"))
    assert view.hami_way({"gpu": "on"}) == CDI_DEVICES
    daemonsets.event("DELETED", daemonset())
    assert view.hami_way({"gpu": "on"}) is None and not view.knows_hami_plugins()


def test_each_listing_reads_the_release_so_an_upgrade_is_decided_as_its_new_release():
    gone = [{"type": "ERROR", "object": {"code": 410}}]
    nodes = FakeNodeAPI([[_node("a", "1")]], [gone, gone])
    inf, view = _informer(nodes)
    assert view.release().minor == 37 and view.release().source == "assumed"
    versions = iter([{"gitVersion": "v1.36.3"}, {"gitVersion": "v1.37.2"}])
    seen = []

    def read():
        seen.append(1)
        try:
            return next(versions)
        except StopIteration:
            raise ConnectionError("API server unreachable") from None

    inf.read_version = read
    inf.nodes.start()
    try:
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:  # list, relist, relist...
            time.sleep(0.01)
    finally:
        inf.nodes.stop()
    # read at the first listing (1.36), again after the expired watch (1.37), and a failed
    # read keeps the release the view had
    assert len(seen) >= 3
    assert (view.release().minor, view.release().source) == (37, "discovered")
