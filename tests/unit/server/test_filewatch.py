"""One rule for files that change under the server (certificates, policy): a change is
picked up, a version that does not load never replaces the last good one, and the next
change is tried again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from webhook.server.filewatch import KeptCopies, Watched


def _load(path):
    def load(paths) -> int:
        path = Path(paths[0])
        text = path.read_text()
        if not text.strip().isdigit():
            raise ValueError(f"{path.name}: not a number: {text!r}")
        return int(text)
    return load


def _touch_later(path, text: str) -> None:
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a new identity


def test_changes_are_followed_and_bad_versions_never_served(tmp_path):
    f = tmp_path / "value"
    f.write_text("1")
    seen: list[int] = []
    w = Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,),
                on_change=seen.append)
    assert w.value == 1 and not w.check()  # unchanged: not loaded again
    _touch_later(f, "2")
    assert w.value == 2 and seen == [2] and w.reloads == 1
    _touch_later(f, "two")
    assert w.value == 2  # the last good one keeps serving
    assert w.failed_reloads == 1 and "not a number" in (w.last_error or "")
    assert not w.check()  # the bad version is not retried until it changes
    _touch_later(f, "3")
    assert w.value == 3 and w.last_error is None and seen == [2, 3]


def test_a_pair_is_one_value_and_a_missing_file_is_a_change(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("1")
    b.write_text("2")

    def load(paths) -> int:
        return sum(int(Path(p).read_text()) for p in paths)

    w = Watched("pair", [str(a), str(b)], load, interval=0, errors=(OSError, ValueError))
    assert w.value == 3
    b.unlink()
    assert w.value == 3 and w.failed_reloads == 1  # mid-rotation: keep serving
    b.write_text("5")
    assert w.value == 6


def test_reads_check_at_most_every_interval(tmp_path):
    f = tmp_path / "value"
    f.write_text("1")
    w = Watched("value", [str(f)], _load(f), interval=3600, errors=(ValueError,))
    _touch_later(f, "2")
    assert w.value == 1  # not due yet
    assert w.check() and w.value == 2


def test_a_first_load_that_fails_is_the_callers_error(tmp_path):
    f = tmp_path / "value"
    f.write_text("x")
    with pytest.raises(ValueError):
        Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,))
    with pytest.raises(ValueError):  # nothing kept yet in this state directory either
        Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,),
                kept=KeptCopies(str(tmp_path / "state")))


def test_a_process_that_starts_after_a_bad_update_serves_the_last_good_copy(tmp_path):
    """What a respawned worker meets: the file went bad after an earlier process loaded it."""
    f = tmp_path / "value"
    f.write_text("1")
    kept = KeptCopies(str(tmp_path / "state"))
    first = Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,), kept=kept)
    _touch_later(f, "2")
    assert first.value == 2  # the newer good version is the one kept
    _touch_later(f, "garbage")
    assert first.value == 2 and first.last_error
    later = Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,), kept=kept)
    assert later.value == 2 and later.serving_kept
    assert "not a number" in (later.last_error or "") and "last good copy" in later.last_error
    assert not later.check()  # the bad version is not retried until it changes
    _touch_later(f, "3")
    assert later.value == 3 and not later.serving_kept and later.last_error is None
    f.unlink()  # gone entirely: still the kept copy
    again = Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,), kept=kept)
    assert again.value == 3 and again.serving_kept


def test_kept_copies_are_private_and_keyed_by_the_files_they_copy(tmp_path):
    f, g = tmp_path / "f", tmp_path / "g"
    f.write_text("1")
    g.write_text("7")
    kept = KeptCopies(str(tmp_path / "state"))
    Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,), kept=kept)
    (copy,) = kept.kept("value", [str(f)]) or []
    assert Path(copy).read_text() == "1" and Path(copy).stat().st_mode & 0o077 == 0
    assert kept.kept("value", [str(g)]) is None  # another file never falls back to f's copy
    g.write_text("x")
    with pytest.raises(ValueError):
        Watched("value", [str(g)], _load(g), interval=0, errors=(ValueError,), kept=kept)


def test_a_state_directory_that_cannot_take_a_copy_costs_only_the_fallback(tmp_path):
    f = tmp_path / "value"
    f.write_text("5")
    blocker = tmp_path / "state"
    blocker.write_text("a file where the directory should be")
    kept = KeptCopies(str(blocker))
    w = Watched("value", [str(f)], _load(f), interval=0, errors=(ValueError,), kept=kept)
    assert w.value == 5 and kept.kept("value", [str(f)]) is None
