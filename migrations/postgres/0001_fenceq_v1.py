"""fenceq v1: the first schema.

Why: creates everything fenceq 1 needs in the schema "fenceq": the private
tables and indexes, the claim type, every function of CONTRACT §3, the
views, ownership by fenceq_owner with nothing granted to PUBLIC, and the
verify_schema admission check (the step fails, and rolls back, when a check
fails). It applies sql/0001_fenceq_v1.sql: the text `fenceq sql`
printed for version 1, frozen at release (commit 8e56bfc). Released
migrations never change (tests/test_migration_texts.py holds their
digests); a later change to the schema adds a new migration.

Rollback drops the schema and everything in it: every job, submission
identity and claim ledger row is lost. It first locks the tables, then
refuses (QF901) while submission identities are retained or claims are live,
unless the session set fenceq.allow_data_loss = on
(`fenceq.migrate.rollback(url, allow_data_loss=True)`).
"""

from pathlib import Path

from yoyo import step

SQL = Path(__file__).parent / "sql" / "0001_fenceq_v1.sql"


def apply(conn):
    conn.cursor().execute(SQL.read_text(encoding="utf-8"))


ROLLBACK = """
DO $$
BEGIN
    IF to_regnamespace('fenceq') IS NULL THEN
        RETURN;
    END IF;
    LOCK TABLE fenceq._jobs, fenceq._submissions, fenceq._claims IN ACCESS EXCLUSIVE MODE;
    IF coalesce(current_setting('fenceq.allow_data_loss', true), '') <> 'on' AND (
        EXISTS (SELECT 1 FROM fenceq._submissions)
        OR EXISTS (SELECT 1 FROM fenceq._jobs
                    WHERE status = 'claimed' AND lease_expires_at > clock_timestamp())) THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: this downgrade would lose retained submission identities or live claims; '
                      'rerun with --allow-data-loss (or set fenceq.allow_data_loss = on)';
    END IF;
END
$$;
DROP SCHEMA IF EXISTS fenceq CASCADE;
"""


def rollback(conn):
    conn.cursor().execute(ROLLBACK)


steps = [step(apply, rollback)]
