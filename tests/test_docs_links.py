"""Every link in the documentation resolves inside the repository, and
nothing points at the promises' old home outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_migration_texts import RELEASED

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted({ROOT / "README.md", ROOT / "sql" / "sqlite" / "README.md",
                    *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*/README.md")})
LINK = re.compile(r"!?\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# Written in pieces so that this file does not match itself.
OUTSIDE = re.compile("|".join([re.escape("../" + "shared/"), re.escape("CONTRACT" + ".md"),
                               "CONTRACT" + r"(?: |\u00a0)?\u00a7", "project's " + "CONTRACT"]))
# The files first rewritten to point inside the repository.
REWRITTEN = ["README.md", "docs/guarantees.md", "docs/worker.md", "docs/dba.md", "examples/node/README.md",
             "sql/sqlite/", "python_client/fenceq/cli.py", "scripts/gen-sqlite"]


def prose_lines(path: Path) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    for line in prose_lines(path):
        heading = HEADING.match(line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(2).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            if count:
                seen[f"{slug}-{count}"] = 1
    return set(seen)


def relative_links(path: Path) -> list[str]:
    """Links outside code (inline code is blanked first), other than URLs."""
    return [target for line in prose_lines(path) for target in LINK.findall(re.sub(r"`[^`]*`", "``", line))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_to_files_and_headings(document):
    broken = []
    for target in relative_links(document):
        file_part, _, anchor = target.partition("#")
        resolved = (document.parent / file_part).resolve() if file_part else document
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(target)
    assert not broken


def test_the_link_check_sees_links_and_anchors():
    """The checks above could pass by finding nothing: they find the README's
    links and the guarantees' numbered sections."""
    readme_links = relative_links(ROOT / "README.md")
    assert "docs/guarantees.md" in readme_links and "docs/dba.md" in readme_links
    assert {"1-vocabulary", "3-postgresql-functions-schema-fenceq",
            "11-notes-for-operators-and-implementers"} <= anchors(ROOT / "docs" / "guarantees.md")


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.splitlines() if (ROOT / name).is_file()]


def references_outside(names: list[str]) -> list[str]:
    found = []
    for name in names:
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{number}" for number, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    return found


def test_the_guarantees_are_cited_inside_the_repository():
    mine = [name for name in tracked_files() if any(name == p or name.startswith(p) for p in REWRITTEN if p)]
    assert "README.md" in mine and any(name.startswith("sql/sqlite/") for name in mine)
    assert not references_outside(mine)


def test_no_tracked_file_points_outside_the_repository():
    """Released migration steps are exempt: their text is frozen as applied."""
    assert not references_outside([name for name in tracked_files() if name not in RELEASED])
