"""fenceq v1: the first schema.

Why: creates everything fenceq 1 needs in the schema "fenceq": the private
tables and indexes, the claim type, every function of CONTRACT §3, the
views, ownership by fenceq_owner with nothing granted to PUBLIC, and the
verify_schema admission check (the step fails, and rolls back, when a check
fails). It applies the reviewed files of sql/postgres/ listed below, the same
text `fenceq sql` prints. A later change to the schema adds a new migration
and a new file; it never edits these.

Rollback drops the schema and everything in it: every job, submission
identity and claim ledger row is lost.
"""

from yoyo import step

from fenceq.migrate import read_sql

FILES = ["010_schema.sql", "020_helpers.sql", "030_queues.sql", "040_submit.sql",
         "050_workers.sql", "060_operators.sql", "070_verify.sql", "090_privileges.sql"]


def apply(conn):
    conn.cursor().execute(read_sql("postgres", FILES))


def rollback(conn):
    conn.cursor().execute("DROP SCHEMA IF EXISTS fenceq CASCADE")


steps = [step(apply, rollback)]
