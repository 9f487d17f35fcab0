"""The mutant list of `make mutants` (tests/mutants/mutants.toml) still
applies to the SQL: each original text occurs exactly once in its file, and
each killer is a test pytest collects. Cheap, so `make test` notices when a
storage change moves a rule away from under its mutant."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "mutants"))
import mutants  # noqa: E402

# The docs/guarantees.md sections whose rules live in SQL; each has a mutant.
SECTIONS_WITH_SQL_RULES = {"§1", "§2", "§3", "§4", "§5", "§6", "§7", "§10",
                           "§12", "§13", "§14", "§15", "§16", "§17", "§19", "§20", "§21"}


def test_every_mutant_applies_to_the_current_sql():
    listed = mutants.load()
    assert mutants.problems(listed, node_ids=mutants.collected(listed)) == []


def test_every_section_with_a_rule_in_sql_has_a_mutant_on_each_engine_it_names():
    listed = mutants.load()
    assert {m.section for m in listed} >= SECTIONS_WITH_SQL_RULES
    assert {m.engine for m in listed} == set(mutants.ENGINES)


def test_the_admission_check_the_plugin_leaves_out_is_found_once():
    script = mutants.install_script_without_admission(mutants.REPO / "sql")
    assert "verify_schema checks" not in script and "COMMENT ON FUNCTION fenceq.verify_schema" in script


def test_a_drifted_original_is_reported(tmp_path):
    (tmp_path / "sql" / "postgres").mkdir(parents=True)
    (tmp_path / "sql" / "postgres" / "051_fence.sql").write_text("FOR UPDATE; FOR UPDATE;", encoding="utf-8")
    mutant = mutants.Mutant(id="x", engine="postgres", file="sql/postgres/051_fence.sql", section="§1",
                            guarantee="g", original="FOR UPDATE", replacement="", killers=("tests/test_claims.py::t",))
    found = mutants.problems([mutant], repo=tmp_path)
    assert any("occurs 2 times" in p for p in found)
