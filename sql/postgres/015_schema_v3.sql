-- fenceq for PostgreSQL, part 1b: what version 3 adds to the tables of
-- part 1.
--
-- Columns are appended with ALTER TABLE ... ADD COLUMN IF NOT EXISTS, never
-- written into part 1's CREATE TABLE, so that a fresh install and an upgrade
-- from version 2 build the same tables column for column. Every added column
-- is nullable or has a constant default: adding it rewrites no row and holds
-- its table's ACCESS EXCLUSIVE lock only for the catalog change.
-- Idempotent like part 1.

-- Flow control (docs/guarantees.md §12): per-queue limits, NULL = no limit.
ALTER TABLE fenceq._queues
    ADD COLUMN IF NOT EXISTS max_claimed integer,
    ADD COLUMN IF NOT EXISTS max_claimed_per_key integer,
    ADD COLUMN IF NOT EXISTS rate_limit integer,
    ADD COLUMN IF NOT EXISTS rate_period interval;

-- A job's concurrency key: max_claimed_per_key counts claimed jobs per key.
ALTER TABLE fenceq._jobs
    ADD COLUMN IF NOT EXISTS concurrency_key text COLLATE "C";

-- The rate window: one row per successful claim of a queue with a rate
-- limit, kept for one rate_period (claims prune the older ones), so that a
-- claim can count the claims of the last period exactly.
CREATE TABLE IF NOT EXISTS fenceq._rate_window (
    queue      text COLLATE "C" NOT NULL,
    claimed_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS _rate_window_queue_idx ON fenceq._rate_window (queue, claimed_at);

-- Dependencies (docs/guarantees.md §16): job_id may not be claimed before
-- depends_on completes. A job waiting on dependencies is pending with
-- blocked_by > 0 (its unsatisfied dependencies) and run_at 'infinity', so the
-- claim index passes over it as it passes over a job due later; the run_at
-- it asked for waits in blocked_run_at until its last dependency completes.
ALTER TABLE fenceq._jobs
    ADD COLUMN IF NOT EXISTS blocked_by integer,
    ADD COLUMN IF NOT EXISTS blocked_run_at timestamptz;
CREATE TABLE IF NOT EXISTS fenceq._dependencies (
    depends_on text COLLATE "C" NOT NULL,
    job_id     text COLLATE "C" NOT NULL,
    satisfied  boolean NOT NULL DEFAULT false,
    CONSTRAINT _dependencies_pkey PRIMARY KEY (depends_on, job_id)
);
CREATE INDEX IF NOT EXISTS _dependencies_job_idx ON fenceq._dependencies (job_id);

-- Named locks (docs/guarantees.md §15): one row per lock name ever
-- acquired. A release clears owner_id and expires_at but keeps the row and
-- its token, so that the lock's fencing tokens only rise, across releases
-- too. A row is held while owner_id is set and expires_at is after now.
CREATE TABLE IF NOT EXISTS fenceq._locks (
    lock       text COLLATE "C" NOT NULL,
    owner_id   text COLLATE "C",
    token      bigint NOT NULL,
    expires_at timestamptz,
    CONSTRAINT _locks_pkey PRIMARY KEY (lock),
    CONSTRAINT _locks_token_check CHECK (token >= 0),
    CONSTRAINT _locks_holder_check CHECK ((owner_id IS NULL) = (expires_at IS NULL))
);

-- Periodic schedules (docs/guarantees.md §14): one row per schedule, the
-- job it submits, its cron expression as written and parsed once by
-- set_schedule (the allowed values of each field, ascending; weekdays 0-6
-- from Sunday), and the next occurrence tick submits (NULL while paused or
-- when none is left before year 10000).
CREATE TABLE IF NOT EXISTS fenceq._schedules (
    schedule      text COLLATE "C" NOT NULL,
    queue         text COLLATE "C" NOT NULL,
    task          text COLLATE "C" NOT NULL,
    cron          text COLLATE "C" NOT NULL,
    time_zone     text COLLATE "C" NOT NULL,
    payload       jsonb,
    priority      integer,
    max_attempts  integer,
    active_key    text COLLATE "C",
    paused        boolean NOT NULL,
    cron_minutes  integer[] NOT NULL,
    cron_hours    integer[] NOT NULL,
    cron_days     integer[] NOT NULL,
    cron_months   integer[] NOT NULL,
    cron_weekdays integer[] NOT NULL,
    cron_days_and boolean NOT NULL,
    next_run_at   timestamptz,
    last_run_at   timestamptz,
    last_job_id   text COLLATE "C",
    CONSTRAINT _schedules_pkey PRIMARY KEY (schedule)
);
-- tick reads the due schedules, the longest due first.
CREATE INDEX IF NOT EXISTS _schedules_due_idx
    ON fenceq._schedules (next_run_at)
    WHERE next_run_at IS NOT NULL;
-- Waiting for results and fenced progress (docs/guarantees.md §17): whether
-- a queue's terminal transitions notify fenceq_done (off by default: a
-- notifying commit serialises, §11), and a claimed job's latest progress
-- report. progress and progress_at are written by heartbeat-like updates:
-- no index may cover them, so that those stay HOT.
ALTER TABLE fenceq._queues
    ADD COLUMN IF NOT EXISTS notify_done boolean NOT NULL DEFAULT false;
ALTER TABLE fenceq._jobs
    ADD COLUMN IF NOT EXISTS progress jsonb,
    ADD COLUMN IF NOT EXISTS progress_at timestamptz;
