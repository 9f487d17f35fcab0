"""Where the SQL, the error-code table and the migrations live.

In a source checkout (an editable install) they are the repository's own
top-level ``sql/`` and ``migrations/`` folders; a built wheel carries copies
under ``fenceq/_data``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data_root() -> Path:
    bundled = _PACKAGE / "_data"
    if (bundled / "sql").is_dir():
        return bundled
    return _PACKAGE.parents[1]


def sql_dir(backend: str) -> Path:
    return _data_root() / "sql" / backend


def errcodes_path() -> Path:
    return _data_root() / "sql" / "errcodes.tsv"


def migrations_dir(backend: str) -> Path:
    return _data_root() / "migrations" / backend
