"""Workers promote and prune the same kept copies at the same moment (each follows the same
file): one removing a version while another lists them must never cost the other its load."""

from __future__ import annotations

import os
from pathlib import Path

from webhook.server import filewatch
from webhook.server.filewatch import KeptCopies


def test_a_version_pruned_by_another_worker_mid_listing_costs_nothing(tmp_path, monkeypatch):
    f = tmp_path / "value"
    kept = KeptCopies(str(tmp_path / "state"))
    for text in ("1", "2", "3"):  # three versions: pruning has something to do
        f.write_text(text)
        assert kept.load("value", [str(f)], lambda ps: Path(ps[0]).read_text()) == text
    real_scandir = os.scandir

    def scandir_then_vanish(path):  # a test double: another worker prunes mid-listing
        with real_scandir(path) as it:
            entries = list(it)
        for e in entries:
            if e.name.startswith(".value-") and e.is_dir(follow_symlinks=False):
                for name in os.listdir(e.path):
                    os.unlink(os.path.join(e.path, name))
                os.rmdir(e.path)
        return iter(entries)

    monkeypatch.setattr(filewatch.os, "scandir", scandir_then_vanish)
    f.write_text("4")
    assert kept.load("value", [str(f)], lambda ps: Path(ps[0]).read_text()) == "4"
