"""The node's real GPUs from the NVIDIA driver's /proc entries, and what gpupool makes of them."""

from __future__ import annotations

import json

from harness.layouts import UUIDS, fake_driver, write_layout
from webhook.api.inventory import parse_inventory
from webhook.node.agent import Observer
from webhook.node.driver import driver_gpus


def test_reads_every_gpu_uuid(tmp_path):
    assert driver_gpus(str(fake_driver(tmp_path))) == (tuple(sorted(UUIDS)), [])


def test_no_driver_is_no_gpus_and_no_error(tmp_path):
    assert driver_gpus(str(tmp_path / "absent")) == ((), [])


def test_an_unreadable_entry_is_reported_and_the_rest_kept(tmp_path):
    gpus = fake_driver(tmp_path)
    (gpus / "0000:99:00.0").mkdir()
    (gpus / "0000:99:00.0" / "information").write_text("Model: broken\n")
    found, errors = driver_gpus(str(gpus))
    assert found == tuple(sorted(UUIDS))
    assert errors == [(str(gpus / "0000:99:00.0" / "information"), "no GPU UUID line")]


def test_agent_publishes_the_driver_gpus_and_nothing_new_without_them(tmp_path):
    paths = write_layout(tmp_path / "n", "operator-management")
    args = ([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
            str(paths["containerd"]))
    with_driver = Observer(*args, driver_gpus_dir=str(fake_driver(tmp_path))).observe()
    assert parse_inventory(with_driver.dumps()).gpus == tuple(sorted(UUIDS))
    without = Observer(*args, driver_gpus_dir=str(tmp_path / "absent")).observe()
    assert "gpus" not in json.loads(without.dumps())  # the annotation is as before
