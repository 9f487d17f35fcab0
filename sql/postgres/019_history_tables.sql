-- fenceq for PostgreSQL, part 1: what the operator reads back about jobs
-- over time: each job's events (version 6, docs/design-v6.md,
-- docs/guarantees.md §20), each queue's activity per minute and the row a
-- search of the jobs returns (version 7, docs/design-v7.md, §21).
--
-- Who writes it: _events is written by the function that makes a
-- transition, in its transaction, through _record_event and _record_events
-- (part 8b, 082_history.sql) and by _record_action and retry_jobs
-- (088_bulk.sql); purge (060_operators.sql) deletes the events of the
-- jobs it deletes and those past their queue's history_retention.
-- _activity is written by sample_activity (part 8c, 084_activity.sql)
-- alone, off the hot path.
-- search_jobs (part 8d, 086_search.sql) returns job_search_row.

-- Events: one row per transition of a job whose queue has history on,
-- written by the function that makes the transition, in its transaction.
CREATE TABLE IF NOT EXISTS fenceq._events (
    job_id     text COLLATE "C" NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    queue      text COLLATE "C" NOT NULL,
    at         timestamptz NOT NULL,
    event      text COLLATE "C" NOT NULL,
    generation bigint,
    owner_id   text COLLATE "C",
    detail     jsonb NOT NULL,
    CONSTRAINT _events_pkey PRIMARY KEY (job_id, seq)
);
-- purge's retention: a queue's oldest events first.
CREATE INDEX IF NOT EXISTS _events_queue_at_idx ON fenceq._events (queue, at);

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
