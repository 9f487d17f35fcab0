-- fenceq for PostgreSQL, part 1: schema, tables, indexes and the claim type.
--
-- Everything lives in the schema "fenceq". Tables start with "_": they are
-- private, reachable only through the functions (docs/guarantees.md §3, §10).
-- Identity columns use COLLATE "C" so that comparison is byte-exact and
-- deterministic whatever the database's default collation is.
--
-- This file is idempotent: every object is created only when missing, so the
-- install script can be applied again safely.

-- Names in the SQL-bodied helpers (RETURN ...) are bound when they are
-- created, so the install runs on a search_path nobody else can write to
-- (pg_temp is never searched for functions or operators); part 9 puts the
-- caller's path back. Transaction-local: it ends with the install anyway.
SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE SCHEMA IF NOT EXISTS fenceq;
COMMENT ON SCHEMA fenceq IS
    'fenceq: a fenced, owned work queue. Call the functions; the _tables are private.';

-- Queues: named lanes with their defaults. Jobs reference queues by name with
-- no foreign key: an FK would share-lock the queue row on every insert
-- (multixact churn under load, docs/guarantees.md §11).
CREATE TABLE IF NOT EXISTS fenceq._queues (
    queue          text COLLATE "C" NOT NULL,
    lease          interval NOT NULL,
    max_attempts   integer NOT NULL,
    backoff_base   interval NOT NULL,
    backoff_factor double precision NOT NULL,
    backoff_max    interval NOT NULL,
    dead_letter    boolean NOT NULL,
    paused         boolean NOT NULL DEFAULT false,
    notify         boolean NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL,
    CONSTRAINT _queues_pkey PRIMARY KEY (queue)
);

-- Jobs: one row per job, carrying its current fence (owner_id, generation,
-- claim_token). fillfactor leaves room on each page so that heartbeats,
-- checkpoints and set_pid stay HOT updates: no index covers the columns they
-- change (lease_expires_at, pid). State changes touch indexed columns
-- (status, run_at, finished_at) and are ordinary updates.
CREATE TABLE IF NOT EXISTS fenceq._jobs (
    seq               bigint GENERATED ALWAYS AS IDENTITY,
    job_id            text COLLATE "C" NOT NULL,
    queue             text COLLATE "C" NOT NULL,
    task              text COLLATE "C" NOT NULL,
    payload           jsonb,
    priority          integer NOT NULL,
    status            text COLLATE "C" NOT NULL DEFAULT 'pending',
    attempts          integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL,
    run_at            timestamptz NOT NULL,
    expires_at        timestamptz,
    owner_id          text COLLATE "C",
    generation        bigint NOT NULL DEFAULT 0,
    claim_token       text COLLATE "C",
    lease             interval,
    lease_expires_at  timestamptz,
    budget_expires_at timestamptz,
    cancel_requested  boolean NOT NULL DEFAULT false,
    pid               integer,
    result            jsonb,
    last_error        text,
    submission_id     text COLLATE "C",
    fingerprint       text COLLATE "C",
    active_key        text COLLATE "C",
    dlq_id            text COLLATE "C",
    created_at        timestamptz NOT NULL,
    finished_at       timestamptz,
    CONSTRAINT _jobs_pkey PRIMARY KEY (job_id),
    CONSTRAINT _jobs_status_check CHECK (status IN
        ('pending', 'claimed', 'completed', 'failed', 'cancelled', 'expired')),
    CONSTRAINT _jobs_attempts_check CHECK (attempts >= 0 AND max_attempts > 0),
    CONSTRAINT _jobs_generation_check CHECK (generation >= 0)
) WITH (fillfactor = 80);

-- The claim's index is part 1c's (016): since version 5 it holds only the
-- pending jobs that are not waiting apart for their run_at.
-- Claimed jobs: reap scans them (few: one per working worker) and
-- queue_stats counts them without touching terminal history.
CREATE INDEX IF NOT EXISTS _jobs_claimed_idx
    ON fenceq._jobs (queue)
    WHERE status = 'claimed';
-- At most one active job per (queue, active_key) (docs/guarantees.md §5).
CREATE UNIQUE INDEX IF NOT EXISTS _jobs_active_key_idx
    ON fenceq._jobs (queue, active_key)
    WHERE active_key IS NOT NULL AND status IN ('pending', 'claimed');
-- reap turns overdue pending jobs into 'expired', oldest first.
CREATE INDEX IF NOT EXISTS _jobs_expires_idx
    ON fenceq._jobs (expires_at)
    WHERE status = 'pending' AND expires_at IS NOT NULL;
-- purge deletes terminal jobs, oldest first.
CREATE INDEX IF NOT EXISTS _jobs_finished_idx
    ON fenceq._jobs (finished_at)
    WHERE finished_at IS NOT NULL;

-- Submission identities: outlive their jobs (purge) so that a replay keeps
-- answering with the original job id (docs/guarantees.md §4). job_id is deliberately
-- not unique here: _jobs' primary key arbitrates job ids, so a race between
-- two explicit job ids surfaces as QF203, never as a raw unique violation.
CREATE TABLE IF NOT EXISTS fenceq._submissions (
    submission_id text COLLATE "C" NOT NULL,
    fingerprint   text COLLATE "C" NOT NULL,
    job_id        text COLLATE "C" NOT NULL,
    queue         text COLLATE "C" NOT NULL,
    created_at    timestamptz NOT NULL,
    CONSTRAINT _submissions_pkey PRIMARY KEY (submission_id)
);
CREATE INDEX IF NOT EXISTS _submissions_job_idx ON fenceq._submissions (job_id);

-- The claim ledger: every token used in a successful claim, until its job is
-- purged. Also the source of the fenceq.attempts view.
CREATE TABLE IF NOT EXISTS fenceq._claims (
    claim_token text COLLATE "C" NOT NULL,
    job_id      text COLLATE "C" NOT NULL,
    generation  bigint NOT NULL,
    owner_id    text COLLATE "C" NOT NULL,
    claimed_at  timestamptz NOT NULL,
    CONSTRAINT _claims_pkey PRIMARY KEY (claim_token)
);
CREATE INDEX IF NOT EXISTS _claims_job_idx ON fenceq._claims (job_id, generation);

-- Checkpoints: one recorded value per (job, step), written once.
CREATE TABLE IF NOT EXISTS fenceq._checkpoints (
    job_id      text COLLATE "C" NOT NULL,
    step        text COLLATE "C" NOT NULL,
    value       jsonb NOT NULL,
    generation  bigint NOT NULL,
    recorded_at timestamptz NOT NULL,
    CONSTRAINT _checkpoints_pkey PRIMARY KEY (job_id, step)
);

-- Dead letters: written by fail/reap in the same transaction as the failure.
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

-- What a claim returns. Columns are only ever appended (docs/guarantees.md §3).
DO $$
BEGIN
    IF to_regtype('fenceq.claim') IS NULL THEN
        CREATE TYPE fenceq.claim AS (
            job_id            text,
            queue             text,
            task              text,
            payload           jsonb,
            priority          integer,
            attempt           integer,
            max_attempts      integer,
            owner_id          text,
            generation        bigint,
            claim_token       text,
            lease_expires_at  timestamptz,
            budget_expires_at timestamptz,
            cancel_requested  boolean,
            submission_id     text,
            checkpoints       jsonb
        );
    END IF;
END
$$;
COMMENT ON TYPE fenceq.claim IS
    'One successful claim: the job and its fence (job_id, owner_id, generation, claim_token).';
