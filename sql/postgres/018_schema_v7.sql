-- fenceq for PostgreSQL, part 1e (version 7): what the operator's view over
-- time keeps (docs/design-v7.md, docs/guarantees.md §21). The functions that
-- write and read it are parts 8c (084_activity.sql), 8d (086_search.sql)
-- and 8e (088_bulk.sql).
--
-- Idempotent like part 1: every object is created only when missing. Nothing
-- here alters _jobs or any table the hot path writes but _dead_letters,
-- which gains one partial index (a final failure maintains it).

-- Activity: one row per queue and closed minute, written once by
-- sample_activity from the jobs and the claim ledger, off the hot path. No
-- job id is kept, so purge leaves it alone; sample_activity deletes the rows
-- older than its retention. Counts of what happened in the minute; the depth
-- (pending, due, running) as sampled just after it, NULL on minutes written
-- later by a catch-up; waits and run times as histograms of quarter powers
-- of two (bucket k counts durations d with 2^(k/4) <= d in ms < 2^((k+1)/4),
-- bucket 0 everything below 2^(1/4) ms, bucket 127 everything from
-- 2^(127/4) ms), trimmed after the last non-zero bucket.
CREATE TABLE IF NOT EXISTS fenceq._activity (
    queue     text COLLATE "C" NOT NULL,
    minute    timestamptz NOT NULL,
    submitted integer NOT NULL,
    claimed   integer NOT NULL,
    retried   integer NOT NULL,
    completed integer NOT NULL,
    failed    integer NOT NULL,
    cancelled integer NOT NULL,
    expired   integer NOT NULL,
    pending   integer,
    due       integer,
    running   integer,
    wait_hist integer[] NOT NULL,
    run_hist  integer[] NOT NULL,
    CONSTRAINT _activity_pkey PRIMARY KEY (queue, minute)
);

-- replay_dead_letters reads a queue's unhandled letters, oldest first,
-- without reading the handled ones, which are never deleted.
CREATE INDEX IF NOT EXISTS _dead_letters_unhandled_idx
    ON fenceq._dead_letters (queue, failed_at)
    WHERE replayed_at IS NULL AND discarded_at IS NULL;

-- What search_jobs returns: fenceq.jobs' columns, then seq (the submission
-- order it pages by). A type of its own because the function's parameters
-- take the names of some of these columns. Columns are only ever appended.
DO $$
BEGIN
    IF to_regtype('fenceq.job_search_row') IS NULL THEN
        CREATE TYPE fenceq.job_search_row AS (
            job_id            text,
            queue             text,
            task              text,
            payload           jsonb,
            priority          integer,
            status            text,
            attempts          integer,
            max_attempts      integer,
            run_at            timestamptz,
            expires_at        timestamptz,
            owner_id          text,
            generation        bigint,
            lease_expires_at  timestamptz,
            budget_expires_at timestamptz,
            cancel_requested  boolean,
            pid               integer,
            result            jsonb,
            last_error        text,
            submission_id     text,
            fingerprint       text,
            active_key        text,
            dlq_id            text,
            created_at        timestamptz,
            finished_at       timestamptz,
            concurrency_key   text,
            blocked_by        integer,
            progress          jsonb,
            progress_at       timestamptz,
            seq               bigint
        );
    END IF;
END
$$;
COMMENT ON TYPE fenceq.job_search_row IS
    'One job search_jobs found: the columns of fenceq.jobs, then seq (submission order).';
