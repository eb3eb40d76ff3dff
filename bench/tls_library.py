"""The same server on two OpenSSL builds (``python -m bench.tls_library``): does a newer TLS
library make gpupool's serving stack cheaper?

    python -m bench.tls_library [--lib DIR] [--rounds N] [--out bench/results/tls-library.json]

The e2e load scenario puts most of what gpupool adds above a do-nothing Go webhook in its
Python serving stack, and a third of a worker's CPU in OpenSSL when the API server opens new
connections. This Python links the system's OpenSSL 3.0; Debian trixie's images ship 3.5. Two
copies of one server, one on each library (``LD_LIBRARY_PATH=DIR``, the libraries
``bench/openssl.sh`` builds by default), both gpupool's and the do-nothing baseline's, take
the same wrk load in alternating rounds: kept-alive connections, and a new TLS connection per
request (``Connection: close``). Reported per request type: requests/s and the server's CPU
per request on each library, and the new library's ratios to the system's, taken round by
round. wrk itself stays on the system's library.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import cluster, load, machine
from bench.e2e_load import cpu_seconds
from bench.publish import publish
from harness.servers import free_port, stop_group

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ("gpupool", "baseline")
ENDPOINTS = ("mutate", "validate")
CONNECTIONS = {"keepalive": False, "close": True}


class Refused(Exception):
    """Input the run cannot use: one line for the user, exit 2."""


def library_version(lib: Path | None) -> str:
    """The OpenSSL this Python's ssl module loads with ``lib`` first on the library path."""
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    if lib is not None:
        env["LD_LIBRARY_PATH"] = str(lib)
    r = subprocess.run([sys.executable, "-c", "import ssl; print(ssl.OPENSSL_VERSION)"],
                       env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"--lib {lib}: Python's ssl module does not load with it ({last}); "
                      "give a directory with libssl.so.3 and libcrypto.so.3 of OpenSSL 3.x, "
                      "as bench/openssl.sh builds")
    return r.stdout.strip()


def check_library(lib: Path) -> tuple[str, str]:
    """(system version, ``lib``'s version), refusing a directory that changes nothing."""
    if not (lib / "libssl.so.3").is_file() or not (lib / "libcrypto.so.3").is_file():
        raise Refused(f"--lib {lib}: no libssl.so.3 and libcrypto.so.3 there; build them with "
                      "bench/openssl.sh, which prints the directory")
    system, other = library_version(None), library_version(lib)
    if system == other:
        raise Refused(f"--lib {lib}: Python loads the system's own {system} with it; give "
                      "another OpenSSL's libraries")
    return system, other


def ratios(rounds: list[dict[str, dict[str, float]]]) -> dict[str, float]:
    """Medians of the other library's figures over the system's, round by round, so drift in
    the machine's load hits both sides of every ratio."""
    return {key: statistics.median(r["other"][key] / r["system"][key] for r in rounds)
            for key in ("rps", "cpu_ms_per_request")}


def measure(tmp: Path, lib: Path, *, rounds: int, seconds: int) -> dict[str, Any]:
    from bench.servers import bodies, certs, server_cmd, start

    certs_dir = certs(tmp)
    ca = str(certs_dir / "ca.crt")
    nodes = cluster.write(tmp / "cluster-5000.json", 5000)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    procs: dict[tuple[str, str], tuple[subprocess.Popen[bytes], int]] = {}
    raw: dict[str, list[dict[str, dict[str, float]]]] = {}
    try:
        for server in SERVERS:
            for side, extra in (("system", {}), ("other", {"LD_LIBRARY_PATH": str(lib)})):
                port = free_port()
                procs[server, side] = (start(server_cmd(server, port, certs_dir, "--workers", "2",
                                                        view=("--cluster", str(nodes))),
                                             f"https://127.0.0.1:{port}", ca,
                                             tmp / f"{server}-{side}.log", cwd=ROOT,
                                             env={**env, **extra}), port)
        b = bodies()
        for rnd in range(rounds):
            sides = ["system", "other"] if rnd % 2 == 0 else ["other", "system"]
            for server in SERVERS:
                for endpoint in ENDPOINTS:
                    for conn, close in CONNECTIONS.items():
                        pair: dict[str, dict[str, float]] = {}
                        for side in sides:
                            proc, port = procs[server, side]
                            before = cpu_seconds({proc.pid: server})[server]
                            r = load.wrk(f"https://127.0.0.1:{port}/{endpoint}", b[endpoint],
                                         seconds=seconds, connections=8, close=close)
                            used = cpu_seconds({proc.pid: server})[server] - before
                            done = r["rps"] * seconds
                            pair[side] = {"rps": r["rps"],
                                          "cpu_ms_per_request": 1000 * used / max(done, 1),
                                          "errors": r["non2xx"]}
                        raw.setdefault(f"{server}/{endpoint}/{conn}", []).append(pair)
    finally:
        for proc, _ in procs.values():
            stop_group(proc)
    rows = {key: {"system_rps": statistics.median(r["system"]["rps"] for r in rs),
                  "other_rps": statistics.median(r["other"]["rps"] for r in rs),
                  "system_cpu_ms": statistics.median(r["system"]["cpu_ms_per_request"]
                                                     for r in rs),
                  "other_cpu_ms": statistics.median(r["other"]["cpu_ms_per_request"]
                                                    for r in rs),
                  "ratios": ratios(rs),
                  "errors": sum(r[s]["errors"] for r in rs for s in ("system", "other"))}
            for key, rs in raw.items()}
    return {"machine": machine.describe(), "rounds": rounds, "seconds": seconds,
            "connections": 8, "rows": rows, "each": raw}


def report(r: dict[str, Any]) -> str:
    lines = [f"One server on two OpenSSL builds ({machine.line(r['machine'])}; wrk, "
             f"{r['connections']} connections; median of {r['rounds']} alternating rounds of "
             f"{r['seconds']} s)",
             f"system: {r['system_openssl']}; other: {r['other_openssl']}",
             f"{'server/request/connections':<30} {'req/s':>15} {'ratio':>6} | "
             f"{'CPU ms per request':>19} {'ratio':>6} | errors"]
    for key, row in r["rows"].items():
        lines.append(f"{key:<30} {row['system_rps']:>7.0f}/{row['other_rps']:<7.0f} "
                     f"{row['ratios']['rps']:>6.2f} | {row['system_cpu_ms']:>9.3f}/"
                     f"{row['other_cpu_ms']:<9.3f} {row['ratios']['cpu_ms_per_request']:>6.2f}"
                     f" | {row['errors']}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tls_library", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", type=Path, help="directory with the other libssl.so.3 and "
                   "libcrypto.so.3 (default: build OpenSSL 3.5 with bench/openssl.sh)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--out", default=str(Path(__file__).parent / "results/tls-library.json"))
    a = p.parse_args()
    try:
        if a.rounds < 1 or a.seconds < 1:
            raise Refused(f"--rounds {a.rounds} --seconds {a.seconds}: give at least 1 each")
        lib = a.lib
        if lib is None:
            built = subprocess.run([str(ROOT / "bench/openssl.sh")], capture_output=True,
                                   text=True)
            if built.returncode != 0:
                last = (built.stderr.strip().splitlines() or ["no output"])[-1]
                raise Refused(f"bench/openssl.sh failed: {last}; or give --lib DIR")
            lib = Path(built.stdout.strip())
        system, other = check_library(lib)
        if not load.have_wrk():
            raise Refused("wrk not found; `make bench` installs it (apt-get install wrk)")
    except Refused as e:
        print(f"tls library: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpupool-tls-library-") as tmp:
        res = measure(Path(tmp), lib, rounds=a.rounds, seconds=a.seconds)
    res.update(system_openssl=system, other_openssl=other)
    publish(res, a.out, "bench.tls_library", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
