"""docs/sql-reference.md is generated from sql/postgres (scripts/gen-sql-reference)
and must match what the generator produces from the SQL as it is now.

The generator installs the SQL into a scratch database on the test server
(FENCEQ_TEST_PG_PORT), reads pg_catalog, and drops the database again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen-sql-reference"


def test_sql_reference_is_current() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout + done.stderr
                                  + "\n(regenerate with `make docs`, or "
                                  "`.venv/bin/python scripts/gen-sql-reference`)")


def test_sql_reference_covers_every_public_function() -> None:
    """Every CREATE FUNCTION fenceq.<public> in the SQL has a section."""
    import re

    doc = (ROOT / "docs" / "sql-reference.md").read_text(encoding="utf-8")
    names = set()
    for path in (ROOT / "sql" / "postgres").glob("*.sql"):
        names |= set(re.findall(r"CREATE\s+OR\s+REPLACE\s+(?:FUNCTION|VIEW)\s+fenceq\.([a-z]\w*)",
                                path.read_text(encoding="utf-8"), re.I))
    assert names
    missing = sorted(n for n in names if f"\n### {n}\n" not in doc)
    assert not missing, missing
