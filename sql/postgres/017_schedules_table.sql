-- fenceq for PostgreSQL, part 1: the periodic schedules (version 3,
-- docs/guarantees.md §14).
--
-- What it holds: one row per schedule, the job it submits, its cron
-- expression as written and parsed once by set_schedule (the allowed values
-- of each field, ascending; weekdays 0-6 from Sunday), and the next
-- occurrence tick submits (NULL while paused or when none is left before
-- year 10000).
-- Who writes it: set_schedule, drop_schedule and tick (054_schedules.sql).
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
