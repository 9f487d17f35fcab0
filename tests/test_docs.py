"""Generated documentation stays in step with its single source."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_doc_sections_are_current():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-docs"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_sql_raises_only_codes_from_the_table():
    from fenceq.errors import CODES

    raised = set()
    for path in (ROOT / "sql" / "postgres").glob("*.sql"):
        text = path.read_text()
        raised |= {text[i + 1:i + 6] for i in range(len(text)) if text.startswith("'QF", i)}
    assert raised and raised <= set(CODES), raised - set(CODES)
