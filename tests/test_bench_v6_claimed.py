"""The laboratory of design-v5.md §1's layout under version 5's hot
functions (bench/v6_claimed_proto.sql, measured by bench/v6_claimed.py,
design-v5.md §11) still does what it claims to: the claims write no job row
and no ledger row, the end of a job retires its token into the ledger (a
spent token stays refused), and a drain one at a time and in batches
completes every job exactly once."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from bench import v6_claimed
from conftest import pg_url

pytestmark = pytest.mark.pg_server


@pytest.fixture
def lab(pg):
    name = "fenceq_v6lab_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    v6_claimed.install(url, proto=True, jobs=40)
    yield url
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def test_the_laboratory_drains_every_job_once_and_retires_every_token(lab: str) -> None:
    with psycopg.connect(lab, autocommit=True) as conn:
        token = uuid.uuid4().hex
        job_id, generation = conn.execute("SELECT job_id, generation FROM fenceq.claim_next(ARRAY['q'], 'w', %s)",
                                          (token,)).fetchone()
        assert generation == 1
        # The claim lives in _claimed only: the job row and the ledger are untouched.
        assert conn.execute("SELECT status, generation FROM fenceq._jobs WHERE job_id = %s",
                            (job_id,)).fetchone() == ("pending", 0)
        assert conn.execute("SELECT count(*) FROM fenceq._claims").fetchone() == (0,)
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT * FROM fenceq.claim_next(ARRAY['q'], 'w', %s)", (token,))
        assert refused.value.sqlstate == "QF301"
        assert conn.execute("SELECT fenceq.complete(%s, 'w', 1, %s)", (job_id, token)).fetchone() == (True,)
        assert conn.execute("SELECT fenceq.complete(%s, 'w', 1, %s)", (job_id, token)).fetchone() == (False,)
        assert v6_claimed.drain(conn, 15, 1) == 15
        assert v6_claimed.drain(conn, 24, 16) == 24
        assert v6_claimed.drain(conn, 1, 16) == 0
        assert conn.execute("SELECT count(*) FILTER (WHERE status = 'completed'), count(*),"
                            " count(DISTINCT claim_token) FROM fenceq._jobs").fetchone() == (40, 40, 40)
        assert conn.execute("SELECT (SELECT count(*) FROM fenceq._claims), (SELECT count(*) FROM fenceq._claimed),"
                            " (SELECT count(*) FROM fenceq._ready)").fetchone() == (40, 0, 0)
        with pytest.raises(psycopg.Error) as spent:
            conn.execute("SELECT * FROM fenceq.claim_next(ARRAY['q'], 'w', %s)", (token,))
        assert spent.value.sqlstate == "QF301"
