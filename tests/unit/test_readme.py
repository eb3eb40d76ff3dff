"""The README as a map a new user can trust: every page under docs/ in its index, every
command in its table, and each of the two commands' needs said."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def test_the_documentation_index_lists_every_page_under_docs():
    listed = set(re.findall(r"\[docs/([\w.-]+\.md)\]\(docs/\1\)", _section("Documentation")))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert listed == pages, (sorted(pages - listed), sorted(listed - pages))


def test_the_command_table_names_every_command():
    commands = set(re.findall(r'add_command\(sub, "([a-z]+)"',
                              "".join(p.read_text() for p in
                                      (ROOT / "webhook/cli/commands").glob("*.py"))))
    assert commands >= {"serve", "check", "policy", "scan", "agent", "doctor"}
    table = _section("Commands")
    missing = [c for c in sorted(commands) if f"`gpupool {c}" not in table]
    assert not missing, missing
    assert "`gpupool policy compile`" in table


def test_each_command_says_what_it_needs():
    head = README[:README.index("## ")]
    assert "| `make run` | Python 3.11+" in head
    needs_test = next(line for line in head.splitlines() if line.startswith("| `make test` |"))
    for need in ("Python 3.11+", "Go", "apt-get", "cold"):
        assert need in needs_test, need
