"""The documentation as tests read it: every fenced block of README.md, docs/*.md and
bench/README.md, with the directive that says how it runs, and every inline `gpupool ...`
command.

A shell block carries a directive on the line before its fence:

    <!-- doc-test: offline; files: nodes.yaml=webhook/data/demo-cluster.yaml; exit: 0,1 -->

- the mode: ``offline`` (run with gpupool on PATH in a copy of the repository), ``cluster:NAME``
  (run against a real API server; blocks with the same NAME share it and the working
  directory, in document order), ``e2e`` (against the end-to-end cluster with gpupool serving),
  ``render`` (``kubectl apply -k DIR`` is rendered with ``kubectl kustomize``, for objects whose
  CRDs the test cluster lacks), ``make`` (make targets, checked with ``make -n``; the targets
  themselves are run by their own tests);
- ``files``: files from the repository put in the working directory under the given names;
- ``exit``: the exit codes each command may end with (default 0; 1 is gpupool's "finding").

YAML blocks must load as a PoolPolicy, JSON blocks as a CDI inventory; a block nothing can
check fails the coverage test, so nothing in the docs goes unchecked.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.kit import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_INLINE = re.compile(r"`((?:kubectl )?gpupool [^`]+)`")


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    mode: str = ""
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def session(self) -> str:
        return self.mode.partition(":")[2]

    @property
    def files(self) -> dict[str, str]:
        out = {}
        for pair in self.options.get("files", "").split(","):
            name, sep, src = pair.strip().partition("=")
            if sep:
                out[name.strip()] = src.strip()
        return out

    @property
    def exits(self) -> set[int]:
        return {int(x) for x in self.options.get("exit", "0").split(",")}

    def commands(self) -> list[str]:
        """Logical command lines: continuations joined, comments and blank lines dropped."""
        out: list[str] = []
        pending = ""
        for raw in self.text.splitlines():
            line = raw.strip()
            if pending:
                line = pending + " " + line
                pending = ""
            if line.endswith("\\"):
                pending = line[:-1].strip()
                continue
            if line and not line.startswith("#"):
                out.append(line)
        return out


def _directive(text: str) -> tuple[str, dict[str, str]]:
    mode, *rest = [p.strip() for p in text.split(";")]
    options = {}
    for part in rest:
        key, _, value = part.partition(":")
        options[key.strip()] = value.strip()
    return mode, options


def blocks(docs: list[Path] = DOCS) -> list[Block]:
    out = []
    for doc in docs:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            indent, lang = m.group(1), m.group(2)
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            body = "\n".join(line[len(indent):] if line.startswith(indent) else line
                             for line in lines[i + 1:end])
            prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            d = _DIRECTIVE.match(prev)
            mode, options = _directive(d.group(1)) if d else ("", {})
            out.append(Block(doc, i + 1, lang, body, mode, options))
            i = end + 1
    return out


def inline_commands(docs: list[Path] = DOCS) -> Iterator[tuple[str, str]]:
    """(where, command) for every inline `gpupool ...` / `kubectl gpupool ...` span."""
    for doc in docs:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for m in _INLINE.finditer(line):
                yield f"{doc.relative_to(ROOT)}:{number}", m.group(1)


def workdir(tmp: Path, parts: tuple[str, ...] = ("manifests", "docs", "webhook/data",
                                                  "Makefile")) -> Path:
    """A copy of what the docs' commands read (by default the manifests, examples and demo
    data), as ``tmp/repo``."""
    root = tmp / "repo"
    for part in parts:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, root / part,
                            ignore=shutil.ignore_patterns("certs", "__pycache__"))
        else:
            (root / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, root / part)
    return root


@dataclass
class Shell:
    """Runs a block's commands one by one as a reader would type them: ``cd`` carries over
    to the next command (and the next block of the session)."""

    root: Path
    env: dict[str, str]
    cwd: Path = Path()

    def __post_init__(self) -> None:
        self.cwd = self.root

    def run(self, block: Block) -> list[tuple[str, subprocess.CompletedProcess]]:
        for name, src in block.files.items():
            shutil.copy(ROOT / src, self.cwd / name)
        results = []
        for cmd in block.commands():
            words = shlex.split(cmd, comments=True)
            if words and words[0] == "cd" and len(words) == 2:
                self.cwd = (self.cwd / words[1]).resolve()
                assert self.cwd.is_dir(), f"{block.where}: cd {words[1]}: no such directory"
                continue
            r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=self.cwd,
                               env=self.env, capture_output=True, text=True, timeout=300)
            results.append((cmd, r))
            assert r.returncode in block.exits, (
                f"{block.where}: `{cmd}` exited {r.returncode}\n{r.stdout[-2000:]}\n"
                f"{r.stderr[-2000:]}")
            assert "Traceback" not in r.stderr, f"{block.where}: `{cmd}`\n{r.stderr[-3000:]}"
        return results


def path_with(*dirs: Path) -> str:
    return os.pathsep.join([*(str(d) for d in dirs), os.environ.get("PATH", "")])
