-- fenceq migration 0007: version 6 -> 7, for SQLite. Frozen at release.
--
-- Why: see 0007_fenceq_v7.py. The operator's view over time
-- (docs/design-v7.md): the per-queue, per-minute series that
-- sample_activity fills is created empty, dead letters gain a partial index
-- of the open ones (replay_dead_letters), and the schema version moves to
-- 7. No existing table or index changes.

-- The operator's view over time (version 7, docs/design-v7.md §1): one row
-- per queue and closed minute (minute: its start), written once by
-- sample_activity, never on the hot path. The depth (pending, due,
-- running) is the live count when the row was sampled, NULL for a minute
-- caught up later. wait_hist and run_hist are JSON arrays of counts, bucket
-- k holding the durations of floor(4 * log2(max(ms, 1))) = k (at most
-- 127), trimmed at the last non-zero one. It holds no job ids: purge leaves
-- it; sample_activity deletes what is older than its keep. Read by the
-- primary key: a queue's range of minutes.
CREATE TABLE IF NOT EXISTS fenceq__activity (
    queue     TEXT NOT NULL,
    minute    INTEGER NOT NULL,
    submitted INTEGER NOT NULL,
    claimed   INTEGER NOT NULL,
    retried   INTEGER NOT NULL,
    completed INTEGER NOT NULL,
    failed    INTEGER NOT NULL,
    cancelled INTEGER NOT NULL,
    expired   INTEGER NOT NULL,
    pending   INTEGER,
    due       INTEGER,
    running   INTEGER,
    wait_hist TEXT NOT NULL,
    run_hist  TEXT NOT NULL,
    PRIMARY KEY (queue, minute)
) STRICT, WITHOUT ROWID;
-- replay_dead_letters reads a queue's open letters, oldest first, without
-- reading the handled ones, which stay until purge removes their jobs.
CREATE INDEX IF NOT EXISTS fenceq__dead_letters_unhandled_idx
    ON fenceq__dead_letters (queue, failed_at)
    WHERE replayed_at IS NULL AND discarded_at IS NULL;

-- The schema version, read by version.sql.
PRAGMA user_version = 7;
