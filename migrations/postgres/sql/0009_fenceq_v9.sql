-- fenceq migration 0009: version 8 -> 9, for PostgreSQL. Frozen at release.
-- Generated from the parts by scripts/gen-pg-step.
--
-- Why: see 0009_fenceq_v9.py. The fence rule written once (issue 29, item 6):
-- _holds_fence, a helper the planner inlines, is the one place that says when
-- a fence holds a job; the fenced writes that spelled the rule out (complete,
-- complete_batch, heartbeat, heartbeat_batch, progress, _lock_live) and the
-- reads that answer for a live claim (claim_state, recover_claim) judge with
-- it, and _is_live goes. Every answer and error stays as it was; verify_schema
-- (which admits the new inlined helper) and version are replaced; part 9
-- (ownership, privileges, the admission check) runs again.

SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

-- Version 9 changes no table, index, type or view. It drops the private
-- _is_live, whose rule _holds_fence now holds and whose two callers are
-- replaced below (in this one transaction, so no call sees them apart).

DROP FUNCTION fenceq._is_live(fenceq._jobs, text, bigint, text, timestamptz);

-- The functions this version changed, as the parts have them.

-- _holds_fence: the fence rule, written once (version 9). A fence
-- (owner_id, generation, claim_token) holds a job when the job is claimed
-- by exactly that fence and its lease ends strictly after at, the clock
-- reading taken once the job row is locked. Every fenced write, batch or
-- not, and the reads that answer for a live claim (claim_state,
-- recover_claim) judge with it, in a WHERE or an IF only: for a missing
-- row it answers NULL, which both read as false.
-- Inlined into the caller's statement, as _is_plain_duration is (part 2):
-- each argument is read once, so the planner substitutes them freely.
CREATE OR REPLACE FUNCTION fenceq._holds_fence(
    status text, owner_id text, generation bigint, claim_token text, lease_expires_at timestamptz,
    fence_owner_id text, fence_generation bigint, fence_claim_token text, at timestamptz)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN status = 'claimed' AND owner_id = fence_owner_id AND generation = fence_generation
   AND claim_token = fence_claim_token AND lease_expires_at > at;
COMMENT ON FUNCTION fenceq._holds_fence(text, text, bigint, text, timestamptz, text, bigint, text, timestamptz) IS
    'Private, inlined. The fence rule: true when the job (status, owner, generation, token, lease end) is claimed by exactly this fence and its lease ends after at.';

-- _lock_live: the fenced-write preamble. Refuses a malformed fence (QF106),
-- locks the job row by primary key, then reads clock_timestamp() and judges
-- the claim. Returns the locked row when this fence is the live claim, else
-- a row of NULLs. The lock is held until the caller's transaction ends.
CREATE OR REPLACE FUNCTION fenceq._lock_live(
    job_id text, owner_id text, generation bigint, claim_token text)
RETURNS fenceq._jobs
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_job fenceq._jobs;
BEGIN
    PERFORM fenceq._check_fence(_lock_live.job_id, _lock_live.owner_id,
                                _lock_live.generation, _lock_live.claim_token);
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = _lock_live.job_id FOR UPDATE;
    IF fenceq._holds_fence(v_job.status, v_job.owner_id, v_job.generation, v_job.claim_token,
                           v_job.lease_expires_at, _lock_live.owner_id, _lock_live.generation,
                           _lock_live.claim_token, clock_timestamp()) THEN
        RETURN v_job;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION fenceq._lock_live(text, text, bigint, text) IS
    'Private. Lock a job row, then judge the fence on a clock read after the lock: the row when live, else NULLs.';

-- heartbeat: renew a live claim to LEAST(now + lease, budget_expires_at).
-- True while the claim is live (also when the budget clamps the renewal);
-- false once the lease or budget ran out or the fence is stale.
-- One statement, locked and judged as complete is (see there).
CREATE OR REPLACE FUNCTION fenceq.heartbeat(
    job_id text, owner_id text, generation bigint, claim_token text,
    lease interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    IF NOT fenceq._is_plain_duration(heartbeat.lease) THEN
        PERFORM fenceq._check_interval(heartbeat.lease, 'lease');
    END IF;
    IF NOT coalesce(fenceq._is_plain_fence(heartbeat.job_id, heartbeat.owner_id,
                                           heartbeat.generation, heartbeat.claim_token), false) THEN
        PERFORM fenceq._check_fence(heartbeat.job_id, heartbeat.owner_id, heartbeat.generation, heartbeat.claim_token);
    END IF;
    WITH locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at
              FROM fenceq._jobs AS j WHERE j.job_id = heartbeat.job_id
               FOR UPDATE) AS l)
    UPDATE fenceq._jobs AS j
       SET lease_expires_at = least(l.locked_at + coalesce(heartbeat.lease, j.lease), j.budget_expires_at)
      FROM locked AS l
     WHERE j.job_id = l.job_id
       AND fenceq._holds_fence(l.status, l.owner_id, l.generation, l.claim_token, l.lease_expires_at,
                               heartbeat.owner_id, heartbeat.generation, heartbeat.claim_token, l.locked_at);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION fenceq.heartbeat(text, text, bigint, text, interval) IS
    'Renew a live claim to LEAST(now + lease, budget). True while live; false when stale, expired or past its budget.';

-- heartbeat_batch: heartbeat for many fences in one transaction. Element i
-- answers as heartbeat would for fence i. Rows are locked in job id order,
-- so two batches never deadlock.
CREATE OR REPLACE FUNCTION fenceq.heartbeat_batch(
    job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[],
    lease interval DEFAULT NULL)
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
BEGIN
    v_count := fenceq._check_batch(heartbeat_batch.job_ids, heartbeat_batch.owner_ids,
                                   heartbeat_batch.generations, heartbeat_batch.claim_tokens);
    IF heartbeat_batch.lease IS NOT NULL THEN
        PERFORM fenceq._check_interval(heartbeat_batch.lease, 'lease');
    END IF;
    IF v_count = 0 THEN
        RETURN '{}';
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (heartbeat_batch.job_ids)
     ORDER BY j.job_id FOR UPDATE;
    v_now := clock_timestamp();  -- read after the row locks are held
    -- A heartbeat changes no fence, so every element naming the live fence
    -- answers true, as it would one call at a time.
    WITH fences AS (
        SELECT f.j, f.o, f.g, f.t, f.i
          FROM unnest(heartbeat_batch.job_ids, heartbeat_batch.owner_ids,
                      heartbeat_batch.generations, heartbeat_batch.claim_tokens)
               WITH ORDINALITY AS f(j, o, g, t, i)),
    live AS (
        -- One primary-key probe per fence (the lateral subquery is kept
        -- apart by OFFSET 0): joined freely, the planner may hash every
        -- claimed job instead, however many are in flight.
        SELECT f.i, f.j FROM fences AS f
         CROSS JOIN LATERAL (SELECT j.* FROM fenceq._jobs AS j WHERE j.job_id = f.j OFFSET 0) AS j
         WHERE fenceq._holds_fence(j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                                   f.o, f.g, f.t, v_now)),
    renewed AS (  -- runs whether or not it is read, as every data-modifying WITH does
        UPDATE fenceq._jobs AS j
           SET lease_expires_at = least(v_now + coalesce(heartbeat_batch.lease, j.lease), j.budget_expires_at)
         WHERE j.job_id IN (SELECT l.j FROM live AS l))
    -- Each fence's answer by grouping, not by a probe of live per fence
    -- (a scan of the CTE each: quadratic in the batch).
    SELECT array_agg(a.live ORDER BY a.i)
      INTO v_answers
      FROM (SELECT u.i, bool_or(u.live) AS live
              FROM (SELECT f.i, false AS live FROM fences AS f
                    UNION ALL
                    SELECT l.i, true FROM live AS l) AS u
             GROUP BY u.i) AS a;
    RETURN v_answers;
END
$$;
COMMENT ON FUNCTION fenceq.heartbeat_batch(text[], text[], bigint[], text[], interval) IS
    'Heartbeat many fences in one transaction; element i answers as heartbeat would for fence i. QF100 for arrays of unequal length.';

-- claim_state: (cancel_requested, pid) of a live claim; no row when the
-- fence is not the live owner. A snapshot read without locks: not authority.
CREATE OR REPLACE FUNCTION fenceq.claim_state(
    job_id text, owner_id text, generation bigint, claim_token text)
RETURNS TABLE(cancel_requested boolean, pid integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
BEGIN
    PERFORM fenceq._check_fence(claim_state.job_id, claim_state.owner_id, claim_state.generation, claim_state.claim_token);
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = claim_state.job_id;
    IF fenceq._holds_fence(v_job.status, v_job.owner_id, v_job.generation, v_job.claim_token,
                           v_job.lease_expires_at, claim_state.owner_id, claim_state.generation,
                           claim_state.claim_token, clock_timestamp()) THEN
        RETURN QUERY SELECT v_job.cancel_requested, v_job.pid;
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq.claim_state(text, text, bigint, text) IS
    'Snapshot (cancel_requested, pid) of a live claim; no row when the fence is not the live owner.';

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

-- recover_claim: the live claims this exact owner made with this token or
-- nonce: zero or one row for a token of claim_next, claim_batch or
-- adopt_dispatch; for the nonce of a claim_jobs call (version 8), every job
-- of the call still claimed under it, in the call's order (those settled,
-- released or taken over since are left out). Read-only: it neither claims
-- again nor renews, and calling it again answers the same until a lease
-- lapses or a claim is settled.
CREATE OR REPLACE FUNCTION fenceq.recover_claim(owner_id text, claim_token text)
RETURNS SETOF fenceq.claim
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job_ids text[];
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(recover_claim.owner_id, 'owner_id');
    PERFORM fenceq._check_name(recover_claim.claim_token, 'claim_token');
    SELECT coalesce(c.job_ids, ARRAY[c.job_id]) INTO v_job_ids
      FROM fenceq._claims AS c WHERE c.claim_token = recover_claim.claim_token;
    v_now := clock_timestamp();
    RETURN QUERY
        SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.attempts, j.max_attempts, j.owner_id,
               j.generation, j.claim_token, j.lease_expires_at, j.budget_expires_at, j.cancel_requested,
               j.submission_id, fenceq._checkpoints_of(j.job_id)
          FROM unnest(v_job_ids) WITH ORDINALITY AS k(job_id, ordinal)
          JOIN fenceq._jobs AS j ON j.job_id = k.job_id
         WHERE fenceq._holds_fence(j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                                   recover_claim.owner_id, j.generation, recover_claim.claim_token, v_now)
         ORDER BY k.ordinal;
END
$$;
COMMENT ON FUNCTION fenceq.recover_claim(text, text) IS
    'The live claims made by this exact owner with this claim token (zero or one row) or claim_jobs nonce (every job of the call still claimed under it). Does not claim again and does not renew the lease.';

-- verify_schema: one row per check (check_name, ok, detail). Read-only.
-- The details name schema objects, never data.
CREATE OR REPLACE FUNCTION fenceq.verify_schema()
RETURNS TABLE(check_name text, ok boolean, detail text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_bad text;
BEGIN
    check_name := 'server_encoding';
    ok := current_setting('server_encoding') = 'UTF8';
    detail := CASE WHEN ok THEN 'UTF8' ELSE 'server_encoding must be UTF8' END;
    RETURN NEXT;

    -- Every column this version reads or writes, with its exact type.
    WITH expected(tbl, col, typ, not_null) AS (VALUES
        ('_queues', 'queue', 'text', true), ('_queues', 'lease', 'interval', true),
        ('_queues', 'max_attempts', 'integer', true), ('_queues', 'backoff_base', 'interval', true),
        ('_queues', 'backoff_factor', 'double precision', true), ('_queues', 'backoff_max', 'interval', true),
        ('_queues', 'dead_letter', 'boolean', true), ('_queues', 'paused', 'boolean', true),
        ('_queues', 'notify', 'boolean', true), ('_queues', 'created_at', 'timestamp with time zone', true),
        ('_queues', 'max_claimed', 'integer', false), ('_queues', 'max_claimed_per_key', 'integer', false),
        ('_queues', 'rate_limit', 'integer', false), ('_queues', 'rate_period', 'interval', false),
        ('_jobs', 'concurrency_key', 'text', false),
        ('_jobs', 'blocked_by', 'integer', false),
        ('_jobs', 'blocked_run_at', 'timestamp with time zone', false),
        ('_dependencies', 'depends_on', 'text', true), ('_dependencies', 'job_id', 'text', true),
        ('_dependencies', 'satisfied', 'boolean', true),
        ('_rate_window', 'queue', 'text', true), ('_rate_window', 'claimed_at', 'timestamp with time zone', true),
        ('_queues', 'notify_done', 'boolean', true), ('_jobs', 'progress', 'jsonb', false),
        ('_jobs', 'progress_at', 'timestamp with time zone', false),
        ('_jobs', 'seq', 'bigint', true), ('_jobs', 'job_id', 'text', true),
        ('_jobs', 'queue', 'text', true), ('_jobs', 'task', 'text', true),
        ('_jobs', 'payload', 'jsonb', false), ('_jobs', 'priority', 'integer', true),
        ('_jobs', 'status', 'text', true), ('_jobs', 'attempts', 'integer', true),
        ('_jobs', 'max_attempts', 'integer', true), ('_jobs', 'run_at', 'timestamp with time zone', true),
        ('_jobs', 'expires_at', 'timestamp with time zone', false), ('_jobs', 'owner_id', 'text', false),
        ('_jobs', 'generation', 'bigint', true), ('_jobs', 'claim_token', 'text', false),
        ('_jobs', 'lease', 'interval', false), ('_jobs', 'lease_expires_at', 'timestamp with time zone', false),
        ('_jobs', 'budget_expires_at', 'timestamp with time zone', false),
        ('_jobs', 'cancel_requested', 'boolean', true), ('_jobs', 'pid', 'integer', false),
        ('_jobs', 'result', 'jsonb', false), ('_jobs', 'last_error', 'text', false),
        ('_jobs', 'submission_id', 'text', false), ('_jobs', 'fingerprint', 'text', false),
        ('_jobs', 'active_key', 'text', false), ('_jobs', 'dlq_id', 'text', false),
        ('_jobs', 'created_at', 'timestamp with time zone', true),
        ('_jobs', 'finished_at', 'timestamp with time zone', false),
        ('_submissions', 'submission_id', 'text', true), ('_submissions', 'fingerprint', 'text', true),
        ('_submissions', 'job_id', 'text', true), ('_submissions', 'queue', 'text', true),
        ('_submissions', 'created_at', 'timestamp with time zone', true),
        ('_claims', 'claim_token', 'text', true), ('_claims', 'job_id', 'text', false),
        ('_claims', 'generation', 'bigint', false), ('_claims', 'owner_id', 'text', true),
        ('_claims', 'claimed_at', 'timestamp with time zone', true), ('_claims', 'job_ids', 'text[]', false),
        ('_jobs', 'call_claims', '_call_claim[]', false),
        ('_checkpoints', 'job_id', 'text', true), ('_checkpoints', 'step', 'text', true),
        ('_checkpoints', 'value', 'jsonb', true), ('_checkpoints', 'generation', 'bigint', true),
        ('_checkpoints', 'recorded_at', 'timestamp with time zone', true),
        ('_dead_letters', 'dlq_id', 'text', true), ('_dead_letters', 'job_id', 'text', true),
        ('_dead_letters', 'queue', 'text', true), ('_dead_letters', 'task', 'text', true),
        ('_dead_letters', 'error', 'text', false), ('_dead_letters', 'attempts', 'integer', true),
        ('_dead_letters', 'failed_at', 'timestamp with time zone', true),
        ('_dead_letters', 'replayed_at', 'timestamp with time zone', false),
        ('_dead_letters', 'discarded_at', 'timestamp with time zone', false),
        ('_locks', 'lock', 'text', true), ('_locks', 'owner_id', 'text', false),
        ('_locks', 'token', 'bigint', true), ('_locks', 'expires_at', 'timestamp with time zone', false),
        ('_schedules', 'schedule', 'text', true), ('_schedules', 'queue', 'text', true),
        ('_schedules', 'task', 'text', true), ('_schedules', 'cron', 'text', true),
        ('_schedules', 'time_zone', 'text', true), ('_schedules', 'payload', 'jsonb', false),
        ('_schedules', 'priority', 'integer', false), ('_schedules', 'max_attempts', 'integer', false),
        ('_schedules', 'active_key', 'text', false), ('_schedules', 'paused', 'boolean', true),
        ('_schedules', 'cron_minutes', 'integer[]', true), ('_schedules', 'cron_hours', 'integer[]', true),
        ('_schedules', 'cron_days', 'integer[]', true), ('_schedules', 'cron_months', 'integer[]', true),
        ('_schedules', 'cron_weekdays', 'integer[]', true), ('_schedules', 'cron_days_and', 'boolean', true),
        ('_schedules', 'next_run_at', 'timestamp with time zone', false),
        ('_schedules', 'last_run_at', 'timestamp with time zone', false),
        ('_schedules', 'last_job_id', 'text', false),
        ('_queues', 'requeue_priority', 'text', true), ('_queues', 'history', 'boolean', true),
        ('_queues', 'history_retention', 'interval', false),
        ('_dispatches', 'job_id', 'text', true), ('_dispatches', 'backend', 'text', true),
        ('_dispatches', 'generation', 'bigint', true), ('_dispatches', 'state', 'text', true),
        ('_dispatches', 'reservation_ref', 'text', true), ('_dispatches', 'execution_ref', 'text', false),
        ('_dispatches', 'reserved_at', 'timestamp with time zone', true),
        ('_dispatches', 'finalized_at', 'timestamp with time zone', false),
        ('_dispatches', 'checked_at', 'timestamp with time zone', false),
        ('_events', 'job_id', 'text', true), ('_events', 'seq', 'bigint', true),
        ('_events', 'queue', 'text', true), ('_events', 'at', 'timestamp with time zone', true),
        ('_events', 'event', 'text', true), ('_events', 'generation', 'bigint', false),
        ('_events', 'owner_id', 'text', false), ('_events', 'detail', 'jsonb', true),
        ('_activity', 'queue', 'text', true), ('_activity', 'minute', 'timestamp with time zone', true),
        ('_activity', 'submitted', 'integer', true), ('_activity', 'claimed', 'integer', true),
        ('_activity', 'retried', 'integer', true), ('_activity', 'completed', 'integer', true),
        ('_activity', 'failed', 'integer', true), ('_activity', 'cancelled', 'integer', true),
        ('_activity', 'expired', 'integer', true), ('_activity', 'pending', 'integer', false),
        ('_activity', 'due', 'integer', false), ('_activity', 'running', 'integer', false),
        ('_activity', 'wait_hist', 'integer[]', true), ('_activity', 'run_hist', 'integer[]', true))
    SELECT string_agg(e.tbl || '.' || e.col, ', ' ORDER BY e.tbl, e.col) INTO v_bad
      FROM expected AS e
      LEFT JOIN pg_attribute AS a
        ON a.attrelid = to_regclass('fenceq.' || e.tbl) AND a.attname = e.col
       AND a.attnum > 0 AND NOT a.attisdropped
     WHERE a.attname IS NULL
        OR format_type(a.atttypid, a.atttypmod) <> e.typ
        OR a.attnotnull <> e.not_null;
    check_name := 'column_types'; ok := v_bad IS NULL;
    detail := coalesce('wrong or missing: ' || v_bad, 'all columns as expected');
    RETURN NEXT;

    -- Every text column is compared exactly: its collation must be
    -- deterministic (a nondeterministic ICU collation would fold case).
    SELECT string_agg(c.relname || '.' || a.attname, ', ' ORDER BY c.relname, a.attname) INTO v_bad
      FROM pg_attribute AS a
      JOIN pg_class AS c ON c.oid = a.attrelid
      JOIN pg_namespace AS n ON n.oid = c.relnamespace
      JOIN pg_collation AS co ON co.oid = a.attcollation
     WHERE n.nspname = 'fenceq' AND c.relkind = 'r' AND c.relname LIKE '\_%'
       AND a.attnum > 0 AND NOT a.attisdropped AND NOT co.collisdeterministic;
    check_name := 'deterministic_collations'; ok := v_bad IS NULL;
    detail := coalesce('nondeterministic: ' || v_bad, 'all text columns deterministic');
    RETURN NEXT;

    -- Identity is arbitrated by exact, full, single-column unique indexes.
    FOR check_name, v_bad IN VALUES ('claim_token_unique', '_claims.claim_token'),
                                    ('submission_id_unique', '_submissions.submission_id'),
                                    ('job_id_unique', '_jobs.job_id'),
                                    ('dispatch_job_unique', '_dispatches.job_id')
    LOOP
        SELECT count(*) = 1 INTO ok
          FROM pg_index AS i
          JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
          JOIN pg_collation AS co ON co.oid = i.indcollation[0]
         WHERE i.indrelid = to_regclass('fenceq.' || split_part(v_bad, '.', 1))
           AND a.attname = split_part(v_bad, '.', 2)
           AND i.indisunique AND i.indisvalid AND i.indnatts = 1 AND i.indnkeyatts = 1
           AND i.indpred IS NULL AND i.indexprs IS NULL AND co.collisdeterministic;
        detail := CASE WHEN ok THEN 'exact unique index on ' || v_bad
                       ELSE 'needs exactly one full single-column unique index on ' || v_bad END;
        RETURN NEXT;
    END LOOP;

    -- At most one active job per (queue, active_key) is arbitrated by this
    -- exact partial unique index (submit relies on it in ON CONFLICT).
    SELECT count(*) = 1 INTO ok
      FROM pg_index AS i
     WHERE i.indrelid = to_regclass('fenceq._jobs') AND i.indisunique AND i.indisvalid
       AND i.indnatts = 2 AND i.indexprs IS NULL
       AND (SELECT array_agg(a.attname::text ORDER BY k.ord)
              FROM unnest(i.indkey::smallint[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
           = ARRAY['queue', 'active_key']
       AND pg_get_expr(i.indpred, i.indrelid)
           = '((active_key IS NOT NULL) AND (status = ANY (ARRAY[''pending''::text, ''claimed''::text])))';
    check_name := 'active_key_unique';
    detail := CASE WHEN ok THEN 'partial unique index on _jobs (queue, active_key) for active jobs'
                   ELSE 'needs the partial unique index on _jobs (queue, active_key) WHERE active' END;
    RETURN NEXT;

    -- One activity row per queue and minute: sample_activity's ON CONFLICT
    -- DO NOTHING writes each minute once only against this exact index.
    SELECT count(*) = 1 INTO ok
      FROM pg_index AS i
     WHERE i.indrelid = to_regclass('fenceq._activity') AND i.indisunique AND i.indisvalid
       AND i.indnatts = 2 AND i.indexprs IS NULL AND i.indpred IS NULL
       AND (SELECT array_agg(a.attname::text ORDER BY k.ord)
              FROM unnest(i.indkey::smallint[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
           = ARRAY['queue', 'minute'];
    check_name := 'activity_minute_unique';
    detail := CASE WHEN ok THEN 'unique index on _activity (queue, minute)'
                   ELSE 'needs exactly one unique index on _activity (queue, minute)' END;
    RETURN NEXT;

    -- The public shapes callers read: the claim type, search_jobs' row type
    -- and the views, with their columns in contract order (they are only
    -- ever appended to).
    WITH expected(obj, cols) AS (VALUES
        ('claim', ARRAY['job_id', 'queue', 'task', 'payload', 'priority', 'attempt', 'max_attempts',
                        'owner_id', 'generation', 'claim_token', 'lease_expires_at', 'budget_expires_at',
                        'cancel_requested', 'submission_id', 'checkpoints']),
        ('jobs', ARRAY['job_id', 'queue', 'task', 'payload', 'priority', 'status', 'attempts',
                       'max_attempts', 'run_at', 'expires_at', 'owner_id', 'generation',
                       'lease_expires_at', 'budget_expires_at', 'cancel_requested', 'pid', 'result',
                       'last_error', 'submission_id', 'fingerprint', 'active_key', 'dlq_id',
                       'created_at', 'finished_at', 'concurrency_key', 'blocked_by', 'progress', 'progress_at']),
        ('dependencies', ARRAY['job_id', 'depends_on', 'satisfied']),
        ('submissions', ARRAY['submission_id', 'job_id', 'queue', 'created_at']),
        ('checkpoints', ARRAY['job_id', 'step', 'value', 'generation', 'recorded_at']),
        ('attempts', ARRAY['job_id', 'generation', 'owner_id', 'claimed_at']),
        ('queue_stats', ARRAY['queue', 'pending', 'due', 'claimed', 'cancel_requested',
                              'oldest_due_age', 'paused', 'notify', 'max_claimed',
                              'max_claimed_per_key', 'busiest_key_claimed', 'rate_limit', 'rate_period',
                              'rate_used', 'blocked']),
        ('dead_letters', ARRAY['dlq_id', 'job_id', 'queue', 'task', 'error', 'attempts',
                               'failed_at', 'replayed_at', 'discarded_at']),
        ('locks', ARRAY['lock', 'owner_id', 'token', 'expires_at']),
        ('schedules', ARRAY['schedule', 'queue', 'task', 'cron', 'time_zone', 'payload', 'priority',
                            'max_attempts', 'active_key', 'paused', 'next_run_at', 'last_run_at',
                            'last_job_id']),
        ('dispatches', ARRAY['job_id', 'queue', 'backend', 'state', 'reservation_ref', 'execution_ref',
                             'owner_id', 'generation', 'lease_expires_at', 'checked_at']),
        ('job_events', ARRAY['job_id', 'seq', 'at', 'event', 'generation', 'owner_id', 'detail']),
        ('job_search_row', ARRAY['job_id', 'queue', 'task', 'payload', 'priority', 'status', 'attempts',
                                 'max_attempts', 'run_at', 'expires_at', 'owner_id', 'generation',
                                 'lease_expires_at', 'budget_expires_at', 'cancel_requested', 'pid', 'result',
                                 'last_error', 'submission_id', 'fingerprint', 'active_key', 'dlq_id',
                                 'created_at', 'finished_at', 'concurrency_key', 'blocked_by', 'progress',
                                 'progress_at', 'seq']))
    SELECT string_agg(e.obj, ', ' ORDER BY e.obj) INTO v_bad
      FROM expected AS e
     WHERE e.cols IS DISTINCT FROM (
            SELECT (array_agg(a.attname::text ORDER BY a.attnum))[1:cardinality(e.cols)]
              FROM pg_class AS c
              JOIN pg_namespace AS n ON n.oid = c.relnamespace
              JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             WHERE n.nspname = 'fenceq' AND c.relname = e.obj AND c.relkind IN ('v', 'c'));
    check_name := 'public_shapes'; ok := v_bad IS NULL;
    detail := coalesce('missing or reordered columns: ' || v_bad, 'the types and views as expected');
    RETURN NEXT;

    -- No default may manufacture identity or an invalid state.
    WITH expected(tbl, col, def) AS (VALUES
        ('_jobs', 'job_id', NULL), ('_jobs', 'owner_id', NULL), ('_jobs', 'claim_token', NULL),
        ('_jobs', 'submission_id', NULL), ('_jobs', 'fingerprint', NULL), ('_jobs', 'active_key', NULL),
        ('_jobs', 'dlq_id', NULL), ('_jobs', 'lease_expires_at', NULL), ('_jobs', 'pid', NULL),
        ('_jobs', 'generation', '0'), ('_jobs', 'attempts', '0'),
        ('_jobs', 'status', '''pending''::text'), ('_jobs', 'cancel_requested', 'false'),
        ('_submissions', 'submission_id', NULL), ('_submissions', 'fingerprint', NULL),
        ('_submissions', 'job_id', NULL), ('_claims', 'claim_token', NULL),
        ('_claims', 'job_id', NULL), ('_claims', 'owner_id', NULL), ('_claims', 'generation', NULL),
        ('_dead_letters', 'dlq_id', NULL), ('_queues', 'paused', 'false'), ('_queues', 'notify', 'true'),
        ('_locks', 'lock', NULL), ('_locks', 'owner_id', NULL), ('_locks', 'token', NULL),
        ('_queues', 'notify_done', 'false'), ('_jobs', 'progress', NULL), ('_jobs', 'progress_at', NULL),
        ('_queues', 'requeue_priority', '''keep''::text'), ('_queues', 'history', 'false'),
        ('_dispatches', 'job_id', NULL), ('_dispatches', 'generation', NULL), ('_dispatches', 'state', NULL),
        ('_dispatches', 'reservation_ref', NULL), ('_dispatches', 'execution_ref', NULL))
    SELECT string_agg(e.tbl || '.' || e.col, ', ' ORDER BY e.tbl, e.col) INTO v_bad
      FROM expected AS e
      LEFT JOIN pg_attrdef AS d
        ON d.adrelid = to_regclass('fenceq.' || e.tbl)
       AND d.adnum = (SELECT a.attnum FROM pg_attribute AS a
                       WHERE a.attrelid = to_regclass('fenceq.' || e.tbl) AND a.attname = e.col)
     WHERE pg_get_expr(d.adbin, d.adrelid) IS DISTINCT FROM e.def;
    check_name := 'defaults'; ok := v_bad IS NULL;
    detail := coalesce('unexpected default: ' || v_bad, 'no default manufactures identity or state');
    RETURN NEXT;

    -- Nothing may rewrite what the functions store behind their back.
    SELECT string_agg(c.relname || '.' || t.tgname, ', ') INTO v_bad
      FROM pg_trigger AS t
      JOIN pg_class AS c ON c.oid = t.tgrelid
      JOIN pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname = 'fenceq' AND NOT t.tgisinternal;
    check_name := 'no_triggers'; ok := v_bad IS NULL;
    detail := coalesce('unexpected triggers: ' || v_bad, 'no triggers on fenceq tables');
    RETURN NEXT;

    -- The one exception: the private helpers the planner inlines into their
    -- caller's statement (see _is_plain_duration), by name. Each must be a
    -- SQL function with a SQL-standard body (bound at creation, so its
    -- dependencies are recorded), no SET clause, nothing it depends on
    -- outside pg_catalog and fenceq, and no role but its owner may run it.
    SELECT string_agg(p.proname, ', ' ORDER BY p.proname) INTO v_bad
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
     WHERE n.nspname = 'fenceq' AND NOT p.prosecdef
       AND NOT (p.proname || '(' || oidvectortypes(p.proargtypes) || ')' IN (
                    '_holds_fence(text, text, bigint, text, timestamp with time zone, text, bigint, text, '
                    'timestamp with time zone)',
                    '_is_plain_duration(interval)', '_is_plain_fence(text, text, bigint, text)',
                    '_is_plain_json(jsonb)', '_is_plain_json_int(jsonb, integer)',
                    '_is_plain_time(timestamp with time zone)', '_new_job_id()',
                    '_fingerprint_of(text, text, text, text, text, integer, timestamp with time zone, '
                    'timestamp with time zone, integer, text, boolean, text, text[])')
                AND p.prolang = (SELECT l.oid FROM pg_language AS l WHERE l.lanname = 'sql')
                AND p.prosqlbody IS NOT NULL AND p.proconfig IS NULL
                AND NOT EXISTS (
                    SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
                     WHERE a.grantee <> p.proowner)
                AND NOT EXISTS (
                    SELECT 1 FROM pg_depend AS d
                      LEFT JOIN pg_proc AS dp ON d.refclassid = 'pg_proc'::regclass AND dp.oid = d.refobjid
                      LEFT JOIN pg_operator AS dop ON d.refclassid = 'pg_operator'::regclass AND dop.oid = d.refobjid
                      LEFT JOIN pg_type AS dt ON d.refclassid = 'pg_type'::regclass AND dt.oid = d.refobjid
                     WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                       AND coalesce(dp.pronamespace, dop.oprnamespace, dt.typnamespace)
                           NOT IN ('pg_catalog'::regnamespace, n.oid)));
    check_name := 'security_definer'; ok := v_bad IS NULL;
    detail := coalesce('not SECURITY DEFINER: ' || v_bad,
                       'every function is SECURITY DEFINER but the inlined private helpers');
    RETURN NEXT;

    -- Planner settings the functions pin for their own plans (see part 5)
    -- are allowed beside the search_path, and nothing else.
    SELECT string_agg(p.proname, ', ' ORDER BY p.proname) INTO v_bad
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
     WHERE n.nspname = 'fenceq' AND p.prosecdef
       AND ARRAY(SELECT c.setting FROM unnest(p.proconfig) AS c(setting)
                  WHERE c.setting NOT IN ('plan_cache_mode=force_generic_plan', 'enable_seqscan=off'))
           IS DISTINCT FROM ARRAY['search_path=pg_catalog, fenceq, pg_temp'];
    check_name := 'pinned_search_path'; ok := v_bad IS NULL;
    detail := coalesce('search_path not pinned: ' || v_bad, 'every function pins search_path');
    RETURN NEXT;

    SELECT string_agg(DISTINCT p.proname, ', ') INTO v_bad
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
     CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS acl
     WHERE n.nspname = 'fenceq' AND acl.grantee = 0 AND acl.privilege_type = 'EXECUTE';
    check_name := 'no_public_execute'; ok := v_bad IS NULL;
    detail := coalesce('PUBLIC may execute: ' || v_bad, 'PUBLIC has no EXECUTE');
    RETURN NEXT;

    SELECT string_agg(DISTINCT o.name, ', ') INTO v_bad FROM (
        SELECT p.proname AS name, p.proowner AS owner
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'fenceq'
        UNION ALL
        SELECT c.relname, c.relowner
          FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'fenceq' AND c.relkind IN ('r', 'v')) AS o
      JOIN pg_roles AS r ON r.oid = o.owner
     WHERE r.rolsuper;
    check_name := 'owner_not_superuser'; ok := v_bad IS NULL;
    detail := coalesce('owned by a superuser: ' || v_bad, 'no fenceq object is owned by a superuser');
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION fenceq.verify_schema() IS
    'Admission check of the deployed schema: encoding, column types, deterministic collations, exact unique identity indexes, the active-key and activity indexes, the public types and views, safe defaults, no triggers, SECURITY DEFINER with pinned search_path, no PUBLIC EXECUTE, no superuser owner. One row per check.';

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

-- fenceq for PostgreSQL, part 9: ownership and privileges.
--
-- Everything is owned by the NOLOGIN, non-superuser role fenceq_owner when the
-- installer may create it, so SECURITY DEFINER functions run with no more
-- than the queue's own rights. Otherwise the installing role stays owner (the
-- functions then run with its rights; docs/dba.md says what that means).
-- PUBLIC gets nothing: grants to the fenceq_* roles are added separately,
-- without touching any function body.
DO $$
DECLARE
    v_can_create boolean;
    v_object record;
BEGIN
    SELECT r.rolsuper OR r.rolcreaterole INTO v_can_create
      FROM pg_roles AS r WHERE r.rolname = current_user;
    IF NOT EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = 'fenceq_owner') THEN
        IF NOT v_can_create THEN
            RAISE NOTICE 'fenceq: may not create role fenceq_owner; objects stay owned by %', current_user;
            RETURN;
        END IF;
        BEGIN
            CREATE ROLE fenceq_owner NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
        EXCEPTION WHEN duplicate_object THEN
            NULL;  -- created concurrently by an install in another database
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = 'fenceq_owner'
                AND (r.rolcanlogin OR r.rolsuper)) THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: role fenceq_owner exists and can log in or is a superuser; refusing to use it';
    END IF;
    IF NOT pg_has_role(current_user, 'fenceq_owner', 'MEMBER') THEN
        IF NOT v_can_create THEN
            RAISE NOTICE 'fenceq: not a member of fenceq_owner; objects stay owned by %', current_user;
            RETURN;
        END IF;
        EXECUTE format('GRANT fenceq_owner TO %I', current_user);
    END IF;
    EXECUTE 'ALTER SCHEMA fenceq OWNER TO fenceq_owner';
    -- Only what another role owns: ALTER TABLE ... OWNER takes an ACCESS
    -- EXCLUSIVE lock even when the owner stays the same, and an upgrade
    -- must not stop the queue for nothing.
    FOR v_object IN
        SELECT format('ALTER %s %s OWNER TO fenceq_owner',
                      CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, c.oid::regclass) AS stmt
          FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'fenceq' AND c.relkind IN ('r', 'v')
           AND c.relowner <> 'fenceq_owner'::regrole
        UNION ALL
        SELECT format('ALTER FUNCTION %s OWNER TO fenceq_owner', p.oid::regprocedure)
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'fenceq' AND p.proowner <> 'fenceq_owner'::regrole
        UNION ALL
        SELECT format('ALTER TYPE %s OWNER TO fenceq_owner', t.oid::regtype)
          FROM pg_type AS t JOIN pg_class AS c ON c.oid = t.typrelid
         WHERE t.typnamespace = 'fenceq'::regnamespace AND c.relkind = 'c'
           AND t.typowner <> 'fenceq_owner'::regrole
    LOOP
        EXECUTE v_object.stmt;
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA fenceq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA fenceq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA fenceq FROM PUBLIC;
-- A type's default lets PUBLIC use it; the private one (version 8) is the
-- functions' own.
REVOKE ALL ON TYPE fenceq._call_claim FROM PUBLIC;

-- Group roles (docs/guarantees.md §10), NOLOGIN; applications log in as their own
-- roles and are granted one of these. Roles are cluster-wide: membership
-- grants the same rights in every database of the cluster where fenceq is
-- installed. An existing role of these names that can log in is refused.
--   fenceq_producer: submit, submit_batch, get_job, version
--   fenceq_worker:   the producer's rights, every fenced worker function,
--                    reap, tick, next_due, and the views
--                    (and the named locks, docs/guarantees.md §15; the
--                    external dispatch calls and get_job_events, §19-§20;
--                    sample_activity, activity and search_jobs, §21)
--   fenceq_admin:    everything (queue settings, cancel, purge, dead
--                    letters, the bulk actions, verify_schema) and the views
-- Private tables and _helpers are granted to nobody: everything goes
-- through the SECURITY DEFINER functions.
DO $$
DECLARE
    v_can_create boolean;
    v_role text;
    v_function text;
    v_grants constant jsonb := jsonb_build_object(
        'fenceq_producer', jsonb_build_array('submit', 'submit_batch', 'get_job', 'version'),
        'fenceq_worker', jsonb_build_array('submit', 'submit_batch', 'get_job', 'version',
            'claim_next', 'claim_batch', 'claim_jobs', 'recover_claim', 'heartbeat', 'heartbeat_batch', 'complete',
            'complete_batch', 'fail', 'release', 'checkpoint', 'set_pid', 'claim_state',
            'acknowledge_cancel', 'reap',
            'tick', 'next_due', 'extend', 'acquire_lock', 'renew_lock', 'release_lock', 'check_lock',
            'progress', 'reserve_dispatch', 'finalize_dispatch', 'release_dispatch', 'replace_dispatch_ref',
            'adopt_dispatch', 'dispatch_repair_candidates', 'get_job_events',
            'sample_activity', 'activity', 'search_jobs'));
BEGIN
    SELECT r.rolsuper OR r.rolcreaterole INTO v_can_create FROM pg_roles AS r WHERE r.rolname = current_user;
    FOREACH v_role IN ARRAY ARRAY['fenceq_producer', 'fenceq_worker', 'fenceq_admin'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = v_role AND (r.rolcanlogin OR r.rolsuper)) THEN
            RAISE EXCEPTION USING ERRCODE = 'QF901',
                MESSAGE = format('fenceq: role %s exists and can log in or is a superuser; refusing to use it', v_role);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = v_role) THEN
            IF NOT v_can_create THEN
                RAISE NOTICE 'fenceq: may not create role %; grant its rights by hand (docs/dba.md)', v_role;
                CONTINUE;
            END IF;
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object THEN
                NULL;  -- created concurrently by an install in another database
            END;
        END IF;
        EXECUTE format('GRANT USAGE ON SCHEMA fenceq TO %I', v_role);
        IF v_role = 'fenceq_admin' THEN
            FOR v_function IN
                SELECT p.oid::regprocedure::text FROM pg_proc AS p
                  JOIN pg_namespace AS n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'fenceq' AND p.proname NOT LIKE '\_%'
            LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_function, v_role);
            END LOOP;
        ELSE
            FOR v_function IN
                SELECT p.oid::regprocedure::text FROM pg_proc AS p
                  JOIN pg_namespace AS n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'fenceq'
                   AND p.proname IN (SELECT jsonb_array_elements_text(v_grants -> v_role))
            LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_function, v_role);
            END LOOP;
        END IF;
        IF v_role <> 'fenceq_producer' THEN  -- every view: they show no claim token
            FOR v_function IN
                SELECT c.oid::regclass::text FROM pg_class AS c
                  JOIN pg_namespace AS n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'fenceq' AND c.relkind = 'v'
            LOOP
                EXECUTE format('GRANT SELECT ON %s TO %I', v_function, v_role);
            END LOOP;
        END IF;
    END LOOP;
END
$$;

-- Admission: an install or migration refuses to finish on a schema that
-- fails any verify_schema check (docs/guarantees.md §3).
DO $$
DECLARE
    v_failed text;
BEGIN
    SELECT string_agg(v.check_name, ', ') INTO v_failed FROM fenceq.verify_schema() AS v WHERE NOT v.ok;
    IF v_failed IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: the schema fails verify_schema checks: ' || v_failed;
    END IF;
END
$$;

-- The installer's own search_path again (see part 1), for whatever its
-- transaction runs next (the migration bookkeeping, for one).
SELECT set_config('search_path', current_setting('fenceq.installer_search_path'), true);
