"""What a person reads: ``audit`` and ``doctor`` tables aligned from their content, doctor's
fixes grouped and its totals on thousands of nodes, and ``audit`` refusing a file that is
not an audit log instead of reporting it as empty."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import yaml

DEMO = Path(__file__).parents[3] / "webhook/data/demo-cluster.yaml"


def gp(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", *map(str, args)],
                          capture_output=True, text=True, timeout=120, input=stdin)


def _columns_line_up(lines: list[str], header: str) -> None:
    """Every row's cells start where the header's columns start (the last may run on)."""
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")
              and (i < 3 or header[i - 3:i] == "   ")]
    for line in lines:
        for s in starts[1:]:
            assert line[s - 1] == " " and line[s] != " ", (s, line, header)


def _record(i: int, name: str, namespace: str) -> dict:
    return {"audit": "gpupool", "time": f"2026-12-0{1 + i % 3}T00:00:0{i}Z", "uid": f"u{i}",
            "kind": "Pod", "name": name, "namespace": namespace, "pool": "hami",
            "reason": "CDIDeviceMissing", "dryRun": i % 2 == 0, "user": "alice",
            "message": "pod would fail"}


def test_audit_columns_are_as_wide_as_their_content():
    records = [_record(0, "p", "a"), _record(1, "a-rather-long-pod-name-from-a-statefulset-0",
                                            "a-namespace-with-a-long-name"),
               _record(2, "x", "ml")]
    for wide in (False, True):
        out = gp("audit", "--file", "-", *(["-o", "wide"] if wide else []),
                 stdin="\n".join(json.dumps(r) for r in records)).stdout.splitlines()
        head = next(i for i, line in enumerate(out) if line.startswith("TIME"))
        _columns_line_up(out[head + 1:head + 4], out[head])
        assert ("MESSAGE" in out[head]) is wide


def test_audit_refuses_a_file_that_is_not_an_audit_log(tmp_path):
    wrong = tmp_path / "passwd"
    wrong.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/bin/sh\n")
    corrupt = tmp_path / "corrupt.log"
    corrupt.write_bytes(bytes(range(256)) * 8)
    for path in (wrong, corrupt):
        r = gp("audit", "--file", path)
        assert r.returncode == 2 and not r.stdout
        (line,) = r.stderr.splitlines()
        assert str(path) in line and "no gpupool audit record" in line
    empty = tmp_path / "audit.log"
    empty.write_text("")  # a server with no denial yet: nothing wrong
    r = gp("audit", "--file", empty)
    assert r.returncode == 0 and r.stdout.startswith("0 record(s)")
    # the webhook's kubectl logs with no denial in them: its own log lines, no record
    logs = ("[2026-12-05 05:45:42 +0000] [15231] [INFO] Booting worker with pid: 15783\n"
            "2026-12-05 05:45:42,817 INFO webhook.server.runner: gpupool 0.1.0: serving\n")
    r = gp("audit", "--file", "-", stdin=logs)
    assert r.returncode == 0 and r.stdout.startswith("0 record(s)")
    r = gp("audit", "--file", "-", stdin="hello\nworld\n")
    assert r.returncode == 2 and "standard input" in r.stderr


def test_doctor_on_thousands_of_nodes_groups_fixes_and_ends_with_totals(tmp_path):
    items = yaml.safe_load(DEMO.read_text())["items"]
    hami, operator = items[0], items[1]
    nodes = []
    for i in range(1500):
        for template, name in ((hami, f"hami-{i:04d}"), (operator, f"op-{i:04d}")):
            node = copy.deepcopy(template)
            node["metadata"]["name"] = name
            nodes.append(node)
    nodes[0]["metadata"]["name"] = "a-node-with-a-much-longer-name-than-its-neighbours"
    cluster = tmp_path / "nodes.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    r = gp("doctor", "--cluster", cluster)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    fixes = [line for line in lines if line.startswith("fix for")]
    assert len(fixes) == 1, fixes
    assert fixes[0].startswith("fix for 1500 node(s) (")
    assert "and 1497 more): define a CDI device per GPU UUID" in fixes[0]
    assert lines[-1] == "3000 GPU node(s): 1500 missing, 1500 ok"
    rows = [line for line in lines if line.startswith(("hami-", "op-", "a-node"))]
    assert len(rows) == 3000
    _columns_line_up(rows, lines[0])
    doc = json.loads(gp("doctor", "--cluster", cluster, "-o", "json").stdout)
    assert doc["totals"] == {"nodes": {"missing": 1500, "ok": 1500}, "with_hazards": 0,
                             "pods_at_risk": None}
    wide = gp("doctor", "--cluster", cluster, "-o", "wide").stdout
    assert "hami-1499" in next(x for x in wide.splitlines() if x.startswith("fix for"))


def test_doctor_on_a_cluster_without_gpu_nodes(tmp_path):
    cpu = next(o for o in yaml.safe_load(DEMO.read_text())["items"]
               if o["metadata"]["name"] == "cpu-node-1")
    cluster = tmp_path / "nodes.yaml"
    cluster.write_text(yaml.safe_dump(cpu))
    r = gp("doctor", "--cluster", cluster)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == [
        "(no GPU nodes)", "",
        "Kubernetes 1.37 (assumed: the release is not known, so the newest supported): DRA "
        "allocation is decided as its scheduler decides it", "0 GPU node(s): none"]
