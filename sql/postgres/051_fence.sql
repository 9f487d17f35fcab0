-- fenceq for PostgreSQL, part 5: fenced writes that keep a claim going.
--
-- What it holds: the fence itself (_holds_fence, the rule, and _lock_live,
-- the preamble of the fenced writes that are not one statement), the renewals
-- (heartbeat, heartbeat_batch with its _check_batch, checkpoint), set_pid,
-- and the reads a worker makes under its fence (claim_state, and
-- _checkpoints_of, which the claims also call).
-- What they write: the live claim's _jobs row (lease_expires_at, pid: no
-- index covers them, so these stay HOT updates) and _checkpoints.
-- Who calls them: workers (the fenceq_worker role, part 9), holding the
-- fence a claim (050_claim.sql) gave them. Settling the claim is
-- 052_settle.sql. Why the hot functions pin their planner settings: part 5
-- (050_claim.sql).
--
-- A fenced write locks the job row by primary key, then reads
-- clock_timestamp(): the lease is judged on a reading taken after the lock is
-- held, so a lock wait past expiry can never authorise a write (docs/guarantees.md §1).
-- The rule it judges by is _holds_fence, and nothing else spells it out. The
-- lock comes in two shapes: one job (complete, heartbeat and progress in
-- their one statement, whose innermost SELECT locks and whose projection
-- reads the clock; every other fenced write through _lock_live) and many
-- jobs (complete_batch and heartbeat_batch lock their rows in job id order,
-- then read the clock once).

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

-- _checkpoints_of: the recorded checkpoints of a job as a jsonb object.
CREATE OR REPLACE FUNCTION fenceq._checkpoints_of(job_id text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN coalesce((SELECT jsonb_object_agg(c.step, c.value)
                       FROM fenceq._checkpoints AS c WHERE c.job_id = _checkpoints_of.job_id), '{}'::jsonb);
END
$$;
COMMENT ON FUNCTION fenceq._checkpoints_of(text) IS
    'Private. A job''s checkpoints as a jsonb object step -> value ({} when none).';

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

-- _check_batch: the fence arrays of a batch call must have equal lengths
-- (QF100), at most 10,000 elements, and well-formed fences (QF106).
CREATE OR REPLACE FUNCTION fenceq._check_batch(
    job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_count integer := coalesce(cardinality(_check_batch.job_ids), -1);
BEGIN
    IF v_count < 0 OR v_count > 10000
       OR coalesce(cardinality(_check_batch.owner_ids), -1) <> v_count
       OR coalesce(cardinality(_check_batch.generations), -1) <> v_count
       OR coalesce(cardinality(_check_batch.claim_tokens), -1) <> v_count THEN
        PERFORM fenceq._raise('QF100', 'fence arrays must be non-NULL, of equal length, with at most 10000 elements');
    END IF;
    IF v_count > 0 AND (array_ndims(_check_batch.job_ids) <> 1 OR array_ndims(_check_batch.owner_ids) <> 1
        OR array_ndims(_check_batch.generations) <> 1 OR array_ndims(_check_batch.claim_tokens) <> 1 OR EXISTS (
        SELECT 1 FROM unnest(_check_batch.job_ids, _check_batch.owner_ids,
                             _check_batch.generations, _check_batch.claim_tokens) AS f(j, o, g, t)
         WHERE f.j IS NULL OR length(f.j) NOT BETWEEN 1 AND 36
            OR f.o IS NULL OR length(f.o) NOT BETWEEN 1 AND 255
            OR f.t IS NULL OR length(f.t) NOT BETWEEN 1 AND 255
            OR f.g IS NULL OR f.g < 1)) THEN
        PERFORM fenceq._raise('QF106', 'a fence is malformed');
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION fenceq._check_batch(text[], text[], bigint[], text[]) IS
    'Private. Validate the fence arrays of a batch call; returns their length.';

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

-- checkpoint: record a step's value once per job under a live fence, and
-- renew the lease as heartbeat would. Returns what is recorded: the earlier
-- value when the step was already recorded (by this or an earlier claim).
-- Without a live fence it records nothing and returns SQL NULL.
CREATE OR REPLACE FUNCTION fenceq.checkpoint(
    job_id text, owner_id text, generation bigint, claim_token text,
    step text, value jsonb)
RETURNS jsonb
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
    v_recorded jsonb;
BEGIN
    PERFORM fenceq._check_name(checkpoint.step, 'step');
    IF checkpoint.value IS NULL OR jsonb_typeof(checkpoint.value) = 'null' THEN
        PERFORM fenceq._raise('QF103', 'a checkpoint value may not be null');
    END IF;
    PERFORM fenceq._check_json(checkpoint.value, 'value');
    v_job := fenceq._lock_live(checkpoint.job_id, checkpoint.owner_id,
                               checkpoint.generation, checkpoint.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT c.value INTO v_recorded FROM fenceq._checkpoints AS c
     WHERE c.job_id = checkpoint.job_id AND c.step = checkpoint.step;
    IF v_recorded IS NULL THEN
        IF (SELECT count(*) FROM fenceq._checkpoints AS c WHERE c.job_id = checkpoint.job_id) >= 10000 THEN
            PERFORM fenceq._raise('QF100', 'a job may hold at most 10000 checkpoints');
        END IF;
        -- The row lock on the job serialises writers of its checkpoints.
        INSERT INTO fenceq._checkpoints AS c (job_id, step, value, generation, recorded_at)
        VALUES (checkpoint.job_id, checkpoint.step, checkpoint.value, checkpoint.generation, v_now);
        v_recorded := checkpoint.value;
    END IF;
    UPDATE fenceq._jobs AS j
       SET lease_expires_at = least(v_now + j.lease, j.budget_expires_at)
     WHERE j.job_id = checkpoint.job_id;
    RETURN v_recorded;
END
$$;
COMMENT ON FUNCTION fenceq.checkpoint(text, text, bigint, text, text, jsonb) IS
    'Record a step value once per job under a live fence and renew the lease; returns the recorded value (the earlier one if already recorded), or NULL without a live fence.';

-- set_pid: record the OS process id working a live, not cancel-requested claim.
CREATE OR REPLACE FUNCTION fenceq.set_pid(
    job_id text, owner_id text, generation bigint, claim_token text, pid integer)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
BEGIN
    IF set_pid.pid IS NULL OR set_pid.pid < 1 THEN
        PERFORM fenceq._raise('QF104', 'pid must be a positive integer');
    END IF;
    v_job := fenceq._lock_live(set_pid.job_id, set_pid.owner_id,
                               set_pid.generation, set_pid.claim_token);
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    UPDATE fenceq._jobs AS j SET pid = set_pid.pid WHERE j.job_id = set_pid.job_id;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.set_pid(text, text, bigint, text, integer) IS
    'Record the process id of a live, not cancel-requested claim. True when recorded; false otherwise.';

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
