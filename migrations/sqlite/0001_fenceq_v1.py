"""fenceq v1 for SQLite: the first schema.

Why: creates everything fenceq 1 needs in the database file: the private
STRICT tables and their indexes, the public views, and the schema version
(PRAGMA user_version = 1) that version.sql reports. It applies the reviewed
sql/sqlite/schema.sql, the same text `fenceq sql --backend sqlite` prints.
The operations themselves are the statement files of sql/sqlite/, run by
the client; they are not stored in the database. A later change to the
schema adds a new migration and a new file; it never edits this one.

Rollback drops the tables and views: every job, submission identity and
claim ledger row is lost.
"""

from yoyo import step

from fenceq._sqlite import schema_statements

TABLES = ["fenceq__queues", "fenceq__jobs", "fenceq__submissions", "fenceq__claims",
          "fenceq__checkpoints", "fenceq__dead_letters"]
VIEWS = ["fenceq_jobs", "fenceq_attempts", "fenceq_queue_stats", "fenceq_dead_letters"]


def apply(conn):
    cursor = conn.cursor()
    for statement in schema_statements():
        cursor.execute(statement)


def rollback(conn):
    cursor = conn.cursor()
    for view in VIEWS:
        cursor.execute(f"DROP VIEW IF EXISTS {view}")
    for table in TABLES:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
    cursor.execute("PRAGMA user_version = 0")


steps = [step(apply, rollback)]
