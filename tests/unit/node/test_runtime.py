"""Runtime configuration as the upstream files write it."""

from __future__ import annotations

from harness.kit import UPSTREAM
from harness.layouts import nvidia_config
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


# ------------------------------------------------------------------ imported drop-ins


#: The drop-in directory, named so that no real host has it (the test reads it under tmp).
CONF_D = "/etc/containerd-gpupool-test/conf.d"


def _dropin() -> str:
    return (RC / "from-go-literals/nvidia-ctk-installer-containerd-dropin.cdi-enabled.toml"
            ).read_text().replace("{{ .toolkitRoot }}", "/usr/local/nvidia")


def _main_importing(tmp_path, imports: str) -> str:
    main = tmp_path / "etc/containerd/config.toml"
    main.parent.mkdir(parents=True, exist_ok=True)
    main.write_text((RC / "containerd-default-1.7.toml").read_text().replace(
        "imports = []", f"imports = {imports}", 1))
    return str(main)


def test_the_nvidia_drop_in_a_config_imports_is_read(tmp_path):
    """The GPU Operator and nvidia-ctk put the NVIDIA runtime in a drop-in the main config
    imports: read alone, containerd's upstream default config says runc and no NVIDIA
    handler; with its imports (under the host root, as the DaemonSet mounts it), nvidia."""
    main = _main_importing(tmp_path, f'["{CONF_D}/*.toml"]')
    dropins = tmp_path / CONF_D.lstrip("/")
    dropins.mkdir(parents=True)
    (dropins / "99-nvidia.toml").write_text(_dropin())
    with open(main) as fh:
        assert "runc" in fh.read()  # what the main file alone says
    cfg = read_containerd_config(main, host_root=str(tmp_path))
    assert cfg.default_runtime == "nvidia" and cfg.cdi_enabled
    assert set(cfg.nvidia_handlers) >= {"nvidia", "nvidia-cdi", "nvidia-legacy"}


def test_imports_relative_nested_and_circular(tmp_path):
    main = _main_importing(tmp_path, '["conf.d/a.toml"]')
    conf = tmp_path / "etc/containerd/conf.d"
    conf.mkdir()
    (conf / "a.toml").write_text('version = 2\nimports = ["b.toml", "a.toml"]\n')
    (conf / "b.toml").write_text(_dropin())
    assert read_containerd_config(main).default_runtime == "nvidia"


def test_an_imported_plugin_section_replaces_the_whole_section_before_containerd_2(tmp_path):
    """containerd 1.x merges sections, not keys: the drop-in's CRI section replaces the main
    file's, cdi_spec_dirs included; containerd 2.x (config version 3) merges key by key."""
    from webhook.node.runtime import load_containerd_toml

    main = tmp_path / "config.toml"
    main.write_text('version = 2\nimports = ["d.toml"]\n'
                    '[plugins."io.containerd.grpc.v1.cri"]\n  cdi_spec_dirs = ["/custom"]\n')
    (tmp_path / "d.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        '  default_runtime_name = "nvidia"\n')
    cri = load_containerd_toml(str(main))["plugins"]["io.containerd.grpc.v1.cri"]
    assert "cdi_spec_dirs" not in cri and cri["containerd"]["default_runtime_name"] == "nvidia"
    main.write_text(main.read_text().replace("version = 2", "version = 3").replace(
        "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"))
    (tmp_path / "d.toml").write_text(
        'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd]\n'
        '  default_runtime_name = "nvidia"\n')
    rt = load_containerd_toml(str(main))["plugins"]["io.containerd.cri.v1.runtime"]
    assert rt["cdi_spec_dirs"] == ["/custom"]
    assert rt["containerd"]["default_runtime_name"] == "nvidia"


def test_an_import_that_cannot_be_read_is_an_error_naming_it(tmp_path):
    import pytest

    from webhook.node.runtime import RuntimeConfigError

    main = _main_importing(tmp_path, '["/nowhere/99-nvidia.toml"]')
    with pytest.raises(RuntimeConfigError, match=r"/nowhere/99-nvidia\.toml"):
        read_containerd_config(main)


def test_an_import_directory_out_of_sight_is_an_error_not_an_empty_glob(tmp_path):
    """Without --host-root the drop-in directory is not where the agent looks: that must not
    read as "no drop-ins" (which would hide the NVIDIA runtime); an existing empty one does."""
    import pytest

    from webhook.node.runtime import RuntimeConfigError

    main = _main_importing(tmp_path, f'["{CONF_D}/*.toml"]')
    with pytest.raises(RuntimeConfigError, match="--host-root"):
        read_containerd_config(main)
    (tmp_path / CONF_D.lstrip("/")).mkdir(parents=True)
    assert read_containerd_config(main, host_root=str(tmp_path)).default_runtime == "runc"


def test_unprivileged_envvar_switch(tmp_path):
    """The toolkit's accept-nvidia-visible-devices-envvar-when-unprivileged: true as its
    installer writes it and by default; false is carried into the inventory; anything else
    is a config error the agent reports."""
    from webhook.node.runtime import ENVVAR_UNPRIVILEGED_KEY, RuntimeConfigError

    installer = RC / "from-go-literals/nvidia-ctk-installer-toolkit-config.cdi-enabled.toml"
    assert read_nvidia_config(str(installer)).accept_envvar_unprivileged is True
    assert runtime_info(read_nvidia_config(str(installer)), None) \
        .accept_envvar_unprivileged is None  # the default goes unsaid
    off = tmp_path / "off.toml"
    off.write_text(installer.read_text().replace(f"{ENVVAR_UNPRIVILEGED_KEY} = true",
                                                 f"{ENVVAR_UNPRIVILEGED_KEY} = false"))
    rt = runtime_info(read_nvidia_config(str(off)), None)
    assert rt.accept_envvar_unprivileged is False
    assert rt.to_json()["acceptEnvvarUnprivileged"] is False
    bad = tmp_path / "bad.toml"
    bad.write_text(f'{ENVVAR_UNPRIVILEGED_KEY} = "no"\n')
    import pytest

    with pytest.raises(RuntimeConfigError, match=ENVVAR_UNPRIVILEGED_KEY):
        read_nvidia_config(str(bad))


def test_whether_containerd_hosts_nri_plugins(tmp_path):
    """containerd's own files: 1.7's default (NRI turned on), the 2.x full config (version 3,
    on by default), the toolkit's drop-in (version 2, no NRI key: either containerd may read
    it, so nothing is said). Only "off" is published."""
    assert read_containerd_config(str(RC / "containerd-default-1.7.toml")).nri_enabled is True
    v3 = RC / "from-docs/containerd-v3-full-config.toml"
    assert read_containerd_config(str(v3)).nri_enabled is True
    dropin = RC / "from-go-literals/nvidia-ctk-installer-containerd-dropin.cdi-enabled.toml"
    assert read_containerd_config(str(dropin)).nri_enabled is None
    for key in ("disable", "disable_connections"):
        text = (RC / "containerd-default-1.7.toml").read_text()
        assert f"    {key} = false\n" in text
        off = tmp_path / f"{key}.toml"
        off.write_text(text.replace(f"    {key} = false\n", f"    {key} = true\n", 1))
        cfg = read_containerd_config(str(off))
        assert cfg.nri_enabled is False
        info = runtime_info(None, cfg)
        assert info.containerd_nri is False and info.to_json()["containerdNRI"] is False
    assert "containerdNRI" not in runtime_info(None, read_containerd_config(str(v3))).to_json()
