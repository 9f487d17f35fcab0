"""bench/claim_calls.py stays runnable: a tiny run against the test server
drains every job with each of the three claim calls, each writing WAL, the
table renders, and its database is dropped. No timing is judged."""

from __future__ import annotations

import psycopg
import pytest
from conftest import pg_url

from bench import claim_calls

pytestmark = pytest.mark.pg_server


def test_a_tiny_run_measures_every_call_and_drops_its_database(pg):
    results = claim_calls.run(pg_url("postgres"), jobs=30, rounds=2, size=10, log=lambda message: None)
    assert set(results) == set(claim_calls.CALLS)
    for runs in results.values():
        assert len(runs) == 2 and all(r["claim_wal"] > 0 and r["complete_wal"] > 0 for r in runs)
    with psycopg.connect(pg_url("postgres")) as admin:
        assert admin.execute("SELECT count(*) FROM pg_database WHERE datname LIKE 'fenceq_claim_calls_%'"
                             ).fetchone()[0] == 0
    assert claim_calls.markdown(results).count("\n") == len(claim_calls.CALLS) + 1
