-- The storage layout proposed for fenceq version 5 (docs/design-v5.md), as
-- a laboratory: schema "v5lab" in the bench database only, never installed
-- by fenceq. It carries the hot path alone (submit, claim, complete) with
-- the same fence semantics as version 4, so that `python -m bench.v5_layout`
-- can measure what the layout writes per job beside version 4 and the bare
-- loop, and race its token scheme with real sessions, before the product's
-- functions are rewritten onto it.
--
-- Per job, from submit to completion:
--   _jobs     the job record: inserted at submit, one HOT update when the
--             job ends (no index covers a column that changes);
--   _ready    what a claim reads: inserted at submit, deleted by the claim;
--   _claimed  the live claims, keyed by token: inserted by the claim,
--             deleted when the token retires;
--   _spent    retired tokens: one row per claim, written on retirement.

CREATE SCHEMA IF NOT EXISTS v5lab;

CREATE TABLE IF NOT EXISTS v5lab._jobs (
    job_id        text COLLATE "C" NOT NULL,
    queue         text COLLATE "C" NOT NULL,
    task          text COLLATE "C" NOT NULL,
    payload       jsonb,
    priority      integer NOT NULL,
    status        text COLLATE "C" NOT NULL DEFAULT 'pending',
    attempts      integer NOT NULL DEFAULT 0,   -- retired claims
    max_attempts  integer NOT NULL,
    generation    bigint NOT NULL DEFAULT 0,    -- of the last retired claim
    run_at        timestamptz NOT NULL,
    result        jsonb,
    created_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    CONSTRAINT _jobs_pkey PRIMARY KEY (job_id)
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS v5lab._ready (
    queue    text COLLATE "C" NOT NULL,
    priority integer NOT NULL,
    run_at   timestamptz NOT NULL,
    seq      bigint NOT NULL,
    job_id   text COLLATE "C" NOT NULL
);
CREATE INDEX IF NOT EXISTS _ready_claim_idx ON v5lab._ready (queue, priority DESC, run_at, seq);
CREATE SEQUENCE IF NOT EXISTS v5lab._ready_seq;

-- Jobs due later: the claim moves the due ones of its queue into _ready.
CREATE TABLE IF NOT EXISTS v5lab._scheduled (
    queue    text COLLATE "C" NOT NULL,
    priority integer NOT NULL,
    run_at   timestamptz NOT NULL,
    seq      bigint NOT NULL,
    job_id   text COLLATE "C" NOT NULL
);
CREATE INDEX IF NOT EXISTS _scheduled_due_idx ON v5lab._scheduled (queue, run_at);

CREATE TABLE IF NOT EXISTS v5lab._claimed (
    claim_token      text COLLATE "C" NOT NULL,
    job_id           text COLLATE "C" NOT NULL,
    queue            text COLLATE "C" NOT NULL,
    owner_id         text COLLATE "C" NOT NULL,
    generation       bigint NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false,
    claimed_at       timestamptz NOT NULL,
    -- Unique and not deferrable: a second claim with the same token waits
    -- on the first one's insert (or delete) and then sees it.
    CONSTRAINT _claimed_pkey PRIMARY KEY (claim_token),
    CONSTRAINT _claimed_job_key UNIQUE (job_id)
) WITH (fillfactor = 70);

CREATE TABLE IF NOT EXISTS v5lab._spent (
    claim_token text COLLATE "C" NOT NULL,
    job_id      text COLLATE "C" NOT NULL,
    generation  bigint NOT NULL,
    owner_id    text COLLATE "C" NOT NULL,
    claimed_at  timestamptz NOT NULL,
    retired_at  timestamptz NOT NULL,
    CONSTRAINT _spent_pkey PRIMARY KEY (claim_token)
);

-- submit: the job record, and its entry in _ready (due now) or
-- _scheduled (due later).
CREATE OR REPLACE FUNCTION v5lab.submit(queue text, task text, payload jsonb DEFAULT NULL,
                                        priority integer DEFAULT 0, run_at timestamptz DEFAULT NULL)
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, v5lab, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_run_at timestamptz := coalesce(submit.run_at, v_now);
    v_job_id text := gen_random_uuid()::text;
BEGIN
    INSERT INTO v5lab._jobs (job_id, queue, task, payload, priority, max_attempts, run_at, created_at)
    VALUES (v_job_id, submit.queue, submit.task, submit.payload, submit.priority, 3, v_run_at, v_now);
    IF v_run_at <= v_now THEN
        INSERT INTO v5lab._ready (queue, priority, run_at, seq, job_id)
        VALUES (submit.queue, submit.priority, v_run_at, nextval('v5lab._ready_seq'), v_job_id);
    ELSE
        INSERT INTO v5lab._scheduled (queue, priority, run_at, seq, job_id)
        VALUES (submit.queue, submit.priority, v_run_at, nextval('v5lab._ready_seq'), v_job_id);
    END IF;
    RETURN v_job_id;
END
$$;

-- next_due: when the next job of the queue is due: one probe of each head.
CREATE OR REPLACE FUNCTION v5lab.next_due(queue text)
RETURNS timestamptz LANGUAGE plpgsql STABLE SET search_path = pg_catalog, v5lab, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
BEGIN
    RETURN least((SELECT r.run_at FROM v5lab._ready AS r WHERE r.queue = next_due.queue
                   ORDER BY r.priority DESC, r.run_at, r.seq LIMIT 1),
                 (SELECT s.run_at FROM v5lab._scheduled AS s WHERE s.queue = next_due.queue
                   ORDER BY s.run_at LIMIT 1));
END
$$;

-- claim_next: take the head of the queue's ready entries (SKIP LOCKED),
-- insert the claim under its token, then, in a later statement with a
-- fresh snapshot, refuse a token that has retired (QF301). The scheme needs
-- READ COMMITTED: under a transaction snapshot the later statement could
-- miss a retirement that committed while the insert waited.
CREATE OR REPLACE FUNCTION v5lab.claim_next(queue text, owner_id text, claim_token text,
                                            lease interval DEFAULT '30 seconds')
RETURNS TABLE (job_id text, task text, payload jsonb, attempt integer, generation bigint,
               lease_expires_at timestamptz)
LANGUAGE plpgsql SET search_path = pg_catalog, v5lab, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();  -- eligibility; the lease is read after the lock
    v_row record;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claims need READ COMMITTED' USING ERRCODE = 'QF305';
    END IF;
    -- Jobs of this queue that fell due since the last claim enter _ready
    -- first, so that they are claimed in order with it. Nothing due: one
    -- probe of the index head.
    WITH due AS (
        DELETE FROM v5lab._scheduled AS s
         WHERE s.ctid = ANY (ARRAY(SELECT d.ctid FROM v5lab._scheduled AS d
                                    WHERE d.queue = claim_next.queue AND d.run_at <= v_now
                                    ORDER BY d.run_at LIMIT 100 FOR UPDATE SKIP LOCKED))
        RETURNING s.queue, s.priority, s.run_at, s.seq, s.job_id)
    INSERT INTO v5lab._ready (queue, priority, run_at, seq, job_id)
    SELECT d.queue, d.priority, d.run_at, d.seq, d.job_id FROM due AS d;
    WITH picked AS MATERIALIZED (
        DELETE FROM v5lab._ready AS r
         WHERE r.ctid = (SELECT h.ctid FROM v5lab._ready AS h
                          WHERE h.queue = claim_next.queue AND h.run_at <= v_now
                          ORDER BY h.priority DESC, h.run_at, h.seq
                          LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING r.job_id, clock_timestamp() AS locked_at),
    job AS MATERIALIZED (
        SELECT j.job_id, j.task, j.payload, j.attempts, j.generation, p.locked_at
          FROM picked AS p JOIN v5lab._jobs AS j ON j.job_id = p.job_id),
    claimed AS (
        INSERT INTO v5lab._claimed AS c (claim_token, job_id, queue, owner_id, generation,
                                         lease_expires_at, claimed_at)
        SELECT claim_next.claim_token, j.job_id, claim_next.queue, claim_next.owner_id,
               j.generation + 1, j.locked_at + claim_next.lease, j.locked_at
          FROM job AS j
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING c.job_id, c.generation, c.lease_expires_at)
    SELECT j.job_id, j.task, j.payload, j.attempts + 1 AS attempt, c.generation,
           c.lease_expires_at, c.job_id IS NOT NULL AS recorded
      INTO v_row
      FROM job AS j LEFT JOIN claimed AS c ON true;
    IF v_row IS NULL OR v_row.job_id IS NULL THEN
        RETURN;  -- nothing due (the product also refuses a used token here)
    END IF;
    IF NOT v_row.recorded THEN
        RAISE EXCEPTION 'a claim token was already used' USING ERRCODE = 'QF301';
    END IF;
    -- Its own statement: a snapshot taken after the insert's wait.
    IF EXISTS (SELECT 1 FROM v5lab._spent AS s WHERE s.claim_token = claim_next.claim_token) THEN
        RAISE EXCEPTION 'a claim token was already used' USING ERRCODE = 'QF301';
    END IF;
    RETURN QUERY SELECT v_row.job_id, v_row.task, v_row.payload, v_row.attempt, v_row.generation,
                        v_row.lease_expires_at;
END
$$;

-- complete: lock the claim by token, judge the fence on a clock read above
-- the lock, retire the token (delete the claim, record it spent) and end
-- the job with one HOT update, in one statement.
CREATE OR REPLACE FUNCTION v5lab.complete(job_id text, owner_id text, generation bigint,
                                          claim_token text, result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, v5lab, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
BEGIN
    WITH locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT c.* FROM v5lab._claimed AS c
             WHERE c.claim_token = complete.claim_token FOR UPDATE) AS l),
    retired AS (
        DELETE FROM v5lab._claimed AS c USING locked AS l
         WHERE c.claim_token = l.claim_token AND l.job_id = complete.job_id
           AND l.owner_id = complete.owner_id AND l.generation = complete.generation
           AND NOT l.cancel_requested AND l.lease_expires_at > l.locked_at
        RETURNING c.claim_token, c.job_id, c.generation, c.owner_id, c.claimed_at, l.locked_at),
    spent AS (
        INSERT INTO v5lab._spent (claim_token, job_id, generation, owner_id, claimed_at, retired_at)
        SELECT r.claim_token, r.job_id, r.generation, r.owner_id, r.claimed_at, r.locked_at
          FROM retired AS r)
    UPDATE v5lab._jobs AS j
       SET status = 'completed', result = complete.result, finished_at = r.locked_at,
           attempts = j.attempts + 1, generation = r.generation
      FROM retired AS r
     WHERE j.job_id = r.job_id;
    RETURN FOUND;
END
$$;

-- claim_batch: claim_next for up to cardinality(claim_tokens) jobs in one
-- claiming statement, token i going to the i-th job in claim order; the
-- same later statement refuses a retired token.
CREATE OR REPLACE FUNCTION v5lab.claim_batch(queue text, owner_id text, claim_tokens text[],
                                             lease interval DEFAULT '30 seconds')
RETURNS TABLE (job_id text, task text, payload jsonb, attempt integer, generation bigint,
               claim_token text, lease_expires_at timestamptz)
LANGUAGE plpgsql SET search_path = pg_catalog, v5lab, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
    v_rows jsonb;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claims need READ COMMITTED' USING ERRCODE = 'QF305';
    END IF;
    WITH due AS (
        DELETE FROM v5lab._scheduled AS s
         WHERE s.ctid = ANY (ARRAY(SELECT d.ctid FROM v5lab._scheduled AS d
                                    WHERE d.queue = claim_batch.queue AND d.run_at <= v_now
                                    ORDER BY d.run_at LIMIT 100 FOR UPDATE SKIP LOCKED))
        RETURNING s.queue, s.priority, s.run_at, s.seq, s.job_id)
    INSERT INTO v5lab._ready (queue, priority, run_at, seq, job_id)
    SELECT d.queue, d.priority, d.run_at, d.seq, d.job_id FROM due AS d;

    WITH heads AS MATERIALIZED (
        SELECT h.ctid AS row_id, h.job_id, h.priority, h.run_at, h.seq
          FROM v5lab._ready AS h
         WHERE h.queue = claim_batch.queue AND h.run_at <= v_now
         ORDER BY h.priority DESC, h.run_at, h.seq
         LIMIT cardinality(claim_batch.claim_tokens) FOR UPDATE SKIP LOCKED),
    picked AS MATERIALIZED (
        DELETE FROM v5lab._ready AS r USING heads AS h
         WHERE r.ctid = h.row_id
        RETURNING h.job_id, h.priority, h.run_at, h.seq, clock_timestamp() AS locked_at),
    ordered AS MATERIALIZED (
        SELECT p.job_id, p.locked_at,
               row_number() OVER (ORDER BY p.priority DESC, p.run_at, p.seq) AS n
          FROM picked AS p),
    paired AS MATERIALIZED (
        SELECT o.job_id, o.locked_at, o.n, t.token
          FROM ordered AS o
          JOIN unnest(claim_batch.claim_tokens) WITH ORDINALITY AS t (token, n) ON t.n = o.n),
    claimed AS (
        INSERT INTO v5lab._claimed AS c (claim_token, job_id, queue, owner_id, generation,
                                         lease_expires_at, claimed_at)
        SELECT p.token, j.job_id, claim_batch.queue, claim_batch.owner_id, j.generation + 1,
               p.locked_at + claim_batch.lease, p.locked_at
          FROM paired AS p JOIN v5lab._jobs AS j ON j.job_id = p.job_id
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING c.job_id, c.claim_token, c.generation, c.lease_expires_at)
    SELECT jsonb_build_object('picked', (SELECT count(*) FROM paired),
                              'rows', coalesce(jsonb_agg(jsonb_build_array(c.job_id, j.task, j.payload,
                                  j.attempts + 1, c.generation, c.claim_token, c.lease_expires_at)
                                  ORDER BY p.n), '[]'))
      INTO v_rows
      FROM claimed AS c JOIN paired AS p ON p.token = c.claim_token
      JOIN v5lab._jobs AS j ON j.job_id = c.job_id;
    IF jsonb_array_length(v_rows -> 'rows') < (v_rows ->> 'picked')::integer THEN
        RAISE EXCEPTION 'a claim token was already used' USING ERRCODE = 'QF301';
    END IF;
    -- Its own statement: a snapshot taken after the inserts' waits.
    IF EXISTS (SELECT 1 FROM v5lab._spent AS s WHERE s.claim_token = ANY (claim_batch.claim_tokens)) THEN
        RAISE EXCEPTION 'a claim token was already used' USING ERRCODE = 'QF301';
    END IF;
    RETURN QUERY
    SELECT r ->> 0, r ->> 1, r -> 2, (r ->> 3)::integer, (r ->> 4)::bigint, r ->> 5,
           (r ->> 6)::timestamptz
      FROM jsonb_array_elements(v_rows -> 'rows') AS r;
END
$$;

-- complete_batch: complete for each fence, in one statement over the
-- claims locked in token order; element i answers for fence i.
CREATE OR REPLACE FUNCTION v5lab.complete_batch(job_ids text[], owner_ids text[], generations bigint[],
                                                claim_tokens text[])
RETURNS boolean[] LANGUAGE plpgsql SET search_path = pg_catalog, v5lab, pg_temp
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_answers boolean[];
BEGIN
    WITH fences AS MATERIALIZED (
        SELECT f.* FROM unnest(complete_batch.job_ids, complete_batch.owner_ids,
                               complete_batch.generations, complete_batch.claim_tokens)
                        WITH ORDINALITY AS f (job_id, owner_id, generation, claim_token, n)),
    locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT c.* FROM v5lab._claimed AS c
             WHERE c.claim_token IN (SELECT f.claim_token FROM fences AS f)
             ORDER BY c.claim_token FOR UPDATE) AS l),
    retired AS (
        DELETE FROM v5lab._claimed AS c USING locked AS l, fences AS f
         WHERE c.claim_token = l.claim_token AND f.claim_token = l.claim_token
           AND l.job_id = f.job_id AND l.owner_id = f.owner_id AND l.generation = f.generation
           AND NOT l.cancel_requested AND l.lease_expires_at > l.locked_at
        RETURNING c.claim_token, c.job_id, c.generation, c.owner_id, c.claimed_at, l.locked_at),
    spent AS (
        INSERT INTO v5lab._spent (claim_token, job_id, generation, owner_id, claimed_at, retired_at)
        SELECT r.claim_token, r.job_id, r.generation, r.owner_id, r.claimed_at, r.locked_at
          FROM retired AS r),
    ended AS (
        UPDATE v5lab._jobs AS j
           SET status = 'completed', finished_at = r.locked_at,
               attempts = j.attempts + 1, generation = r.generation
          FROM retired AS r
         WHERE j.job_id = r.job_id
        RETURNING r.claim_token)
    SELECT array_agg(e.claim_token IS NOT NULL ORDER BY f.n) INTO v_answers
      FROM fences AS f LEFT JOIN ended AS e ON e.claim_token = f.claim_token;
    RETURN v_answers;
END
$$;
