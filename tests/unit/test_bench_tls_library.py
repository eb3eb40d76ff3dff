"""The TLS library comparison's input checks and arithmetic (the comparison itself runs by
hand, `python -m bench.tls_library`, not here). The checks load the real ssl module in a
child Python with the directory given."""

from __future__ import annotations

import ssl
import sys
from pathlib import Path

import pytest

from bench import tls_library


def _run(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(tls_library, "measure",
                        lambda *a, **k: pytest.fail("the comparison started"))
    monkeypatch.setattr(sys, "argv", ["tls_library", *args])
    code = tls_library.main()
    return code, capsys.readouterr().err


def _system_libraries(into: Path) -> Path:
    """Links to the very libssl and libcrypto this Python's ssl module mapped (their own
    directory may hold other libraries, a system libpython among them, that must not be put
    first on the library path)."""
    assert ssl.OPENSSL_VERSION  # the module, and so both libraries, are loaded here
    mapped = {Path(line.split()[-1]) for line in Path("/proc/self/maps").read_text().splitlines()
              if line.endswith(("/libssl.so.3", "/libcrypto.so.3"))}
    assert {p.name for p in mapped} == {"libssl.so.3", "libcrypto.so.3"}, mapped
    for path in mapped:
        (into / path.name).symlink_to(path)
    return into


def test_a_directory_without_the_libraries_is_refused_in_one_line(tmp_path, monkeypatch,
                                                                   capsys):
    code, err = _run(monkeypatch, capsys, "--lib", str(tmp_path))
    assert code == 2
    assert err == (f"tls library: --lib {tmp_path}: no libssl.so.3 and libcrypto.so.3 there; "
                   "build them with bench/openssl.sh, which prints the directory\n")


def test_libraries_python_cannot_load_are_refused_with_the_loaders_words(tmp_path,
                                                                           monkeypatch,
                                                                           capsys):
    for name in ("libssl.so.3", "libcrypto.so.3"):
        (tmp_path / name).write_text("not a shared object\n")
    code, err = _run(monkeypatch, capsys, "--lib", str(tmp_path))
    assert code == 2
    assert err.startswith(f"tls library: --lib {tmp_path}: Python's ssl module does not "
                          "load with it (")
    assert ("libssl.so.3" in err or "libcrypto.so.3" in err) and err.count("\n") == 1


def test_the_systems_own_library_is_refused_because_it_compares_nothing(tmp_path, monkeypatch,
                                                                        capsys):
    lib = _system_libraries(tmp_path)
    code, err = _run(monkeypatch, capsys, "--lib", str(lib))
    assert code == 2
    assert err == (f"tls library: --lib {lib}: Python loads the system's own "
                   f"{ssl.OPENSSL_VERSION} with it; give another OpenSSL's libraries\n")


def test_no_rounds_is_refused_before_any_library_is_looked_at(monkeypatch, capsys):
    monkeypatch.setattr(tls_library, "check_library",
                        lambda lib: pytest.fail("looked at the library"))
    code, err = _run(monkeypatch, capsys, "--lib", "/nonexistent", "--rounds", "0")
    assert code == 2
    assert err == "tls library: --rounds 0 --seconds 5: give at least 1 each\n"


def test_ratios_are_medians_of_each_rounds_own_ratio():
    # Round by round the other library is 2x, 2x and 0.5x the system's: the median of those
    # is 2. The medians' ratio would be 1 (medians 100 and 100), hiding that it won twice.
    rounds = [
        {"system": {"rps": 50.0, "cpu_ms_per_request": 1.0},
         "other": {"rps": 100.0, "cpu_ms_per_request": 0.5}},
        {"system": {"rps": 100.0, "cpu_ms_per_request": 1.0},
         "other": {"rps": 200.0, "cpu_ms_per_request": 0.5}},
        {"system": {"rps": 400.0, "cpu_ms_per_request": 1.0},
         "other": {"rps": 50.0, "cpu_ms_per_request": 2.0}},
    ]
    assert tls_library.ratios(rounds) == {"rps": 2.0, "cpu_ms_per_request": 0.5}
