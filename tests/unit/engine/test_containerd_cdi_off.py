"""containerd with CDI off (``enable_cdi = false``, containerd 1.7's default): a device
plugin's CDI names reach a resolver only as ``cdi.k8s.io/`` annotations that the handler
passes to the NVIDIA runtime in ``cdi`` or ``auto`` mode (``delivery.cdi_names_path``);
elsewhere the container starts with its variables alone, and a pod's own
NVIDIA_VISIBLE_DEVICES is what the runtime resolves. The restarts of the same answers on the
real runtime are in tests/integration/test_restart_corpus.py."""

from __future__ import annotations

from harness.kit import gpu_pod
from harness.layouts import CONTAINERD_SRC
from tests.plugincases import operator_learned
from tests.unit.engine.test_own_devices import own
from tests.unit.engine.test_steering import agent_node, decide, terms
from webhook.api import delivery
from webhook.api.inventory import parse_inventory
from webhook.engine.core.decision import Reason
from webhook.node.runtime import read_containerd_config, runtime_info

PASSED = 'container_annotations = ["cdi.k8s.io/*"]'


def cdi_off(passes: bool = True):
    """containerd's config with CDI off; ``passes``: its NVIDIA handlers pass the CDI
    annotations on, as ``nvidia-ctk`` configures them."""
    def edit(text: str) -> str:
        text = text.replace("enable_cdi = true", "enable_cdi = false")
        if passes:
            text = text.replace('runtime_type = "io.containerd.runc.v2"',
                                f'runtime_type = "io.containerd.runc.v2"\n          {PASSED}')
        return text
    return edit


def node(tmp_path, strategy: str, *, passes: bool = True, mode: str | None = None,
         name: str = "op-1") -> dict:
    return agent_node(tmp_path / name, name, None, "device-plugin", register=False,
                      plugins=operator_learned(strategy, name), containerd=cdi_off(passes),
                      mode=mode)


def plain() -> dict:
    return gpu_pod("p", limits={"nvidia.com/gpu": 1})


def test_the_agent_reads_which_annotations_each_nvidia_handler_passes(tmp_path):
    path = tmp_path / "containerd.toml"
    path.write_text(cdi_off()(CONTAINERD_SRC.read_text()))
    cfg = read_containerd_config(str(path))
    assert not cfg.cdi_enabled
    assert cfg.container_annotations["nvidia"] == ("cdi.k8s.io/*",)
    rt = runtime_info(None, cfg)
    assert rt.handler_annotations is not None
    assert rt.handler_annotations["nvidia-legacy"] == ("cdi.k8s.io/*",)
    # published, and read back, only where containerd leaves the names to the runtime
    inv = parse_inventory(node(tmp_path, "cdi-annotations")["metadata"]["annotations"][
        "gpupool.io/cdi-inventory"])
    assert inv.runtime.handler_annotations == {"nvidia": ("cdi.k8s.io/*",),
                                               "nvidia-cdi": ("cdi.k8s.io/*",),
                                               "nvidia-legacy": ("cdi.k8s.io/*",)}
    path.write_text(CONTAINERD_SRC.read_text())
    assert runtime_info(None, read_containerd_config(str(path))).handler_annotations is None


def test_containerd_matches_annotation_keys_as_go_path_match():
    key = delivery.PLUGIN_ANNOTATION_KEY
    assert delivery.passes_annotation(["cdi.k8s.io/*"], key)
    assert delivery.passes_annotation(["other/*", "cdi.k8s.io/nvidia-*"], key)
    assert not delivery.passes_annotation(["cdi.k8s.io*"], "cdi.k8s.io/x/y")  # * stops at /
    assert not delivery.passes_annotation(["*"], key)
    assert not delivery.passes_annotation([], key)


def test_cri_names_are_dropped_and_the_pods_own_value_is_all_its_containers_get(tmp_path):
    n = node(tmp_path, "cdi-cri")
    rv, _, _ = decide([n], plain())
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    assert "containerd drops them" in rv.final.message, rv.final.message
    assert "Fix: turn containerd's CDI on on those nodes" in rv.final.message
    # cdi mode: "all" is the management spec's device, "0" no spec defines
    rv, _, _ = decide([n], own("all"))
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    rv, _, _ = decide([n], own("0"))
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    assert "op-1 lacks management.nvidia.com/gpu=0" in rv.final.message
    # not "remove the variable": it is all the containers get here
    assert "Fix: set NVIDIA_VISIBLE_DEVICES in the pod's GPU containers to devices" in \
        rv.final.message
    # a second GPU container that sets nothing gets nothing
    rv, _, _ = decide([n], own("all", second=True))
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED


def test_annotations_reach_the_runtime_only_through_a_handler_that_passes_them(tmp_path):
    rv, _, _ = decide([node(tmp_path, "cdi-annotations")], plain())
    assert rv.final.allowed and not rv.final.warnings, rv.final.to_json()
    shut = node(tmp_path, "cdi-annotations", passes=False, name="op-2")
    rv, _, _ = decide([shut], plain())
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    assert "passes no cdi.k8s.io/ annotation" in rv.final.message
    assert decide([shut], own("all"))[0].final.allowed


def test_only_cdi_and_auto_modes_read_the_annotations(tmp_path):
    """toolkit v1.20.2 internal/runtime/runtime_factory.go, initRuntimeModeAndImage: every
    other mode drops the annotation prefixes before anything reads them."""
    assert decide([node(tmp_path, "cdi-annotations", mode="auto")], plain())[0].final.allowed
    legacy = node(tmp_path, "cdi-annotations", mode="legacy", name="op-2")
    rv, _, _ = decide([legacy], plain())
    assert not rv.final.allowed and rv.final.reason == Reason.GPU_NOT_DELIVERED
    assert "legacy mode, which ignores CDI annotations" in rv.final.message
    # the legacy hook reads the pod's own value
    assert decide([legacy], own("all"))[0].final.allowed


def test_a_pod_with_a_runtime_class_is_steered_node_by_node(tmp_path):
    """The agent's label judges the default handler only; here the handler decides whether
    the names reach the runtime."""
    good = node(tmp_path, "cdi-annotations")
    bad = node(tmp_path, "cdi-annotations", mode="legacy", name="op-2")
    pod = plain()
    pod["spec"]["runtimeClassName"] = "nvidia"
    rv, _, _ = decide([good, bad], pod)
    assert rv.final.allowed, rv.final.to_json()
    fields = [e for t in terms(pod, rv.mutation.patch) for e in t.get("matchFields", [])]
    assert fields == [{"key": "metadata.name", "operator": "NotIn", "values": ["op-2"]}]
