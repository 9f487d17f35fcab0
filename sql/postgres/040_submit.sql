-- fenceq for PostgreSQL, part 4: producers (submit, submit_batch).
-- Like the hot functions of part 5, _submit and submit_batch pin
-- plan_cache_mode = force_generic_plan and enable_seqscan = off (why: part 5).

-- _submit: the body of submit, shared by submit_batch.
--
-- Order of work, and why:
--  1. validate everything (QF1xx), read the queue (QF101), and lock the
--     request's identities (active key, explicit job id, submission id) in
--     hash order, so concurrent submits serialise instead of deadlocking;
--  2. exact replay of a retained submission identity returns the original
--     job id; changed content raises QF201 before anything changes;
--  3. an explicit job id reserved by another job, live or purged: QF203;
--  4. the submission identity is reserved *before* any predecessor is
--     touched: a concurrent identical request waits (on the identity's
--     advisory lock, then on that row), then replays, so retrying an old
--     force request never cancels a successor;
--  5. the job is inserted with ON CONFLICT DO NOTHING; on a conflict the
--     active-key holder is locked, and with force cancelled (its fence dies),
--     then the insert is tried again. No raw unique violation escapes.
CREATE OR REPLACE FUNCTION fenceq._submit(
    queue text, task text, payload jsonb, submission_id text, job_id text,
    priority integer, run_at timestamptz, expires_at timestamptz,
    max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[])
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_payload jsonb := CASE WHEN jsonb_typeof(_submit.payload) = 'null' THEN NULL ELSE _submit.payload END;
    v_force boolean := coalesce(_submit.force, false);
    v_fingerprint text;
    v_existing fenceq._submissions;
    v_job_id text;
    v_now timestamptz;
    v_run_at timestamptz;
    v_holder text;
    v_round integer := 0;
    v_depends_on text[];
    v_blocked_by integer;
    v_dependency_failed boolean := false;
BEGIN
    -- Fast path for the usual well-formed call (one expression); otherwise
    -- the checks run one by one and name what is wrong.
    IF NOT coalesce(length(_submit.queue) BETWEEN 1 AND 255 AND length(_submit.task) BETWEEN 1 AND 255
                    AND coalesce(length(_submit.submission_id) BETWEEN 1 AND 255, true)
                    AND coalesce(length(_submit.job_id) BETWEEN 1 AND 36, true)
                    AND coalesce(length(_submit.active_key) BETWEEN 1 AND 255, true)
                    AND coalesce(length(_submit.concurrency_key) BETWEEN 1 AND 255, true)
                    AND coalesce(_submit.max_attempts >= 1, true)
                    AND _submit.run_at IS NULL AND _submit.expires_at IS NULL, false) THEN
        PERFORM fenceq._check_name(_submit.queue, 'queue');
        PERFORM fenceq._check_name(_submit.task, 'task');
        PERFORM fenceq._check_name(_submit.submission_id, 'submission_id', nullable => true);
        PERFORM fenceq._check_name(_submit.job_id, 'job_id', max_length => 36, nullable => true);
        PERFORM fenceq._check_name(_submit.active_key, 'active_key', nullable => true);
        PERFORM fenceq._check_name(_submit.concurrency_key, 'concurrency_key', nullable => true);
        IF _submit.max_attempts < 1 THEN
            PERFORM fenceq._raise('QF104', 'max_attempts must be a positive integer');
        END IF;
        PERFORM fenceq._check_time(_submit.run_at, 'run_at');
        PERFORM fenceq._check_time(_submit.expires_at, 'expires_at');
    END IF;
    IF v_payload IS NOT NULL THEN
        PERFORM fenceq._check_json(v_payload, 'payload');
    END IF;
    IF _submit.depends_on IS NOT NULL THEN
        v_depends_on := fenceq._check_dependencies(_submit.depends_on, _submit.job_id);
    END IF;

    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = _submit.queue;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;

    IF coalesce(_submit.submission_id, _submit.job_id, _submit.active_key) IS NOT NULL THEN
        PERFORM fenceq._lock_identities(fenceq._identity_keys(_submit.queue, _submit.active_key,
                                                              _submit.job_id, _submit.submission_id));
    END IF;

    IF _submit.submission_id IS NOT NULL THEN
        v_fingerprint := fenceq._fingerprint(_submit.queue, _submit.task, v_payload,
            _submit.submission_id, _submit.job_id, _submit.priority, _submit.run_at,
            _submit.expires_at, _submit.max_attempts, _submit.active_key, v_force, _submit.concurrency_key,
            v_depends_on);
        SELECT * INTO v_existing FROM fenceq._submissions AS s
         WHERE s.submission_id = _submit.submission_id;
        IF FOUND THEN
            IF v_existing.fingerprint = v_fingerprint THEN
                RETURN v_existing.job_id;
            END IF;
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
    END IF;

    IF _submit.job_id IS NOT NULL AND (
        EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = _submit.job_id)
        OR EXISTS (SELECT 1 FROM fenceq._submissions AS s WHERE s.job_id = _submit.job_id)) THEN
        PERFORM fenceq._raise('QF203', 'the job id is taken');
    END IF;
    v_job_id := coalesce(_submit.job_id, fenceq._new_job_id());
    v_now := clock_timestamp();

    IF _submit.submission_id IS NOT NULL THEN
        INSERT INTO fenceq._submissions AS s (submission_id, fingerprint, job_id, queue, created_at)
        VALUES (_submit.submission_id, v_fingerprint, v_job_id, _submit.queue, v_now)
        ON CONFLICT (submission_id) DO NOTHING;
        IF NOT FOUND THEN
            -- The same identity committed concurrently: replay or conflict.
            SELECT * INTO v_existing FROM fenceq._submissions AS s
             WHERE s.submission_id = _submit.submission_id;
            IF v_existing.fingerprint = v_fingerprint THEN
                RETURN v_existing.job_id;
            END IF;
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
    END IF;

    v_run_at := coalesce(_submit.run_at, v_now);
    IF v_depends_on IS NOT NULL THEN
        SELECT d.blocked_by, d.failed INTO v_blocked_by, v_dependency_failed
          FROM fenceq._lock_dependencies(v_depends_on) AS d;
        -- A job stored cancelled waits for nothing.
        v_blocked_by := CASE WHEN v_dependency_failed THEN 0 ELSE v_blocked_by END;
    END IF;
    LOOP
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, status, max_attempts,
            run_at, expires_at, submission_id, fingerprint, active_key, created_at, concurrency_key,
            blocked_by, blocked_run_at, last_error, finished_at, scheduled)
        VALUES (v_job_id, _submit.queue, _submit.task, v_payload, coalesce(_submit.priority, 0),
            CASE WHEN v_dependency_failed THEN 'cancelled' ELSE 'pending' END,
            coalesce(_submit.max_attempts, v_queue.max_attempts),
            CASE WHEN v_blocked_by > 0 THEN 'infinity' ELSE v_run_at END,
            _submit.expires_at, _submit.submission_id, v_fingerprint,
            CASE WHEN v_dependency_failed THEN NULL ELSE _submit.active_key END, v_now, _submit.concurrency_key,
            nullif(v_blocked_by, 0), CASE WHEN v_blocked_by > 0 THEN v_run_at END,
            CASE WHEN v_dependency_failed THEN 'dependency_failed' END,
            CASE WHEN v_dependency_failed THEN v_now END,
            -- Waits apart (part 1c) while blocked or due later.
            NOT coalesce(v_dependency_failed, false) AND (coalesce(v_blocked_by, 0) > 0 OR v_run_at > v_now))
        ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;

        IF EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = v_job_id) THEN
            PERFORM fenceq._raise('QF203', 'the job id is taken');
        END IF;
        v_round := v_round + 1;
        IF v_round > 100 THEN
            PERFORM fenceq._raise('QF202', 'the active key stayed busy');
        END IF;
        SELECT j.job_id INTO v_holder FROM fenceq._jobs AS j
         WHERE j.queue = _submit.queue AND j.active_key = _submit.active_key
           AND j.status IN ('pending', 'claimed')
         FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- the holder finished meanwhile: try again
        IF NOT v_force THEN
            PERFORM fenceq._raise('QF202', 'the active key is held by another active job');
        END IF;
        UPDATE fenceq._jobs AS j
           SET status = 'cancelled', finished_at = clock_timestamp()
         WHERE j.job_id = v_holder;
        PERFORM fenceq._record_events(ARRAY[v_holder], 'cancelled', '{"reason": "replaced"}');
        PERFORM fenceq._settle_dependents(ARRAY[v_holder], false);
        PERFORM pg_notify('fenceq_control', v_holder);
        PERFORM fenceq._notify_done(ARRAY[v_holder]);
        IF v_holder = ANY (v_depends_on) THEN
            -- Forced over its own dependency, which is cancelled now: the
            -- job is stored cancelled too (§16), not left waiting for ever.
            v_blocked_by := 0;
            v_dependency_failed := true;
        END IF;
    END LOOP;
    IF v_queue.history THEN
        PERFORM fenceq._record_events(ARRAY[v_job_id], 'submitted');
    END IF;

    IF v_depends_on IS NOT NULL THEN
        INSERT INTO fenceq._dependencies AS d (depends_on, job_id, satisfied)
        SELECT e.id, v_job_id, coalesce(j.status = 'completed', false)
          FROM unnest(v_depends_on) AS e(id) LEFT JOIN fenceq._jobs AS j ON j.job_id = e.id;
        -- Stored cancelled: an earlier element of the same submit_batch may
        -- already wait on this job, and is cancelled with it.
        IF v_dependency_failed THEN
            PERFORM fenceq._settle_dependents(ARRAY[v_job_id], false);
        END IF;
    END IF;
    -- Due now or later: an idle worker re-reads next_due on the hint, so a
    -- job due before its next poll starts on time (docs/guarantees.md §13).
    IF coalesce(v_blocked_by, 0) = 0 AND NOT v_dependency_failed AND v_queue.notify THEN
        PERFORM pg_notify('fenceq_jobs', _submit.queue);
    END IF;
    RETURN v_job_id;
END
$$;
COMMENT ON FUNCTION fenceq._submit(text, text, jsonb, text, text, integer, timestamptz, timestamptz, integer, text, boolean, text, text[]) IS
    'Private. The body of submit, shared with submit_batch.';

-- submit: enqueue one job and return its id.
-- Locking: advisory transaction locks on its identities (active key,
-- explicit job id, submission id); inserts; with an active key held by
-- another active job and force, locks and cancels that predecessor. Idempotent under submission_id: an
-- exact replay returns the original job id (also after the job finished or
-- was purged); a changed request raises QF201; a busy active key QF202; a
-- taken explicit job id QF203. A pending job, due now or later, sends
-- fenceq_jobs when the queue notifies (idle workers then re-read next_due);
-- one waiting on dependencies sends none.
--
-- The usual calls take a short path of one statement: a request with no
-- identity but (perhaps) a submission id, and values that need no closer
-- look. A submission id alone needs no advisory lock: its row in
-- _submissions is inserted with ON CONFLICT DO NOTHING in the same
-- statement as the job, so a concurrent twin waits on that row, then finds
-- it and replays. Everything else takes _submit's general path.
CREATE OR REPLACE FUNCTION fenceq.submit(
    queue text,
    task text,
    payload jsonb DEFAULT NULL,
    submission_id text DEFAULT NULL,
    job_id text DEFAULT NULL,
    priority integer DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    active_key text DEFAULT NULL,
    force boolean DEFAULT false,
    concurrency_key text DEFAULT NULL,
    depends_on text[] DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_payload jsonb := CASE WHEN jsonb_typeof(submit.payload) = 'null' THEN NULL ELSE submit.payload END;
    v_fingerprint text;
    v_job_id text;
    v_notify boolean;
    v_reserved boolean;
    v_history boolean;  -- whether the queue keeps events (part 8b)
    v_existing fenceq._submissions;
BEGIN
    IF NOT coalesce(submit.job_id IS NULL AND submit.active_key IS NULL AND NOT submit.force
                    AND submit.depends_on IS NULL
                    AND length(submit.queue) BETWEEN 1 AND 255 AND length(submit.task) BETWEEN 1 AND 255
                    AND coalesce(length(submit.submission_id) BETWEEN 1 AND 255, true)
                    AND coalesce(length(submit.concurrency_key) BETWEEN 1 AND 255, true)
                    AND coalesce(submit.max_attempts >= 1, true)
                    AND fenceq._is_plain_time(submit.run_at) AND fenceq._is_plain_time(submit.expires_at)
                    AND fenceq._is_plain_json(v_payload), false) THEN
        RETURN fenceq._submit(submit.queue, submit.task, submit.payload, submit.submission_id,
            submit.job_id, submit.priority, submit.run_at, submit.expires_at,
            submit.max_attempts, submit.active_key, submit.force, submit.concurrency_key, submit.depends_on);
    END IF;
    IF submit.submission_id IS NOT NULL THEN
        v_fingerprint := fenceq._fingerprint_of(submit.queue, submit.task, fenceq._canonical_json(v_payload),
            submit.submission_id, NULL, submit.priority, submit.run_at,
            submit.expires_at, submit.max_attempts, NULL, false, submit.concurrency_key, NULL);
    END IF;

    WITH queue AS MATERIALIZED (
        SELECT q.queue, q.max_attempts, q.notify, q.history, clock_timestamp() AS now,
               fenceq._new_job_id() AS job_id
          FROM fenceq._queues AS q WHERE q.queue = submit.queue),
    reserved AS (  -- a submission identity, when there is one, before its job
        INSERT INTO fenceq._submissions AS s (submission_id, fingerprint, job_id, queue, created_at)
        SELECT submit.submission_id, v_fingerprint, q.job_id, q.queue, q.now
          FROM queue AS q WHERE submit.submission_id IS NOT NULL
        ON CONFLICT (submission_id) DO NOTHING
        RETURNING s.job_id),
    inserted AS (
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, max_attempts,
            run_at, expires_at, submission_id, fingerprint, created_at, concurrency_key, scheduled)
        SELECT q.job_id, q.queue, submit.task, v_payload, coalesce(submit.priority, 0),
               coalesce(submit.max_attempts, q.max_attempts), coalesce(submit.run_at, q.now),
               submit.expires_at, submit.submission_id, v_fingerprint, q.now, submit.concurrency_key,
               coalesce(submit.run_at > q.now, false)  -- due later: waits apart (part 1c)
          FROM queue AS q
         WHERE submit.submission_id IS NULL OR EXISTS (SELECT 1 FROM reserved)
        ON CONFLICT DO NOTHING
        RETURNING j.job_id)
    SELECT i.job_id, q.notify, EXISTS (SELECT 1 FROM reserved), q.history
      INTO v_job_id, v_notify, v_reserved, v_history
      FROM queue AS q LEFT JOIN inserted AS i ON true;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF v_job_id IS NULL AND v_reserved THEN
        -- The identity was reserved but the generated job id is taken (a
        -- UUID collision): refuse whole, so the reservation goes too.
        PERFORM fenceq._raise('QF203', 'the job id is taken');
    END IF;
    IF v_job_id IS NULL THEN
        SELECT * INTO v_existing FROM fenceq._submissions AS s WHERE s.submission_id = submit.submission_id;
        IF v_existing.fingerprint = v_fingerprint THEN
            RETURN v_existing.job_id;  -- an exact replay
        END IF;
        IF v_existing.submission_id IS NOT NULL THEN
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
        PERFORM fenceq._raise('QF203', 'the job id is taken');  -- a generated id collided
    END IF;
    IF v_history THEN
        PERFORM fenceq._record_events(ARRAY[v_job_id], 'submitted');
    END IF;
    IF v_notify THEN
        PERFORM pg_notify('fenceq_jobs', submit.queue);
    END IF;
    RETURN v_job_id;
END
$$;
COMMENT ON FUNCTION fenceq.submit(text, text, jsonb, text, text, integer, timestamptz, timestamptz, integer, text, boolean, text, text[]) IS
    'Enqueue a job; returns its id. With submission_id an exact replay returns the original id (QF201 if the request changed). QF202 busy active key unless force; QF203 taken job id.';

-- _json_text / _json_int / _json_time / _json_bool: read one submit_batch
-- field, refusing a value of the wrong JSON type. JSON null means NULL.
CREATE OR REPLACE FUNCTION fenceq._json_text(value jsonb, what text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF _json_text.value IS NULL OR jsonb_typeof(_json_text.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_text.value) <> 'string' THEN
        PERFORM fenceq._raise('QF102', _json_text.what || ' must be a string');
    END IF;
    RETURN _json_text.value #>> '{}';
END
$$;
COMMENT ON FUNCTION fenceq._json_text(jsonb, text) IS
    'Private. A JSON string field as text (NULL for null); QF102 for another type.';

CREATE OR REPLACE FUNCTION fenceq._json_int(value jsonb, what text)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_number numeric;
BEGIN
    IF _json_int.value IS NULL OR jsonb_typeof(_json_int.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_int.value) <> 'number' THEN
        PERFORM fenceq._raise('QF104', _json_int.what || ' must be an integer');
    END IF;
    v_number := (_json_int.value #>> '{}')::numeric;
    IF v_number <> trunc(v_number) OR v_number NOT BETWEEN -2147483648 AND 2147483647 THEN
        PERFORM fenceq._raise('QF104', _json_int.what || ' must be a 32-bit integer');
    END IF;
    RETURN v_number::integer;
END
$$;
COMMENT ON FUNCTION fenceq._json_int(jsonb, text) IS
    'Private. A JSON integer field within 32 bits (NULL for null); QF104 otherwise.';

CREATE OR REPLACE FUNCTION fenceq._json_time(value jsonb, what text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_parts text[];
    v_year integer;
    v_month integer;
    v_result timestamptz;
BEGIN
    IF _json_time.value IS NULL OR jsonb_typeof(_json_time.value) = 'null' THEN
        RETURN NULL;
    END IF;
    -- ISO 8601 with an explicit offset; each field is range-checked before
    -- the cast so that a bad date is QF105, never a raw 22008.
    IF jsonb_typeof(_json_time.value) = 'string' THEN
        v_parts := regexp_match(_json_time.value #>> '{}',
            '^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,6})?)?(?:Z|z|[+-](\d{2})(?::?(\d{2}))?)$');
    END IF;
    IF v_parts IS NULL THEN
        PERFORM fenceq._raise('QF105', _json_time.what || ' must be an ISO 8601 timestamp with an offset');
    END IF;
    v_year := v_parts[1]::integer;
    v_month := v_parts[2]::integer;
    IF v_year < 1 OR v_month NOT BETWEEN 1 AND 12
       OR v_parts[3]::integer NOT BETWEEN 1 AND extract(day FROM
            make_date(v_year, v_month, 1) + interval '1 month' - interval '1 day')
       OR v_parts[4]::integer > 23 OR v_parts[5]::integer > 59
       OR coalesce(v_parts[6]::integer, 0) > 59
       OR coalesce(v_parts[7]::integer, 0) > 15 OR coalesce(v_parts[8]::integer, 0) > 59 THEN
        PERFORM fenceq._raise('QF105', _json_time.what || ' is not a valid timestamp');
    END IF;
    v_result := (_json_time.value #>> '{}')::timestamptz;
    PERFORM fenceq._check_time(v_result, _json_time.what);
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION fenceq._json_time(jsonb, text) IS
    'Private. A JSON timestamp string with an explicit offset (NULL for null); QF105 otherwise.';

CREATE OR REPLACE FUNCTION fenceq._json_bool(value jsonb, what text)
RETURNS boolean
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF _json_bool.value IS NULL OR jsonb_typeof(_json_bool.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_bool.value) <> 'boolean' THEN
        PERFORM fenceq._raise('QF100', _json_bool.what || ' must be a boolean');
    END IF;
    RETURN (_json_bool.value #>> '{}')::boolean;
END
$$;
COMMENT ON FUNCTION fenceq._json_bool(jsonb, text) IS
    'Private. A JSON boolean field (NULL for null); QF100 for another type.';

-- submit_batch: many submissions in one call and one transaction, all or
-- nothing. requests is a JSON array of objects keyed by submit's parameter
-- names (except queue). Job ids come back in input order. A failure names
-- the element's index (from 0) in DETAIL, never its content.
-- Locking: every identity of the batch is locked first, in one global
-- order; then elements run in input order. Idempotency: as submit.
-- Two set-based paths store the same rows as element-by-element would, in a
-- few statements for the whole batch: a batch of plain requests (task and
-- payload only, all valid) by one INSERT; a batch whose requests carry at
-- most a submission id, priority and max_attempts besides, by locking the
-- identities, reserving them with one INSERT, answering replays and
-- conflicts from one read, and inserting the new jobs with one more.
CREATE OR REPLACE FUNCTION fenceq.submit_batch(queue text, requests jsonb)
RETURNS text[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids text[] := '{}';
    v_request jsonb;
    v_index bigint;
    v_queue fenceq._queues;
    v_now timestamptz;
    v_tasks text[];
    v_payloads jsonb[];
    v_submission_ids text[];
    v_priorities integer[];
    v_max_attempts integer[];
    v_fingerprints text[];
    v_new_ids text[];
    v_fresh bigint[];
    v_inserted bigint;
    v_conflict bigint;
BEGIN
    PERFORM fenceq._check_name(submit_batch.queue, 'queue');
    IF submit_batch.requests IS NULL OR jsonb_typeof(submit_batch.requests) <> 'array' THEN
        PERFORM fenceq._raise('QF100', 'requests must be a JSON array');
    END IF;
    IF jsonb_array_length(submit_batch.requests) > 10000 THEN
        PERFORM fenceq._raise('QF100', 'requests may hold at most 10000 elements');
    END IF;
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = submit_batch.queue;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;

    -- Fast path: every element is a plain request ({"task": ..., "payload":
    -- ...} and nothing else) that is valid as it stands. Such requests have
    -- no identity to lock, replay or conflict on, so one INSERT stores them
    -- all, in input order, exactly as _submit would one by one.
    IF (SELECT coalesce(bool_and(coalesce(  -- an unknown (NULL) answer is a no
                jsonb_typeof(r.value) = 'object'
                AND (r.value - 'task' - 'payload') = '{}'::jsonb
                AND jsonb_typeof(r.value -> 'task') = 'string'
                AND length(r.value ->> 'task') BETWEEN 1 AND 255
                AND coalesce(octet_length((r.value -> 'payload')::text) <= 1048576, true)
                AND NOT jsonb_path_exists(r.value -> 'payload',
                    'strict $.**{128} ? (@.type() == "object" || @.type() == "array")'), false)), true)
          FROM jsonb_array_elements(submit_batch.requests) AS r) THEN
        v_now := clock_timestamp();
        v_ids := fenceq._new_job_ids(jsonb_array_length(submit_batch.requests));
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, max_attempts,
                                       run_at, created_at)
        SELECT v_ids[r.ordinality], submit_batch.queue, r.value ->> 'task',
               CASE WHEN jsonb_typeof(r.value -> 'payload') = 'null' THEN NULL ELSE r.value -> 'payload' END,
               0, v_queue.max_attempts, v_now, v_now
          FROM jsonb_array_elements(submit_batch.requests) WITH ORDINALITY AS r
         ORDER BY r.ordinality;  -- seq follows input order
        IF v_queue.history THEN
            PERFORM fenceq._record_events(v_ids, 'submitted');
        END IF;
        IF cardinality(v_ids) > 0 AND v_queue.notify THEN
            PERFORM pg_notify('fenceq_jobs', submit_batch.queue);
        END IF;
        RETURN v_ids;
    END IF;

    -- Owned path: requests with a submission id, priority or max_attempts
    -- besides task and payload, every value valid as it stands.
    IF (SELECT coalesce(bool_and(coalesce(
                jsonb_typeof(r.value) = 'object'
                AND (r.value - 'task' - 'payload' - 'submission_id' - 'priority' - 'max_attempts') = '{}'::jsonb
                AND jsonb_typeof(r.value -> 'task') = 'string'
                AND length(r.value ->> 'task') BETWEEN 1 AND 255
                AND CASE jsonb_typeof(r.value -> 'submission_id')
                        WHEN 'string' THEN length(r.value ->> 'submission_id') BETWEEN 1 AND 255
                        ELSE coalesce(jsonb_typeof(r.value -> 'submission_id') = 'null', true) END
                AND fenceq._is_plain_json_int(r.value -> 'priority', -2147483648)
                AND fenceq._is_plain_json_int(r.value -> 'max_attempts', 1)
                AND fenceq._is_plain_json(r.value -> 'payload'), false)), true)
          FROM jsonb_array_elements(submit_batch.requests) AS r) THEN
        v_new_ids := fenceq._new_job_ids(jsonb_array_length(submit_batch.requests));
        SELECT array_agg(e.task ORDER BY e.i), array_agg(e.payload ORDER BY e.i),
               array_agg(e.submission_id ORDER BY e.i), array_agg(e.priority ORDER BY e.i),
               array_agg(e.max_attempts ORDER BY e.i), array_agg(e.new_id ORDER BY e.i),
               -- The fingerprint of each request as submit computes it, a
               -- flat object payload canonicalised here rather than by a
               -- call per element (nested containers still recurse).
               array_agg(CASE WHEN e.submission_id IS NOT NULL THEN fenceq._fingerprint_of(
                   submit_batch.queue, e.task,
                   CASE jsonb_typeof(e.payload)
                       WHEN 'object' THEN '{' || coalesce((
                           SELECT string_agg(to_json(m.key)::text || ':' ||
                                      CASE WHEN jsonb_typeof(m.value) IN ('object', 'array')
                                           THEN fenceq._canonical_json(m.value) ELSE m.value::text END,
                                  ',' ORDER BY m.key COLLATE "C")
                             FROM jsonb_each(e.payload) AS m), '') || '}'
                       WHEN 'array' THEN fenceq._canonical_json(e.payload)
                       ELSE coalesce(e.payload::text, 'null') END,
                   e.submission_id, NULL, e.priority, NULL, NULL, e.max_attempts, NULL, false, NULL, NULL) END ORDER BY e.i)
          INTO v_tasks, v_payloads, v_submission_ids, v_priorities, v_max_attempts, v_new_ids, v_fingerprints
          FROM (SELECT r.ordinality AS i, r.value ->> 'task' AS task,
                       CASE WHEN jsonb_typeof(r.value -> 'payload') = 'null' THEN NULL
                            ELSE r.value -> 'payload' END AS payload,
                       r.value ->> 'submission_id' AS submission_id,
                       (r.value ->> 'priority')::numeric::integer AS priority,
                       (r.value ->> 'max_attempts')::numeric::integer AS max_attempts,
                       v_new_ids[r.ordinality] AS new_id
                  FROM jsonb_array_elements(submit_batch.requests) WITH ORDINALITY AS r) AS e;
        IF v_tasks IS NULL THEN
            RETURN '{}';
        END IF;
        -- The same global order as every other path takes its identities in.
        PERFORM fenceq._lock_identities(ARRAY(
            SELECT 'fenceq.submission:' || i.id FROM unnest(v_submission_ids) AS i(id) WHERE i.id IS NOT NULL));
        v_now := clock_timestamp();
        -- Reserve each new identity for its first request in the batch. An
        -- identity retained already (or committed meanwhile by a submit that
        -- holds no lock) is left as it is and answered from below.
        INSERT INTO fenceq._submissions AS s (submission_id, fingerprint, job_id, queue, created_at)
        SELECT DISTINCT ON (u.submission_id) u.submission_id, u.fingerprint, u.new_id, submit_batch.queue, v_now
          FROM unnest(v_submission_ids, v_fingerprints, v_new_ids) WITH ORDINALITY AS u(submission_id, fingerprint,
                                                                                         new_id, i)
         WHERE u.submission_id IS NOT NULL
         ORDER BY u.submission_id, u.i
        ON CONFLICT (submission_id) DO NOTHING;
        -- Each request's answer: its own new job when it has no identity or
        -- reserved it just now (the row holds this request's new id), else
        -- the retained job, or the first request whose content differs.
        SELECT array_agg(coalesce(s.job_id, u.new_id) ORDER BY u.i),
               array_agg(u.i) FILTER (WHERE s.job_id IS NULL OR s.job_id = u.new_id),
               min(u.i) FILTER (WHERE s.fingerprint IS DISTINCT FROM u.fingerprint)
          INTO v_ids, v_fresh, v_conflict
          FROM unnest(v_submission_ids, v_fingerprints, v_new_ids) WITH ORDINALITY AS u(submission_id, fingerprint,
                                                                                         new_id, i)
          LEFT JOIN fenceq._submissions AS s ON s.submission_id = u.submission_id;
        IF v_conflict IS NOT NULL THEN
            PERFORM set_config('fenceq.batch_index', (v_conflict - 1)::text, true);
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, max_attempts,
                                       run_at, submission_id, fingerprint, created_at)
        SELECT v_new_ids[f.i], submit_batch.queue, v_tasks[f.i], v_payloads[f.i], coalesce(v_priorities[f.i], 0),
               coalesce(v_max_attempts[f.i], v_queue.max_attempts), v_now, v_submission_ids[f.i],
               v_fingerprints[f.i], v_now
          FROM unnest(v_fresh) AS f(i)
         ORDER BY f.i  -- seq follows input order
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
        IF v_inserted <> coalesce(cardinality(v_fresh), 0) THEN
            PERFORM fenceq._raise('QF203', 'the job id is taken');  -- a generated id collided
        END IF;
        IF v_queue.history THEN
            PERFORM fenceq._record_events(ARRAY(SELECT v_new_ids[f.i] FROM unnest(v_fresh) AS f(i) ORDER BY f.i),
                                          'submitted');
        END IF;
        IF cardinality(v_fresh) > 0 AND v_queue.notify THEN
            PERFORM pg_notify('fenceq_jobs', submit_batch.queue);
        END IF;
        RETURN v_ids;
    END IF;

    -- Dependencies between elements: the batch's explicit job ids may be
    -- named before their element runs (any order); a cycle is refused here.
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(submit_batch.requests) AS r
                WHERE jsonb_typeof(r.value) = 'object' AND r.value ? 'depends_on') THEN
        PERFORM fenceq._check_batch_graph(submit_batch.requests);
    END IF;
    -- Lock every identity of the batch up front, in the one global order.
    PERFORM fenceq._lock_identities(ARRAY(
        SELECT k.key
          FROM jsonb_array_elements(submit_batch.requests) AS r,
               unnest(fenceq._identity_keys(submit_batch.queue, r.value ->> 'active_key',
                                            r.value ->> 'job_id', r.value ->> 'submission_id')) AS k(key)
         WHERE jsonb_typeof(r.value) = 'object'));
    FOR v_request, v_index IN
        SELECT r.value, r.ordinality - 1
          FROM jsonb_array_elements(submit_batch.requests) WITH ORDINALITY AS r
    LOOP
        PERFORM set_config('fenceq.batch_index', v_index::text, true);
        IF jsonb_typeof(v_request) <> 'object' THEN
            PERFORM fenceq._raise('QF100', 'each request must be a JSON object');
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_object_keys(v_request) AS k(key)
                    WHERE k.key NOT IN ('task', 'payload', 'submission_id', 'job_id', 'priority',
                        'run_at', 'expires_at', 'max_attempts', 'active_key', 'force',
                        'concurrency_key', 'depends_on')) THEN
            PERFORM fenceq._raise('QF100', 'a request has an unknown key');
        END IF;
        v_ids := v_ids || fenceq._submit(
            submit_batch.queue,
            fenceq._json_text(v_request -> 'task', 'task'),
            v_request -> 'payload',
            fenceq._json_text(v_request -> 'submission_id', 'submission_id'),
            fenceq._json_text(v_request -> 'job_id', 'job_id'),
            fenceq._json_int(v_request -> 'priority', 'priority'),
            fenceq._json_time(v_request -> 'run_at', 'run_at'),
            fenceq._json_time(v_request -> 'expires_at', 'expires_at'),
            fenceq._json_int(v_request -> 'max_attempts', 'max_attempts'),
            fenceq._json_text(v_request -> 'active_key', 'active_key'),
            fenceq._json_bool(v_request -> 'force', 'force'),
            fenceq._json_text(v_request -> 'concurrency_key', 'concurrency_key'),
            fenceq._json_text_array(v_request -> 'depends_on', 'depends_on'));
    END LOOP;
    PERFORM set_config('fenceq.batch_index', '', true);
    PERFORM set_config('fenceq.batch_job_ids', '', true);
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION fenceq.submit_batch(text, jsonb) IS
    'Submit a JSON array of requests (keys: submit''s parameters but queue) all or nothing; returns job ids in input order. Errors carry the element index in DETAIL.';
