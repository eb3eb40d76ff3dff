"""Runtime configuration as the upstream files write it."""

from __future__ import annotations

from tests.conftest import UPSTREAM
from tests.layouts import nvidia_config
from webhook.node.runtime import read_containerd_config, read_nvidia_config, runtime_info

RC = UPSTREAM / "runtime-config"


def test_default_toolkit_config():
    cfg = read_nvidia_config(
        str(RC / "from-go-literals/nvidia-container-runtime-config.default.toml"))
    assert cfg.mode == "auto" and cfg.default_kind == "nvidia.com/gpu"
    assert cfg.spec_dirs == ("/etc/cdi", "/var/run/cdi")


def test_empty_and_historical_configs_mean_defaults():
    for name in ("nvidia-toolkit-test-input-config.toml",
                 "nvidia-container-runtime-config.toml.ubuntu",
                 "nvidia-container-runtime-config.toml.rpm-yum"):
        cfg = read_nvidia_config(str(RC / name))
        assert cfg.default_kind == "nvidia.com/gpu", name
        assert cfg.mode == "auto", name


def test_operator_overrides(tmp_path):
    (tmp_path / "c.toml").write_text(nvidia_config("cdi", "management.nvidia.com/gpu"))
    cfg = read_nvidia_config(str(tmp_path / "c.toml"))
    assert (cfg.mode, cfg.default_kind) == ("cdi", "management.nvidia.com/gpu")


def test_containerd_17_cdi_enabled():
    for name in ("containerd-default-1.7.toml", "containerd-custom-1.7.toml"):
        cfg = read_containerd_config(str(RC / name))
        assert cfg.cdi_enabled, name
        assert cfg.spec_dirs == ("/etc/cdi", "/var/run/cdi")


def test_containerd_16_has_no_cdi():
    assert not read_containerd_config(str(RC / "containerd-default-1.6.toml")).cdi_enabled


def test_containerd_v3():
    cfg = read_containerd_config(str(RC / "from-docs/containerd-v3-full-config.toml"))
    assert cfg.cdi_enabled and "/var/run/cdi" in cfg.spec_dirs


def test_operator_handlers_derived_from_binary_names():
    cfg = read_containerd_config(
        str(RC / "from-go-literals/nvidia-ctk-installer-containerd-dropin.cdi-enabled.toml"))
    assert cfg.nvidia_handlers == {"nvidia": "config", "nvidia-cdi": "cdi",
                                   "nvidia-legacy": "legacy"}
    assert cfg.default_runtime == "nvidia"
    from webhook.node.runtime import NvidiaConfig

    rt = runtime_info(NvidiaConfig(mode="cdi", default_kind="management.nvidia.com/gpu"), cfg)
    assert rt.uses_cdi(None) and rt.uses_cdi("nvidia-cdi") and not rt.uses_cdi("nvidia-legacy")
    rt = runtime_info(NvidiaConfig(mode="legacy"), cfg)
    assert not rt.uses_cdi(None) and rt.uses_cdi("nvidia-cdi")
