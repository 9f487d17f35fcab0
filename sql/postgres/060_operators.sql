-- fenceq for PostgreSQL, part 6: operators (cancel, views, purge, dead letters).

-- _cancel_locked: cancel a job whose row the caller holds locked, as cancel
-- does: pending (or claimed, with force) -> 'cancelled', which kills any
-- fence; claimed -> cancel requested (the worker acknowledges). Returns the
-- new state, 'cancelled' or 'cancel_requested', or NULL for a terminal job,
-- which is left as it is. A cancelled job's dependents are cancelled with it
-- (§16). Of the notifications it sends only fenceq_done (part 58, where the
-- queue has notify_done on): each caller says whom else to tell.
CREATE OR REPLACE FUNCTION fenceq._cancel_locked(job fenceq._jobs, force boolean)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    IF (_cancel_locked.job).status = 'pending' OR ((_cancel_locked.job).status = 'claimed' AND _cancel_locked.force) THEN
        UPDATE fenceq._jobs AS j SET status = 'cancelled', finished_at = clock_timestamp()
         WHERE j.job_id = (_cancel_locked.job).job_id;
        PERFORM fenceq._record_event((_cancel_locked.job).job_id, (_cancel_locked.job).queue, 'cancelled',
            (_cancel_locked.job).generation, (_cancel_locked.job).owner_id,
            jsonb_build_object('reason', CASE WHEN (_cancel_locked.job).status = 'claimed'
                                              THEN 'force' ELSE 'cancel' END));
        PERFORM fenceq._settle_dependents(ARRAY[(_cancel_locked.job).job_id], false);
        PERFORM fenceq._notify_done(ARRAY[(_cancel_locked.job).job_id]);
        RETURN 'cancelled';
    END IF;
    IF (_cancel_locked.job).status = 'claimed' THEN
        UPDATE fenceq._jobs AS j SET cancel_requested = true WHERE j.job_id = (_cancel_locked.job).job_id;
        IF NOT (_cancel_locked.job).cancel_requested THEN  -- a repeated request is no transition
            PERFORM fenceq._record_event((_cancel_locked.job).job_id, (_cancel_locked.job).queue,
                'cancel_requested', (_cancel_locked.job).generation, (_cancel_locked.job).owner_id);
        END IF;
        RETURN 'cancel_requested';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION fenceq._cancel_locked(fenceq._jobs, boolean) IS
    'Private. Cancel a locked job as cancel does (pending or forced -> cancelled, claimed -> cancel_requested); NULL for a terminal job, left unchanged.';

-- cancel: cancel a job. Pending -> 'cancelled'. Claimed -> 'cancel_requested'
-- (the worker acknowledges), or 'cancelled' at once with force, which kills
-- the fence. A terminal job answers with its unchanged status; an unknown job
-- with NULL. Sends pg_notify('fenceq_control', job_id) for an active job.
-- Locking: the job row.
CREATE OR REPLACE FUNCTION fenceq.cancel(job_id text, force boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_answer text;
BEGIN
    PERFORM fenceq._check_name(cancel.job_id, 'job_id', max_length => 36);
    IF cancel.force IS NULL THEN
        PERFORM fenceq._raise('QF100', 'force is required');
    END IF;
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = cancel.job_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_answer := fenceq._cancel_locked(v_job, cancel.force);
    IF v_answer IS NULL THEN
        RETURN v_job.status;
    END IF;
    PERFORM pg_notify('fenceq_control', cancel.job_id);
    RETURN v_answer;
END
$$;
COMMENT ON FUNCTION fenceq.cancel(text, boolean) IS
    'Cancel a job: pending -> cancelled; claimed -> cancel_requested (or cancelled with force, killing the fence); terminal -> its status; unknown -> NULL. Notifies fenceq_control.';

-- Views: read-only windows on the private tables. No view shows a claim
-- token. Columns are only ever appended (docs/guarantees.md §3).
CREATE OR REPLACE VIEW fenceq.jobs AS
SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.status, j.attempts,
       j.max_attempts, coalesce(j.blocked_run_at, j.run_at) AS run_at, j.expires_at, j.owner_id, j.generation,
       j.lease_expires_at, j.budget_expires_at, j.cancel_requested, j.pid, j.result,
       j.last_error, j.submission_id, j.fingerprint, j.active_key, j.dlq_id,
       j.created_at, j.finished_at, j.concurrency_key, coalesce(j.blocked_by, 0) AS blocked_by,
       j.progress, j.progress_at
  FROM fenceq._jobs AS j;
COMMENT ON VIEW fenceq.jobs IS 'Every job, without claim tokens.';

CREATE OR REPLACE VIEW fenceq.dependencies AS
SELECT d.job_id, d.depends_on, d.satisfied
  FROM fenceq._dependencies AS d;
COMMENT ON VIEW fenceq.dependencies IS 'One row per dependency: job_id waits for depends_on; satisfied once it completed.';

-- submissions: the retained submission identities (fingerprints stay
-- private), so that a job is found by its submission id through the
-- identity's primary key.
CREATE OR REPLACE VIEW fenceq.submissions AS
SELECT s.submission_id, s.job_id, s.queue, s.created_at
  FROM fenceq._submissions AS s;
COMMENT ON VIEW fenceq.submissions IS 'Retained submission identities: submission_id -> job_id (they outlive purged jobs).';

CREATE OR REPLACE VIEW fenceq.checkpoints AS
SELECT c.job_id, c.step, c.value, c.generation, c.recorded_at
  FROM fenceq._checkpoints AS c;
COMMENT ON VIEW fenceq.checkpoints IS 'Recorded checkpoints: one value per (job, step), with the generation that wrote it.';

-- attempts: the ledger's rows of claims by token, and the claims by
-- claim_jobs calls that the job rows keep (version 8; a call's one ledger
-- row names its jobs, not their generations). A filter on job_id reads one
-- index range of the ledger and one job row.
CREATE OR REPLACE VIEW fenceq.attempts AS
SELECT c.job_id, c.generation, c.owner_id, c.claimed_at
  FROM fenceq._claims AS c
 WHERE c.job_id IS NOT NULL
UNION ALL
SELECT j.job_id, k.generation, k.owner_id, k.claimed_at
  FROM fenceq._jobs AS j
 CROSS JOIN LATERAL unnest(j.call_claims) AS k;
COMMENT ON VIEW fenceq.attempts IS 'One row per successful claim (from the claim ledger and the job rows), without claim tokens or nonces.';

-- queue_stats reads pending and claimed jobs through their partial indexes,
-- never the terminal history.
CREATE OR REPLACE VIEW fenceq.queue_stats AS
SELECT q.queue,
       coalesce(p.pending, 0) AS pending,
       coalesce(p.due, 0) AS due,
       coalesce(c.claimed, 0) AS claimed,
       coalesce(c.cancel_requested, 0) AS cancel_requested,
       clock_timestamp() - p.oldest_due AS oldest_due_age,
       q.paused,
       q.notify,
       q.max_claimed,
       q.max_claimed_per_key,
       coalesce(k.busiest_key, 0) AS busiest_key_claimed,
       q.rate_limit,
       q.rate_period,
       coalesce(r.used, 0) AS rate_used,
       coalesce(p.blocked, 0) AS blocked
  FROM fenceq._queues AS q
  LEFT JOIN LATERAL (
        SELECT count(*) AS pending,
               count(*) FILTER (WHERE j.run_at <= clock_timestamp()) AS due,
               min(j.run_at) FILTER (WHERE j.run_at <= clock_timestamp()) AS oldest_due,
               count(*) FILTER (WHERE j.blocked_by IS NOT NULL) AS blocked
          FROM fenceq._jobs AS j
         WHERE j.queue = q.queue AND j.status = 'pending') AS p ON true
  LEFT JOIN LATERAL (
        SELECT count(*) AS claimed,
               count(*) FILTER (WHERE j.cancel_requested) AS cancel_requested
          FROM fenceq._jobs AS j
         WHERE j.queue = q.queue AND j.status = 'claimed') AS c ON true
  LEFT JOIN LATERAL (
        SELECT max(k.claimed) AS busiest_key FROM (
            SELECT count(*) AS claimed FROM fenceq._jobs AS j
             WHERE j.queue = q.queue AND j.status = 'claimed' AND j.concurrency_key IS NOT NULL
               AND q.max_claimed_per_key IS NOT NULL
             GROUP BY j.concurrency_key) AS k) AS k ON true
  LEFT JOIN LATERAL (
        SELECT count(*) AS used FROM fenceq._rate_window AS w
         WHERE w.queue = q.queue AND w.claimed_at > clock_timestamp() - q.rate_period) AS r ON true;
COMMENT ON VIEW fenceq.queue_stats IS
    'Per queue: pending, due-now pending, claimed and cancel-requested counts, the age of the oldest due job, the paused and notify flags, and the limits with their usage (busiest key''s claimed count, claims in the current rate window).';

CREATE OR REPLACE VIEW fenceq.dead_letters AS
SELECT d.dlq_id, d.job_id, d.queue, d.task, d.error, d.attempts, d.failed_at,
       d.replayed_at, d.discarded_at
  FROM fenceq._dead_letters AS d;
COMMENT ON VIEW fenceq.dead_letters IS 'Dead letters; a replayed or discarded letter stays listed.';

-- get_job: one job from fenceq.jobs, or no row.
CREATE OR REPLACE FUNCTION fenceq.get_job(job_id text)
RETURNS SETOF fenceq.jobs
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(get_job.job_id, 'job_id', max_length => 36);
    RETURN QUERY SELECT * FROM fenceq.jobs AS j WHERE j.job_id = get_job.job_id;
END
$$;
COMMENT ON FUNCTION fenceq.get_job(text) IS 'One job as fenceq.jobs shows it, or no row.';

-- purge: delete terminal jobs finished before now - older_than, oldest first,
-- at most max_rows, with their checkpoints, claim ledger rows (their tokens
-- are forgotten) and dependency edges. Jobs with a dead letter that is
-- neither replayed nor discarded are kept; handled dead letters stay listed.
-- Their history events (part 8b) and dispatch records (part 8a) go with
-- them; events older than their queue's history retention go too (at most
-- max_rows). Submission identities outlive the purge unless submissions_older_than is
-- given: then up to max_rows identities older than that whose jobs are gone
-- are forgotten too, and replaying such a request creates a new job.
-- Locking: FOR UPDATE SKIP LOCKED on the jobs it deletes.
CREATE OR REPLACE FUNCTION fenceq.purge(
    older_than interval, max_rows integer DEFAULT 10000,
    submissions_older_than interval DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_ids text[];
    v_nonces text[];
    v_cutoff timestamptz;
BEGIN
    PERFORM fenceq._check_interval(purge.older_than, 'older_than', allow_zero => true,
                                   nullable => false, backwards => true);
    PERFORM fenceq._check_interval(purge.submissions_older_than, 'submissions_older_than',
                                   allow_zero => true, backwards => true);
    IF purge.max_rows IS NULL OR purge.max_rows < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be a positive integer');
    END IF;
    -- A variable, not clock_timestamp() inline, so the index can serve it.
    v_cutoff := clock_timestamp() - purge.older_than;
    SELECT coalesce(array_agg(t.job_id), '{}') INTO v_ids FROM (
        SELECT j.job_id FROM fenceq._jobs AS j
         WHERE j.finished_at < v_cutoff
           AND j.status IN ('completed', 'failed', 'cancelled', 'expired')
           AND NOT EXISTS (SELECT 1 FROM fenceq._dead_letters AS d
                            WHERE d.job_id = j.job_id
                              AND d.replayed_at IS NULL AND d.discarded_at IS NULL)
         ORDER BY j.finished_at
         LIMIT purge.max_rows
           FOR UPDATE SKIP LOCKED) AS t;
    -- The nonces of the claim_jobs calls that claimed them: each call's
    -- ledger row goes with the last of its jobs, below.
    SELECT coalesce(array_agg(DISTINCT k.claim_nonce), '{}') INTO v_nonces
      FROM fenceq._jobs AS j CROSS JOIN LATERAL unnest(j.call_claims) AS k
     WHERE j.job_id = ANY (v_ids);
    DELETE FROM fenceq._checkpoints AS c WHERE c.job_id = ANY (v_ids);
    DELETE FROM fenceq._claims AS c WHERE c.job_id = ANY (v_ids);
    -- A terminal job's edges are settled (satisfied, or the dependent
    -- cancelled): they go with it, either end.
    DELETE FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (v_ids);
    DELETE FROM fenceq._dependencies AS d WHERE d.job_id = ANY (v_ids);
    DELETE FROM fenceq._events AS e WHERE e.job_id = ANY (v_ids);
    DELETE FROM fenceq._dispatches AS d WHERE d.job_id = ANY (v_ids);
    DELETE FROM fenceq._jobs AS j WHERE j.job_id = ANY (v_ids);
    -- A purge of another job of the same call, concurrent with this one,
    -- can leave a call's row behind: its nonce then stays spent, the safe
    -- side of "a nonce claims at most once".
    DELETE FROM fenceq._claims AS c
     WHERE c.claim_token = ANY (v_nonces) AND c.job_ids IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (c.job_ids));
    -- Each queue's retention (part 8b) bounds its events on their own:
    -- at most max_rows of them, oldest first per queue.
    DELETE FROM fenceq._events AS e
     WHERE (e.job_id, e.seq) IN (
        SELECT o.job_id, o.seq
          FROM fenceq._queues AS q
         CROSS JOIN LATERAL (
            SELECT x.job_id, x.seq FROM fenceq._events AS x
             WHERE x.queue = q.queue AND x.at < clock_timestamp() - q.history_retention
             ORDER BY x.at
             LIMIT purge.max_rows) AS o
         WHERE q.history_retention IS NOT NULL
         LIMIT purge.max_rows);
    IF purge.submissions_older_than IS NOT NULL THEN
        v_cutoff := clock_timestamp() - purge.submissions_older_than;
        DELETE FROM fenceq._submissions AS s
         WHERE s.submission_id IN (
            SELECT o.submission_id FROM fenceq._submissions AS o
             WHERE o.created_at < v_cutoff
               AND NOT EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = o.job_id)
             LIMIT purge.max_rows);
    END IF;
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION fenceq.purge(interval, integer, interval) IS
    'Delete terminal jobs finished before now - older_than (oldest first, at most max_rows) with their checkpoints, ledger rows and dependency edges, keeping those with an unhandled dead letter. Submission identities are kept unless submissions_older_than is given. Returns jobs deleted.';

-- replay_dead_letter: put a dead-lettered job back to pending with a fresh
-- attempt budget; its submission identity and generation history are kept.
-- Returns the job id; NULL for an unknown or already handled dead letter;
-- QF202 when another active job now holds the job's active key.
CREATE OR REPLACE FUNCTION fenceq.replay_dead_letter(dlq_id text)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_letter fenceq._dead_letters;
    v_active_key text;
    v_now timestamptz;
BEGIN
    IF replay_dead_letter.dlq_id IS NULL OR replay_dead_letter.dlq_id !~ '^[0-9a-f]{32}$' THEN
        PERFORM fenceq._raise('QF102', 'dlq_id must be 32 lowercase hex characters');
    END IF;
    SELECT * INTO v_letter FROM fenceq._dead_letters AS d
     WHERE d.dlq_id = replay_dead_letter.dlq_id FOR UPDATE;
    IF NOT FOUND OR v_letter.replayed_at IS NOT NULL OR v_letter.discarded_at IS NOT NULL THEN
        RETURN NULL;
    END IF;
    -- The replayed job becomes active again: its active key must be free.
    SELECT j.active_key INTO v_active_key FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id;
    IF v_active_key IS NOT NULL THEN
        PERFORM fenceq._lock_identities(fenceq._identity_keys(v_letter.queue, v_active_key, NULL, NULL));
        IF EXISTS (SELECT 1 FROM fenceq._jobs AS j
                    WHERE j.queue = v_letter.queue AND j.active_key = v_active_key
                      AND j.status IN ('pending', 'claimed')) THEN
            PERFORM fenceq._raise('QF202', 'the active key is held by another active job');
        END IF;
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id FOR UPDATE;
    v_now := clock_timestamp();
    UPDATE fenceq._jobs AS j
       SET status = 'pending', attempts = 0, run_at = v_now, finished_at = NULL,
           owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
           budget_expires_at = NULL, pid = NULL, cancel_requested = false, result = NULL,
           scheduled = false  -- due now: ready (part 1c)
     WHERE j.job_id = v_letter.job_id AND j.status = 'failed';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE fenceq._dead_letters AS d SET replayed_at = v_now WHERE d.dlq_id = replay_dead_letter.dlq_id;
    PERFORM fenceq._record_events(ARRAY[v_letter.job_id], 'replayed',
                                  jsonb_build_object('dlq_id', replay_dead_letter.dlq_id));
    PERFORM fenceq._notify_jobs(v_letter.queue);
    RETURN v_letter.job_id;
END
$$;
COMMENT ON FUNCTION fenceq.replay_dead_letter(text) IS
    'Return a dead-lettered job to pending with a fresh attempt budget; returns the job id, or NULL for an unknown or already handled letter; QF202 when its active key is now held by another active job.';

-- discard_dead_letter: mark a dead letter handled without replaying it.
-- True once; false for an unknown or already handled letter.
CREATE OR REPLACE FUNCTION fenceq.discard_dead_letter(dlq_id text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    IF discard_dead_letter.dlq_id IS NULL OR discard_dead_letter.dlq_id !~ '^[0-9a-f]{32}$' THEN
        PERFORM fenceq._raise('QF102', 'dlq_id must be 32 lowercase hex characters');
    END IF;
    UPDATE fenceq._dead_letters AS d SET discarded_at = clock_timestamp()
     WHERE d.dlq_id = discard_dead_letter.dlq_id
       AND d.replayed_at IS NULL AND d.discarded_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION fenceq.discard_dead_letter(text) IS
    'Mark a dead letter handled without replay. True once; false for an unknown or already handled letter.';

-- version: the installed schema version.
CREATE OR REPLACE FUNCTION fenceq.version()
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN '9';
END
$$;
COMMENT ON FUNCTION fenceq.version() IS 'The installed fenceq schema version.';
