"""Every place the engine keeps what it worked out beyond one question, listed.

The engine keeps answers at two declared boundaries only (``webhook/engine/view/caches.py``):
the folds (verdicts per node for a pod shape, kept current node by node) and admission's
decisions per pod shape. Their keys are made from what the rules declare they read
(docs/checks.md). This test reads the engine's source and fails on any other way of keeping
a value between calls: a memoising decorator, a table at module level that functions write,
a memo on an object, or a new user of the boundaries, so one cannot be added without being
listed (and argued) here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness.kit import ROOT

ENGINE = ROOT / "webhook" / "engine"

#: (module, function, what) for every use of the two boundaries
BOUNDARIES = {
    # decisions per pod shape: the key is the pod as far as any rule reads it
    # (``decision_metadata``) with its claims as the view resolves them
    ("admission/admit.py", "_pod_stage", "until_any_change"),
    # ...and both stages of one, as ``review`` runs them (the same key, for the pair: the
    # pod validated is the shape with the mutation's patch)
    ("admission/admit.py", "review", "until_any_change"),
    # the folds: the CDI verdicts (key: ``nodechecks.shape_key``, from the checks' reads)...
    ("checks/cdi.py", "verdicts", "kept_fold"),
    ("checks/cdi.py", "_fold", "fold"),
    # ...the DRA verdicts (the pod's placement, demand and claims)...
    ("checks/allocation.py", "_summary", "fold"),
    # ...who may be handed a GPU without a grant (placement, RuntimeClass handler)...
    ("access/grants.py", "_reach", "fold"),
    ("access/grants.py", "_annotated", "fold"),
    # ...and which pools serve a DRA extended resource (the resource and its class)
    ("placement/routing.py", "_serving_pools", "fold"),
    # whether the cluster's declarations reach beyond the agents' labels in a pool (key: the
    # pool and the policy; it reads the pool's nodes and the cluster's settings, each of
    # which changes the view's version): asked by every review of the pool
    ("admission/steering.py", "_cluster_steers", "until_any_change"),
    # the boundaries themselves
    ("view/cluster.py", "fold", "fold"),
    ("view/cluster.py", "kept_fold", "kept_fold"),
    ("view/cluster.py", "until_any_change", "until_any_change"),
    ("view/caches.py", "fold", "kept_fold"),
}

#: zero-argument functions whose value is a constant built on first use (nothing decided
#: is kept: the CEL environment, whose construction costs more than most decisions)
LAZY_CONSTANTS = {("stacks/cel.py", "_env")}
#: kept within one question and gone with it: the allocation search asks the same device
#: again and again while it backtracks (``allocator._Search``, made per ``allocate``)
WITHIN_ONE_QUESTION = {("stacks/allocator.py", "selectable", "writes match_cache"),
                       # one node stored again: the folds of a pod's two stages (of a
                       # workload's replicas) judge it once (``caches.NodeChange``)
                       ("view/caches.py", "shared", "writes _memo")}
#: switches, not answers: the test suite hands checks only what they declared
SWITCHES = {("checks/assessment.py", "enforce_declarations", "global")}

_MEMOISING = {"lru_cache", "cache", "cached_property"}
_WRITES = {"setdefault", "update", "clear", "pop", "popitem", "append", "add", "extend",
           "insert", "discard", "remove"}
_BOUNDARY_CALLS = {"fold", "kept_fold", "until_any_change"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _kept(path: Path, root: Path = ENGINE
          ) -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """(uses of the boundaries, every other way of keeping a value) in one module."""
    module = str(path.relative_to(root))
    tree = ast.parse(path.read_text())
    uses: set[tuple[str, str, str]] = set()
    other: set[tuple[str, str, str]] = set()
    tables = {t.id for stmt in tree.body if isinstance(stmt, ast.Assign | ast.AnnAssign)
              for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
              if isinstance(t, ast.Name)}

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
                for dec in child.decorator_list:
                    if _name(dec) in _MEMOISING:
                        what = "lazy constant" if not child.args.args and \
                            _name(dec) == "cache" else _name(dec)
                        other.add((module, name, what))
                if any(isinstance(n, ast.Global) for n in ast.walk(child)):
                    other.add((module, name, "global"))
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                attr = child.func.attr
                if attr in _BOUNDARY_CALLS and function:
                    uses.add((module, function, attr))
                target = child.func.value
                if attr in _WRITES and function and isinstance(target, ast.Name) \
                        and target.id in tables:
                    other.add((module, function, f"writes module table {target.id}"))
                if attr in _WRITES and isinstance(target, ast.Attribute) \
                        and ("memo" in target.attr or "cache" in target.attr):
                    other.add((module, function, f"writes {target.attr}"))
            elif isinstance(child, ast.Assign | ast.AugAssign) and function:
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for t in targets:
                    base = t.value if isinstance(t, ast.Subscript) else None
                    if isinstance(base, ast.Name) and base.id in tables:
                        other.add((module, function, f"writes module table {base.id}"))
                    if isinstance(base, ast.Attribute) and \
                            ("memo" in base.attr or "cache" in base.attr):
                        other.add((module, function, f"writes {base.attr}"))
            visit(child, name)

    visit(tree, "")
    return uses, other


def _everything() -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    uses: set[tuple[str, str, str]] = set()
    other: set[tuple[str, str, str]] = set()
    for path in sorted(ENGINE.rglob("*.py")):
        u, o = _kept(path)
        uses |= u
        other |= o
    return uses, other


def test_the_two_boundaries_are_the_only_places_the_engine_keeps_answers():
    uses, other = _everything()
    lazy = {(m, f, w) for m, f, w in other if w == "lazy constant"}
    assert {(m, f) for m, f, _ in lazy} == LAZY_CONSTANTS
    assert other - lazy - WITHIN_ONE_QUESTION - SWITCHES == set(), (
        "the engine keeps a value outside its two boundaries (view/caches.py): make it a "
        "fold or part of a decision kept per shape, with a key from the rules' "
        f"declarations, or list and argue it here: "
        f"{sorted(other - lazy - WITHIN_ONE_QUESTION - SWITCHES)}")
    assert other >= WITHIN_ONE_QUESTION | SWITCHES, "listed here, gone from the engine"
    assert uses == BOUNDARIES, (
        f"a new use of a boundary: {sorted(uses - BOUNDARIES)}; gone: "
        f"{sorted(BOUNDARIES - uses)}. Say here what its key is made of")


def test_the_reader_finds_each_way_of_keeping_a_value(tmp_path):
    """The reader above is itself checked: each form it must catch, caught."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "m.py").write_text(
        "import functools\n"
        "_T: dict = {}\n"
        "@functools.lru_cache(maxsize=8)\n"
        "def a(x): return x\n"
        "@functools.cache\n"
        "def env(): return 1\n"
        "def b(x):\n"
        "    _T[x] = 1\n"
        "def c(x):\n"
        "    _T.setdefault(x, 1)\n"
        "def d(s, x):\n"
        "    s.memo[x] = 1\n"
        "def e(view):\n"
        "    return view.fold(1, 2, 3)\n"
        "class K:\n"
        "    @functools.cached_property\n"
        "    def p(self): return 1\n")
    uses, other = _kept(engine / "m.py", engine)
    assert uses == {("m.py", "e", "fold")}
    assert other == {("m.py", "a", "lru_cache"), ("m.py", "env", "lazy constant"),
                     ("m.py", "b", "writes module table _T"),
                     ("m.py", "c", "writes module table _T"), ("m.py", "d", "writes memo"),
                     ("m.py", "p", "cached_property")}


API = ROOT / "webhook" / "api"
#: The formats the engine shares with the node agent (``webhook/api``) keep one thing: the
#: agent's held-devices record parsed once per text (a scan re-judging a node's pods reads
#: it for each of them; the view keeps each node's record as the text it was published in,
#: gzip+base64 when large, not parsed). An inventory's plugin way and its runtime section
#: are worked out as it is made, and equal runtimes are shared by the view's index.
API_KEPT = {("held.py", "parse_held", "lru_cache")}


def test_the_formats_the_engine_reads_keep_only_the_held_parse():
    other: set[tuple[str, str, str]] = set()
    for path in sorted(API.rglob("*.py")):
        uses, kept = _kept(path, API)
        assert not uses, f"{path.name} uses the engine's boundaries"
        other |= kept
    assert other == API_KEPT, f"webhook/api keeps a value: {sorted(other - API_KEPT)}"
