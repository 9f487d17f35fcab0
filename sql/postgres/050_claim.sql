-- fenceq for PostgreSQL, part 5: claims.
--
-- What it holds: the functions that hand due jobs to workers: claim_next,
-- claim_batch (also claim_next's general path), claim_jobs (one nonce per
-- call, version 8) and their helpers _move_due (moves the jobs that fell
-- due from the later set to the ready set, part 1c), _pick_limited (queues
-- with limits), _pick (the pick of every claim but claim_next's fast path)
-- and _claim_picked (the claim of what _pick locked); recover_claim, a
-- read-only answer to an uncertain claim.
-- What they write: _jobs (pending -> claimed, with a new fence), the claim
-- ledger _claims, the rate window _rate_window and, for queues with
-- history on, _events (part 8b).
-- Who calls them: workers (the fenceq_worker role, part 9).
--
-- Part 5 is the workers' side, files 050 to 058: claims (here), fenced
-- writes (051_fence.sql), settling a claim (052_settle.sql), reap
-- (053_reap.sql), periodic schedules (054_schedules.sql), time
-- (055_time.sql), named locks (056_locks.sql) and progress
-- (058_progress.sql).
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
-- recorded by _claim_picked at a time no earlier than this check).
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

-- _pick: lock and return, in claim order, up to `wanted` due jobs across
-- `queues` (declared, checked names), and whether one of them is at the
-- largest generation. The one pick of every claim but claim_next's fast
-- path: claim_batch and claim_jobs call it, then claim what it returns.
-- Locking: FOR UPDATE SKIP LOCKED on job rows only (the queue rows are read
-- without locks), so concurrent claimers never wait on each other and never
-- get the same job. One queue: one ordered scan of its claim index. Several:
-- the head rows of each queue's scan are locked and merged; the heads not
-- picked stay locked until the caller's transaction ends (in autocommit, at
-- once). A queue with limits (set_queue_limits) is the exception: its
-- claimers take turns on its queue row (_pick_limited), and it offers only
-- what its limits allow, possibly nothing; a limit never raises.
-- QF101 for an undeclared queue; picked is NULL when nothing is due.
CREATE OR REPLACE FUNCTION fenceq._pick(
    queues text[], wanted integer, OUT picked text[], OUT exhausted boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_active text[];
    v_known integer;
    v_limited text[];
    v_offered text[] := '{}';
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    IF cardinality(_pick.queues) = 1 THEN
        SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = _pick.queues[1];
        IF NOT FOUND THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        IF NOT v_queue.paused AND num_nonnulls(v_queue.max_claimed, v_queue.max_claimed_per_key,
                                               v_queue.rate_limit) > 0 THEN
            picked := fenceq._pick_limited(v_queue.queue, _pick.wanted);
            exhausted := EXISTS (SELECT 1 FROM fenceq._jobs AS j
                                  WHERE j.job_id = ANY (_pick.picked) AND j.generation = 9223372036854775807);
        ELSIF NOT v_queue.paused THEN
            IF EXISTS (SELECT 1 FROM fenceq._jobs AS l
                        WHERE l.queue = v_queue.queue AND l.status = 'pending' AND l.scheduled
                          AND l.run_at <= v_now) THEN
                PERFORM fenceq._move_due(v_queue.queue, v_now);
            END IF;
            SELECT array_agg(p.job_id ORDER BY p.ordinal), bool_or(p.generation = 9223372036854775807)
              INTO picked, exhausted FROM (
                SELECT j.job_id, j.generation, row_number() OVER () AS ordinal FROM (
                    SELECT j.job_id, j.generation
                      FROM fenceq._jobs AS j
                     WHERE j.queue = v_queue.queue AND j.status = 'pending' AND NOT j.scheduled
                       AND j.run_at <= v_now AND (j.expires_at IS NULL OR j.expires_at > v_now)
                     ORDER BY j.priority DESC, j.run_at, j.seq
                     LIMIT _pick.wanted
                       FOR UPDATE SKIP LOCKED) AS j) AS p;
        END IF;
    ELSE
        SELECT array_agg(q.queue ORDER BY q.queue) FILTER (WHERE NOT q.paused AND NOT q.limited),
               array_agg(q.queue ORDER BY q.queue) FILTER (WHERE NOT q.paused AND q.limited), count(*)
          INTO v_active, v_limited, v_known
          FROM (SELECT q.queue, q.paused,
                       num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) > 0 AS limited
                  FROM fenceq._queues AS q WHERE q.queue = ANY (_pick.queues)) AS q;
        IF v_known <> (SELECT count(DISTINCT n.name) FROM unnest(_pick.queues) AS n(name)) THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        -- Queues with limits offer what their limits allow (locking their
        -- rows in name order, so claimers never deadlock); the merge below
        -- takes the best of those and of the other queues' heads.
        IF v_limited IS NOT NULL THEN
            v_offered := ARRAY(SELECT unnest(fenceq._pick_limited(l.name, _pick.wanted))
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
            $sql$ INTO picked, exhausted USING coalesce(v_active, '{}'), _pick.wanted, v_now, v_offered;
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._pick(text[], integer) IS
    'Private. Lock and return, in claim order, up to wanted due jobs across queues, and whether one is at the largest generation.';

-- _claim_picked: claim the jobs _pick locked, in its order, with one
-- statement for every claim but claim_next's fast path. Either each job i
-- gets claim_tokens[i], recorded as its own ledger row (claim_batch), or
-- every job gets claim_nonce, recorded as one ledger row for the call that
-- names the jobs, each job row keeping the claim in its call_claims
-- (claim_jobs). The lease and budget start when the rows are held (the
-- clock is read here, after _pick's locks). Storage must keep exactly what
-- was sent: a trigger or coercion that changes it rolls the whole claim
-- back (QF302); a token or nonce the ledger already holds rolls it back
-- with QF301 (a concurrent claim with it waits on the ledger's key, then
-- conflicts).
CREATE OR REPLACE FUNCTION fenceq._claim_picked(
    picked text[], owner_id text, claim_tokens text[], claim_nonce text,
    lease interval, budget interval)
RETURNS SETOF fenceq.claim
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();  -- read after the picked rows are locked
    v_claims fenceq.claim[];
    v_recorded integer;
    v_changed boolean;
    v_logged text[];  -- the claimed jobs whose queues keep events (part 8b)
BEGIN
    WITH picked AS (
        SELECT p.job_id, p.ordinal,
               coalesce(_claim_picked.claim_nonce, _claim_picked.claim_tokens[p.ordinal]) AS token
          FROM unnest(_claim_picked.picked) WITH ORDINALITY AS p(job_id, ordinal)),
    claimed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'claimed',
               attempts = j.attempts + 1,
               generation = j.generation + 1,
               owner_id = _claim_picked.owner_id,
               claim_token = p.token,
               lease = coalesce(_claim_picked.lease, q.lease),
               lease_expires_at = least(v_now + coalesce(_claim_picked.lease, q.lease),
                                        v_now + _claim_picked.budget),
               budget_expires_at = v_now + _claim_picked.budget,
               cancel_requested = false,
               pid = NULL,
               call_claims = CASE WHEN _claim_picked.claim_nonce IS NULL THEN j.call_claims
                                  ELSE j.call_claims || ROW(j.generation + 1, _claim_picked.owner_id, v_now,
                                                            _claim_picked.claim_nonce)::fenceq._call_claim END
          FROM picked AS p, fenceq._queues AS q
         WHERE j.job_id = p.job_id AND q.queue = j.queue
        RETURNING j.*, p.ordinal, p.token AS sent_token, q.rate_limit IS NOT NULL AS rated, q.history AS logged),
    rated AS (
        INSERT INTO fenceq._rate_window (queue, claimed_at)
        SELECT c.queue, v_now FROM claimed AS c WHERE c.rated),
    recorded AS (
        INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at, job_ids)
        SELECT c.sent_token, c.job_id, c.generation, _claim_picked.owner_id, v_now, NULL
          FROM claimed AS c WHERE _claim_picked.claim_nonce IS NULL
        UNION ALL
        SELECT _claim_picked.claim_nonce, NULL, NULL, _claim_picked.owner_id, v_now,
               array_agg(c.job_id ORDER BY c.ordinal)
          FROM claimed AS c HAVING _claim_picked.claim_nonce IS NOT NULL
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING cardinality(c.job_ids) AS jobs)
    SELECT array_agg(ROW(c.job_id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts,
                         c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                         c.cancel_requested, c.submission_id,
                         -- Checkpoints need a live fence: a first claim has none to read.
                         CASE WHEN c.generation = 1 THEN '{}'::jsonb
                              ELSE fenceq._checkpoints_of(c.job_id) END)::fenceq.claim ORDER BY c.ordinal),
           (SELECT sum(coalesce(r.jobs, 1)) FROM recorded AS r),
           bool_or(c.owner_id IS DISTINCT FROM _claim_picked.owner_id OR c.claim_token IS DISTINCT FROM c.sent_token),
           array_agg(c.job_id ORDER BY c.ordinal) FILTER (WHERE c.logged)
      INTO v_claims, v_recorded, v_changed, v_logged
      FROM claimed AS c;
    IF v_changed OR cardinality(v_claims) IS DISTINCT FROM cardinality(_claim_picked.picked) THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    IF v_recorded IS DISTINCT FROM cardinality(v_claims) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    IF v_logged IS NOT NULL THEN
        PERFORM fenceq._record_events(v_logged, 'claimed');
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_claims);
END
$$;
COMMENT ON FUNCTION fenceq._claim_picked(text[], text, text[], text, interval, interval) IS
    'Private. Claim the jobs _pick locked, in its order: token i for job i with a ledger row each, or one nonce for all with one ledger row for the call.';

-- claim_batch: claim up to one job per token (tokens used in array order),
-- across queues, in priority / run_at / submission order. A repeated or
-- already used token raises QF301 before anything is claimed. It is also
-- claim_next's general path.
-- Locking: _pick's (SKIP LOCKED on job rows; a queue with limits, its queue
-- row); then one statement claims every picked job and records its token.
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
    v_picked text[];
    v_exhausted boolean;
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

    SELECT p.picked, p.exhausted INTO v_picked, v_exhausted
      FROM fenceq._pick(claim_batch.queues, v_count) AS p;

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
    RETURN QUERY SELECT * FROM fenceq._claim_picked(v_picked, claim_batch.owner_id,
        claim_batch.claim_tokens, NULL, claim_batch.lease, claim_batch.budget);
END
$$;
COMMENT ON FUNCTION fenceq.claim_batch(text[], text, text[], interval, interval) IS
    'Claim up to one job per token across queues; QF301 before anything is claimed when a token repeats or was used.';

-- claim_jobs: claim up to max_jobs jobs across queues, with claim_batch's
-- rules and order, under one caller nonce for the whole call (version 8).
-- Every job of the call gets the fence (job_id, owner_id, generation,
-- claim_nonce), and the ledger records the nonce once, naming the call's
-- jobs: a call costs one ledger row, not one per job.
-- Locking: _pick's (SKIP LOCKED on job rows; a queue with limits, its queue
-- row); a concurrent call with the same nonce waits on the ledger's key.
-- Not idempotent by design: each call needs a fresh nonce, and a nonce (or
-- a token of claim_next, claim_batch or adopt_dispatch) already spent
-- raises QF301, also when nothing is due; after an uncertain answer call
-- recover_claim with the same nonce, which returns every job of the call
-- still claimed. Zero rows: nothing eligible, and the nonce is not spent.
CREATE OR REPLACE FUNCTION fenceq.claim_jobs(
    queues text[], owner_id text, claim_nonce text, max_jobs integer,
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
    v_picked text[];
    v_exhausted boolean;
BEGIN
    -- The usual well-formed call is one query-free expression; otherwise
    -- the checks run one by one and name what is wrong.
    IF NOT coalesce(array_ndims(claim_jobs.queues) = 1 AND array_lower(claim_jobs.queues, 1) = 1
                    AND cardinality(claim_jobs.queues) BETWEEN 1 AND 10000
                    AND length(claim_jobs.owner_id) BETWEEN 1 AND 255
                    AND length(claim_jobs.claim_nonce) BETWEEN 1 AND 255
                    AND claim_jobs.max_jobs BETWEEN 1 AND 10000
                    AND fenceq._is_plain_duration(claim_jobs.lease)
                    AND fenceq._is_plain_duration(claim_jobs.budget)
                    AND (cardinality(claim_jobs.queues) = 1 AND length(claim_jobs.queues[1]) BETWEEN 1 AND 255
                         OR (SELECT bool_and(coalesce(length(n.name) BETWEEN 1 AND 255, false))
                               FROM unnest(claim_jobs.queues) AS n(name))), false) THEN
        PERFORM fenceq._check_names(claim_jobs.queues, 'queues');
        PERFORM fenceq._check_name(claim_jobs.owner_id, 'owner_id');
        PERFORM fenceq._check_name(claim_jobs.claim_nonce, 'claim_nonce');
        IF claim_jobs.max_jobs IS NULL OR claim_jobs.max_jobs NOT BETWEEN 1 AND 10000 THEN
            PERFORM fenceq._raise('QF104', 'max_jobs must be an integer from 1 to 10000');
        END IF;
        PERFORM fenceq._check_interval(claim_jobs.lease, 'lease');
        PERFORM fenceq._check_interval(claim_jobs.budget, 'budget');
        claim_jobs.queues := ARRAY(SELECT unnest(claim_jobs.queues));  -- numbered from 1
    END IF;
    -- A spent nonce is refused even when there is nothing to claim (and
    -- before any job is locked); a concurrent spend is caught by the
    -- ledger's key in _claim_picked.
    IF EXISTS (SELECT 1 FROM fenceq._claims AS c WHERE c.claim_token = claim_jobs.claim_nonce) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    SELECT p.picked, p.exhausted INTO v_picked, v_exhausted
      FROM fenceq._pick(claim_jobs.queues, claim_jobs.max_jobs) AS p;
    IF v_picked IS NULL THEN
        RETURN;
    END IF;
    IF v_exhausted THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    RETURN QUERY SELECT * FROM fenceq._claim_picked(v_picked, claim_jobs.owner_id, NULL,
        claim_jobs.claim_nonce, claim_jobs.lease, claim_jobs.budget);
END
$$;
COMMENT ON FUNCTION fenceq.claim_jobs(text[], text, text, integer, interval, interval) IS
    'Claim up to max_jobs jobs across queues under one nonce: each job''s fence carries the nonce, the ledger records it once. QF301 when the nonce was spent; recover_claim with it returns the call''s live claims.';

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
