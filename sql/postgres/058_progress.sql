-- fenceq for PostgreSQL, part 58: waiting for results and fenced progress.
--
-- docs/guarantees.md §17. A queue whose notify_done switch is on sends a
-- fenceq_done notification, whose payload is the job id, at every terminal
-- transition of its jobs: every function that makes a job completed,
-- failed, cancelled or expired calls _notify_done. progress records a small
-- JSON value on a live claim and renews its lease, as a heartbeat does.

-- _notify_done: a fenceq_done hint for each of the jobs whose queue has
-- notify_done on, sent in the caller's transaction after it made them
-- terminal. A notification is delivered at commit, so a listener woken by
-- one reads the job terminal; a rolled-back transaction sends nothing.
-- Callers on the hot path (complete, complete_batch, fail) read their
-- queue's switch in a statement they run anyway, and skip the call when it
-- is off.
CREATE OR REPLACE FUNCTION fenceq._notify_done(job_ids text[])
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
BEGIN
    PERFORM pg_notify('fenceq_done', j.job_id)
       FROM fenceq._jobs AS j JOIN fenceq._queues AS q ON q.queue = j.queue
      WHERE j.job_id = ANY (_notify_done.job_ids) AND q.notify_done;
END
$$;
COMMENT ON FUNCTION fenceq._notify_done(text[]) IS
    'Private. Send fenceq_done (payload: the job id) for each of these jobs whose queue has notify_done on.';

-- set_queue_notify_done: whether the terminal transitions of a queue's jobs
-- send fenceq_done notifications. Off by default: every notifying commit
-- takes a cluster-wide lock (docs/guarantees.md §11), and without the
-- notifications a waiting client polls instead.
-- Locking: the queue row, for the update; of concurrent identical calls
-- exactly one changes the flag. True when the flag changed; false when it
-- had this value already; QF101 for an unknown queue.
CREATE OR REPLACE FUNCTION fenceq.set_queue_notify_done(queue text, notify boolean)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(set_queue_notify_done.queue, 'queue');
    IF set_queue_notify_done.notify IS NULL THEN
        PERFORM fenceq._raise('QF100', 'notify is required');
    END IF;
    UPDATE fenceq._queues AS q SET notify_done = set_queue_notify_done.notify
     WHERE q.queue = set_queue_notify_done.queue AND q.notify_done <> set_queue_notify_done.notify;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = set_queue_notify_done.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION fenceq.set_queue_notify_done(text, boolean) IS
    'Turn fenceq_done notifications (one per job reaching a terminal state, payload the job id) for a queue on or off. True when the flag changed; QF101 for an unknown queue.';

-- progress: record a progress report (any JSON value of at most 64 KiB in
-- canonical form; JSON null clears it) on a live claim, with progress_at
-- the time it was recorded. A sign of life: it renews the lease as
-- heartbeat does without a lease, to LEAST(now + the claim's lease,
-- budget_expires_at), also for a cancel-requested claim. A later report
-- replaces an earlier one.
-- True while the claim is live (also when the budget clamps the renewal);
-- false, with nothing changed, once the lease or the budget has run out,
-- the job is terminal or the fence is stale. QF103 for a bad value (named
-- before a malformed fence, QF106).
-- Locking: one statement, locked and judged as complete is (the job row
-- by primary key, the clock read above the lock). A HOT update: no index
-- covers progress, progress_at or lease_expires_at.
CREATE OR REPLACE FUNCTION fenceq.progress(
    job_id text, owner_id text, generation bigint, claim_token text, progress jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    -- jsonb's text is never shorter than the canonical form: a cheap first
    -- test of the size.
    IF NOT coalesce(fenceq._is_plain_json(progress.progress)
                    AND octet_length(progress.progress::text) <= 65536, true) THEN
        PERFORM fenceq._check_json(progress.progress, 'progress');
        IF octet_length(fenceq._canonical_json(progress.progress)) > 65536 THEN
            PERFORM fenceq._raise('QF103', 'progress exceeds 64 KiB in canonical form');
        END IF;
    END IF;
    IF NOT coalesce(fenceq._is_plain_fence(progress.job_id, progress.owner_id,
                                           progress.generation, progress.claim_token), false) THEN
        PERFORM fenceq._check_fence(progress.job_id, progress.owner_id, progress.generation, progress.claim_token);
    END IF;
    WITH locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at
              FROM fenceq._jobs AS j WHERE j.job_id = progress.job_id
               FOR UPDATE) AS l)
    UPDATE fenceq._jobs AS j
       SET progress = nullif(progress.progress, 'null'::jsonb), progress_at = l.locked_at,
           lease_expires_at = least(l.locked_at + j.lease, j.budget_expires_at)
      FROM locked AS l
     WHERE j.job_id = l.job_id
       AND fenceq._holds_fence(l.status, l.owner_id, l.generation, l.claim_token, l.lease_expires_at,
                               progress.owner_id, progress.generation, progress.claim_token, l.locked_at);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION fenceq.progress(text, text, bigint, text, jsonb) IS
    'Record a progress report (JSON, at most 64 KiB canonical) on a live claim and renew its lease as heartbeat does. True while live; false when stale, expired, terminal or past its budget.';
