-- A laboratory, never installed by fenceq: design-v5.md §1's layout (the
-- fence in _claimed, tokens spent on retirement) under version 5's own hot
-- functions, to measure what the product would gain (bench/v6_claimed.py).
--
-- Applied on a database at version 5. It replaces claim_next, claim_batch,
-- complete and complete_batch with bodies that keep version 5's checks,
-- queue row read, expiry filter, move of jobs fallen due, checkpoint read,
-- dependency probe and notifications, but read and write:
--   * _ready: one row per pending job (as branch v6-split's), deleted by
--     the claim, which locks only that row (SKIP LOCKED);
--   * _claimed: the live claims, keyed by token (unique, ON CONFLICT) and
--     job id: the claim inserts here and writes no _jobs row;
--   * _claims (the ledger): written when the token retires (complete), and
--     probed by the claim in a later statement (design-v5.md §2: READ
--     COMMITTED), so the claim writes no ledger row;
--   * _jobs: one HOT update when the job ends (its generation, attempts and
--     final fence copied from _claimed).
-- The indexes the layout replaces are dropped, not replaced (an ablation:
-- the active-key set, the finished-history index and the ledger's job index
-- would come back in another form): _jobs keeps its primary key only and
-- _claims its token key. Only the usual calls are built (one queue, no
-- lease or budget in claim_batch, no limits); anything else raises. Every
-- other function is left as version 5 has it and is wrong on this layout.
-- Its bodies are version 5's (sql/postgres/050_workers.sql), copied on
-- purpose and changed only where the layout differs, so that the comparison
-- measures the layout and not the checks.
-- Its functions turn hash and merge joins off: the generic plans of their
-- CTE joins otherwise read all of _jobs into a hash (the product would
-- write those joins as LATERAL primary-key probes, as heartbeat_batch does).

SET search_path = pg_catalog, fenceq;

CREATE TABLE fenceq._ready (
    job_id     text COLLATE "C" NOT NULL,
    queue      text COLLATE "C" NOT NULL,
    scheduled  boolean NOT NULL,
    priority   integer NOT NULL,
    run_at     timestamptz NOT NULL,
    seq        bigint NOT NULL,
    expires_at timestamptz
);
INSERT INTO fenceq._ready
SELECT j.job_id, j.queue, j.scheduled, j.priority, j.run_at, j.seq, j.expires_at
  FROM fenceq._jobs AS j WHERE j.status = 'pending';
CREATE INDEX _ready_claim_idx ON fenceq._ready (queue, scheduled, priority DESC, run_at, seq);
CREATE INDEX _ready_later_idx ON fenceq._ready (queue, run_at) WHERE scheduled;

CREATE TABLE fenceq._claimed (
    claim_token       text COLLATE "C" NOT NULL,
    job_id            text COLLATE "C" NOT NULL,
    queue             text COLLATE "C" NOT NULL,
    owner_id          text COLLATE "C" NOT NULL,
    generation        bigint NOT NULL,
    attempt           integer NOT NULL,
    lease             interval NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    budget_expires_at timestamptz,
    cancel_requested  boolean NOT NULL DEFAULT false,
    pid               integer,
    claimed_at        timestamptz NOT NULL,
    CONSTRAINT _claimed_pkey PRIMARY KEY (claim_token),
    CONSTRAINT _claimed_job_key UNIQUE (job_id)
) WITH (fillfactor = 70);

ALTER TABLE fenceq._ready OWNER TO fenceq_owner;
ALTER TABLE fenceq._claimed OWNER TO fenceq_owner;

DROP INDEX fenceq._jobs_pending_idx;
DROP INDEX fenceq._jobs_later_idx;
DROP INDEX fenceq._jobs_claimed_idx;
DROP INDEX fenceq._jobs_expires_idx;
DROP INDEX fenceq._jobs_active_key_idx;
DROP INDEX fenceq._jobs_finished_idx;
DROP INDEX fenceq._claims_job_idx;

CREATE OR REPLACE FUNCTION fenceq._move_due(queue text, now timestamptz)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_moved integer;
BEGIN
    UPDATE fenceq._ready AS r SET scheduled = false
      FROM (SELECT l.ctid FROM fenceq._ready AS l
             WHERE l.queue = _move_due.queue AND l.scheduled AND l.run_at <= _move_due.now
             ORDER BY l.run_at LIMIT 1000 FOR UPDATE SKIP LOCKED) AS d
     WHERE r.ctid = d.ctid;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    RETURN v_moved;
END
$$;

-- claim_batch's usual call, n jobs of one queue (claim_next has its own
-- single statement, as in version 5): pick the
-- queue's due heads (their _ready rows locked, SKIP LOCKED), read the clock
-- once they are held, delete them from _ready and insert the claims (token
-- i to the i-th job), then answer with the claim rows in claim order.
CREATE OR REPLACE FUNCTION fenceq._claim_usual(
    queue text, owner_id text, claim_tokens text[], lease interval, budget interval)
RETURNS fenceq.claim[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
    v_count integer := cardinality(_claim_usual.claim_tokens);
    v_claims fenceq.claim[];
    v_picked integer;
    v_inserted integer;
    v_exhausted boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM fenceq._ready AS l
                WHERE l.queue = _claim_usual.queue AND l.scheduled AND l.run_at <= v_now) THEN
        PERFORM fenceq._move_due(_claim_usual.queue, v_now);
    END IF;
    WITH queue AS MATERIALIZED (
        SELECT q.lease FROM fenceq._queues AS q
         WHERE q.queue = _claim_usual.queue AND NOT q.paused
           AND num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) = 0),
    picked AS MATERIALIZED (
        SELECT p.ready, p.job_id, row_number() OVER () AS ordinal FROM (
            SELECT r.ctid AS ready, r.job_id
              FROM fenceq._ready AS r
             WHERE r.queue = _claim_usual.queue AND NOT r.scheduled AND r.run_at <= v_now
               AND (r.expires_at IS NULL OR r.expires_at > v_now)
               AND EXISTS (SELECT 1 FROM queue)
             ORDER BY r.priority DESC, r.run_at, r.seq
             LIMIT v_count
               FOR UPDATE OF r SKIP LOCKED) AS p),
    stamp AS MATERIALIZED (
        SELECT clock_timestamp() AS now WHERE (SELECT count(*) FROM picked) > 0),
    unready AS (
        DELETE FROM fenceq._ready AS r USING picked AS p WHERE r.ctid = p.ready),
    claimed AS (
        INSERT INTO fenceq._claimed AS c (claim_token, job_id, queue, owner_id, generation, attempt,
                                         lease, lease_expires_at, budget_expires_at, claimed_at)
        SELECT _claim_usual.claim_tokens[p.ordinal], p.job_id, _claim_usual.queue, _claim_usual.owner_id,
               CASE WHEN j.generation < 9223372036854775807 THEN j.generation + 1 ELSE j.generation END,
               j.attempts + 1, coalesce(_claim_usual.lease, q.lease),
               least(s.now + coalesce(_claim_usual.lease, q.lease), s.now + _claim_usual.budget),
               s.now + _claim_usual.budget, s.now
          FROM picked AS p
          JOIN fenceq._jobs AS j ON j.job_id = p.job_id, queue AS q, stamp AS s
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING c.*)
    SELECT array_agg(ROW(c.job_id, j.queue, j.task, j.payload, j.priority, c.attempt, j.max_attempts,
                         c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                         false, j.submission_id,
                         CASE WHEN c.generation = 1 THEN '{}'::jsonb
                              ELSE fenceq._checkpoints_of(c.job_id) END)::fenceq.claim
                     ORDER BY array_position(_claim_usual.claim_tokens, c.claim_token)),
           (SELECT count(*) FROM picked), count(*), bool_or(j.generation = 9223372036854775807)
      INTO v_claims, v_picked, v_inserted, v_exhausted
      FROM claimed AS c JOIN fenceq._jobs AS j ON j.job_id = c.job_id;
    IF v_inserted <> v_picked THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    -- Its own statement, begun after the insert above waited on any
    -- transaction that held one of these tokens (design-v5.md §2).
    IF EXISTS (SELECT 1 FROM fenceq._claims AS c WHERE c.claim_token = ANY (_claim_usual.claim_tokens)) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    IF v_exhausted THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    RETURN v_claims;
END
$$;

-- claim_next: as version 5's usual path, one statement (the pick, the
-- clock above the lock, the _ready delete and the _claimed insert), then the
-- ledger probe in a later statement (design-v5.md §2).
CREATE OR REPLACE FUNCTION fenceq.claim_next(
    queues text[], owner_id text, claim_token text,
    lease interval DEFAULT NULL, budget interval DEFAULT NULL)
RETURNS SETOF fenceq.claim LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_claim fenceq.claim[];
    v_old_generation bigint;
BEGIN
    IF NOT coalesce(cardinality(claim_next.queues) = 1 AND array_lower(claim_next.queues, 1) = 1
                    AND length(claim_next.queues[1]) BETWEEN 1 AND 255
                    AND length(claim_next.owner_id) BETWEEN 1 AND 255
                    AND length(claim_next.claim_token) BETWEEN 1 AND 255
                    AND fenceq._is_plain_duration(claim_next.lease)
                    AND fenceq._is_plain_duration(claim_next.budget), false) THEN
        RAISE EXCEPTION 'the laboratory builds the usual call only';
    END IF;
    v_now := clock_timestamp();
    IF EXISTS (SELECT 1 FROM fenceq._ready AS l
                WHERE l.queue = claim_next.queues[1] AND l.scheduled AND l.run_at <= v_now) THEN
        PERFORM fenceq._move_due(claim_next.queues[1], v_now);
    END IF;
    WITH queue AS MATERIALIZED (
        SELECT q.lease FROM fenceq._queues AS q
         WHERE q.queue = claim_next.queues[1] AND NOT q.paused
           AND num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) = 0),
    picked AS MATERIALIZED (
        SELECT p.ready, p.job_id, clock_timestamp() AS locked_at FROM (
            SELECT r.ctid AS ready, r.job_id
              FROM fenceq._ready AS r
             WHERE r.queue = claim_next.queues[1] AND NOT r.scheduled AND r.run_at <= v_now
               AND (r.expires_at IS NULL OR r.expires_at > v_now)
               AND EXISTS (SELECT 1 FROM queue)
             ORDER BY r.priority DESC, r.run_at, r.seq
             LIMIT 1
               FOR UPDATE OF r SKIP LOCKED) AS p),
    unready AS (
        DELETE FROM fenceq._ready AS r USING picked AS p WHERE r.ctid = p.ready),
    claimed AS (
        INSERT INTO fenceq._claimed AS c (claim_token, job_id, queue, owner_id, generation, attempt,
                                         lease, lease_expires_at, budget_expires_at, claimed_at)
        SELECT claim_next.claim_token, p.job_id, claim_next.queues[1], claim_next.owner_id,
               CASE WHEN j.generation < 9223372036854775807 THEN j.generation + 1 ELSE j.generation END,
               j.attempts + 1, coalesce(claim_next.lease, q.lease),
               least(p.locked_at + coalesce(claim_next.lease, q.lease), p.locked_at + claim_next.budget),
               p.locked_at + claim_next.budget, p.locked_at
          FROM picked AS p
          JOIN fenceq._jobs AS j ON j.job_id = p.job_id, queue AS q
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING c.*)
    SELECT ARRAY[ROW(c.job_id, j.queue, j.task, j.payload, j.priority, c.attempt, j.max_attempts,
                     c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                     false, j.submission_id, '{}'::jsonb)::fenceq.claim], j.generation
      INTO v_claim, v_old_generation
      FROM claimed AS c JOIN fenceq._jobs AS j ON j.job_id = c.job_id;
    -- Its own statement, begun after the insert above waited on any
    -- transaction that held this token (design-v5.md §2).
    IF EXISTS (SELECT 1 FROM fenceq._claims AS c WHERE c.claim_token = claim_next.claim_token) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    IF v_claim IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = claim_next.queues[1]) THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        -- A live token: the insert above found it (and the pick, if any,
        -- is rolled back with this refusal).
        IF EXISTS (SELECT 1 FROM fenceq._claimed AS c WHERE c.claim_token = claim_next.claim_token) THEN
            PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
        END IF;
        RETURN;
    END IF;
    IF v_old_generation = 9223372036854775807 THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    IF v_claim[1].generation > 1 THEN
        v_claim[1].checkpoints := fenceq._checkpoints_of(v_claim[1].job_id);
    END IF;
    RETURN NEXT v_claim[1];
END
$$;

CREATE OR REPLACE FUNCTION fenceq.claim_batch(
    queues text[], owner_id text, claim_tokens text[],
    lease interval DEFAULT NULL, budget interval DEFAULT NULL)
RETURNS SETOF fenceq.claim LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_count integer := cardinality(claim_batch.claim_tokens);
    v_claims fenceq.claim[];
BEGIN
    IF NOT coalesce(cardinality(claim_batch.queues) = 1 AND length(claim_batch.queues[1]) BETWEEN 1 AND 255
                    AND v_count BETWEEN 1 AND 10000 AND array_ndims(claim_batch.claim_tokens) = 1
                    AND array_lower(claim_batch.claim_tokens, 1) = 1
                    AND length(claim_batch.owner_id) BETWEEN 1 AND 255
                    AND claim_batch.lease IS NULL AND claim_batch.budget IS NULL
                    AND (SELECT bool_and(coalesce(length(t.token) BETWEEN 1 AND 255, false))
                                AND count(DISTINCT t.token) = v_count
                           FROM unnest(claim_batch.claim_tokens) AS t(token)), false) THEN
        RAISE EXCEPTION 'the laboratory builds the usual call only';
    END IF;
    v_claims := fenceq._claim_usual(claim_batch.queues[1], claim_batch.owner_id, claim_batch.claim_tokens,
                                    NULL, NULL);
    IF v_claims IS NULL AND NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = claim_batch.queues[1]) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_claims);
END
$$;

-- complete: the fence is the _claimed row, locked by token; its end retires
-- the token into the ledger and writes the job record once.
CREATE OR REPLACE FUNCTION fenceq.complete(
    job_id text, owner_id text, generation bigint, claim_token text,
    result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_notify_done boolean;
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
            SELECT c.* FROM fenceq._claimed AS c WHERE c.claim_token = complete.claim_token
               FOR UPDATE) AS l),
    retired AS (
        DELETE FROM fenceq._claimed AS c USING locked AS l
         WHERE c.claim_token = l.claim_token AND l.job_id = complete.job_id
           AND l.owner_id = complete.owner_id AND l.generation = complete.generation
           AND NOT l.cancel_requested AND l.lease_expires_at > l.locked_at
        RETURNING c.*, l.locked_at),
    spent AS (
        INSERT INTO fenceq._claims (claim_token, job_id, generation, owner_id, claimed_at)
        SELECT r.claim_token, r.job_id, r.generation, r.owner_id, r.claimed_at FROM retired AS r),
    ended AS (
        UPDATE fenceq._jobs AS j
           SET status = 'completed', result = complete.result, finished_at = r.locked_at,
               generation = r.generation, attempts = r.attempt, owner_id = r.owner_id,
               claim_token = r.claim_token, lease = r.lease
          FROM retired AS r
         WHERE j.job_id = r.job_id
        RETURNING j.queue)
    SELECT coalesce((SELECT q.notify_done FROM fenceq._queues AS q WHERE q.queue = e.queue), false)
      INTO v_notify_done
      FROM ended AS e;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = complete.job_id) THEN
        PERFORM fenceq._settle_dependents(ARRAY[complete.job_id], true);
    END IF;
    IF v_notify_done THEN
        PERFORM fenceq._notify_done(ARRAY[complete.job_id]);
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION fenceq.complete_batch(
    job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[],
    results jsonb[] DEFAULT NULL)
RETURNS boolean[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
    v_now timestamptz;
    v_answers boolean[];
    v_completed text[];
    v_notify_done text[];
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
    PERFORM 1 FROM fenceq._claimed AS c WHERE c.claim_token = ANY (complete_batch.claim_tokens)
     ORDER BY c.claim_token FOR UPDATE;
    v_now := clock_timestamp();
    WITH fences AS (
        SELECT f.j, f.o, f.g, f.t, f.r, f.i
          FROM unnest(complete_batch.job_ids, complete_batch.owner_ids,
                      complete_batch.generations, complete_batch.claim_tokens, complete_batch.results)
               WITH ORDINALITY AS f(j, o, g, t, r, i)),
    winners AS (
        SELECT DISTINCT ON (f.j) f.j, f.t, f.r, f.i
          FROM fences AS f
         CROSS JOIN LATERAL (SELECT c.* FROM fenceq._claimed AS c WHERE c.claim_token = f.t OFFSET 0) AS c
         WHERE c.job_id = f.j AND c.owner_id = f.o AND c.generation = f.g
           AND c.lease_expires_at > v_now AND NOT c.cancel_requested
         ORDER BY f.j, f.i),
    retired AS (
        DELETE FROM fenceq._claimed AS c USING winners AS w
         WHERE c.claim_token = w.t
        RETURNING c.*, w.r, w.i),
    spent AS (
        INSERT INTO fenceq._claims (claim_token, job_id, generation, owner_id, claimed_at)
        SELECT r.claim_token, r.job_id, r.generation, r.owner_id, r.claimed_at FROM retired AS r),
    completed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'completed', finished_at = v_now, result = r.r,
               generation = r.generation, attempts = r.attempt, owner_id = r.owner_id,
               claim_token = r.claim_token, lease = r.lease
          FROM retired AS r
         WHERE j.job_id = r.job_id
        RETURNING r.i, j.job_id AS j, j.queue)
    SELECT (SELECT array_agg(a.completed ORDER BY a.i)
              FROM (SELECT u.i, bool_or(u.completed) AS completed
                      FROM (SELECT f.i, false AS completed FROM fences AS f
                            UNION ALL
                            SELECT c.i, true FROM completed AS c) AS u
                     GROUP BY u.i) AS a),
           (SELECT array_agg(c.j) FROM completed AS c),
           (SELECT array_agg(c.j) FROM completed AS c
             WHERE EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = c.queue AND q.notify_done))
      INTO v_answers, v_completed, v_notify_done;
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (v_completed)) THEN
        PERFORM fenceq._settle_dependents(v_completed, true);
    END IF;
    IF v_notify_done IS NOT NULL THEN
        PERFORM fenceq._notify_done(v_notify_done);
    END IF;
    RETURN v_answers;
END
$$;

ALTER FUNCTION fenceq._claim_usual(text, text, text[], interval, interval) OWNER TO fenceq_owner;
RESET search_path;
