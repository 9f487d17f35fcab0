"""verify_schema on PostgreSQL: every admission check, tested by tampering
with a fresh install (docs/guarantees.md §3)."""

from __future__ import annotations

import subprocess
import uuid

import psycopg
import pytest


from conftest import pg_url
from fenceq.migrate import install_script

TAMPERING = {
    "column_types": ["ALTER TABLE fenceq._submissions ALTER COLUMN fingerprint TYPE varchar(255)"],
    "deterministic_collations": [
        "CREATE COLLATION public.fold (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
        'ALTER TABLE fenceq._submissions ALTER COLUMN fingerprint TYPE text COLLATE public.fold'],
    "claim_token_unique": ["ALTER TABLE fenceq._claims DROP CONSTRAINT _claims_pkey",
                           "CREATE INDEX ON fenceq._claims (claim_token)"],
    "submission_id_unique": ["ALTER TABLE fenceq._submissions DROP CONSTRAINT _submissions_pkey",
                             "CREATE UNIQUE INDEX ON fenceq._submissions (submission_id, queue)"],
    "job_id_unique": ["ALTER TABLE fenceq._jobs DROP CONSTRAINT _jobs_pkey",
                      "CREATE UNIQUE INDEX ON fenceq._jobs (lower(job_id))"],
    "dispatch_job_unique": ["ALTER TABLE fenceq._dispatches DROP CONSTRAINT _dispatches_pkey",
                            "CREATE INDEX ON fenceq._dispatches (job_id)"],
    "active_key_unique": ["DROP INDEX fenceq._jobs_active_key_idx",
                          "CREATE UNIQUE INDEX ON fenceq._jobs (queue, active_key) WHERE active_key IS NOT NULL"],
    "activity_minute_unique": ["ALTER TABLE fenceq._activity DROP CONSTRAINT _activity_pkey",
                               "CREATE INDEX ON fenceq._activity (queue, minute)"],
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
    assert {name for name, _ in rows} >= {"jobs", "attempts", "queue_stats", "dead_letters", "dependencies", "locks",
                                            "submissions", "checkpoints", "schedules"}
    assert all(comment for _, comment in rows)


INLINED_HELPER_TAMPERING = {
    # A checking helper swapped for a SQL function that checks nothing.
    "a helper that is not on the list": [
        "DROP FUNCTION fenceq._check_json(jsonb, text)",
        "CREATE FUNCTION fenceq._check_json(value jsonb, what text) RETURNS void LANGUAGE sql AS $$ SELECT $$",
        "ALTER FUNCTION fenceq._check_json(jsonb, text) OWNER TO fenceq_owner",
        "REVOKE ALL ON FUNCTION fenceq._check_json(jsonb, text) FROM PUBLIC"],
    # An inlined helper bound to an object outside pg_catalog and fenceq.
    "a helper bound outside pg_catalog": [
        "CREATE FUNCTION public.planted(numeric, integer) RETURNS boolean LANGUAGE sql RETURN true",
        "CREATE OPERATOR public.>= (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.planted)",
        "CREATE OR REPLACE FUNCTION fenceq._is_plain_json_int(value jsonb, min integer) RETURNS boolean"
        " LANGUAGE sql IMMUTABLE RETURN (value #>> '{}')::numeric OPERATOR(public.>=) min"],
    "a helper granted to a role": ["GRANT EXECUTE ON FUNCTION fenceq._new_job_id() TO fenceq_producer"],
}


@pytest.mark.parametrize("tampering", sorted(INLINED_HELPER_TAMPERING))
def test_security_definer_check_admits_only_the_inlined_helpers_as_shipped(pg, tampering):
    for statement in INLINED_HELPER_TAMPERING[tampering]:
        pg.sql(statement)
    failed = {row[0] for row in pg.sql("SELECT check_name FROM fenceq.verify_schema() WHERE NOT ok")}
    assert failed == {"security_definer"}


def test_install_script_binds_helpers_to_pg_catalog_whatever_the_installer_path(pg):
    """The SQL-bodied helpers are bound when created: an operator planted in
    the installer's search_path must not be the one they use."""
    name = "fenceq_planted_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE FUNCTION public.planted(numeric, integer) RETURNS boolean LANGUAGE plpgsql"
                         " AS $$BEGIN RAISE EXCEPTION 'planted operator ran'; END$$")
            conn.execute("CREATE OPERATOR public.>= (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.planted)")
        shown = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-q", "-At",
                                "-c", "SET search_path = public, pg_catalog", "-f", "-", "-c", "SHOW search_path"],
                               input=install_script("postgres"), text=True, check=True, capture_output=True)
        assert shown.stdout.splitlines()[-1] == "public, pg_catalog"  # the installer's path, put back
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT fenceq.create_queue('q')")
            (ids,) = conn.execute("""SELECT fenceq.submit_batch('q', '[{"task": "t", "priority": 1,
                                     "submission_id": "s"}]')""").fetchone()
            assert len(ids) == 1
    finally:
        pg.sql(f"DROP DATABASE {name} WITH (FORCE)")
