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
