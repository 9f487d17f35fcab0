-- fenceq migration 0005: version 4 -> 5, for SQLite. Frozen at release.
--
-- Why: see 0005_fenceq_v5.py. Jobs due later wait apart from the jobs a
-- claim reads: the job table gets scheduled (ALTER TABLE ... ADD COLUMN
-- with a constant default rewrites no row), the pending jobs whose run_at
-- is still ahead are marked, the two indexes are created in place of the
-- version 4 claim index, and the schema version moves to 5.

ALTER TABLE fenceq__jobs ADD COLUMN scheduled INTEGER NOT NULL DEFAULT 0;

-- The jobs version 4 left waiting for a later run_at (blocked ones wait at
-- year 10000) wait apart from now on. Marked before the index on the flag
-- is built, so that the build writes each entry once.
UPDATE fenceq__jobs SET scheduled = 1
 WHERE status = 'pending'
   AND run_at > (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000;

CREATE INDEX IF NOT EXISTS fenceq__jobs_pending_idx
    ON fenceq__jobs (queue, scheduled, priority DESC, run_at, seq)
    WHERE status = 'pending';

CREATE INDEX IF NOT EXISTS fenceq__jobs_later_idx
    ON fenceq__jobs (queue, run_at)
    WHERE status = 'pending' AND scheduled;

DROP INDEX fenceq__jobs_claim_idx;

PRAGMA user_version = 5;
