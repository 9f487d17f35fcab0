-- fenceq for PostgreSQL, part 1: the dead letters.
--
-- What it holds: one row per job that failed for good in a queue that keeps
-- dead letters, with when it was replayed or discarded. Rows are never
-- deleted.
-- Who writes it: _dead_letter (052_settle.sql), called by fail and by reap
-- in the same transaction as the failure; replay_dead_letter and
-- discard_dead_letter (060_operators.sql) and replay_dead_letters
-- (088_bulk.sql) mark a letter handled.
CREATE TABLE IF NOT EXISTS fenceq._dead_letters (
    dlq_id       text COLLATE "C" NOT NULL,
    job_id       text COLLATE "C" NOT NULL,
    queue        text COLLATE "C" NOT NULL,
    task         text COLLATE "C" NOT NULL,
    error        text,
    attempts     integer NOT NULL,
    failed_at    timestamptz NOT NULL,
    replayed_at  timestamptz,
    discarded_at timestamptz,
    CONSTRAINT _dead_letters_pkey PRIMARY KEY (dlq_id)
);
CREATE INDEX IF NOT EXISTS _dead_letters_job_idx ON fenceq._dead_letters (job_id);

-- replay_dead_letters reads a queue's unhandled letters, oldest first,
-- without reading the handled ones, which are never deleted.
CREATE INDEX IF NOT EXISTS _dead_letters_unhandled_idx
    ON fenceq._dead_letters (queue, failed_at)
    WHERE replayed_at IS NULL AND discarded_at IS NULL;
