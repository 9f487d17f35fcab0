-- fenceq migration 0008: version 7 -> 8, for PostgreSQL. Frozen at release.
-- Generated from the parts by scripts/gen-pg-step.
--
-- Why: see 0008_fenceq_v8.py. One nonce per claim call (issue 29): claim_jobs
-- claims up to max_jobs jobs under one caller nonce that the ledger records
-- once, naming the call's jobs (part 1: _claims.job_ids), each job row keeping
-- the claim in call_claims. claim_batch's pick and claim move into _pick and
-- _claim_picked, which claim_jobs shares; recover_claim answers every job of a
-- call; the attempts view, purge and sample_activity read the claims the job
-- rows keep; complete_batch checks its results set-wise; verify_schema and
-- version are replaced; part 9 (ownership, privileges, the admission check)
-- runs again.

SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

-- fenceq for PostgreSQL, version 8's storage: the composite type of a claim
-- by a claim_jobs call, then the two tables it changes. Both changes are to
-- the catalog only (a nullable column without a default; NOT NULL dropped):
-- no row is rewritten or read, and every row already there, every fence in
-- flight among them, reads as before.

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

-- A call's ledger row names its jobs and has no job or generation of its own.
ALTER TABLE fenceq._claims
    ALTER COLUMN job_id DROP NOT NULL,
    ALTER COLUMN generation DROP NOT NULL,
    ADD COLUMN job_ids text[] COLLATE "C";

-- Each job's claims by claim_jobs calls.
ALTER TABLE fenceq._jobs ADD COLUMN call_claims fenceq._call_claim[];

-- The functions this version changed, as the parts have them.

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
         WHERE fenceq._is_live(j, recover_claim.owner_id, j.generation, recover_claim.claim_token, v_now)
         ORDER BY k.ordinal;
END
$$;
COMMENT ON FUNCTION fenceq.recover_claim(text, text) IS
    'The live claims made by this exact owner with this claim token (zero or one row) or claim_jobs nonce (every job of the call still claimed under it). Does not claim again and does not renew the lease.';

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

-- sample_activity: write the closed minutes (_activity_end) of every queue
-- that have no row yet: for each queue, from the minute after its last row
-- (on the first call, the last closed minute only), oldest first, at most
-- max_minutes (1 to 11,520) of them and none older than keep; the rest wait
-- for the next call. Then delete the rows older than keep (a positive
-- interval of at least a minute). Answers the number of rows written.
--
-- One read of the jobs for all queues: the live jobs (pending and claimed,
-- through their partial indexes, as queue_stats reads them) and the jobs
-- that finished since the oldest minute written (one range of
-- _jobs_finished_idx), with the claims of those created before their
-- queue's last minute written (_claims_job_idx, and the claims by
-- claim_jobs calls the job rows keep in call_claims). Every job that did anything
-- in those minutes is among them unless purged meanwhile. Per minute:
-- submitted (created_at in it), claimed (ledger rows with claimed_at in
-- it), retried (of those, claims after the job's first: generation > 1),
-- completed, failed, cancelled, expired (finished_at in it), and for the
-- jobs completed or failed in it, the wait (their final claim's claimed_at
-- - run_at) and run time (finished_at - that claimed_at). The depth
-- columns are the live counts at this call, on the last closed minute's
-- row when this call writes it. A catch-up reads every job finished since
-- its oldest minute, whatever max_minutes: after a long pause one call with
-- a large max_minutes costs less than many small ones.
--
-- Locking: no row lock. Concurrent samplers: one proceeds, the others answer
-- 0 at once (a transaction-scoped advisory lock taken with try); every row
-- is inserted ON CONFLICT DO NOTHING against the primary key (queue, minute),
-- so a minute is written once whoever writes it. Idempotent: a second call
-- in the same minute writes nothing.
CREATE OR REPLACE FUNCTION fenceq.sample_activity(max_minutes integer DEFAULT 60, keep interval DEFAULT '192 hours')
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_end timestamptz;
    v_oldest timestamptz;
    v_queues text[];
    v_starts timestamptz[];
    v_stops timestamptz[];
    v_from timestamptz;
    v_written integer := 0;
BEGIN
    IF sample_activity.max_minutes IS NULL OR sample_activity.max_minutes NOT BETWEEN 1 AND 11520 THEN
        PERFORM fenceq._raise('QF104', 'max_minutes must be an integer from 1 to 11520');
    END IF;
    PERFORM fenceq._check_interval(sample_activity.keep, 'keep', nullable => false, backwards => true);
    IF sample_activity.keep < interval '1 minute' THEN
        PERFORM fenceq._raise('QF105', 'keep must be at least a minute');
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended('fenceq.sample_activity', 0)) THEN
        RETURN 0;  -- another sampler is at it now
    END IF;
    v_now := clock_timestamp();
    v_end := fenceq._activity_end(v_now);
    -- The oldest minute kept: whole minutes of keep before the end.
    v_oldest := v_end - make_interval(mins => floor(extract(epoch FROM sample_activity.keep) / 60)::integer);
    SELECT array_agg(w.queue ORDER BY w.queue), array_agg(w.m0 ORDER BY w.queue),
           array_agg(least(w.m0 + make_interval(mins => sample_activity.max_minutes), v_end) ORDER BY w.queue),
           min(w.m0)
      INTO v_queues, v_starts, v_stops, v_from
      FROM (SELECT q.queue,
                   greatest(coalesce(l.last + interval '1 minute', v_end - interval '1 minute'), v_oldest) AS m0
              FROM fenceq._queues AS q
             CROSS JOIN LATERAL (SELECT max(a.minute) AS last FROM fenceq._activity AS a
                                  WHERE a.queue = q.queue) AS l) AS w
     WHERE w.m0 < v_end;
    IF v_from IS NOT NULL THEN
        INSERT INTO fenceq._activity AS a (queue, minute, submitted, claimed, retried, completed, failed,
                                           cancelled, expired, pending, due, running, wait_hist, run_hist)
        WITH windows AS (
            SELECT w.queue, w.m0, w.m1 FROM unnest(v_queues, v_starts, v_stops) AS w(queue, m0, m1)),
        live AS MATERIALIZED (
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation,
                   j.call_claims
              FROM windows AS w JOIN fenceq._jobs AS j ON j.queue = w.queue AND j.status = 'pending'
            UNION ALL
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation,
                   j.call_claims
              FROM windows AS w JOIN fenceq._jobs AS j ON j.queue = w.queue AND j.status = 'claimed'),
        depth AS (
            SELECT l.queue, count(*) FILTER (WHERE l.status = 'pending') AS pending,
                   count(*) FILTER (WHERE l.status = 'pending' AND l.run_at <= v_now) AS due,
                   count(*) FILTER (WHERE l.status = 'claimed') AS running
              FROM live AS l
             GROUP BY l.queue),
        finished AS MATERIALIZED (  -- one range of the index, whatever the number of queues
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation,
                   j.call_claims
              FROM fenceq._jobs AS j
             WHERE j.finished_at >= v_from AND j.queue = ANY (v_queues)),
        jobs AS MATERIALIZED (  -- with their queue's window; one created since its end did nothing in it
            SELECT s.job_id, s.queue, s.status, s.created_at, s.run_at, s.finished_at, s.generation,
                   s.call_claims, w.m0, w.m1
              FROM (SELECT * FROM live UNION ALL SELECT * FROM finished) AS s
              JOIN windows AS w ON w.queue = s.queue
             WHERE s.created_at < w.m1),
        claims AS (  -- every claim of those jobs: one probe of the ledger per claimed job, and
                     -- the claims by claim_jobs calls that the job rows keep
            SELECT j.queue, j.status, j.run_at, j.finished_at, j.generation AS final, j.m0, j.m1,
                   c.generation, c.claimed_at
              FROM jobs AS j JOIN fenceq._claims AS c ON c.job_id = j.job_id
             WHERE j.generation > 0
            UNION ALL
            SELECT j.queue, j.status, j.run_at, j.finished_at, j.generation, j.m0, j.m1,
                   k.generation, k.claimed_at
              FROM jobs AS j CROSS JOIN LATERAL unnest(j.call_claims) AS k),
        facts AS (
            -- What happened, when: each minute of the windows itself (so
            -- that each has its row), a submission, a claim, an end (a
            -- completion or failure with the buckets of its wait and run
            -- time, from its final claim: purge deletes a job's claims with
            -- it, never before).
            SELECT w.queue, m.minute AS at, 'minute' AS what, false AS again,
                   NULL::integer AS wait, NULL::integer AS run
              FROM windows AS w
             CROSS JOIN LATERAL generate_series(w.m0, w.m1 - interval '1 minute', interval '1 minute') AS m(minute)
            UNION ALL
            SELECT j.queue, j.created_at, 'submitted', false, NULL, NULL
              FROM jobs AS j
             WHERE j.created_at >= j.m0
            UNION ALL
            SELECT c.queue, c.claimed_at, 'claimed', c.generation > 1, NULL, NULL
              FROM claims AS c
             WHERE c.claimed_at >= c.m0 AND c.claimed_at < c.m1
            UNION ALL
            SELECT c.queue, c.finished_at, c.status, false,
                   width_bucket(greatest(extract(epoch FROM c.claimed_at - c.run_at) * 1000, 1)::double precision,
                                fenceq._histogram_bounds()),
                   width_bucket(greatest(extract(epoch FROM c.finished_at - c.claimed_at) * 1000, 1)::double precision,
                                fenceq._histogram_bounds())
              FROM claims AS c
             WHERE c.generation = c.final AND c.status IN ('completed', 'failed')
               AND c.finished_at >= c.m0 AND c.finished_at < c.m1
            UNION ALL
            SELECT j.queue, j.finished_at, j.status, false, NULL, NULL
              FROM jobs AS j
             WHERE j.status IN ('cancelled', 'expired') AND j.finished_at >= j.m0 AND j.finished_at < j.m1),
        per_minute AS (
            SELECT f.queue, date_trunc('minute', f.at, 'UTC') AS minute,
                   count(*) FILTER (WHERE f.what = 'submitted') AS submitted,
                   count(*) FILTER (WHERE f.what = 'claimed') AS claimed,
                   count(*) FILTER (WHERE f.what = 'claimed' AND f.again) AS retried,
                   count(*) FILTER (WHERE f.what = 'completed') AS completed,
                   count(*) FILTER (WHERE f.what = 'failed') AS failed,
                   count(*) FILTER (WHERE f.what = 'cancelled') AS cancelled,
                   count(*) FILTER (WHERE f.what = 'expired') AS expired,
                   fenceq._histogram(array_agg(f.wait) FILTER (WHERE f.wait IS NOT NULL)) AS wait_hist,
                   fenceq._histogram(array_agg(f.run) FILTER (WHERE f.run IS NOT NULL)) AS run_hist
              FROM facts AS f
             GROUP BY 1, 2)
        SELECT p.queue, p.minute, p.submitted, p.claimed, p.retried, p.completed, p.failed, p.cancelled, p.expired,
               CASE WHEN p.minute = v_end - interval '1 minute' THEN coalesce(d.pending, 0) END,
               CASE WHEN p.minute = v_end - interval '1 minute' THEN coalesce(d.due, 0) END,
               CASE WHEN p.minute = v_end - interval '1 minute' THEN coalesce(d.running, 0) END,
               p.wait_hist, p.run_hist
          FROM per_minute AS p
          LEFT JOIN depth AS d ON d.queue = p.queue
         ORDER BY p.queue, p.minute
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_written = ROW_COUNT;
    END IF;
    DELETE FROM fenceq._activity AS a
     USING fenceq._queues AS q
     WHERE a.queue = q.queue AND a.minute < v_oldest;
    RETURN v_written;
END
$$;
COMMENT ON FUNCTION fenceq.sample_activity(integer, interval) IS
    'Write every queue''s closed minutes that have no activity row yet (oldest first, at most max_minutes per queue, none older than keep), then delete rows older than keep. Returns rows written; 0 at once while another sampler runs. Workers and admins.';

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
    RETURN '8';
END
$$;
COMMENT ON FUNCTION fenceq.version() IS 'The installed fenceq schema version.';

-- The views this version changed, as the parts have them.

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
