-- fenceq for PostgreSQL, part 5: settling a claim.
--
-- What it holds: the functions that end a live claim under its fence:
-- complete and complete_batch, fail (with _retry_or_fail, which reap
-- shares, and _dead_letter), release (back to pending without spending an
-- attempt) and acknowledge_cancel.
-- What they write: the claimed job's _jobs row (to completed, failed,
-- cancelled or back to pending), _dead_letters, the job's dependents
-- (_settle_dependents, 045_dependencies.sql), _events for queues with
-- history on (part 8b), and the notifications fenceq_jobs and fenceq_done.
-- Who calls them: workers (the fenceq_worker role, part 9). Each fenced
-- write locks the job row, then reads the clock (051_fence.sql); why the
-- hot functions pin their planner settings: part 5 (050_claim.sql).

-- complete: record success for a live, not cancel-requested claim.
-- True once; false for a stale, expired, terminal or cancel-requested fence.
-- One statement: the innermost SELECT locks the row by primary key; the
-- clock is read in the projection above that lock (a condition written
-- beside the lock could be pushed below it), and the materialized CTE keeps
-- the fence conditions on that reading, so a lock wait past the lease can
-- never authorise the write. Its RETURNING reads the queue's notify_done
-- switch (one primary-key probe of _queues, a few microseconds: as cheap as
-- a following statement asking whether any queue has the switch on, and
-- exact), so that only a queue with the switch on pays for the call that
-- notifies (part 58).
CREATE OR REPLACE FUNCTION fenceq.complete(
    job_id text, owner_id text, generation bigint, claim_token text,
    result jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_notify_done boolean;
    v_history boolean;  -- whether the queue keeps events (part 8b)
BEGIN
    IF NOT fenceq._is_plain_json(complete.result) THEN
        PERFORM fenceq._check_json(complete.result, 'result');
    END IF;
    IF NOT coalesce(fenceq._is_plain_fence(complete.job_id, complete.owner_id,
                                           complete.generation, complete.claim_token), false) THEN
        PERFORM fenceq._check_fence(complete.job_id, complete.owner_id, complete.generation, complete.claim_token);
    END IF;
    WITH locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                   j.cancel_requested
              FROM fenceq._jobs AS j WHERE j.job_id = complete.job_id
               FOR UPDATE) AS l)
    UPDATE fenceq._jobs AS j
       SET status = 'completed', result = complete.result, finished_at = l.locked_at
      FROM locked AS l
     WHERE j.job_id = l.job_id
       AND fenceq._holds_fence(l.status, l.owner_id, l.generation, l.claim_token, l.lease_expires_at,
                               complete.owner_id, complete.generation, complete.claim_token, l.locked_at)
       AND NOT l.cancel_requested
    RETURNING coalesce((SELECT q.notify_done FROM fenceq._queues AS q WHERE q.queue = j.queue), false),
              coalesce((SELECT q.history FROM fenceq._queues AS q WHERE q.queue = j.queue), false)
         INTO v_notify_done, v_history;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Its own statement, so it sees every dependent committed before the
    -- row lock above was granted (a dependent's submit share-locks this row).
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = complete.job_id) THEN
        PERFORM fenceq._settle_dependents(ARRAY[complete.job_id], true);
    END IF;
    IF v_notify_done THEN
        PERFORM fenceq._notify_done(ARRAY[complete.job_id]);
    END IF;
    IF v_history THEN
        PERFORM fenceq._record_events(ARRAY[complete.job_id], 'completed');
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.complete(text, text, bigint, text, jsonb) IS
    'Complete a live claim with an optional JSON result. True once; false when stale, expired, terminal or cancel-requested.';

-- complete_batch: complete many fences in one transaction, rows locked in job
-- id order. Element i answers as complete would for fence i.
CREATE OR REPLACE FUNCTION fenceq.complete_batch(
    job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[],
    results jsonb[] DEFAULT NULL)
RETURNS boolean[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
    v_now timestamptz;
    v_answers boolean[];
    v_completed text[];
    v_notify_done text[];  -- the completed jobs whose queues notify
    v_logged text[];  -- the completed jobs whose queues keep events (part 8b)
BEGIN
    v_count := fenceq._check_batch(complete_batch.job_ids, complete_batch.owner_ids,
        complete_batch.generations, complete_batch.claim_tokens);
    IF complete_batch.results IS NOT NULL AND (cardinality(complete_batch.results) <> v_count
        OR (v_count > 0 AND array_ndims(complete_batch.results) <> 1)) THEN
        PERFORM fenceq._raise('QF100', 'results must have one element per fence');
    END IF;
    IF v_count = 0 THEN
        RETURN '{}';
    END IF;
    -- One set-wise look at the results (complete's own test, version 8):
    -- only a batch with a result that needs a closer look checks each.
    IF complete_batch.results IS NOT NULL
       AND NOT (SELECT bool_and(fenceq._is_plain_json(r.value)) FROM unnest(complete_batch.results) AS r(value)) THEN
        PERFORM fenceq._check_json(r.value, 'result') FROM unnest(complete_batch.results) AS r(value)
         WHERE r.value IS NOT NULL;
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (complete_batch.job_ids)
     ORDER BY j.job_id FOR UPDATE;
    v_now := clock_timestamp();  -- read after the row locks are held
    -- One call at a time, the first element naming a job's live fence would
    -- complete it and every later one would find it completed: so exactly
    -- the first live element per job wins.
    -- The results are unnested beside the fences (NULL results: NULL each):
    -- subscripting an array of jsonb walks it from its start every time.
    WITH fences AS (
        SELECT f.j, f.o, f.g, f.t, f.r, f.i
          FROM unnest(complete_batch.job_ids, complete_batch.owner_ids,
                      complete_batch.generations, complete_batch.claim_tokens, complete_batch.results)
               WITH ORDINALITY AS f(j, o, g, t, r, i)),
    winners AS (
        SELECT DISTINCT ON (f.j) f.j, f.r, f.i
          FROM fences AS f  -- one primary-key probe per fence, as in heartbeat_batch
         CROSS JOIN LATERAL (SELECT j.* FROM fenceq._jobs AS j WHERE j.job_id = f.j OFFSET 0) AS j
         WHERE fenceq._holds_fence(j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                                   f.o, f.g, f.t, v_now)
           AND NOT j.cancel_requested
         ORDER BY f.j, f.i),
    completed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'completed', finished_at = v_now, result = w.r
          FROM winners AS w
         WHERE j.job_id = w.j
        RETURNING w.i, w.j, j.queue)
    SELECT (SELECT array_agg(a.completed ORDER BY a.i)  -- grouped, as in heartbeat_batch
              FROM (SELECT u.i, bool_or(u.completed) AS completed
                      FROM (SELECT f.i, false AS completed FROM fences AS f
                            UNION ALL
                            SELECT c.i, true FROM completed AS c) AS u
                     GROUP BY u.i) AS a),
           (SELECT array_agg(c.j) FROM completed AS c),
           (SELECT array_agg(c.j) FROM completed AS c
             WHERE EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = c.queue AND q.notify_done)),
           (SELECT array_agg(c.j ORDER BY c.i) FROM completed AS c
             WHERE EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = c.queue AND q.history))
      INTO v_answers, v_completed, v_notify_done, v_logged;
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (v_completed)) THEN
        PERFORM fenceq._settle_dependents(v_completed, true);
    END IF;
    IF v_notify_done IS NOT NULL THEN
        PERFORM fenceq._notify_done(v_notify_done);
    END IF;
    IF v_logged IS NOT NULL THEN
        PERFORM fenceq._record_events(v_logged, 'completed');
    END IF;
    RETURN v_answers;
END
$$;
COMMENT ON FUNCTION fenceq.complete_batch(text[], text[], bigint[], text[], jsonb[]) IS
    'Complete many fences in one transaction; element i answers as complete would for fence i. QF100 for arrays of unequal length.';

-- _dead_letter: write a dead letter for a job that just failed for good,
-- in the caller's transaction; returns its id.
CREATE OR REPLACE FUNCTION fenceq._dead_letter(job fenceq._jobs, error text, now timestamptz)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_dlq_id text := replace(gen_random_uuid()::text, '-', '');
BEGIN
    INSERT INTO fenceq._dead_letters (dlq_id, job_id, queue, task, error, attempts, failed_at)
    VALUES (v_dlq_id, (_dead_letter.job).job_id, (_dead_letter.job).queue, (_dead_letter.job).task,
            _dead_letter.error, (_dead_letter.job).attempts, _dead_letter.now);
    RETURN v_dlq_id;
END
$$;
COMMENT ON FUNCTION fenceq._dead_letter(fenceq._jobs, text, timestamptz) IS
    'Private. Insert a dead letter for a failed job; returns its 32-hex id.';

-- _retry_or_fail: the outcome of a failed attempt (fail, and reap of an
-- expired lease): back to pending with backoff while attempts remain and
-- retry is asked, else 'failed' with a dead letter when the queue keeps them.
-- A retry sends fenceq_jobs (when the queue notifies), due now or later.
-- The caller holds the row lock. Returns the new status.
CREATE OR REPLACE FUNCTION fenceq._retry_or_fail(
    job fenceq._jobs, error text, retry boolean, retry_at timestamptz, now timestamptz)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_error text := left(_retry_or_fail.error, 65536);
    v_run_at timestamptz;
    v_dlq_id text;
BEGIN
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = (_retry_or_fail.job).queue;
    IF _retry_or_fail.retry AND (_retry_or_fail.job).attempts < (_retry_or_fail.job).max_attempts THEN
        v_run_at := coalesce(_retry_or_fail.retry_at, least(_retry_or_fail.now + fenceq._backoff(
            (_retry_or_fail.job).attempts, v_queue.backoff_base, v_queue.backoff_factor, v_queue.backoff_max),
            timestamptz '9999-12-31 23:59:59.999999+00'));
        UPDATE fenceq._jobs AS j
           SET status = 'pending', run_at = v_run_at, last_error = v_error,
               owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
               budget_expires_at = NULL, pid = NULL,
               scheduled = v_run_at > _retry_or_fail.now  -- in back-off: waits apart (part 1c)
         WHERE j.job_id = (_retry_or_fail.job).job_id;
        IF v_queue.history THEN
            PERFORM fenceq._record_event((_retry_or_fail.job).job_id, v_queue.queue, 'retried',
                (_retry_or_fail.job).generation, (_retry_or_fail.job).owner_id,
                jsonb_build_object('error', left(v_error, 2000), 'retry_at', v_run_at));
        END IF;
        -- Also for a later run: idle workers re-read next_due on the hint
        -- (the failing worker may be busy, stopping, or a reaper).
        IF v_queue.notify THEN
            PERFORM pg_notify('fenceq_jobs', v_queue.queue);
        END IF;
        RETURN 'pending';
    END IF;
    UPDATE fenceq._jobs AS j
       SET status = 'failed', last_error = v_error, finished_at = _retry_or_fail.now,
           dlq_id = CASE WHEN coalesce(v_queue.dead_letter, true)
                         THEN fenceq._dead_letter(_retry_or_fail.job, v_error, _retry_or_fail.now) END
     WHERE j.job_id = (_retry_or_fail.job).job_id
    RETURNING j.dlq_id INTO v_dlq_id;
    IF v_queue.history THEN
        PERFORM fenceq._record_event((_retry_or_fail.job).job_id, v_queue.queue, 'failed',
            (_retry_or_fail.job).generation, (_retry_or_fail.job).owner_id,
            jsonb_build_object('error', left(v_error, 2000)));
        IF v_dlq_id IS NOT NULL THEN
            PERFORM fenceq._record_event((_retry_or_fail.job).job_id, v_queue.queue, 'dead_lettered',
                (_retry_or_fail.job).generation, (_retry_or_fail.job).owner_id,
                jsonb_build_object('dlq_id', v_dlq_id));
        END IF;
    END IF;
    PERFORM fenceq._settle_dependents(ARRAY[(_retry_or_fail.job).job_id], false);
    IF v_queue.notify_done THEN
        PERFORM fenceq._notify_done(ARRAY[(_retry_or_fail.job).job_id]);
    END IF;
    RETURN 'failed';
END
$$;
COMMENT ON FUNCTION fenceq._retry_or_fail(fenceq._jobs, text, boolean, timestamptz, timestamptz) IS
    'Private. Requeue a failed attempt with backoff, or fail it for good (with a dead letter when the queue keeps them).';

-- fail: record a failed attempt of a live, not cancel-requested claim.
-- With retry and attempts left: pending at retry_at or now + backoff;
-- otherwise failed, with the dead letter written in the same transaction.
-- True once; false for a stale, expired, terminal or cancel-requested fence.
CREATE OR REPLACE FUNCTION fenceq.fail(
    job_id text, owner_id text, generation bigint, claim_token text,
    error text, retry boolean DEFAULT true, retry_at timestamptz DEFAULT NULL)
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
BEGIN
    IF fail.error IS NULL THEN
        PERFORM fenceq._raise('QF100', 'error is required');
    END IF;
    IF fail.retry IS NULL THEN
        PERFORM fenceq._raise('QF100', 'retry is required');
    END IF;
    PERFORM fenceq._check_time(fail.retry_at, 'retry_at');
    v_job := fenceq._lock_live(fail.job_id, fail.owner_id, fail.generation, fail.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    PERFORM fenceq._retry_or_fail(v_job, fail.error, fail.retry, fail.retry_at, v_now);
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.fail(text, text, bigint, text, text, boolean, timestamptz) IS
    'Fail a live claim: retried with backoff (or at retry_at) while attempts remain, else failed with a dead letter. True once; false when stale, expired, terminal or cancel-requested.';

-- release: hand a live claim back to pending without spending an attempt
-- (graceful shutdown, snooze), with a fenceq_jobs hint when the queue
-- notifies. False for a cancel-requested claim.
CREATE OR REPLACE FUNCTION fenceq.release(
    job_id text, owner_id text, generation bigint, claim_token text,
    run_at timestamptz DEFAULT NULL)
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
    v_run_at timestamptz;
BEGIN
    PERFORM fenceq._check_time(release.run_at, 'run_at');
    v_job := fenceq._lock_live(release.job_id, release.owner_id,
                               release.generation, release.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    -- Work handed to an external system may exist: never requeue it (a
    -- reservation is dropped by release_dispatch first; part 8a).
    IF (fenceq._live_dispatch(v_job)).job_id IS NOT NULL THEN
        RETURN false;
    END IF;
    v_run_at := coalesce(release.run_at, v_now);
    UPDATE fenceq._jobs AS j
       SET status = 'pending', attempts = j.attempts - 1, run_at = v_run_at,
           owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
           budget_expires_at = NULL, pid = NULL,
           scheduled = v_run_at > v_now  -- released for later: waits apart (part 1c)
     WHERE j.job_id = release.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'released', v_job.generation, v_job.owner_id,
                                 jsonb_build_object('run_at', v_run_at));
    PERFORM fenceq._notify_jobs(v_job.queue);  -- due now or later: idle workers re-read next_due
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.release(text, text, bigint, text, timestamptz) IS
    'Hand a live claim back to pending (at run_at, default now) without spending an attempt. False when stale, expired, terminal or cancel-requested.';

-- acknowledge_cancel: the worker confirms a requested cancellation: the job
-- becomes cancelled, its lease and pid are cleared and its active key freed.
-- Needs the live fence and a pending cancel request.
CREATE OR REPLACE FUNCTION fenceq.acknowledge_cancel(
    job_id text, owner_id text, generation bigint, claim_token text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
BEGIN
    v_job := fenceq._lock_live(acknowledge_cancel.job_id, acknowledge_cancel.owner_id,
                               acknowledge_cancel.generation, acknowledge_cancel.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL OR NOT v_job.cancel_requested THEN
        RETURN false;
    END IF;
    UPDATE fenceq._jobs AS j
       SET status = 'cancelled', lease_expires_at = NULL, pid = NULL, finished_at = v_now
     WHERE j.job_id = acknowledge_cancel.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'cancelled', v_job.generation, v_job.owner_id,
                                 '{"reason": "acknowledged"}');
    PERFORM fenceq._settle_dependents(ARRAY[acknowledge_cancel.job_id], false);
    PERFORM fenceq._notify_done(ARRAY[acknowledge_cancel.job_id]);
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.acknowledge_cancel(text, text, bigint, text) IS
    'Acknowledge a requested cancellation under the live fence: cancelled, lease and pid cleared, active key freed. False without a live fence or a pending request.';
