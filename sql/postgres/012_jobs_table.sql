-- fenceq for PostgreSQL, part 1: the jobs table, with all its columns,
-- constraints and indexes.
--
-- What it holds: one row per job, from its submission until purge deletes
-- it, carrying its current fence (owner_id, generation, claim_token).
-- Who writes it: submit and submit_batch (040_submit.sql) insert; the
-- claims (050_claim.sql) claim, the fenced writes (051_fence.sql) renew and
-- record, the settling functions (052_settle.sql) and reap (053_reap.sql)
-- end or requeue a claim; dependencies (045_dependencies.sql) free waiting
-- jobs; extend (055_time.sql), progress (058_progress.sql), the operators
-- (060_operators.sql: cancel, purge, replay_dead_letter), adopt_dispatch
-- (080_dispatch.sql) and retry_jobs (088_bulk.sql) change one.
--
-- fillfactor leaves room on each page so that heartbeats, checkpoints,
-- set_pid and progress reports stay HOT updates: no index covers the
-- columns they change (lease_expires_at, pid, progress, progress_at). State
-- changes touch indexed columns (status, scheduled, run_at, finished_at)
-- and are ordinary updates.
-- One claim of a job by a claim_jobs call (version 8): the job's fence at
-- that claim but the job id, and when it was made. A job's call_claims
-- lists them, so that the attempts view and the activity sampler read a
-- call's claims from the job rows, where the call's one ledger row (part
-- 1: _claims) names the jobs but not their generations.
DO $$
BEGIN
    IF to_regtype('fenceq._call_claim') IS NULL THEN
        CREATE TYPE fenceq._call_claim AS (
            generation  bigint,
            owner_id    text,
            claimed_at  timestamptz,
            claim_nonce text
        );
    END IF;
END
$$;

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
    -- A job's concurrency key (version 3): the queue's max_claimed_per_key
    -- counts claimed jobs per key (docs/guarantees.md §12).
    concurrency_key   text COLLATE "C",
    -- Dependencies (version 3, docs/guarantees.md §16): a job waiting on
    -- dependencies is pending with blocked_by > 0 (its unsatisfied
    -- dependencies) and run_at 'infinity', so the claim index passes over it
    -- as it passes over a job due later; the run_at it asked for waits in
    -- blocked_run_at until its last dependency completes.
    blocked_by        integer,
    blocked_run_at    timestamptz,
    -- A claimed job's latest fenced progress report (version 4,
    -- docs/guarantees.md §17), written by heartbeat-like updates.
    progress          jsonb,
    progress_at       timestamptz,
    -- Which of the two sets of pending jobs the job waits in (version 5,
    -- part 1c, below).
    scheduled         boolean NOT NULL DEFAULT false,
    -- The job's claims by claim_jobs calls, oldest first (version 8): the
    -- claim that made each call's ledger row name the job appends one.
    -- NULL until the first; claim_next, claim_batch and adopt_dispatch
    -- record their claims in _claims instead.
    call_claims       fenceq._call_claim[],
    CONSTRAINT _jobs_pkey PRIMARY KEY (job_id),
    CONSTRAINT _jobs_status_check CHECK (status IN
        ('pending', 'claimed', 'completed', 'failed', 'cancelled', 'expired')),
    CONSTRAINT _jobs_attempts_check CHECK (attempts >= 0 AND max_attempts > 0),
    CONSTRAINT _jobs_generation_check CHECK (generation >= 0)
) WITH (fillfactor = 80);

-- Jobs due later wait apart (version 5; "part 1c" in comments). A pending
-- job is in exactly one of two sets, told apart by _jobs.scheduled:
--   * ready (scheduled = false): due; each queue's ready jobs lead its
--     stretch of _jobs_pending_idx, in claim order (priority, run_at,
--     submission order), and every claim reads them there;
--   * later (scheduled = true): due at a run_at still ahead when it was
--     written (submitted for later, a retry in back-off, released for
--     later, waiting on dependencies with run_at 'infinity'); they follow
--     the ready ones in _jobs_pending_idx (where the dashboard and
--     queue_stats count every pending job) and are also in
--     _jobs_later_idx, by due time.
-- Every statement that makes a job pending sets scheduled to whether its
-- run_at is after the clock of that statement; a claim of a queue first
-- moves the queue's jobs that have fallen due from later to ready
-- (_move_due), so a due job is claimable by the first claim after its
-- run_at, as in version 4. Why: in version 4 one claim index held both, and
-- a claim or next_due with many jobs due later read past all of them (an
-- empty claim 7.5 ms, next_due 31.5 ms with 100,000 such jobs); now each
-- is one index probe (docs/design-v5.md).
--
-- A job whose scheduled flag is false while its run_at is ahead is still
-- never claimed early (every claim also compares run_at with its clock):
-- the flag decides where a job waits, never whether it is due.

-- Claim path: one ordered scan per queue over its ready jobs
-- (docs/guarantees.md §11: a single index over queue = ANY(...) cannot
-- serve ORDER BY, so claims merge per-queue heads).
CREATE INDEX IF NOT EXISTS _jobs_pending_idx
    ON fenceq._jobs (queue, scheduled, priority DESC, run_at, seq)
    WHERE status = 'pending';
-- Jobs due later, by due time: the claim's move and next_due read its head.
CREATE INDEX IF NOT EXISTS _jobs_later_idx
    ON fenceq._jobs (queue, run_at)
    WHERE status = 'pending' AND scheduled;
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
