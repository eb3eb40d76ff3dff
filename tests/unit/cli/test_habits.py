"""kubectl's habits, kept by every subcommand: --version, -f with -, directories and -R,
-o json|yaml|wide, help text and examples, shell completion, validated reason codes."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.kit import ROOT
from webhook import __version__
from webhook.cli.main import build_parser
from webhook.engine import Reason

DEMO = ROOT / "webhook/data/demo-cluster.yaml"
EXAMPLES = ROOT / "docs/examples"


def gp(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True,
                          text=True, timeout=60, input=stdin)


def _subparsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.extend(_subparsers(sub, (*path, name)))
    return out


COMMANDS = _subparsers(build_parser())


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "root")
def test_version_everywhere(path):
    r = gp(*path, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gpupool {__version__}"


@pytest.mark.parametrize("path,parser", [c for c in COMMANDS if c[0]],
                         ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_every_subcommand_has_help_for_each_flag_and_an_example(path, parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help, f"{' '.join(path)} {action.option_strings or action.dest}: no help"
    text = gp(*path, "--help").stdout
    assert "examples:" in text and f"gpupool {path[0]}" in text.split("examples:")[1]


def test_check_reads_stdin_directories_and_recursion(tmp_path):
    pod = (EXAMPLES / "pod-operator.yaml").read_text()
    r = gp("check", "-f", "-", "--cluster", str(DEMO), "-o", "json", stdin=pod)
    assert r.returncode == 0, r.stderr
    assert [x["name"] for x in json.loads(r.stdout)["results"]] == ["trainer-0"]

    (tmp_path / "a").mkdir()
    (tmp_path / "a/sub").mkdir()
    shutil.copy(EXAMPLES / "pod-operator.yaml", tmp_path / "a/1-operator.yaml")
    shutil.copy(EXAMPLES / "pod-hami.yaml", tmp_path / "a/sub/2-hami.yml")
    (tmp_path / "a/notes.txt").write_text("not a manifest")
    flat = json.loads(gp("check", "-f", str(tmp_path / "a"), "--cluster", str(DEMO),
                         "-o", "json").stdout)
    assert [x["name"] for x in flat["results"]] == ["trainer-0"]
    deep = gp("check", "-R", "-f", str(tmp_path / "a"), "--cluster", str(DEMO), "-o", "json")
    assert deep.returncode == 1  # the HAMi pod in the subdirectory is denied on the demo
    assert [x["name"] for x in json.loads(deep.stdout)["results"]] == ["trainer-0", "vllm-0"]


def test_check_namespace_flag_fills_in_objects_without_one():
    pod = yaml.safe_load((EXAMPLES / "pod-operator.yaml").read_text())
    del pod["metadata"]["namespace"]
    r = gp("check", "-f", "-", "-n", "ml", "-o", "json", "--cluster", str(DEMO),
           stdin=yaml.safe_dump(pod))
    (res,) = json.loads(r.stdout)["results"]
    assert res["namespace"] == "ml" and "pod ml/trainer-0" in res["message"]
    # As kubectl apply -n does, a manifest that names another namespace is refused.
    r = gp("check", "-f", str(EXAMPLES / "pod-operator.yaml"), "-n", "ml", "--no-cluster")
    assert r.returncode == 2 and "is in namespace default, not ml (-n)" in r.stderr


def test_check_never_passes_a_pod_the_cdi_check_did_not_see(tmp_path):
    """A CI gate on the exit code: one typo in a path must not turn every pod ALLOWED."""
    home = {"HOME": str(tmp_path), "KUBECONFIG": ""}  # no kubeconfig to fall back on
    r = gp_env(home, "check", "-f", str(EXAMPLES / "pod-hami.yaml"))
    assert r.returncode == 2 and not r.stdout, r.stdout
    (line,) = r.stderr.splitlines()
    assert "no nodes to check against" in line and "--no-cluster" in line
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    r = gp("check", "-f", str(EXAMPLES / "pod-hami.yaml"), "--cluster", str(tmp_path / "ns.yaml"))
    assert r.returncode == 2 and "holds no Node" in r.stderr and "ns.yaml" in r.stderr
    # KUBECONFIG set, as kubectl reads it: the cluster it names is read (here: unreachable)
    (tmp_path / "kc").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    r = gp_env({**home, "KUBECONFIG": str(tmp_path / "kc")}, "check", "-f",
               str(EXAMPLES / "pod-hami.yaml"))
    assert r.returncode == 2 and "127.0.0.1:1" in r.stderr, r.stderr
    # said explicitly: routing only, allowed, and the output says what was not checked
    r = gp("check", "-f", str(EXAMPLES / "pod-hami.yaml"), "--no-cluster")
    assert r.returncode == 0
    assert r.stdout.startswith("note: CDI devices not checked: --no-cluster")
    doc = json.loads(gp("check", "-f", str(EXAMPLES / "pod-hami.yaml"), "--no-cluster",
                        "-o", "json").stdout)
    assert doc["cdiCheck"] == {"ran": False, "reason": "--no-cluster: routing only"}
    doc = json.loads(gp("check", "-f", str(EXAMPLES / "pod-hami.yaml"), "--cluster", str(DEMO),
                        "-o", "json").stdout)
    assert doc["cdiCheck"] == {"ran": True, "reason": ""}
    r = gp("check", "-f", str(EXAMPLES / "pod-hami.yaml"), "--cluster", str(DEMO),
           "--no-cluster")
    assert r.returncode == 2 and "pass one of them" in r.stderr


def gp_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env})


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_structured_output_parses_for_every_printing_command(tmp_path, output):
    load = json.loads if output == "json" else yaml.safe_load
    check = load(gp("check", "-f", str(EXAMPLES / "workloads.yaml"), "--cluster", str(DEMO),
                    "-o", output).stdout)
    assert [r["kind"] for r in check["results"]] == ["Deployment", "Job"]
    doctor = load(gp("doctor", "--cluster", str(DEMO), "-o", output).stdout)
    assert {n["node"] for n in doctor["nodes"]} == {"hami-node-1", "operator-node-1", "dra-node-1"}
    record = {"audit": "gpupool", "time": "2026-01-01T00:00:00Z", "reason": "CDIDeviceMissing",
              "namespace": "ml", "kind": "Pod", "name": "p", "pool": "hami", "uid": "u1"}
    audit = load(gp("audit", "--file", "-", "-o", output, stdin=json.dumps(record)).stdout)
    assert [r["uid"] for r in audit] == ["u1"]


def test_wide_output_adds_detail():
    narrow = gp("check", "-f", str(EXAMPLES / "pod-operator.yaml"), "--cluster", str(DEMO))
    wide = gp("check", "-f", str(EXAMPLES / "pod-operator.yaml"), "--cluster", str(DEMO),
              "-o", "wide")
    assert "patch: " not in narrow.stdout and "patch: " in wide.stdout
    assert "reason=Routed" in wide.stdout


def test_audit_reason_is_case_insensitive_and_typos_are_errors():
    records = "\n".join(json.dumps({"audit": "gpupool", "reason": r, "uid": r,
                                    "time": "2026-01-01T00:00:00Z"})
                        for r in ("CDIDeviceMissing", "PoolConflict"))
    r = gp("audit", "--file", "-", "--reason", "cdidevicemissing", "-o", "json", stdin=records)
    assert r.returncode == 0 and [x["uid"] for x in json.loads(r.stdout)] == ["CDIDeviceMissing"]
    r = gp("audit", "--file", "-", "--reason", "PoolConflicts", stdin=records)
    assert r.returncode == 2 and "did you mean PoolConflict?" in r.stderr


def _complete(script: Path, *words: str) -> list[str]:
    probe = (f"source {script}\n"
             f"COMP_WORDS=({' '.join(repr(w) for w in words)}); "
             f"COMP_CWORD={len(words) - 1}; COMPREPLY=(); _gpupool_complete; "
             'printf "%s\\n" "${COMPREPLY[@]}"\n')
    r = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_bash_completion_completes_commands_flags_and_values(tmp_path):
    script = tmp_path / "gpupool.bash"
    r = gp("completion", "bash")
    assert r.returncode == 0
    script.write_text(r.stdout)
    assert _complete(script, "gpupool", "do") == ["doctor"]
    assert _complete(script, "gpupool", "certs", "g") == ["generate"]
    assert _complete(script, "gpupool", "check", "-o", "") == ["json", "yaml", "wide"]
    assert "--recursive" in _complete(script, "gpupool", "check", "--")
    assert _complete(script, "gpupool", "audit", "--reason", "CDI") == ["CDIDeviceMissing"]
    assert set(Reason.codes()) == set(_complete(script, "gpupool", "audit", "--reason", ""))
    (tmp_path / "nodes.yaml").write_text("")
    assert _complete(script, "gpupool", "check", "--cluster", str(tmp_path / "no")) == [
        str(tmp_path / "nodes.yaml")]
    assert _complete(script, "kubectl-gpupool", "ser") == ["serve"]


def test_zsh_completion_wraps_the_same_function():
    r = gp("completion", "zsh")
    assert r.returncode == 0 and r.stdout.startswith("#compdef gpupool kubectl-gpupool\n")
    assert "bashcompinit" in r.stdout and gp("completion", "bash").stdout in r.stdout
    zsh = shutil.which("zsh")
    if zsh:  # where zsh is installed, it loads the script without error
        load = subprocess.run([zsh, "-f", "-c", f"autoload -U compinit && compinit -u; "
                                                f"source <(printf %s {json.dumps(r.stdout)})"],
                              capture_output=True, text=True, timeout=30)
        assert load.returncode == 0, load.stderr
