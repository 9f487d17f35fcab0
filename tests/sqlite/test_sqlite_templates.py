"""The SQLite statement files are generated from sql/sqlite/templates by
scripts/gen-sqlite: they stay current and readable."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "scripts" / "gen-sqlite"
LONGEST_LINE = 120


def load_generator():
    loader = importlib.machinery.SourceFileLoader("gen_sqlite", str(GENERATOR))
    spec = importlib.util.spec_from_loader("gen_sqlite", loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    loader.exec_module(module)
    return module


def test_generated_files_are_current():
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_statement_file_has_a_template():
    generated = {p.name for p in (ROOT / "sql" / "sqlite").glob("*.sql")}
    templates = {p.name for p in (ROOT / "sql" / "sqlite" / "templates").glob("*.sql")} - {"macros.sql"}
    assert generated == templates


@pytest.mark.parametrize("folder", ["sql/sqlite", "sql/sqlite/templates"])
def test_no_line_is_too_long_to_review(folder):
    long_lines = [f"{path.name}:{number}" for path in sorted((ROOT / folder).glob("*.sql"))
                  for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                  if len(line) > LONGEST_LINE]
    assert not long_lines


def test_run_instructions_live_in_the_readme_only():
    readme = (ROOT / "sql" / "sqlite" / "README.md").read_text(encoding="utf-8")
    assert "## How to run a file" in readme
    for path in (ROOT / "sql" / "sqlite").glob("*.sql"):
        how = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("-- How to run")]
        assert len(how) == 1 and len(how[0]) <= 100, path.name


def test_a_call_expands_its_arguments_in_place_and_lines_up_continuations():
    generator = load_generator()
    macros = generator.read_macros(
        "-- macro: pair(a, b)\n-- Two lines.\n($a\n AND $b)\n\n-- A section heading\n"
        "-- macro: ok(x)\n-- One line.\n$x IS NOT NULL\n")
    assert macros["pair"].body == "($a\n AND $b)", "the section heading is not part of the body"
    expanded = generator.expand("SELECT 1 WHERE {{pair({{ok(:p)}}, f(1, 2) = 'a,b')}};", macros, "test")
    assert expanded == "SELECT 1 WHERE (:p IS NOT NULL\n                AND f(1, 2) = 'a,b');"


def test_a_wrong_call_is_refused_by_name():
    generator = load_generator()
    macros = generator.read_macros("-- macro: ok(x)\n$x IS NOT NULL\n")
    with pytest.raises(SystemExit, match="ok takes 1 arguments, got 2"):
        generator.expand("{{ok(a, b)}}", macros, "test")
    with pytest.raises(SystemExit, match="unknown macro nope"):
        generator.expand("{{nope}}", macros, "test")
