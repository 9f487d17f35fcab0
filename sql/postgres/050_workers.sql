-- fenceq for PostgreSQL, part 5: workers (claims and fenced writes).
--
-- Hot functions pin plan_cache_mode = force_generic_plan: their statements
-- are simple index lookups and scans whose generic plans are the right ones,
-- and planning them afresh on every call would cost more than running them.
-- Every keyed function also pins enable_seqscan = off. A session keeps its
-- cached plan until the table's statistics change; planned while a table
-- was empty (a fresh install, after a purge), a lookup would stay a
-- sequential scan of the whole table as it grows, until autovacuum next
-- analyzes it. No statement here wants a sequential scan at any size that
-- matters, so the planner is told not to choose one.
--
-- A fenced write locks the job row by primary key, then reads
-- clock_timestamp(): the lease is judged on a reading taken after the lock is
-- held, so a lock wait past expiry can never authorise a write (docs/guarantees.md §1).
-- complete and heartbeat do it in their one statement; the other fenced
-- writes call _lock_live.

-- _is_live: whether a locked job row is the live claim of this fence at now.
CREATE OR REPLACE FUNCTION fenceq._is_live(
    job fenceq._jobs, owner_id text, generation bigint, claim_token text, now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN coalesce((_is_live.job).status = 'claimed'
        AND (_is_live.job).owner_id = _is_live.owner_id
        AND (_is_live.job).generation = _is_live.generation
        AND (_is_live.job).claim_token = _is_live.claim_token
        AND (_is_live.job).lease_expires_at > _is_live.now, false);
END
$$;
COMMENT ON FUNCTION fenceq._is_live(fenceq._jobs, text, bigint, text, timestamptz) IS
    'Private. True when the locked row is claimed by exactly this fence and its lease is strictly after now.';

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
    -- _is_live, spelled out: this runs on every fenced write.
    IF v_job.status = 'claimed' AND v_job.owner_id = _lock_live.owner_id
       AND v_job.generation = _lock_live.generation AND v_job.claim_token = _lock_live.claim_token
       AND v_job.lease_expires_at > clock_timestamp() THEN
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

-- _move_due: move a queue's jobs that have fallen due by `now` from the
-- later set to the ready set (part 1c), at most 1,000 per call, earliest
-- first, so that the claim that calls it finds them in its index. Every
-- claim calls it for each queue it reads, before it picks: a job becomes
-- claimable by the first claim after its run_at, as in version 4 (where
-- the claim read past every job due later instead). When more than 1,000
-- fell due at once, the rest move on the next claims, so for that moment
-- the claim order among them is due time first, then priority.
-- Locking: FOR UPDATE SKIP LOCKED on the rows it moves: a row another
-- claimer is moving, or a canceller holds, is left to it. Returns how many
-- jobs moved (0 costs one probe of _jobs_later_idx).
CREATE OR REPLACE FUNCTION fenceq._move_due(queue text, now timestamptz)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_moved integer;
BEGIN
    UPDATE fenceq._jobs AS j
       SET scheduled = false
      FROM (SELECT l.job_id FROM fenceq._jobs AS l
             WHERE l.queue = _move_due.queue AND l.status = 'pending' AND l.scheduled
               AND l.run_at <= _move_due.now
             ORDER BY l.run_at
             LIMIT 1000
               FOR UPDATE SKIP LOCKED) AS d
     WHERE j.job_id = d.job_id;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    RETURN v_moved;
END
$$;
COMMENT ON FUNCTION fenceq._move_due(text, timestamptz) IS
    'Private. Move up to 1,000 of a queue''s jobs that fell due from the later set to the ready set; returns how many.';

-- claim_next: claim the next eligible job across queues.
-- Locking: SKIP LOCKED on job rows only; callers never block each other.
-- Not idempotent by design: each call needs a fresh claim_token (QF301 for a
-- used one); after an uncertain answer call recover_claim with the same token.
-- Zero rows: nothing eligible (or every named queue is paused).
--
-- The usual call (one queue, well-formed values) is one statement: pick the
-- head of the queue's claim index with SKIP LOCKED, read the clock above the
-- lock, claim the row and record its token in the ledger. Anything else
-- (several queues, a value to check one by one) takes claim_batch's path.
CREATE OR REPLACE FUNCTION fenceq.claim_next(
    queues text[], owner_id text, claim_token text,
    lease interval DEFAULT NULL, budget interval DEFAULT NULL)
RETURNS SETOF fenceq.claim
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_claim fenceq.claim[];  -- an array: a row variable cannot share an INTO list
    v_old_generation bigint;
    v_recorded boolean;
    v_limited boolean;
    v_history boolean;  -- whether the queue keeps events (part 8b)
BEGIN
    IF NOT coalesce(cardinality(claim_next.queues) = 1 AND array_lower(claim_next.queues, 1) = 1
                    AND length(claim_next.queues[1]) BETWEEN 1 AND 255
                    AND length(claim_next.owner_id) BETWEEN 1 AND 255
                    AND length(claim_next.claim_token) BETWEEN 1 AND 255
                    AND fenceq._is_plain_duration(claim_next.lease)
                    AND fenceq._is_plain_duration(claim_next.budget), false) THEN
        RETURN QUERY SELECT * FROM fenceq.claim_batch(claim_next.queues, claim_next.owner_id,
            ARRAY[claim_next.claim_token], claim_next.lease, claim_next.budget);
        RETURN;
    END IF;

    v_now := clock_timestamp();  -- eligibility; the lease is read after the lock
    IF EXISTS (SELECT 1 FROM fenceq._jobs AS l
                WHERE l.queue = claim_next.queues[1] AND l.status = 'pending' AND l.scheduled
                  AND l.run_at <= v_now) THEN
        PERFORM fenceq._move_due(claim_next.queues[1], v_now);
    END IF;
    WITH queue AS MATERIALIZED (
        -- A queue with limits takes claim_batch's path (the limits' lock).
        SELECT q.lease, q.history FROM fenceq._queues AS q
         WHERE q.queue = claim_next.queues[1] AND NOT q.paused
           AND num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) = 0),
    picked AS MATERIALIZED (
        -- The outer projection runs above the row lock, so its clock reading
        -- is taken once the row is held.
        SELECT p.job_id, p.generation, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.generation
              FROM fenceq._jobs AS j
             WHERE j.queue = claim_next.queues[1] AND j.status = 'pending' AND NOT j.scheduled
               AND j.run_at <= v_now
               AND (j.expires_at IS NULL OR j.expires_at > v_now)
               AND EXISTS (SELECT 1 FROM queue)
             ORDER BY j.priority DESC, j.run_at, j.seq
             LIMIT 1
               FOR UPDATE OF j SKIP LOCKED) AS p),
    claimed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'claimed',
               attempts = j.attempts + 1,
               -- At the largest generation the row keeps it, and the claim
               -- is refused below (QF303) before anything commits.
               generation = CASE WHEN p.generation < 9223372036854775807 THEN p.generation + 1
                                 ELSE p.generation END,
               owner_id = claim_next.owner_id,
               claim_token = claim_next.claim_token,
               lease = coalesce(claim_next.lease, q.lease),
               lease_expires_at = least(p.locked_at + coalesce(claim_next.lease, q.lease),
                                        p.locked_at + claim_next.budget),
               budget_expires_at = p.locked_at + claim_next.budget,
               cancel_requested = false,
               pid = NULL
          FROM picked AS p, queue AS q
         WHERE j.job_id = p.job_id
        RETURNING j.job_id, j.queue, j.task, j.payload, j.priority, j.attempts, j.max_attempts,
                  j.owner_id, j.generation, j.claim_token, j.lease_expires_at, j.budget_expires_at,
                  j.cancel_requested, j.submission_id, p.generation AS old_generation, p.locked_at,
                  q.history),
    recorded AS (
        INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at)
        SELECT claim_next.claim_token, c.job_id, c.generation, claim_next.owner_id, c.locked_at
          FROM claimed AS c
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING 1)
    SELECT ARRAY[ROW(c.job_id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts,
                     c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                     c.cancel_requested, c.submission_id, '{}'::jsonb)::fenceq.claim],
           c.old_generation, EXISTS (SELECT 1 FROM recorded), c.history
      INTO v_claim, v_old_generation, v_recorded, v_history
      FROM claimed AS c;

    IF v_claim IS NULL THEN
        -- Nothing claimed: an undeclared queue and a used token still raise;
        -- a queue with limits is claimed from under them.
        SELECT num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) > 0 INTO v_limited
          FROM fenceq._queues AS q WHERE q.queue = claim_next.queues[1];
        IF NOT FOUND THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        IF v_limited THEN
            RETURN QUERY SELECT * FROM fenceq.claim_batch(claim_next.queues, claim_next.owner_id,
                ARRAY[claim_next.claim_token], claim_next.lease, claim_next.budget);
            RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM fenceq._claims AS c WHERE c.claim_token = claim_next.claim_token) THEN
            PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
        END IF;
        RETURN;
    END IF;
    IF v_old_generation = 9223372036854775807 THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    -- Storage must keep exactly what was sent: a trigger or coercion that
    -- changed it rolls the whole claim back.
    IF v_claim[1].owner_id IS DISTINCT FROM claim_next.owner_id
       OR v_claim[1].claim_token IS DISTINCT FROM claim_next.claim_token THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    IF NOT v_recorded THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    -- Checkpoints need an earlier claim: a first claim has none to read
    -- (and its statement stays free of the lookup).
    IF v_claim[1].generation > 1 THEN
        v_claim[1].checkpoints := fenceq._checkpoints_of(v_claim[1].job_id);
    END IF;
    IF v_history THEN
        PERFORM fenceq._record_events(ARRAY[v_claim[1].job_id], 'claimed');
    END IF;
    RETURN NEXT v_claim[1];
END
$$;
COMMENT ON FUNCTION fenceq.claim_next(text[], text, text, interval, interval) IS
    'Claim the next eligible job (priority desc, run_at, submission order) across queues: zero or one row with the fence. Needs a fresh claim_token (QF301 if used); QF101 for an undeclared queue.';

-- _pick_limited: lock and return (in claim order) up to `wanted` due jobs
-- of a queue with limits, as many as its limits allow now, possibly none.
-- Locking: the queue row FOR NO KEY UPDATE first, so that claimers of one
-- limited queue take turns and each counts what the others committed; the
-- clock is read after that lock. Then each pick is locked FOR UPDATE SKIP
-- LOCKED. A key at its limit is passed over for the next job of another key.
-- The rate window is exact because claims of the queue are serialised: a
-- claim is allowed while fewer than rate_limit claims lie in the last
-- rate_period, so no window of that length ever holds more (the claims are
-- recorded by claim_batch at a time no earlier than this check).
CREATE OR REPLACE FUNCTION fenceq._pick_limited(queue text, wanted integer)
RETURNS text[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_now timestamptz;
    v_allowed integer := _pick_limited.wanted;
    v_full text[] := '{}';
    v_taken text[] := '{}';
    v_job fenceq._jobs;
BEGIN
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = _pick_limited.queue FOR NO KEY UPDATE;
    v_now := clock_timestamp();
    IF v_queue.max_claimed IS NOT NULL THEN
        v_allowed := least(v_allowed, v_queue.max_claimed - (
            SELECT count(*) FROM fenceq._jobs AS j WHERE j.queue = v_queue.queue AND j.status = 'claimed'));
    END IF;
    IF v_queue.rate_limit IS NOT NULL THEN
        DELETE FROM fenceq._rate_window AS r
         WHERE r.queue = v_queue.queue AND r.claimed_at <= v_now - v_queue.rate_period;
        v_allowed := least(v_allowed, v_queue.rate_limit - (
            SELECT count(*) FROM fenceq._rate_window AS r WHERE r.queue = v_queue.queue));
    END IF;
    IF v_allowed <= 0 THEN
        RETURN NULL;
    END IF;
    PERFORM fenceq._move_due(v_queue.queue, v_now);
    IF v_queue.max_claimed_per_key IS NULL THEN
        RETURN ARRAY(
            SELECT j.job_id FROM fenceq._jobs AS j
             WHERE j.queue = v_queue.queue AND j.status = 'pending' AND NOT j.scheduled AND j.run_at <= v_now
               AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.priority DESC, j.run_at, j.seq
             LIMIT v_allowed
               FOR UPDATE SKIP LOCKED);
    END IF;
    -- Per key: the keys already at their limit, then one pick at a time
    -- (a pick can fill its key).
    v_full := ARRAY(
        SELECT j.concurrency_key FROM fenceq._jobs AS j
         WHERE j.queue = v_queue.queue AND j.status = 'claimed' AND j.concurrency_key IS NOT NULL
         GROUP BY j.concurrency_key HAVING count(*) >= v_queue.max_claimed_per_key);
    WHILE cardinality(v_taken) < v_allowed LOOP
        SELECT * INTO v_job FROM fenceq._jobs AS j
         WHERE j.queue = v_queue.queue AND j.status = 'pending' AND NOT j.scheduled AND j.run_at <= v_now
           AND (j.expires_at IS NULL OR j.expires_at > v_now)
           AND (j.concurrency_key IS NULL OR j.concurrency_key <> ALL (v_full))
           AND j.job_id <> ALL (v_taken)
         ORDER BY j.priority DESC, j.run_at, j.seq
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        v_taken := v_taken || v_job.job_id;
        IF v_job.concurrency_key IS NOT NULL AND (
            SELECT count(*) FROM fenceq._jobs AS j
             WHERE j.queue = v_queue.queue AND j.status = 'claimed'
               AND j.concurrency_key = v_job.concurrency_key)
            + (SELECT count(*) FROM fenceq._jobs AS j
                WHERE j.job_id = ANY (v_taken) AND j.concurrency_key = v_job.concurrency_key)
            >= v_queue.max_claimed_per_key THEN
            v_full := v_full || v_job.concurrency_key;
        END IF;
    END LOOP;
    RETURN nullif(v_taken, '{}');
END
$$;
COMMENT ON FUNCTION fenceq._pick_limited(text, integer) IS
    'Private. Lock and return, in claim order, the due jobs of a queue with limits that its limits allow now.';

-- claim_batch: claim up to one job per token (tokens used in array order),
-- across queues, in priority / run_at / submission order. A repeated or
-- already used token raises QF301 before anything is claimed. It is also
-- claim_next's general path.
-- Locking: FOR UPDATE SKIP LOCKED on job rows only (the queue rows are read
-- without locks), so concurrent claimers never wait on each other and never
-- get the same job. One queue: one ordered scan of its claim index. Several:
-- the head rows of each queue's scan are locked and merged; the heads not
-- claimed stay locked until the caller's transaction ends (in autocommit, at
-- once). Then one statement claims every picked job and records its token.
-- A queue with limits (set_queue_limits) is the exception: its claimers take
-- turns on its queue row (_pick_limited), and it offers only what its limits
-- allow, possibly nothing; a limit never raises.
CREATE OR REPLACE FUNCTION fenceq.claim_batch(
    queues text[], owner_id text, claim_tokens text[],
    lease interval DEFAULT NULL, budget interval DEFAULT NULL)
RETURNS SETOF fenceq.claim
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_count integer := cardinality(claim_batch.claim_tokens);
    v_queue fenceq._queues;
    v_active text[];
    v_known integer;
    v_limited text[];
    v_offered text[] := '{}';
    v_now timestamptz;
    v_picked text[];
    v_claims fenceq.claim[];
    v_recorded integer;
    v_changed boolean;
    v_exhausted boolean;
    v_logged text[];  -- the claimed jobs whose queues keep events (part 8b)
BEGIN
    -- Fast paths for the usual well-formed calls: one query-free expression
    -- for a single claim, one expression for a batch numbered from 1.
    -- Otherwise the checks run one by one and name what is wrong.
    IF NOT coalesce(cardinality(claim_batch.queues) = 1 AND length(claim_batch.queues[1]) BETWEEN 1 AND 255
                    AND v_count = 1 AND length(claim_batch.claim_tokens[1]) BETWEEN 1 AND 255
                    AND length(claim_batch.owner_id) BETWEEN 1 AND 255
                    AND claim_batch.lease IS NULL AND claim_batch.budget IS NULL, false) THEN
        IF NOT coalesce(array_ndims(claim_batch.queues) = 1 AND array_lower(claim_batch.queues, 1) = 1
                        AND cardinality(claim_batch.queues) <= 10000
                        AND array_ndims(claim_batch.claim_tokens) = 1 AND array_lower(claim_batch.claim_tokens, 1) = 1
                        AND v_count <= 10000 AND length(claim_batch.owner_id) BETWEEN 1 AND 255
                        AND claim_batch.lease IS NULL AND claim_batch.budget IS NULL
                        AND (SELECT bool_and(coalesce(length(n.name) BETWEEN 1 AND 255, false))
                               FROM unnest(claim_batch.queues) AS n(name))
                        AND (SELECT bool_and(coalesce(length(t.token) BETWEEN 1 AND 255, false))
                               FROM unnest(claim_batch.claim_tokens) AS t(token)), false) THEN
            PERFORM fenceq._check_names(claim_batch.queues, 'queues');
            PERFORM fenceq._check_name(claim_batch.owner_id, 'owner_id');
            PERFORM fenceq._check_names(claim_batch.claim_tokens, 'claim_tokens');
            PERFORM fenceq._check_interval(claim_batch.lease, 'lease');
            PERFORM fenceq._check_interval(claim_batch.budget, 'budget');
            -- Below, element i is [i]: renumber arrays sent with other bounds.
            claim_batch.queues := ARRAY(SELECT unnest(claim_batch.queues));
            claim_batch.claim_tokens := ARRAY(SELECT unnest(claim_batch.claim_tokens));
        END IF;
    END IF;

    IF v_count > 1 AND (SELECT count(DISTINCT t.token) FROM unnest(claim_batch.claim_tokens) AS t(token)) <> v_count THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;

    v_now := clock_timestamp();
    IF cardinality(claim_batch.queues) = 1 THEN
        SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = claim_batch.queues[1];
        IF NOT FOUND THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        IF NOT v_queue.paused AND num_nonnulls(v_queue.max_claimed, v_queue.max_claimed_per_key,
                                               v_queue.rate_limit) > 0 THEN
            v_picked := fenceq._pick_limited(v_queue.queue, v_count);
            v_exhausted := EXISTS (SELECT 1 FROM fenceq._jobs AS j
                                    WHERE j.job_id = ANY (v_picked) AND j.generation = 9223372036854775807);
        ELSIF NOT v_queue.paused THEN
            IF EXISTS (SELECT 1 FROM fenceq._jobs AS l
                        WHERE l.queue = v_queue.queue AND l.status = 'pending' AND l.scheduled
                          AND l.run_at <= v_now) THEN
                PERFORM fenceq._move_due(v_queue.queue, v_now);
            END IF;
            SELECT array_agg(p.job_id ORDER BY p.ordinal), bool_or(p.generation = 9223372036854775807)
              INTO v_picked, v_exhausted FROM (
                SELECT j.job_id, j.generation, row_number() OVER () AS ordinal FROM (
                    SELECT j.job_id, j.generation
                      FROM fenceq._jobs AS j
                     WHERE j.queue = v_queue.queue AND j.status = 'pending' AND NOT j.scheduled
                       AND j.run_at <= v_now AND (j.expires_at IS NULL OR j.expires_at > v_now)
                     ORDER BY j.priority DESC, j.run_at, j.seq
                     LIMIT v_count
                       FOR UPDATE SKIP LOCKED) AS j) AS p;
        END IF;
    ELSE
        SELECT array_agg(q.queue ORDER BY q.queue) FILTER (WHERE NOT q.paused AND NOT q.limited),
               array_agg(q.queue ORDER BY q.queue) FILTER (WHERE NOT q.paused AND q.limited), count(*)
          INTO v_active, v_limited, v_known
          FROM (SELECT q.queue, q.paused,
                       num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) > 0 AS limited
                  FROM fenceq._queues AS q WHERE q.queue = ANY (claim_batch.queues)) AS q;
        IF v_known <> (SELECT count(DISTINCT n.name) FROM unnest(claim_batch.queues) AS n(name)) THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        -- Queues with limits offer what their limits allow (locking their
        -- rows in name order, so claimers never deadlock); the merge below
        -- takes the best of those and of the other queues' heads.
        IF v_limited IS NOT NULL THEN
            v_offered := ARRAY(SELECT unnest(fenceq._pick_limited(l.name, v_count))
                                 FROM unnest(v_limited) AS l(name));
        END IF;
        PERFORM fenceq._move_due(a.name, v_now) FROM unnest(v_active) AS a(name)
          WHERE EXISTS (SELECT 1 FROM fenceq._jobs AS l
                         WHERE l.queue = a.name AND l.status = 'pending' AND l.scheduled AND l.run_at <= v_now);
        IF v_active IS NOT NULL OR cardinality(v_offered) > 0 THEN
            -- EXECUTE plans this statement for its actual values every time: a
            -- generic plan of the per-queue merge can lose the ordered index scan.
            EXECUTE $sql$
                SELECT array_agg(c.job_id ORDER BY c.priority DESC, c.run_at, c.seq),
                       bool_or(c.generation = 9223372036854775807) FROM (
                    SELECT c.job_id, c.generation, c.priority, c.run_at, c.seq
                      FROM unnest($1::text[]) AS a(name)
                     CROSS JOIN LATERAL (
                        SELECT j.job_id, j.generation, j.priority, j.run_at, j.seq
                          FROM fenceq._jobs AS j
                         WHERE j.queue = a.name AND j.status = 'pending' AND NOT j.scheduled
                           AND j.run_at <= $3
                           AND (j.expires_at IS NULL OR j.expires_at > $3)
                         ORDER BY j.priority DESC, j.run_at, j.seq
                         LIMIT $2
                           FOR UPDATE OF j SKIP LOCKED) AS c
                    UNION ALL
                    SELECT j.job_id, j.generation, j.priority, j.run_at, j.seq
                      FROM fenceq._jobs AS j WHERE j.job_id = ANY ($4)
                     ORDER BY priority DESC, run_at, seq
                     LIMIT $2) AS c
            $sql$ INTO v_picked, v_exhausted USING coalesce(v_active, '{}'), v_count, v_now, v_offered;
        END IF;
    END IF;

    -- A used token is refused even when there is nothing to claim. Tokens
    -- spent on picked jobs are checked by the ledger insert below (its
    -- conflict rolls the claim back); only the rest are looked up here.
    IF coalesce(cardinality(v_picked), 0) < v_count AND EXISTS (
        SELECT 1 FROM fenceq._claims AS c
         WHERE c.claim_token = ANY (claim_batch.claim_tokens[coalesce(cardinality(v_picked), 0) + 1 : v_count])) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    IF v_picked IS NULL THEN
        RETURN;
    END IF;
    -- A picked job already at the largest generation cannot be claimed again.
    IF v_exhausted THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    v_now := clock_timestamp();  -- read after the picked rows are locked

    -- Claim the picked (locked) jobs, token i for job i. Storage must keep exactly what was sent: a
    -- trigger or coercion that changes it rolls the whole claim back (QF302).
    WITH picked AS (
        SELECT p.job_id, p.ordinal, claim_batch.claim_tokens[p.ordinal] AS token
          FROM unnest(v_picked) WITH ORDINALITY AS p(job_id, ordinal)),
    claimed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'claimed',
               attempts = j.attempts + 1,
               generation = j.generation + 1,
               owner_id = claim_batch.owner_id,
               claim_token = p.token,
               lease = coalesce(claim_batch.lease, q.lease),
               lease_expires_at = least(v_now + coalesce(claim_batch.lease, q.lease), v_now + claim_batch.budget),
               budget_expires_at = v_now + claim_batch.budget,
               cancel_requested = false,
               pid = NULL
          FROM picked AS p, fenceq._queues AS q
         WHERE j.job_id = p.job_id AND q.queue = j.queue
        RETURNING j.*, p.ordinal, p.token AS sent_token, q.rate_limit IS NOT NULL AS rated, q.history AS logged),
    rated AS (
        INSERT INTO fenceq._rate_window (queue, claimed_at)
        SELECT c.queue, v_now FROM claimed AS c WHERE c.rated),
    recorded AS (
        INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at)
        SELECT c.sent_token, c.job_id, c.generation, claim_batch.owner_id, v_now FROM claimed AS c
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING 1)
    SELECT array_agg(ROW(c.job_id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts,
                         c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                         c.cancel_requested, c.submission_id,
                         -- Checkpoints need a live fence: a first claim has none to read.
                         CASE WHEN c.generation = 1 THEN '{}'::jsonb
                              ELSE fenceq._checkpoints_of(c.job_id) END)::fenceq.claim ORDER BY c.ordinal),
           (SELECT count(*) FROM recorded),
           bool_or(c.owner_id IS DISTINCT FROM claim_batch.owner_id OR c.claim_token IS DISTINCT FROM c.sent_token),
           array_agg(c.job_id ORDER BY c.ordinal) FILTER (WHERE c.logged)
      INTO v_claims, v_recorded, v_changed, v_logged
      FROM claimed AS c;
    IF v_changed OR cardinality(v_claims) <> cardinality(v_picked) THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    IF v_recorded <> cardinality(v_claims) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    IF v_logged IS NOT NULL THEN
        PERFORM fenceq._record_events(v_logged, 'claimed');
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_claims);
END
$$;
COMMENT ON FUNCTION fenceq.claim_batch(text[], text, text[], interval, interval) IS
    'Claim up to one job per token across queues; QF301 before anything is claimed when a token repeats or was used.';

-- recover_claim: the live claim this exact owner made with this nonce, or no
-- row. Read-only: it neither claims again nor renews.
CREATE OR REPLACE FUNCTION fenceq.recover_claim(owner_id text, claim_token text)
RETURNS SETOF fenceq.claim
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
BEGIN
    PERFORM fenceq._check_name(recover_claim.owner_id, 'owner_id');
    PERFORM fenceq._check_name(recover_claim.claim_token, 'claim_token');
    SELECT j.* INTO v_job
      FROM fenceq._claims AS c JOIN fenceq._jobs AS j ON j.job_id = c.job_id
     WHERE c.claim_token = recover_claim.claim_token;
    IF fenceq._is_live(v_job, recover_claim.owner_id, v_job.generation,
                       recover_claim.claim_token, clock_timestamp()) THEN
        RETURN NEXT ROW(v_job.job_id, v_job.queue, v_job.task, v_job.payload, v_job.priority,
            v_job.attempts, v_job.max_attempts, v_job.owner_id, v_job.generation,
            v_job.claim_token, v_job.lease_expires_at, v_job.budget_expires_at,
            v_job.cancel_requested, v_job.submission_id,
            fenceq._checkpoints_of(v_job.job_id))::fenceq.claim;
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq.recover_claim(text, text) IS
    'The live claim made by this exact owner and claim token, or no row. Does not claim again and does not renew the lease.';

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
     WHERE j.job_id = l.job_id AND l.status = 'claimed' AND l.owner_id = heartbeat.owner_id
       AND l.generation = heartbeat.generation AND l.claim_token = heartbeat.claim_token
       AND l.lease_expires_at > l.locked_at;
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
         WHERE j.status = 'claimed' AND j.owner_id = f.o
           AND j.generation = f.g AND j.claim_token = f.t AND j.lease_expires_at > v_now),
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
     WHERE j.job_id = l.job_id AND l.status = 'claimed' AND l.owner_id = complete.owner_id
       AND l.generation = complete.generation AND l.claim_token = complete.claim_token
       AND NOT l.cancel_requested AND l.lease_expires_at > l.locked_at
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
    IF complete_batch.results IS NOT NULL THEN
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
         WHERE j.status = 'claimed' AND j.owner_id = f.o
           AND j.generation = f.g AND j.claim_token = f.t AND j.lease_expires_at > v_now
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
    IF fenceq._is_live(v_job, claim_state.owner_id, claim_state.generation, claim_state.claim_token, clock_timestamp()) THEN
        RETURN QUERY SELECT v_job.cancel_requested, v_job.pid;
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq.claim_state(text, text, bigint, text) IS
    'Snapshot (cancel_requested, pid) of a live claim; no row when the fence is not the live owner.';

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

-- _requeue_at: when a job reap requeues (its lease lapsed) is due, by its
-- queue's requeue_priority: NULL for 'keep' (the back-off, as a fail);
-- 'first': at once, ahead of every pending job of its queue and priority;
-- 'last': after the back-off and behind every job of its queue and priority
-- pending now, due later included (not those waiting on dependencies: they
-- have no due time until they are freed). The priority never changes, so a job
-- never passes one of a higher priority.
CREATE OR REPLACE FUNCTION fenceq._requeue_at(job fenceq._jobs, now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_earliest timestamptz;
    v_latest timestamptz;
BEGIN
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = (_requeue_at.job).queue;
    IF v_queue.requeue_priority = 'keep' THEN
        RETURN NULL;
    END IF;
    -- The ends of the queue's pending jobs of this priority: each half of the
    -- claim index (ready, waiting apart) read at both ends. A job waiting on
    -- dependencies (run_at 'infinity') has no due time yet.
    SELECT min(e.earliest), max(e.latest) INTO v_earliest, v_latest
      FROM (VALUES (false), (true)) AS s(scheduled)
     CROSS JOIN LATERAL (
        SELECT min(j.run_at) AS earliest, max(j.run_at) AS latest
          FROM fenceq._jobs AS j
         WHERE j.queue = v_queue.queue AND j.status = 'pending' AND j.scheduled = s.scheduled
           AND j.priority = (_requeue_at.job).priority AND j.run_at < 'infinity') AS e;
    IF v_queue.requeue_priority = 'first' THEN
        RETURN least(_requeue_at.now, v_earliest - interval '1 microsecond');
    END IF;
    RETURN least(greatest(
        _requeue_at.now + fenceq._backoff((_requeue_at.job).attempts, v_queue.backoff_base,
                                          v_queue.backoff_factor, v_queue.backoff_max),
        v_latest + interval '1 microsecond'), timestamptz '9999-12-31 23:59:59.999999+00');
END
$$;
COMMENT ON FUNCTION fenceq._requeue_at(fenceq._jobs, timestamptz) IS
    'Private. When a job reap requeues is due under its queue''s requeue_priority: NULL for keep (the back-off), else ahead of (first) or behind (last) every pending job of its queue and priority.';

-- reap: settle expired claims and overdue pending jobs, oldest first, at most
-- max_rows in all. Expired claims: cancel-requested -> cancelled; attempts
-- left -> pending (error 'lease_expired', due as the queue's
-- requeue_priority says); none left -> failed (+ dead letter). Overdue
-- pending jobs -> expired. A claim with a live dispatch (part 8a) is never
-- touched, lapsed or not: its work may exist elsewhere, and only
-- adopt_dispatch takes it over.
-- Locking: FOR UPDATE SKIP LOCKED, and each row re-judged on a clock read
-- after its lock, so reapers running anywhere never count a row twice.
CREATE OR REPLACE FUNCTION fenceq.reap(max_rows integer DEFAULT 1000)
RETURNS TABLE(requeued integer, failed integer, cancelled integer, expired integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
    v_left integer := reap.max_rows;
    v_cutoff timestamptz;
    v_expired text[];
BEGIN
    IF reap.max_rows IS NULL OR reap.max_rows < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be a positive integer');
    END IF;
    requeued := 0; failed := 0; cancelled := 0; expired := 0;
    -- A variable, not clock_timestamp() inline: a volatile call cannot be an
    -- index condition. Each row is re-judged on a fresh reading after its lock.
    v_cutoff := clock_timestamp();
    FOR v_job IN
        SELECT j.* FROM fenceq._jobs AS j
         WHERE j.status = 'claimed' AND j.lease_expires_at <= v_cutoff
           AND NOT EXISTS (SELECT 1 FROM fenceq._dispatches AS d
                            WHERE d.job_id = j.job_id AND d.generation = j.generation)
         ORDER BY j.lease_expires_at
         LIMIT v_left
           FOR UPDATE SKIP LOCKED
    LOOP
        v_now := clock_timestamp();
        CONTINUE WHEN v_job.status <> 'claimed' OR v_job.lease_expires_at > v_now;
        -- A reservation may have committed after the scan's snapshot, before
        -- the row lock was granted (reserve_dispatch locks the row without
        -- changing it, so the lock wait re-reads nothing): ask again.
        CONTINUE WHEN EXISTS (SELECT 1 FROM fenceq._dispatches AS d
                               WHERE d.job_id = v_job.job_id AND d.generation = v_job.generation);
        v_left := v_left - 1;
        PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'reaped', v_job.generation, v_job.owner_id,
                                     jsonb_build_object('lease_expires_at', v_job.lease_expires_at));
        IF v_job.cancel_requested THEN
            UPDATE fenceq._jobs AS j SET status = 'cancelled', pid = NULL, finished_at = v_now
             WHERE j.job_id = v_job.job_id;
            PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'cancelled', v_job.generation,
                                         v_job.owner_id, '{"reason": "reaped"}');
            PERFORM fenceq._settle_dependents(ARRAY[v_job.job_id], false);
            PERFORM fenceq._notify_done(ARRAY[v_job.job_id]);
            cancelled := cancelled + 1;
        ELSIF fenceq._retry_or_fail(v_job, 'lease_expired', true, fenceq._requeue_at(v_job, v_now),
                                    v_now) = 'pending' THEN
            requeued := requeued + 1;
        ELSE
            failed := failed + 1;
        END IF;
    END LOOP;
    IF v_left > 0 THEN
        v_cutoff := clock_timestamp();
        WITH overdue AS (
            SELECT j.job_id FROM fenceq._jobs AS j
             WHERE j.status = 'pending' AND j.expires_at <= v_cutoff
             ORDER BY j.expires_at
             LIMIT v_left
               FOR UPDATE SKIP LOCKED),
        done AS (
            UPDATE fenceq._jobs AS j SET status = 'expired', finished_at = clock_timestamp()
              FROM overdue WHERE j.job_id = overdue.job_id
            RETURNING j.job_id)
        SELECT array_agg(d.job_id) INTO v_expired FROM done AS d;
        expired := coalesce(cardinality(v_expired), 0);
        PERFORM fenceq._record_events(v_expired, 'expired');
        PERFORM fenceq._settle_dependents(v_expired, false);
        PERFORM fenceq._notify_done(v_expired);
    END IF;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION fenceq.reap(integer) IS
    'Settle expired claims (cancelled, requeued with backoff, or failed + dead letter) and expire overdue pending jobs; at most max_rows, oldest first. Always one row of counts.';
