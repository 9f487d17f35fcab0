"""verify_schema on PostgreSQL: every admission check, tested by tampering
with a fresh install (docs/guarantees.md §3)."""

from __future__ import annotations

import uuid

import psycopg
import pytest


from conftest import pg_url
from fenceq.migrate import install_script

TAMPERING = {
    "column_types": ["ALTER TABLE fenceq._checkpoints ALTER COLUMN step TYPE varchar(255)"],
    "deterministic_collations": [
        "CREATE COLLATION public.fold (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
        'ALTER TABLE fenceq._submissions ALTER COLUMN queue TYPE text COLLATE public.fold'],
    "claim_token_unique": ["ALTER TABLE fenceq._claims DROP CONSTRAINT _claims_pkey",
                           "CREATE INDEX ON fenceq._claims (claim_token)"],
    "submission_id_unique": ["ALTER TABLE fenceq._submissions DROP CONSTRAINT _submissions_pkey",
                             "CREATE UNIQUE INDEX ON fenceq._submissions (submission_id, queue)"],
    "job_id_unique": ["ALTER TABLE fenceq._jobs DROP CONSTRAINT _jobs_pkey",
                      "CREATE UNIQUE INDEX ON fenceq._jobs (lower(job_id))"],
    "active_key_unique": ["DROP INDEX fenceq._jobs_active_key_idx",
                          "CREATE UNIQUE INDEX ON fenceq._jobs (queue, active_key) WHERE active_key IS NOT NULL"],
    "public_shapes": ["DROP VIEW fenceq.dead_letters",
                      "CREATE VIEW fenceq.dead_letters AS SELECT dlq_id, job_id FROM fenceq._dead_letters",
                      "ALTER VIEW fenceq.dead_letters OWNER TO fenceq_owner"],
    "defaults": ["ALTER TABLE fenceq._jobs ALTER COLUMN claim_token SET DEFAULT md5(random()::text)"],
    "no_triggers": ["CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
                    "CREATE TRIGGER noop BEFORE INSERT ON fenceq._claims FOR EACH ROW EXECUTE FUNCTION public.noop()"],
    "security_definer": ["ALTER FUNCTION fenceq.cancel(text, boolean) SECURITY INVOKER"],
    "pinned_search_path": ["ALTER FUNCTION fenceq.purge(interval, integer, interval) SET search_path = public"],
    "no_public_execute": ["GRANT EXECUTE ON FUNCTION fenceq.reap(integer) TO PUBLIC"],
    "owner_not_superuser": ["ALTER FUNCTION fenceq.version() OWNER TO postgres"],
}


@pytest.mark.parametrize("check", sorted(TAMPERING))
def test_each_check_refuses_its_tampering(pg, check):
    with pg.connect() as client:
        assert all(c.ok for c in client.verify_schema())
    for statement in TAMPERING[check]:
        pg.sql(statement)
    with pg.connect() as client:
        failed = {c.check_name for c in client.verify_schema() if not c.ok}
    assert failed == {check}


def test_every_check_is_tampered_somewhere(pg):
    with pg.connect() as client:
        names = {c.check_name for c in client.verify_schema()}
    assert names - {"server_encoding"} == set(TAMPERING)


def test_install_refuses_a_database_that_is_not_utf8(pg):
    name = "fenceq_ascii_" + uuid.uuid4().hex[:8]
    pg.sql(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        with psycopg.connect(pg_url(name), autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as info:
                conn.execute(install_script("postgres").encode())
            assert info.value.sqlstate == "QF901"
            assert "server_encoding" in info.value.diag.message_primary
    finally:
        pg.sql(f"DROP DATABASE {name}")


def test_every_public_view_has_a_comment(pg):
    rows = pg.sql("SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c"
                  " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'fenceq' AND c.relkind = 'v'")
    assert {name for name, _ in rows} == {"jobs", "attempts", "queue_stats", "dead_letters"}
    assert all(comment for _, comment in rows)
