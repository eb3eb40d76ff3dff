"""The CLI's whole surface with bad input, as a table: every mistake ends in one line on stderr
that names the input, exit 2, no traceback, and nothing half-written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from harness.kit import ROOT
from harness.servers import free_port, generate_certs, kubeconfig_for

DEMO = ROOT / "webhook/data/demo-cluster.yaml"
POD = ROOT / "docs/examples/pod-hami.yaml"


@dataclass
class Case:
    id: str
    args: list[str]
    expect: str  # a piece of the one error line: the input it names, or the fix
    env: dict[str, str] | None = None


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("cli-errors")
    certs = tmp / "certs"
    generate_certs(certs)
    (tmp / "no-nodes.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    (tmp / "bad.yaml").write_text("kind: Pod\nmetadata: [unclosed\n")
    (tmp / "policy.yaml").write_text("apiVersion: gpupool.io/v1alpha1\nkind: PoolPolicy\n")
    (tmp / "empty-dir").mkdir()
    (tmp / "a-file").write_text("x")
    (tmp / "spec-5.json").write_text('{"apiVersion": "v1", "kind": "Pod", "metadata": '
                                     '{"name": "five"}, "spec": 5}')
    (tmp / "no-containers.yaml").write_text("kind: Pod\nmetadata: {name: bare}\nspec: {}\n")
    (tmp / "not-kubeconfig").write_text("just: [text\n")
    (tmp / "home").mkdir()
    generate_certs(tmp / "half-ca")  # a CA whose key went missing
    (tmp / "half-ca/ca.key").unlink()
    return {"tmp": tmp, "certs": certs,
            "refused": kubeconfig_for(tmp / "refused.kubeconfig", f"https://127.0.0.1:{free_port()}")}


def cases(f: dict[str, Path]) -> list[Case]:
    tmp, certs = f["tmp"], f["certs"]
    tls = ["--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key")]
    no_kube = {"HOME": str(tmp / "home"), "KUBECONFIG": ""}
    return [
        Case("unknown-command", ["frobnicate"], "invalid choice: 'frobnicate'"),
        Case("check-no-file", ["check"], "-f/--filename"),
        Case("check-missing-file", ["check", "-f", str(tmp / "nope.yaml")], "nope.yaml"),
        Case("check-bad-yaml", ["check", "-f", str(tmp / "bad.yaml")], "not valid YAML"),
        Case("check-empty-dir", ["check", "-f", str(tmp / "empty-dir")], "no .yaml"),
        Case("check-bad-output", ["check", "-f", str(POD), "-o", "xml"], "'xml'"),
        Case("check-bad-cluster", ["check", "-f", str(POD), "--cluster", str(tmp / "bad.yaml")],
             "bad.yaml"),
        Case("check-bad-policy", ["check", "-f", str(POD), "--policy", str(tmp / "policy.yaml")],
             "gpuResources"),
        Case("check-policy-not-yaml", ["check", "-f", str(POD), "--policy",
                                       str(tmp / "bad.yaml")], "bad.yaml: not valid YAML"),
        # (the same file is worded the same whether -f or --policy names it)
        Case("check-policy-not-yaml-worded-as-f", ["check", "-f", str(tmp / "bad.yaml")],
             "bad.yaml: not valid YAML: did not find expected ',' or ']' at line 3, column 1"),
        Case("check-policy-not-yaml-worded-as-policy", ["check", "-f", str(POD), "--policy",
                                                        str(tmp / "bad.yaml")],
             "bad.yaml: not valid YAML: did not find expected ',' or ']' at line 3, column 1"),
        Case("check-spec-not-an-object", ["check", "-f", str(tmp / "spec-5.json"),
                                          "--no-cluster"],
             "Pod five: spec is 5, not an object, so it is not a valid Pod"),
        Case("check-pod-without-containers", ["check", "-f", str(tmp / "no-containers.yaml"),
                                              "--no-cluster"],
             "Pod bare: spec.containers is missing, so it is not a valid Pod"),
        Case("check-two-cluster-sources", ["check", "-f", str(POD), "--cluster", str(DEMO),
                                           "--no-cluster"],
             "--cluster and --no-cluster: pass one of them"),
        Case("check-nothing-to-check-against", ["check", "-f", str(POD)], "--no-cluster",
             env=no_kube),
        Case("check-cluster-without-nodes", ["check", "-f", str(POD), "--cluster",
                                             str(tmp / "no-nodes.yaml")], "holds no Node"),
        Case("check-unknown-flag", ["check", "-f", str(POD), "--bogus"],
             "check --help'"),
        Case("serve-no-node-source", ["serve", *tls], "--no-cluster"),
        Case("serve-missing-cert", ["serve", "--demo", "--cert", str(tmp / "c.crt"), "--key",
                                    str(tmp / "c.key")], "c.crt"),
        Case("serve-swapped-cert-key", ["serve", "--demo", "--cert", str(certs / "tls.key"),
                                        "--key", str(certs / "tls.crt")], "swapped"),
        Case("serve-missing-cluster", ["serve", "--cluster", str(tmp / "nodes.yaml"), *tls],
             "nodes.yaml"),
        Case("serve-cluster-without-nodes", ["serve", "--cluster", str(tmp / "no-nodes.yaml"),
                                             *tls], "holds no Node"),
        Case("serve-bad-bind", ["serve", "--demo", "--bind", "localhost", *tls], "HOST:PORT"),
        Case("serve-unresolvable-bind", ["serve", "--demo", "--bind", "no-such-host.invalid:8443",
                                         *tls], "cannot resolve"),
        Case("serve-port-in-use", ["serve", "--demo", "--bind", "127.0.0.1:{busy}", *tls],
             "address already in use"),
        Case("serve-audit-dir-missing", ["serve", "--demo", "--audit-file",
                                         str(tmp / "no-dir/audit.log"), *tls], "no-dir"),
        Case("serve-bad-policy", ["serve", "--demo", "--policy", str(tmp / "policy.yaml"), *tls],
             "gpuResources"),
        Case("serve-zero-workers", ["serve", "--demo", "--workers", "0", *tls], "--workers"),
        Case("serve-missing-kubeconfig", ["serve", "--kubeconfig", str(tmp / "kc"), *tls],
             "kc: no such file"),
        Case("serve-in-cluster-off-cluster", ["serve", "--in-cluster", *tls], "not running in"),
        Case("certs-negative-days", ["certs", "generate", "--out", str(tmp / "c1"), "--days",
                                     "-5"], "--days -5"),
        Case("certs-zero-days", ["certs", "generate", "--out", str(tmp / "c2"), "--days", "0"],
             "--days 0"),
        Case("certs-unwritable-out", ["certs", "generate", "--out", str(tmp / "a-file/sub")],
             "a-file"),
        Case("certs-ca-bundle-missing", ["certs", "ca-bundle", "--out", str(tmp / "c3")],
             "c3/ca.crt"),
        Case("certs-renew-missing", ["certs", "renew", "--out", str(tmp / "c4")], "c4"),
        Case("certs-dns-with-space", ["certs", "generate", "--out", str(tmp / "c5"), "--dns",
                                      "bad host"], "not a DNS name"),
        Case("certs-dns-url", ["certs", "generate", "--out", str(tmp / "c5"), "--dns",
                               "https://foo"], "without scheme"),
        Case("certs-bad-service", ["certs", "generate", "--out", str(tmp / "c5"), "--service",
                                   "My_Svc"], "not a Service name"),
        Case("certs-days-beyond-ca", ["certs", "generate", "--out", str(tmp / "c5"), "--days",
                                      "100000"], "--days 3650 or fewer"),
        Case("certs-renew-ca-key-missing", ["certs", "renew", "--out", str(tmp / "half-ca"),
                                            "--force"], "restore it"),
        Case("audit-missing-file", ["audit", "--file", str(tmp / "audit.log")], "audit.log"),
        # (-f, as every other command that reads a file takes it)
        Case("audit-missing-file-f", ["audit", "-f", str(tmp / "audit.log")], "audit.log"),
        Case("audit-bad-since", ["audit", "--file", "-", "--since", "5x"], "--since"),
        Case("audit-not-an-audit-log", ["audit", "--file", str(tmp / "bad.yaml")],
             "no gpupool audit record"),
        Case("audit-reason-typo", ["audit", "--file", "-", "--reason", "CDIDevicesMissing"],
             "did you mean CDIDeviceMissing"),
        Case("agent-off-cluster", ["agent", "--node-name", "n1", "--once"], "--kubeconfig"),
        Case("agent-missing-kubeconfig", ["agent", "--node-name", "n1", "--once",
                                          "--kubeconfig", str(tmp / "kc")], "kc: no such file"),
        Case("doctor-no-kubeconfig", ["doctor"], "--kubeconfig", env=no_kube),
        Case("doctor-unreachable", ["doctor", "--kubeconfig", str(f["refused"])],
             "cannot reach the API server"),
        Case("doctor-unknown-context", ["doctor", "--kubeconfig", str(f["refused"]),
                                        "--context", "prod"], "prod"),
        Case("doctor-not-a-kubeconfig", ["doctor", "--kubeconfig", str(tmp / "not-kubeconfig")],
             "not-kubeconfig"),
        Case("doctor-no-nodes", ["doctor", "--cluster", str(tmp / "no-nodes.yaml")],
             "holds no Node"),
        Case("doctor-missing-cert", ["doctor", "--cluster", str(DEMO), "--cert",
                                     str(tmp / "x.crt")], "x.crt"),
        Case("doctor-bad-webhook-service", ["doctor", "--cluster", str(DEMO),
                                            "--webhook-service", "just-a-name"],
             "NAMESPACE/NAME"),
        Case("compile-no-cluster", ["policy", "compile"],
             "pass --cluster FILE ('kubectl get nodes -o yaml' output), --context/--kubeconfig "
             "for a live cluster", env=no_kube),
        Case("compile-no-cluster-names-no-cluster", ["policy", "compile"], "or --no-cluster to "
             "compile for a cluster with no GPU Operator", env=no_kube),
        Case("completion-unknown-shell", ["completion", "fish"], "'fish'"),
    ]


CASE_IDS = [c.id for c in cases({"tmp": Path("/t"), "certs": Path("/c"),
                                 "refused": Path("/k")})]


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("case_id", CASE_IDS)
@pytest.mark.parametrize("prog", ["gpupool", "kubectl-gpupool"])
def test_bad_input_is_one_line_and_exit_2(files, busy_port, case_id, prog):
    case = next(c for c in cases(files) if c.id == case_id)
    args = [a.replace("{busy}", str(busy_port)) for a in case.args]
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "NODE_NAME")}
    env.update(case.env or {})
    exe = Path(sys.executable).parent / prog
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60, env=env,
                       input="")
    shown = "gpupool" if prog == "gpupool" else "kubectl gpupool"
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(shown) and "error:" in lines[0]
    assert case.expect in lines[0], lines[0]


def test_failed_generate_leaves_nothing_behind(files):
    out = files["tmp"] / "never"
    r = subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out", str(out),
                        "--ip", "not-an-ip"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--ip 'not-an-ip': not an IP address" in r.stderr
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".never.")]


def test_generate_keeps_the_ca_unless_forced(tmp_path):
    def gen(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out",
                               str(tmp_path / "c"), *extra], capture_output=True, text=True,
                              timeout=60)

    assert gen().returncode == 0
    ca = (tmp_path / "c/ca.crt").read_bytes()
    tls = (tmp_path / "c/tls.crt").read_bytes()
    again = gen()
    assert again.returncode == 0 and "kept the CA" in again.stdout
    assert (tmp_path / "c/ca.crt").read_bytes() == ca
    assert (tmp_path / "c/tls.crt").read_bytes() != tls  # a new serving certificate, same CA
    forced = gen("--force")
    assert forced.returncode == 0 and "wrote a new CA" in forced.stdout
    assert (tmp_path / "c/ca.crt").read_bytes() != ca


def test_generate_warns_when_the_certificate_expires_within_30_days(tmp_path):
    r = subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out",
                        str(tmp_path / "c"), "--days", "7"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0
    assert "warning: the serving certificate expires in 6 day(s)" in r.stderr
    assert "gpupool certs renew" in r.stderr


def test_doctor_reports_the_serving_certificate(tmp_path):
    certs = tmp_path / "certs"
    subprocess.run([sys.executable, "-m", "webhook", "certs", "generate", "--out", str(certs),
                    "--days", "10"], check=True, capture_output=True, timeout=60)
    r = subprocess.run([sys.executable, "-m", "webhook", "doctor", "--cluster", str(DEMO),
                        "--cert", str(certs / "tls.crt"), "-o", "yaml"],
                       capture_output=True, text=True, timeout=60)
    doc = yaml.safe_load(r.stdout)
    assert r.returncode == 1  # the demo's broken HAMi node, and a certificate expiring soon
    assert doc["certificate"]["days_left"] == 9
    assert "expires soon" in doc["certificate"]["problem"]
    assert {n["node"] for n in doc["nodes"]} >= {"hami-node-1", "operator-node-1"}


def test_unexpected_errors_are_one_line_exit_3_unless_debugging(tmp_path):
    """A bug is not a user mistake: exit 3, one line that says how to get the traceback."""
    code = ("import importlib, sys\n"
            "c = importlib.import_module('webhook.cli.commands.check')\n"
            "def boom(args): raise RuntimeError('boom')\n"
            "c.cmd_check = boom\n"
            "m = importlib.import_module('webhook.cli.main')\n"
            "sys.exit(m.main(['check', '-f', 'x']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1
    assert "GPUPOOL_DEBUG=1" in r.stderr
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=ROOT, env={**os.environ, "GPUPOOL_DEBUG": "1"})
    assert "Traceback" in r.stderr and "RuntimeError: boom" in r.stderr

