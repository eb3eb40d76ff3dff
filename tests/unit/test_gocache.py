"""The build scripts' shared cache (tests/tools/gocache.sh) under the suite's own use: several
pytest workers building the same program at once, as two xdist workers each starting the
same release's control plane do on a fresh machine.

Each case runs a small build script written the way the real ones are (gocache_bin,
gocache_need, a build into $tmp, gocache_publish), whose "build" is slow and counted, so the
race the real builds had (a second build removing the directory the first one's caller had
started on) shows as a second build or a missing program."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOCACHE = ROOT / "tests" / "tools" / "gocache.sh"

SCRIPT = """\
set -euo pipefail
source {gocache}
gocache_bin demo key1
gocache_need prog data/stage.yaml
echo build >> "$COUNT"
sleep 0.5
printf '#!/bin/sh\\necho ran\\n' > "$tmp/prog"
chmod +x "$tmp/prog"
mkdir -p "$tmp/data" && echo x > "$tmp/data/stage.yaml"
gocache_publish
"""


def _script(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    script = tmp_path / "build.sh"
    script.write_text(SCRIPT.format(gocache=GOCACHE))
    # A stand-in for `go` on PATH (a double: the script only asks that Go is there).
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "go").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "go").chmod(0o755)
    env = {**os.environ, "GPUPOOL_CACHE": str(tmp_path / "cache"), "COUNT": str(tmp_path / "count"),
           "PATH": f"{fake_bin}:{os.environ['PATH']}"}
    return script, env


def test_concurrent_builds_of_one_key_build_once_and_hand_every_caller_a_whole_directory(
        tmp_path: Path) -> None:
    script, env = _script(tmp_path)
    procs = [subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in outs]
    bins = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(bins) == 1
    bin_dir = Path(bins.pop())
    # One builder; the three others waited and were handed its build.
    assert (tmp_path / "count").read_text().splitlines() == ["build"]
    assert subprocess.run([str(bin_dir / "prog")], capture_output=True, text=True).stdout == "ran\n"
    # Nothing half-built left beside it.
    assert sorted(p.name for p in bin_dir.parent.iterdir()) == ["bin", "build.lock"]


def test_an_incomplete_cached_directory_is_rebuilt_and_replaced(tmp_path: Path) -> None:
    script, env = _script(tmp_path)
    first = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                           check=True)
    bin_dir = Path(first.stdout.strip().splitlines()[-1])
    (bin_dir / "data" / "stage.yaml").unlink()
    again = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                           check=True)
    assert Path(again.stdout.strip().splitlines()[-1]) == bin_dir
    assert (bin_dir / "data" / "stage.yaml").is_file()
    assert (tmp_path / "count").read_text().splitlines() == ["build", "build"]
    # A third call finds it whole and builds nothing.
    subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True)
    assert (tmp_path / "count").read_text().splitlines() == ["build", "build"]


def test_every_build_script_goes_through_the_shared_lock() -> None:
    """A build script that publishes into the cache by hand (rm and mv of its own) is the race
    again: each one names gocache_need and gocache_publish."""
    scripts = [p for p in ROOT.glob("**/*.sh")
               if ".venv" not in p.parts and p != GOCACHE and "gocache.sh" in p.read_text()]
    assert len(scripts) >= 12
    for script in scripts:
        text = script.read_text()
        assert "gocache_need" in text or "gocache_main" in text, script
        assert "rm -rf \"$bin\"" not in text, script
