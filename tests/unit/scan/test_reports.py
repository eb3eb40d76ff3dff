"""The report documents the scan writes (``webhook.scan.reports``), checked against the
PolicyReport CRD's own schema (Kyverno's file) and within what etcd stores."""

from __future__ import annotations

import json

import yaml

from harness.kit import UPSTREAM
from webhook.engine import Outcome, PodAnswer
from webhook.scan.reports import MAX_RESULTS, OMITTED, REPORT_APIS, report_of
from webhook.scan.scanner import Answer


def _answer(i: int, outcome: Outcome) -> Answer:
    return Answer(PodAnswer("ml", f"p-{i:05d}", f"uid-{i}", f"node-{i % 7}", "hami",
                            "hami-scheduler", outcome,
                            "CDIDeviceMissing" if outcome.at_risk else "Routed",
                            f"pod ml/p-{i:05d} would fail on its node with 'unresolvable CDI "
                            "devices': node-1 lacks management.nvidia.com/gpu=GPU-59ab2c0d-"
                            "7c4e-4d4a-9f1e-1a2b3c4d5e6f" if outcome.at_risk else "",
                            ("management.nvidia.com/gpu=GPU-59ab2c0d-7c4e-4d4a-9f1e-"
                             "1a2b3c4d5e6f",) if outcome.at_risk else ()),
                  1764900000.0, "node node-1 changed")


def _schema_fields(crd_file: str) -> set[str]:
    crd = yaml.safe_load((UPSTREAM / "crds" / crd_file).read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    return set(props["results"]["items"]["properties"])


def test_results_carry_only_fields_the_crds_declare():
    doc = report_of(REPORT_APIS["wgpolicyk8s"], "ml",
                    [_answer(1, Outcome.FAILS_ON_RESTART), _answer(2, Outcome.FINE),
                     _answer(3, Outcome.MAY_FAIL_ON_RESTART)])
    for crd in ("wgpolicyk8s.io_policyreports.yaml", "openreports.io_reports.yaml"):
        fields = _schema_fields(crd)
        for r in doc["results"]:
            assert set(r) <= fields, (crd, set(r) - fields)
    assert [r["result"] for r in doc["results"]] == ["fail", "warn", "pass"]
    assert doc["summary"] == {"pass": 1, "fail": 1, "warn": 1, "error": 0, "skip": 0}


def test_a_namespace_with_thousands_of_gpu_pods_stays_under_etcds_limit():
    answers = [_answer(i, Outcome.FAILS_ON_RESTART if i % 20 == 0 else Outcome.FINE)
               for i in range(20000)]
    doc = report_of(REPORT_APIS["wgpolicyk8s"], "ml", answers)
    assert len(json.dumps(doc)) < 1_500_000
    assert doc["summary"]["fail"] == 1000 and doc["summary"]["pass"] == 19000
    assert len(doc["results"]) == MAX_RESULTS
    assert sum(r["result"] == "fail" for r in doc["results"]) == 1000  # every failure
    assert doc["metadata"]["annotations"][OMITTED] == str(20000 - MAX_RESULTS)
    # more failures than fit: the summary still counts them all
    answers = [_answer(i, Outcome.FAILS_ON_RESTART) for i in range(3000)]
    doc = report_of(REPORT_APIS["wgpolicyk8s"], "ml", answers)
    assert len(json.dumps(doc)) < 1_500_000 and doc["summary"]["fail"] == 3000
    assert doc["metadata"]["annotations"][OMITTED] == "1500"
