"""Executed docs: every fenced block of README.md, docs/ and bench/README.md is run or parsed,
and every inline `gpupool ...` command names commands and flags that exist, so the docs
cannot drift from the code. Blocks that need a cluster run in tests/e2e/test_docs_cluster.py
and tests/e2e/test_e2e.py."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.kit import ROOT
from tests.docs import Block, Shell, blocks, inline_commands, path_with, workdir
from webhook.api.inventory import parse_inventory
from webhook.cli.main import build_parser
from webhook.engine import PolicyError, load_policy_text
from webhook.files.policyfile import default_policy_text

MODES = ("offline", "cluster", "e2e", "render", "make", "policy")
BLOCKS = blocks()


def _id(b: Block) -> str:
    return b.where


def test_every_block_has_a_way_to_be_checked():
    assert len(BLOCKS) >= 10
    for b in BLOCKS:
        if b.lang in ("yaml", "json"):
            continue
        if b.lang == "mermaid":  # docs/layers.md, drawn from the code (tests/unit/test_layers.py)
            assert b.doc.name == "layers.md", f"{b.where}: a diagram nothing checks"
            continue
        if b.lang == "python":  # run as written by tests/unit/engine/test_worked_example.py
            assert b.mode == "python" and b.doc.name == "checks.md", (
                f"{b.where}: a python block nothing runs")
            continue
        assert b.lang in ("sh", "bash"), f"{b.where}: a ```{b.lang} block nothing checks"
        assert b.mode.partition(":")[0] in MODES, (
            f"{b.where}: shell block without a <!-- doc-test: MODE --> directive")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "yaml"], ids=_id)
def test_yaml_blocks_are_policies_that_load(block):
    load_policy_text(block.text)
    # and each says what it does: a pod and its decision on the demo cluster, run below
    assert block.mode == "policy" and {"pod", "expect"} <= set(block.options), (
        f"{block.where}: a policy example without <!-- doc-test: policy; pod: FILE; "
        "expect: VERDICT KIND NAMESPACE/NAME pool=POOL REASON -->")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "policy"], ids=_id)
def test_policy_examples_decide_as_they_say_on_the_demo_cluster(block, tmp_path):
    """Each policy example, checked against the demo cluster with the pod its directive
    names: the decision it states. A policy example that silently drops what routes or
    checks a pod (exclusiveResources, cdi) is caught here."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(block.text)
    r = subprocess.run([sys.executable, "-m", "webhook", "check", "--policy", str(policy),
                        "--cluster", str(ROOT / "webhook/data/demo-cluster.yaml"), "-f",
                        str(ROOT / block.options["pod"]), "-o", "json"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode in (0, 1), f"{block.where}: {r.stderr}"
    got = [f"{'ALLOWED' if x['allowed'] else 'DENIED'} {x['kind']} {x['namespace']}/"
           f"{x['name']} pool={x['pool']} {x['reason']}" for x in json.loads(r.stdout)["results"]]
    assert block.options["expect"] in got, f"{block.where}: {got}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=_id)
def test_json_blocks_are_inventories_that_parse(block):
    """Each JSON example is an inventory, or what a node's pods hold, that gpupool reads."""
    from webhook.api.held import parse_held

    if '"pods"' in block.text:
        held = parse_held(block.text)
        assert held.pods and all(h.ids for e in held.pods.values() for h in e)
        return
    inv = parse_inventory(block.text)
    assert inv.kinds and inv.runtime.mode


def _subcommand(parser: argparse.ArgumentParser, words: list[str]
                ) -> tuple[argparse.ArgumentParser, list[str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and words and \
                words[0] in action.choices:
            return _subcommand(action.choices[words[0]], words[1:])
    return parser, words


@pytest.mark.parametrize("where,command", list(inline_commands()),
                         ids=[w for w, _ in inline_commands()])
def test_inline_commands_name_real_subcommands_and_flags(where, command):
    words = shlex.split(command.removeprefix("kubectl "))[1:]
    parser, rest = _subcommand(build_parser(), words)
    assert parser.prog != "gpupool" or not rest or rest[0].startswith("-"), (
        f"{where}: `{command}`: no subcommand {rest[:1]}")
    flags = {o for a in parser._actions for o in a.option_strings}
    for word in rest:
        if word.startswith("-"):
            assert word.split("=")[0] in flags, f"{where}: `{command}`: {parser.prog} has no {word}"


def test_the_documented_typo_error_is_what_the_code_prints():
    text = (ROOT / "docs/policy.md").read_text()
    documented = re.search(r"`(pools\[1\]\.schedulerNmae: [^`]+)`", text).group(1)
    policy = yaml.safe_load(default_policy_text())
    policy["pools"][1]["schedulerNmae"] = policy["pools"][1].pop("schedulerName")
    with pytest.raises(PolicyError) as err:
        load_policy_text(yaml.safe_dump(policy))
    assert str(err.value).endswith(f": {documented}")  # after the file name


def test_the_documented_reason_codes_are_the_codes():
    from webhook.engine import Reason

    table = (ROOT / "docs/policy.md").read_text().split("## Reason codes")[1]
    documented = re.findall(r"^\| `(\w+)` \| (?:yes|no) \|", table, re.M)
    assert documented == list(Reason.codes())


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("home")
    venv_bin = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    return {**os.environ, "HOME": str(home), "PIP_CACHE_DIR": cache,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PATH": path_with(venv_bin if venv_bin.is_dir() else Path(sys.executable).parent)}


def _repo(tmp: Path) -> Path:
    root = workdir(tmp)
    for part in ("pyproject.toml", "README.md", "constraints.txt"):
        (root / part).write_bytes((ROOT / part).read_bytes())
    for part in ("webhook", "bench"):
        if not (root / part / "__init__.py").exists():
            shutil.copytree(ROOT / part, root / part, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "results"))
    (root / ".venv").symlink_to(ROOT / ".venv")
    return root


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "offline"], ids=_id)
def test_offline_blocks_run(block, tmp_path, shell_env):
    (tmp_path / "home").mkdir()
    env = {**shell_env, "HOME": str(tmp_path / "home")}
    results = Shell(_repo(tmp_path), env).run(block)
    assert results, f"{block.where}: no command ran"
    if "~/.gpupool" in block.text:  # docs/install.md's CLI install leaves a CLI that answers
        from webhook import __version__

        assert results[-1][1].stdout.strip() == f"gpupool {__version__}"
        assert (tmp_path / "home/.gpupool/bin/kubectl-gpupool").exists()
    for cmd, r in results:
        if " check --running " in f" {cmd} ":
            assert re.search(r"\d+ GPU pod\(s\): \d+ at risk", r.stdout), f"{block.where}: {cmd}"
        elif " check " in f" {cmd} ":
            assert re.search(r"\d+ checked, \d+ denied", r.stdout), f"{block.where}: {cmd}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "make"], ids=_id)
def test_make_blocks_name_real_targets(block):
    for cmd in block.commands():
        words = shlex.split(cmd, comments=True)
        assert words[0] == "make", f"{block.where}: {cmd}"
        r = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, f"{block.where}: {cmd}: {r.stderr}"
        args = re.search(r"BENCH_ARGS=(\S+)", cmd)
        if args:  # the flags the bench takes
            r = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=ROOT,
                               capture_output=True, text=True, timeout=60)
            assert args.group(1) in r.stdout


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci/run").read_text()


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "render"], ids=_id)
def test_render_blocks_build(block, kubectl):
    """Overlays whose CRDs the test cluster lacks (cert-manager): rendered by kubectl's own
    kustomize, every object with a kind and a name."""
    for cmd in block.commands():
        words = shlex.split(cmd)
        assert words[:3] == ["kubectl", "apply", "-k"], f"{block.where}: {cmd}"
        r = subprocess.run([str(kubectl), "kustomize", str(ROOT / words[3])],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        objs = [d for d in yaml.safe_load_all(r.stdout) if d]
        assert objs and all(o.get("kind") and o["metadata"].get("name") for o in objs)
        assert "Certificate" in {o["kind"] for o in objs}


def test_examples_are_what_the_docs_say(tmp_path):
    """docs/examples: each manifest's comment says what happens on the demo cluster."""
    demo = ROOT / "webhook/data/demo-cluster.yaml"
    for path in sorted((ROOT / "docs/examples").glob("*.yaml")):
        comment = path.read_text().split("\napiVersion")[0]
        running = "check --running" in comment  # running pods, re-checked where they are
        r = subprocess.run([sys.executable, "-m", "webhook", "check", "-f", str(path),
                            "--cluster", str(demo), "-o", "json",
                            *(["--running"] if running else [])], capture_output=True,
                           text=True, timeout=60)
        doc = json.loads(r.stdout)
        if running:
            risky = [p for p in doc["pods"] if p["outcome"] != "Fine"]
            assert ("fails on its next container start" in comment) == \
                any(p["outcome"] == "FailsOnRestart" for p in risky), path.name
            assert r.returncode == (1 if risky else 0), path.name
            continue
        denied = [x for x in doc["results"] if not x["allowed"]]
        if "denied" in comment:
            assert denied and r.returncode == 1, path.name
        else:
            assert not denied and r.returncode == 0, (path.name, denied)


def test_make_run_serves_and_the_commands_it_prints_work(tmp_path):
    """README's first command, warm: it serves the demo, and the curl lines it prints answer
    as they say (the HAMi pod routed on /mutate, denied on /validate)."""
    from harness.servers import free_port, stop_group, wait_ready

    port, run = free_port(), tmp_path / "run"
    log = tmp_path / "make-run.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(["make", "run", f"PORT={port}", f"RUN={run}"], cwd=ROOT,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(proc, f"https://127.0.0.1:{port}", str(run / "certs/ca.crt"), log)
        printed = log.read_text()
        curl = re.search(r"^  (curl .*?\\\n.*?json\.tool)$", printed, re.M | re.S).group(1)
        r = subprocess.run(["bash", "-o", "pipefail", "-c", curl], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["response"]["allowed"] is True
        validate = curl.replace("review-hami-pod.json", "review-hami-pod-validate.json") \
            .replace("/mutate", "/validate")
        r = subprocess.run(["bash", "-o", "pipefail", "-c", validate], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        resp = json.loads(r.stdout)["response"]
        assert resp["allowed"] is False and "hami-node-1" in resp["status"]["message"]
    finally:
        stop_group(proc)


def test_the_documented_server_flags_and_defaults_are_the_parsers():
    """docs/install.md's table of `gpupool serve` flags: every flag, each default as the
    parser has it (the parser's defaults come from ServeConfig)."""
    from webhook.server.config import ServeConfig

    parser, _ = _subcommand(build_parser(), ["serve"])
    real = {a.option_strings[-1]: a for a in parser._actions
            if a.option_strings and a.option_strings[-1] not in ("--help", "--version")}
    table = (ROOT / "docs/install.md").read_text().split("## Server flags")[1].split("\n## ")[0]
    documented: dict[str, str] = {}
    for flags, default in re.findall(r"^\| ((?:`--[\w-]+`(?:, )?)+) \| ([^|]+) \|", table, re.M):
        for flag in re.findall(r"`(--[\w-]+)`", flags):
            documented[flag] = default.strip().strip("`")
    assert sorted(documented) == sorted(real)
    for flag, action in real.items():
        # a switch is off unless given (--no-audit-stdout turns a default-on setting off)
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            assert documented[flag] == "off", flag
        elif action.default is None:
            assert documented[flag] == "-", flag
        else:
            assert documented[flag] == str(action.default), flag
            assert getattr(ServeConfig, action.dest) == action.default, flag


def test_make_run_from_nothing_and_after_a_half_made_venv(tmp_path):
    """README's first command as a new user meets it: a first try with a Python too old is
    one line (exit 2) and leaves nothing half made; a virtualenv an interrupted try left
    behind is made again; the run installs what serving needs (not the test tools) and says
    what it is doing, a line per step."""
    from harness.servers import free_port, stop_group, wait_ready

    repo = workdir(tmp_path, ("Makefile", "pyproject.toml", "constraints.txt", "README.md",
                              "webhook", "docs/examples"))
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\necho 'Python 3.9.2'\nexit 1\n")
    old.chmod(0o755)
    r = subprocess.run(["make", "run", f"PYTHON={old}"], cwd=repo, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and not (repo / ".venv").exists(), r.stdout + r.stderr
    assert "needs Python 3.11 or newer" in r.stderr and "PYTHON=" in r.stderr
    # what an interrupted first try leaves: a virtualenv without its interpreter, no stamp
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")],
                   check=True)
    (repo / ".venv/bin/python").unlink()
    port, log = free_port(), tmp_path / "make-run.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(["make", "run", f"PORT={port}", f"PYTHON={sys.executable}"],
                                cwd=repo, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_ready(proc, f"https://127.0.0.1:{port}", str(repo / ".run/certs/ca.crt"), log,
                   timeout=240)
    finally:
        stop_group(proc)
    printed = log.read_text()
    steps = [line for line in printed.splitlines() if line.startswith("make: [")]
    assert [s[:11] for s in steps] == ["make: [1/3]", "make: [2/3]", "make: [3/3]"], printed
    venv = repo / ".venv/bin/python"
    have = subprocess.run([str(venv), "-c", "import gunicorn, gevent, flask; import pytest"],
                          capture_output=True, text=True)
    assert "No module named 'pytest'" in have.stderr  # serving only: no test tools
    assert "Traceback" not in printed
