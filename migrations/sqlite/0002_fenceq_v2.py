"""fenceq v2 for SQLite: the schema version moves to 2.

Why: version 2 is one release on both engines, and version.sql reports
PRAGMA user_version. On SQLite the tables, indexes and views of version 1
serve version 2 unchanged (its faster statements are in the statement
files, which are not stored in the database), so every job, fence,
submission identity, ledger row and dead letter a v1 file holds is read by
v2 as it is. The step takes the write lock only for the pragma.

Rollback sets the version back to 1; nothing is lost, so it is never refused.
"""

from yoyo import step

__depends__ = {"0001_fenceq_v1"}

steps = [step("PRAGMA user_version = 2", "PRAGMA user_version = 1")]
