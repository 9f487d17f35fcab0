"""pytest plugin of `make mutants` (tests/mutants/run.py loads it with -p):
the databases the tests get run one mutant's SQL instead of the shipped SQL.

$FENCEQ_TEST_MUTANT_SQL names a copy of the repository's sql/ folder with
one break applied; $FENCEQ_TEST_MUTANT_ENGINE says which engine it breaks.
Test harness only: the product reads no such variable.

- postgres: after `fenceq migrate` installs a test database (the frozen
  migrations), the copy's install script (its sql/postgres/*.sql, in order,
  in one transaction) is applied over it. Every object there is created or
  replaced idempotently, so the mutated definition is the one installed.
  The script's closing admission check (verify_schema must pass) is left
  out: a mutant that check would refuse (a lost search_path, a grant to
  PUBLIC) is installed all the same, so that the tests have to notice it.
- sqlite: the client reads its statement files from the copy's sql/sqlite
  (the migrated schema stays the frozen migrations').
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg

import mutants
from fenceq.backends import migrations, postgres, sqlite

_ROOT = Path(os.environ["FENCEQ_TEST_MUTANT_SQL"])
_ENGINE = os.environ["FENCEQ_TEST_MUTANT_ENGINE"]


def _install_mutant_postgres(url: str) -> None:
    script = mutants.install_script_without_admission(_ROOT)
    with psycopg.connect(postgres.connection_url(url), autocommit=True) as conn:
        conn.execute(script.encode())


if _ENGINE == "postgres":
    _migrate_postgres = migrations.migrate_postgres

    def _migrate_then_mutate(url: str, progress=None):
        checks = _migrate_postgres(url, progress)
        _install_mutant_postgres(url)
        return checks

    migrations.migrate_postgres = _migrate_then_mutate
elif _ENGINE == "sqlite":
    _sql_dir = sqlite.sql_dir
    sqlite.sql_dir = lambda backend: _ROOT / "sqlite" if backend == "sqlite" else _sql_dir(backend)
    sqlite.load_script.cache_clear()
    sqlite._plan.cache_clear()
else:
    raise RuntimeError(f"FENCEQ_TEST_MUTANT_ENGINE must be postgres or sqlite, not {_ENGINE!r}")
