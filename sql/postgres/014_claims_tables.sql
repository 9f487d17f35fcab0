-- fenceq for PostgreSQL, part 1: what claims record and return.
--
-- What it holds: the claim ledger (_claims), the rate window of queues with
-- a rate limit (_rate_window), the checkpoints recorded under a claim's
-- fence (_checkpoints) and the row type a claim returns (fenceq.claim).
-- Who writes it: the claims (050_claim.sql: claim_next, claim_batch,
-- claim_jobs, _pick_limited) record their tokens and nonces in _claims and
-- their times in _rate_window, and prune _rate_window; checkpoint (051_fence.sql) inserts
-- into _checkpoints; adopt_dispatch (080_dispatch.sql) records the token of
-- the claim it adopts; set_queue_limits (030_queues.sql) empties the rate
-- window of a queue whose rate limit it removes; purge (060_operators.sql)
-- deletes the ledger and the checkpoints of the jobs it deletes.

-- The claim ledger: every token used in a successful claim, until its job is
-- purged, and (version 8) every nonce of a successful claim_jobs call, until
-- none of the call's jobs is left. One key for both, so that a token or
-- nonce claims at most once whichever call spends it. A token's row names
-- its job and generation (job_ids NULL); a call's row names the call's jobs
-- in claim order (job_id and generation NULL), whose generations the job
-- rows' call_claims keep. With the job rows, the source of the
-- fenceq.attempts view.
CREATE TABLE IF NOT EXISTS fenceq._claims (
    claim_token text COLLATE "C" NOT NULL,
    job_id      text COLLATE "C",
    generation  bigint,
    owner_id    text COLLATE "C" NOT NULL,
    claimed_at  timestamptz NOT NULL,
    job_ids     text[] COLLATE "C",
    CONSTRAINT _claims_pkey PRIMARY KEY (claim_token)
);
CREATE INDEX IF NOT EXISTS _claims_job_idx ON fenceq._claims (job_id, generation);

-- The rate window (version 3, docs/guarantees.md §12): one row per
-- successful claim of a queue with a rate limit, kept for one rate_period
-- (claims prune the older ones), so that a claim can count the claims of
-- the last period exactly.
CREATE TABLE IF NOT EXISTS fenceq._rate_window (
    queue      text COLLATE "C" NOT NULL,
    claimed_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS _rate_window_queue_idx ON fenceq._rate_window (queue, claimed_at);

-- Checkpoints: one recorded value per (job, step), written once.
CREATE TABLE IF NOT EXISTS fenceq._checkpoints (
    job_id      text COLLATE "C" NOT NULL,
    step        text COLLATE "C" NOT NULL,
    value       jsonb NOT NULL,
    generation  bigint NOT NULL,
    recorded_at timestamptz NOT NULL,
    CONSTRAINT _checkpoints_pkey PRIMARY KEY (job_id, step)
);

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
