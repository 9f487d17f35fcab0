-- fenceq for PostgreSQL, part 5: time (docs/guarantees.md §13): when the
-- next job falls due, budget extension, bulk cancel.

-- next_due: the earliest run_at of a pending, unexpired job in the named,
-- unpaused queues; in the past when something is due now, NULL when there
-- is none (a run_at of 'infinity', a job that waits for something else,
-- never counts). An idle worker waits no later than this, so a retry or a
-- delayed job starts on time without a notification.
-- QF100 for an empty array, QF102 for a malformed name, QF101 for an
-- undeclared queue. Read-only, no locks.
--
-- Per queue, the earliest of two heads (part 1c). The jobs due later wait
-- apart by due time: their head is one probe of _jobs_later_idx. The ready
-- jobs (due, not yet claimed) are ordered by priority first, so their
-- earliest run_at is the first entry of each priority's stretch of the
-- claim index: the levels are walked from the highest down, one probe each
-- (a loose index scan), and below the 32nd level the rest is read in one
-- range scan. An idle worker, the one that asks, finds the ready set empty:
-- one probe.
CREATE OR REPLACE FUNCTION fenceq.next_due(queues text[])
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_active text[];
    v_known integer;
    v_queue text;
    v_now timestamptz;
    v_queue_due timestamptz;
    v_floor integer;
    v_due timestamptz;
BEGIN
    PERFORM fenceq._check_names(next_due.queues, 'queues');
    SELECT array_agg(q.queue) FILTER (WHERE NOT q.paused), count(*)
      INTO v_active, v_known
      FROM fenceq._queues AS q WHERE q.queue = ANY (next_due.queues);
    IF v_known <> (SELECT count(DISTINCT n.name) FROM unnest(next_due.queues) AS n(name)) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    v_now := clock_timestamp();
    FOREACH v_queue IN ARRAY coalesce(v_active, '{}') LOOP
        -- The priority levels from the highest down, one probe each, and
        -- the earliest due job of each level.
        WITH RECURSIVE levels(priority, depth) AS (
            (SELECT j.priority, 1 FROM fenceq._jobs AS j
              WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled
              ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM fenceq._jobs AS j
                     WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority < l.priority
                     ORDER BY j.priority DESC LIMIT 1), l.depth + 1
              FROM levels AS l
             WHERE l.priority IS NOT NULL AND l.depth < 32)
        SELECT min(d.run_at), min(l.priority) FILTER (WHERE l.depth = 32)
          INTO v_queue_due, v_floor
          FROM levels AS l
          LEFT JOIN LATERAL (
            SELECT j.run_at FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority = l.priority
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.run_at LIMIT 1) AS d ON true
         WHERE l.priority IS NOT NULL;
        IF v_floor IS NOT NULL THEN
            -- Levels below the 32nd: the rest of the queue in one range scan.
            SELECT least(v_queue_due, min(j.run_at)) INTO v_queue_due
              FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority < v_floor
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now);
        END IF;
        -- The head of the jobs due later (a run_at of 'infinity' never counts).
        v_queue_due := least(v_queue_due, (
            SELECT j.run_at FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND j.scheduled
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.run_at LIMIT 1));
        v_due := least(v_due, v_queue_due);  -- least() skips NULLs
    END LOOP;
    RETURN v_due;
END
$$;
COMMENT ON FUNCTION fenceq.next_due(text[]) IS
    'The earliest run_at of a pending, unexpired job in the named, unpaused queues (in the past when one is due now); NULL when there is none. QF100 for an empty array, QF101 for an undeclared queue.';

-- extend: grow a live claim's budget. budget_expires_at becomes the later
-- of its current value and now + budget (a shorter budget takes nothing
-- away); on a claim without a budget it sets one. The lease is renewed as a
-- heartbeat would, to LEAST(now + the claim's lease, the new budget). Also
-- for a cancel-requested claim, as heartbeat. True when the claim is live;
-- false (nothing changed) when the fence is stale, the lease or budget ran
-- out, or the job is terminal. Locking: the job row, then the clock.
-- Sending it again after an unknown outcome is safe: it only grows.
CREATE OR REPLACE FUNCTION fenceq.extend(
    job_id text, owner_id text, generation bigint, claim_token text, budget interval)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
    v_budget_expires_at timestamptz;
BEGIN
    PERFORM fenceq._check_interval(extend.budget, 'budget', nullable => false);
    v_job := fenceq._lock_live(extend.job_id, extend.owner_id, extend.generation, extend.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    -- greatest() skips a NULL: a claim without a budget gets now + budget.
    v_budget_expires_at := greatest(v_job.budget_expires_at, v_now + extend.budget);
    UPDATE fenceq._jobs AS j
       SET budget_expires_at = v_budget_expires_at,
           lease_expires_at = least(v_now + j.lease, v_budget_expires_at)
     WHERE j.job_id = extend.job_id;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.extend(text, text, bigint, text, interval) IS
    'Grow a live claim''s budget to the later of its current one and now + budget (setting one when it had none), and renew the lease as heartbeat would. True when live; false when stale, expired or terminal.';

-- cancel_matching: cancel the jobs of a queue whose task is task (when
-- given) and whose payload contains payload_contains (jsonb @>, when given),
-- each as cancel would: pending -> cancelled; with include_claimed, claimed
-- -> cancel requested, or cancelled at once with force, which kills the
-- fence. Oldest (first submitted) first, at most max_rows (1 to 100,000);
-- returns how many jobs changed, with a fenceq_control notification for
-- each claimed one. A claimed job whose cancel is already requested does
-- not change without force and is not counted. Bad input (payload_contains
-- not a JSON object or array, force without include_claimed) is refused
-- before anything changes. Admins only.
--
-- Locking: the matching jobs are chosen without locks, then locked in job
-- id order (heartbeat_batch's and complete_batch's order, so none of them
-- deadlock each other) and judged again on their current row: a job that
-- stopped matching meanwhile (claimed, completed) is left alone and not
-- counted. It waits for a row another call holds rather than skipping it,
-- so a job being claimed or heartbeated right now is not silently missed.
-- Running it again until it answers 0 cancels every match. Reads every
-- pending (and, with include_claimed, claimed) job of the queue.
CREATE OR REPLACE FUNCTION fenceq.cancel_matching(
    queue text, task text DEFAULT NULL, payload_contains jsonb DEFAULT NULL,
    include_claimed boolean DEFAULT false, force boolean DEFAULT false, max_rows integer DEFAULT 10000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_changed integer := 0;
BEGIN
    PERFORM fenceq._check_name(cancel_matching.queue, 'queue');
    PERFORM fenceq._check_name(cancel_matching.task, 'task', nullable => true);
    IF jsonb_typeof(cancel_matching.payload_contains) NOT IN ('object', 'array') THEN
        PERFORM fenceq._raise('QF100', 'payload_contains must be a JSON object or array');
    END IF;
    PERFORM fenceq._check_json(cancel_matching.payload_contains, 'payload_contains');
    IF cancel_matching.include_claimed IS NULL OR cancel_matching.force IS NULL THEN
        PERFORM fenceq._raise('QF100', 'include_claimed and force are required');
    END IF;
    IF cancel_matching.force AND NOT cancel_matching.include_claimed THEN
        PERFORM fenceq._raise('QF100', 'force applies to claimed jobs: it needs include_claimed');
    END IF;
    IF cancel_matching.max_rows IS NULL OR cancel_matching.max_rows NOT BETWEEN 1 AND 100000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be an integer from 1 to 100000');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = cancel_matching.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    FOR v_job IN
        SELECT j.* FROM fenceq._jobs AS j
         WHERE j.job_id IN (
                SELECT m.job_id FROM fenceq._jobs AS m
                 WHERE m.queue = cancel_matching.queue
                   AND (m.status = 'pending'
                        OR (cancel_matching.include_claimed AND m.status = 'claimed'
                            AND (cancel_matching.force OR NOT m.cancel_requested)))
                   AND (cancel_matching.task IS NULL OR m.task = cancel_matching.task)
                   AND (cancel_matching.payload_contains IS NULL OR m.payload @> cancel_matching.payload_contains)
                 ORDER BY m.seq
                 LIMIT cancel_matching.max_rows)
           -- Judged again on the row as it is once locked.
           AND (j.status = 'pending'
                OR (cancel_matching.include_claimed AND j.status = 'claimed'
                    AND (cancel_matching.force OR NOT j.cancel_requested)))
         ORDER BY j.job_id
           FOR UPDATE OF j
    LOOP
        PERFORM fenceq._cancel_locked(v_job, cancel_matching.force);
        IF v_job.status = 'claimed' THEN
            PERFORM pg_notify('fenceq_control', v_job.job_id);
        END IF;
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION fenceq.cancel_matching(text, text, jsonb, boolean, boolean, integer) IS
    'Cancel, as cancel would, up to max_rows pending (with include_claimed, also claimed) jobs of a queue matching task and payload_contains (@>), oldest first; returns how many changed, notifying fenceq_control for each claimed one. Admins only.';
