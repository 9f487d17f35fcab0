-- fenceq migration 0006: version 5 -> 6, for PostgreSQL. Frozen at release.
--
-- Why: see 0006_fenceq_v6.py. External execution under a fence (part 8a:
-- a dispatch record per claim, the five dispatch calls and the dispatches
-- view; reap and release leave a claim with a live dispatch alone), the job
-- history (part 8b: an event per transition while a queue keeps history),
-- and the priority a reaped job re-enters with (requeue_priority). Part 1d
-- adds the columns and tables; the functions that make transitions are
-- replaced in place (no signature changes), create_queue and alter_queue
-- are dropped and created again with their new last parameter (a function
-- is never overloaded), the new functions are created, and part 9
-- (ownership, privileges, the admission check) runs again.

SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

-- fenceq for PostgreSQL, part 1d (version 6): what external execution and
-- the job history keep. The functions that write these are parts 8a
-- (080_dispatch.sql) and 8b (082_history.sql); design: docs/design-v6.md.
--
-- Idempotent like part 1: every object is created only when missing. The
-- three _queues columns have constant defaults, so adding them rewrites no
-- row.

ALTER TABLE fenceq._queues
    -- Where a job requeued by reap (its lease lapsed) re-enters its priority.
    ADD COLUMN IF NOT EXISTS requeue_priority text COLLATE "C" NOT NULL DEFAULT 'keep'
        CONSTRAINT _queues_requeue_priority_check CHECK (requeue_priority IN ('keep', 'first', 'last')),
    -- Whether this queue's jobs write _events, and for how long purge keeps them.
    ADD COLUMN IF NOT EXISTS history boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS history_retention interval;

-- Dispatches: a claim's reservation of work in an external system, then the
-- external system's id for it. Live while its job is claimed at the same
-- generation (an adoption moves the generation along); a settled job leaves
-- its row behind unread, so no settling path writes here. release_dispatch
-- deletes a row; purge deletes it with its job.
CREATE TABLE IF NOT EXISTS fenceq._dispatches (
    job_id          text COLLATE "C" NOT NULL,
    backend         text COLLATE "C" NOT NULL,
    generation      bigint NOT NULL,
    state           text COLLATE "C" NOT NULL,
    reservation_ref text COLLATE "C" NOT NULL,
    execution_ref   text COLLATE "C",
    reserved_at     timestamptz NOT NULL,
    finalized_at    timestamptz,
    checked_at      timestamptz,
    CONSTRAINT _dispatches_pkey PRIMARY KEY (job_id),
    CONSTRAINT _dispatches_state_check CHECK (
        (state = 'reserved' AND execution_ref IS NULL) OR (state = 'running' AND execution_ref IS NOT NULL))
);
-- dispatch_repair_candidates reads one backend's rows.
CREATE INDEX IF NOT EXISTS _dispatches_backend_idx ON fenceq._dispatches (backend);

-- Events: one row per transition of a job whose queue has history on,
-- written by the function that makes the transition, in its transaction.
CREATE TABLE IF NOT EXISTS fenceq._events (
    job_id     text COLLATE "C" NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    queue      text COLLATE "C" NOT NULL,
    at         timestamptz NOT NULL,
    event      text COLLATE "C" NOT NULL,
    generation bigint,
    owner_id   text COLLATE "C",
    detail     jsonb NOT NULL,
    CONSTRAINT _events_pkey PRIMARY KEY (job_id, seq)
);
-- purge's retention: a queue's oldest events first.
CREATE INDEX IF NOT EXISTS _events_queue_at_idx ON fenceq._events (queue, at);

-- Part 3 (queues): requeue_priority.

-- _check_requeue_priority: where a job reap requeues re-enters (part 5's
-- _requeue_at): keep, first or last; NULL passes (each caller says what it
-- means).
CREATE OR REPLACE FUNCTION fenceq._check_requeue_priority(value text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF _check_requeue_priority.value NOT IN ('keep', 'first', 'last') THEN
        PERFORM fenceq._raise('QF100', 'requeue_priority must be keep, first or last');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_requeue_priority(text) IS
    'Private. Refuse (QF100) a requeue_priority other than keep, first or last.';

-- Version 6 appended requeue_priority to create_queue and alter_queue: the
-- version 5 signatures go (a function is never overloaded).
DROP FUNCTION IF EXISTS fenceq.create_queue(text, interval, integer, interval, double precision, interval, boolean);
DROP FUNCTION IF EXISTS fenceq.alter_queue(text, interval, integer, interval, double precision, interval, boolean);

-- create_queue: declare a queue.
-- Locking: inserts the queue row; a concurrent identical create waits for it.
-- Idempotent: true when created; false when it exists with exactly these
-- settings; QF100 when it exists with other settings (use alter_queue).
-- requeue_priority (version 6): NULL is 'keep' for a new queue and matches
-- any setting of an existing one, so callers written before it keep working
-- after an operator changed it.
CREATE OR REPLACE FUNCTION fenceq.create_queue(
    queue text,
    lease interval DEFAULT '30 seconds',
    max_attempts integer DEFAULT 5,
    backoff_base interval DEFAULT '1 second',
    backoff_factor double precision DEFAULT 2,
    backoff_max interval DEFAULT '1 hour',
    dead_letter boolean DEFAULT true,
    requeue_priority text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_existing fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(create_queue.queue, 'queue');
    PERFORM fenceq._check_queue_settings(create_queue.lease, create_queue.max_attempts,
        create_queue.backoff_base, create_queue.backoff_factor, create_queue.backoff_max);
    IF create_queue.dead_letter IS NULL THEN
        PERFORM fenceq._raise('QF100', 'dead_letter is required');
    END IF;
    PERFORM fenceq._check_requeue_priority(create_queue.requeue_priority);
    INSERT INTO fenceq._queues AS q (queue, lease, max_attempts, backoff_base, backoff_factor,
                                     backoff_max, dead_letter, created_at, requeue_priority)
    VALUES (create_queue.queue, create_queue.lease, create_queue.max_attempts,
            create_queue.backoff_base, create_queue.backoff_factor, create_queue.backoff_max,
            create_queue.dead_letter, clock_timestamp(), coalesce(create_queue.requeue_priority, 'keep'))
    ON CONFLICT (queue) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT * INTO v_existing FROM fenceq._queues AS q WHERE q.queue = create_queue.queue;
    IF v_existing.lease = create_queue.lease
       AND v_existing.max_attempts = create_queue.max_attempts
       AND v_existing.backoff_base = create_queue.backoff_base
       AND v_existing.backoff_factor = create_queue.backoff_factor
       AND v_existing.backoff_max = create_queue.backoff_max
       AND v_existing.dead_letter = create_queue.dead_letter
       AND v_existing.requeue_priority = coalesce(create_queue.requeue_priority, v_existing.requeue_priority) THEN
        RETURN false;
    END IF;
    PERFORM fenceq._raise('QF100', 'the queue exists with other settings; use alter_queue');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION fenceq.create_queue(text, interval, integer, interval, double precision, interval, boolean, text) IS
    'Declare a queue with its defaults. True when created, false when it already exists with exactly these settings; QF100 when it exists with others.';

-- alter_queue: change some settings; NULL leaves a setting unchanged. The
-- §2 rules apply to the settings as they are after the change.
-- Locking: the queue row, for the update.
CREATE OR REPLACE FUNCTION fenceq.alter_queue(
    queue text,
    lease interval DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_factor double precision DEFAULT NULL,
    backoff_max interval DEFAULT NULL,
    dead_letter boolean DEFAULT NULL,
    requeue_priority text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(alter_queue.queue, 'queue');
    PERFORM fenceq._check_requeue_priority(alter_queue.requeue_priority);
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = alter_queue.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    v_queue.lease := coalesce(alter_queue.lease, v_queue.lease);
    v_queue.max_attempts := coalesce(alter_queue.max_attempts, v_queue.max_attempts);
    v_queue.backoff_base := coalesce(alter_queue.backoff_base, v_queue.backoff_base);
    v_queue.backoff_factor := coalesce(alter_queue.backoff_factor, v_queue.backoff_factor);
    v_queue.backoff_max := coalesce(alter_queue.backoff_max, v_queue.backoff_max);
    v_queue.dead_letter := coalesce(alter_queue.dead_letter, v_queue.dead_letter);
    PERFORM fenceq._check_queue_settings(v_queue.lease, v_queue.max_attempts,
        v_queue.backoff_base, v_queue.backoff_factor, v_queue.backoff_max);
    UPDATE fenceq._queues AS q
       SET lease = v_queue.lease, max_attempts = v_queue.max_attempts,
           backoff_base = v_queue.backoff_base, backoff_factor = v_queue.backoff_factor,
           backoff_max = v_queue.backoff_max, dead_letter = v_queue.dead_letter,
           requeue_priority = coalesce(alter_queue.requeue_priority, q.requeue_priority)
     WHERE q.queue = alter_queue.queue;
END
$$;
COMMENT ON FUNCTION fenceq.alter_queue(text, interval, integer, interval, double precision, interval, boolean, text) IS
    'Change queue settings (NULL = unchanged); the rules apply to the result. QF101 for an unknown queue.';

-- Part 5: reap's requeue priority.

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

-- The functions that make transitions, as version 6 has them.

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

CREATE OR REPLACE FUNCTION fenceq._settle_dependents(job_ids text[], completed boolean)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_targets text[];
    v_now timestamptz;
    v_queue text;
    v_job text;
    v_freed text[];
    v_wake text[];
    v_cancelled text[];
BEGIN
    IF _settle_dependents.completed THEN
        v_targets := ARRAY(SELECT DISTINCT d.job_id FROM fenceq._dependencies AS d
                            WHERE d.depends_on = ANY (_settle_dependents.job_ids) AND NOT d.satisfied
                            ORDER BY 1);
    ELSE
        WITH RECURSIVE down(job_id, depth) AS (
            SELECT d.job_id, 1 FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (_settle_dependents.job_ids)
            UNION
            SELECT d.job_id, w.depth + 1 FROM down AS w JOIN fenceq._dependencies AS d ON d.depends_on = w.job_id
             WHERE w.depth <= 17)
        SELECT ARRAY(SELECT DISTINCT w.job_id FROM down AS w ORDER BY 1) INTO v_targets;
    END IF;
    IF cardinality(v_targets) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (v_targets) ORDER BY j.job_id FOR UPDATE;
    v_now := clock_timestamp();
    IF _settle_dependents.completed THEN
        WITH satisfied AS (
            UPDATE fenceq._dependencies AS d SET satisfied = true
             WHERE d.depends_on = ANY (_settle_dependents.job_ids) AND NOT d.satisfied
            RETURNING d.job_id),
        counted AS (SELECT s.job_id, count(*)::integer AS n FROM satisfied AS s GROUP BY s.job_id),
        released AS (
            UPDATE fenceq._jobs AS j
               SET blocked_by = nullif(j.blocked_by - c.n, 0),
                   run_at = CASE WHEN j.blocked_by = c.n THEN greatest(j.blocked_run_at, v_now) ELSE j.run_at END,
                   blocked_run_at = CASE WHEN j.blocked_by = c.n THEN NULL ELSE j.blocked_run_at END,
                   -- Freed: ready when due now, else still waiting apart (part 1c).
                   scheduled = j.blocked_by > c.n OR coalesce(j.blocked_run_at > v_now, false)
              FROM counted AS c
             WHERE j.job_id = c.job_id AND j.status = 'pending' AND j.blocked_by IS NOT NULL
            RETURNING j.job_id, j.queue, j.blocked_by IS NULL AS free)
        SELECT array_agg(r.job_id ORDER BY r.job_id) FILTER (WHERE r.free),
           -- Free now, due now or later: idle workers re-read next_due.
           ARRAY(SELECT DISTINCT w.queue FROM released AS w JOIN fenceq._queues AS q ON q.queue = w.queue
                  WHERE w.free AND q.notify)
          INTO v_freed, v_wake
          FROM released AS r;
        PERFORM fenceq._record_events(v_freed, 'unblocked');
        FOREACH v_queue IN ARRAY v_wake LOOP
            PERFORM pg_notify('fenceq_jobs', v_queue);
        END LOOP;
        RETURN;
    END IF;
    FOR v_job IN
        WITH cancelled AS (
            UPDATE fenceq._jobs AS j
               SET status = 'cancelled', last_error = 'dependency_failed', finished_at = v_now,
                   lease_expires_at = NULL, pid = NULL
              FROM (SELECT j.job_id, j.status AS was FROM fenceq._jobs AS j
                     WHERE j.job_id = ANY (v_targets) AND j.status IN ('pending', 'claimed')) AS o
             WHERE j.job_id = o.job_id
            RETURNING j.job_id, o.was)
        SELECT c.job_id FROM cancelled AS c WHERE c.was = 'claimed' ORDER BY c.job_id
    LOOP
        PERFORM pg_notify('fenceq_control', v_job);
    END LOOP;
    -- The jobs cancelled just now: at this reading.
    v_cancelled := ARRAY(SELECT j.job_id FROM fenceq._jobs AS j
                          WHERE j.job_id = ANY (v_targets) AND j.status = 'cancelled' AND j.finished_at = v_now
                          ORDER BY j.job_id);
    PERFORM fenceq._record_events(v_cancelled, 'cancelled', '{"reason": "dependency_failed"}');
    PERFORM fenceq._notify_done(v_cancelled);  -- fenceq_done (part 58)
END
$$;
COMMENT ON FUNCTION fenceq._settle_dependents(text[], boolean) IS
    'Private. Count a completed job off its dependents (releasing those left with none), or cancel every job that transitively depends on a job that did not complete.';

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

CREATE OR REPLACE FUNCTION fenceq._cancel_locked(job fenceq._jobs, force boolean)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    IF (_cancel_locked.job).status = 'pending' OR ((_cancel_locked.job).status = 'claimed' AND _cancel_locked.force) THEN
        UPDATE fenceq._jobs AS j SET status = 'cancelled', finished_at = clock_timestamp()
         WHERE j.job_id = (_cancel_locked.job).job_id;
        PERFORM fenceq._record_event((_cancel_locked.job).job_id, (_cancel_locked.job).queue, 'cancelled',
            (_cancel_locked.job).generation, (_cancel_locked.job).owner_id,
            jsonb_build_object('reason', CASE WHEN (_cancel_locked.job).status = 'claimed'
                                              THEN 'force' ELSE 'cancel' END));
        PERFORM fenceq._settle_dependents(ARRAY[(_cancel_locked.job).job_id], false);
        PERFORM fenceq._notify_done(ARRAY[(_cancel_locked.job).job_id]);
        RETURN 'cancelled';
    END IF;
    IF (_cancel_locked.job).status = 'claimed' THEN
        UPDATE fenceq._jobs AS j SET cancel_requested = true WHERE j.job_id = (_cancel_locked.job).job_id;
        IF NOT (_cancel_locked.job).cancel_requested THEN  -- a repeated request is no transition
            PERFORM fenceq._record_event((_cancel_locked.job).job_id, (_cancel_locked.job).queue,
                'cancel_requested', (_cancel_locked.job).generation, (_cancel_locked.job).owner_id);
        END IF;
        RETURN 'cancel_requested';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION fenceq._cancel_locked(fenceq._jobs, boolean) IS
    'Private. Cancel a locked job as cancel does (pending or forced -> cancelled, claimed -> cancel_requested); NULL for a terminal job, left unchanged.';

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
    DELETE FROM fenceq._checkpoints AS c WHERE c.job_id = ANY (v_ids);
    DELETE FROM fenceq._claims AS c WHERE c.job_id = ANY (v_ids);
    -- A terminal job's edges are settled (satisfied, or the dependent
    -- cancelled): they go with it, either end.
    DELETE FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (v_ids);
    DELETE FROM fenceq._dependencies AS d WHERE d.job_id = ANY (v_ids);
    DELETE FROM fenceq._events AS e WHERE e.job_id = ANY (v_ids);
    DELETE FROM fenceq._dispatches AS d WHERE d.job_id = ANY (v_ids);
    DELETE FROM fenceq._jobs AS j WHERE j.job_id = ANY (v_ids);
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

CREATE OR REPLACE FUNCTION fenceq.replay_dead_letter(dlq_id text)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_letter fenceq._dead_letters;
    v_active_key text;
    v_now timestamptz;
BEGIN
    IF replay_dead_letter.dlq_id IS NULL OR replay_dead_letter.dlq_id !~ '^[0-9a-f]{32}$' THEN
        PERFORM fenceq._raise('QF102', 'dlq_id must be 32 lowercase hex characters');
    END IF;
    SELECT * INTO v_letter FROM fenceq._dead_letters AS d
     WHERE d.dlq_id = replay_dead_letter.dlq_id FOR UPDATE;
    IF NOT FOUND OR v_letter.replayed_at IS NOT NULL OR v_letter.discarded_at IS NOT NULL THEN
        RETURN NULL;
    END IF;
    -- The replayed job becomes active again: its active key must be free.
    SELECT j.active_key INTO v_active_key FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id;
    IF v_active_key IS NOT NULL THEN
        PERFORM fenceq._lock_identities(fenceq._identity_keys(v_letter.queue, v_active_key, NULL, NULL));
        IF EXISTS (SELECT 1 FROM fenceq._jobs AS j
                    WHERE j.queue = v_letter.queue AND j.active_key = v_active_key
                      AND j.status IN ('pending', 'claimed')) THEN
            PERFORM fenceq._raise('QF202', 'the active key is held by another active job');
        END IF;
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id FOR UPDATE;
    v_now := clock_timestamp();
    UPDATE fenceq._jobs AS j
       SET status = 'pending', attempts = 0, run_at = v_now, finished_at = NULL,
           owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
           budget_expires_at = NULL, pid = NULL, cancel_requested = false, result = NULL,
           scheduled = false  -- due now: ready (part 1c)
     WHERE j.job_id = v_letter.job_id AND j.status = 'failed';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE fenceq._dead_letters AS d SET replayed_at = v_now WHERE d.dlq_id = replay_dead_letter.dlq_id;
    PERFORM fenceq._record_events(ARRAY[v_letter.job_id], 'replayed',
                                  jsonb_build_object('dlq_id', replay_dead_letter.dlq_id));
    PERFORM fenceq._notify_jobs(v_letter.queue);
    RETURN v_letter.job_id;
END
$$;
COMMENT ON FUNCTION fenceq.replay_dead_letter(text) IS
    'Return a dead-lettered job to pending with a fresh attempt budget; returns the job id, or NULL for an unknown or already handled letter; QF202 when its active key is now held by another active job.';

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
        ('_claims', 'claim_token', 'text', true), ('_claims', 'job_id', 'text', true),
        ('_claims', 'generation', 'bigint', true), ('_claims', 'owner_id', 'text', true),
        ('_claims', 'claimed_at', 'timestamp with time zone', true),
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
        ('_events', 'owner_id', 'text', false), ('_events', 'detail', 'jsonb', true))
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

    -- The public shapes callers read: the claim type and the views, with
    -- their columns in contract order (they are only ever appended to).
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
        ('job_events', ARRAY['job_id', 'seq', 'at', 'event', 'generation', 'owner_id', 'detail']))
    SELECT string_agg(e.obj, ', ' ORDER BY e.obj) INTO v_bad
      FROM expected AS e
     WHERE e.cols IS DISTINCT FROM (
            SELECT (array_agg(a.attname::text ORDER BY a.attnum))[1:cardinality(e.cols)]
              FROM pg_class AS c
              JOIN pg_namespace AS n ON n.oid = c.relnamespace
              JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             WHERE n.nspname = 'fenceq' AND c.relname = e.obj AND c.relkind IN ('v', 'c'));
    check_name := 'public_shapes'; ok := v_bad IS NULL;
    detail := coalesce('missing or reordered columns: ' || v_bad, 'claim type and views as expected');
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
    'Admission check of the deployed schema: encoding, column types, deterministic collations, exact unique identity indexes, the active-key index, the claim type and views, safe defaults, no triggers, SECURITY DEFINER with pinned search_path, no PUBLIC EXECUTE, no superuser owner. One row per check.';

CREATE OR REPLACE FUNCTION fenceq.version()
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN '6';
END
$$;
COMMENT ON FUNCTION fenceq.version() IS 'The installed fenceq schema version.';

-- fenceq for PostgreSQL, part 8a (version 6): external execution under a
-- fence (docs/guarantees.md §19, docs/design-v6.md, docs/external-execution.md).
-- What it holds: the calls a worker makes around work it hands to another
-- system (reserve, finalize, release, replace), the takeover of a lapsed
-- dispatch (adopt_dispatch), the reconciler's page of lapsed dispatches
-- and the dispatches view. Who writes _dispatches: only these functions,
-- and purge (with the job). reap (part 5) and release read it: a claim with
-- a live dispatch is never requeued.
--
-- A dispatch is live while its job is claimed at the dispatch's generation.
-- Every call here that takes a fence judges it as every fenced write does:
-- the job row locked first (_lock_live), then the clock read.

-- _live_dispatch: the live dispatch of a job whose row the caller holds
-- locked, or a row of NULLs.
CREATE OR REPLACE FUNCTION fenceq._live_dispatch(job fenceq._jobs)
RETURNS fenceq._dispatches
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_dispatch fenceq._dispatches;
BEGIN
    -- PL/pgSQL, so its plan is kept: release calls it on every release.
    SELECT d.* INTO v_dispatch FROM fenceq._dispatches AS d
     WHERE d.job_id = (_live_dispatch.job).job_id AND d.generation = (_live_dispatch.job).generation
       AND (_live_dispatch.job).status = 'claimed';
    RETURN v_dispatch;
END
$$;
COMMENT ON FUNCTION fenceq._live_dispatch(fenceq._jobs) IS
    'Private. The live dispatch (claimed at the same generation) of a locked job row, or NULLs.';

-- _check_ref: a reference sent to or received from an external system.
CREATE OR REPLACE FUNCTION fenceq._check_ref(value text, what text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    PERFORM fenceq._check_name(_check_ref.value, _check_ref.what, max_length => 1024);
END
$$;
COMMENT ON FUNCTION fenceq._check_ref(text, text) IS
    'Private. Refuse (QF102) a NULL, empty or over-long (1,024 characters) dispatch reference.';

-- reserve_dispatch: before calling an external system, record that this
-- live claim is about to start work there under reservation_ref (the
-- idempotency key the caller sends). From now on reap leaves the job
-- claimed and only adopt_dispatch takes it over.
-- True: reserved now, or already under this backend and ref (a retried
-- call; nothing written). False: the fence is not live or the job's cancel
-- is requested; nothing changed. QF305: the claim's live dispatch is for
-- another backend or under another ref (release_dispatch it first).
-- Locking: the job row (and the dispatch row it writes).
CREATE OR REPLACE FUNCTION fenceq.reserve_dispatch(
    job_id text, owner_id text, generation bigint, claim_token text,
    backend text, reservation_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(reserve_dispatch.job_id, reserve_dispatch.owner_id,
                                reserve_dispatch.generation, reserve_dispatch.claim_token);
    PERFORM fenceq._check_name(reserve_dispatch.backend, 'backend');
    PERFORM fenceq._check_ref(reserve_dispatch.reservation_ref, 'reservation_ref');
    v_job := fenceq._lock_live(reserve_dispatch.job_id, reserve_dispatch.owner_id,
                               reserve_dispatch.generation, reserve_dispatch.claim_token);
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NOT NULL THEN
        IF v_dispatch.backend = reserve_dispatch.backend
           AND v_dispatch.reservation_ref = reserve_dispatch.reservation_ref THEN
            RETURN true;
        END IF;
        PERFORM fenceq._raise('QF305', 'this claim already holds a dispatch under another backend or reference');
    END IF;
    -- A row left by an earlier claim of the job is not live: replace it.
    INSERT INTO fenceq._dispatches AS d (job_id, backend, generation, state, reservation_ref, reserved_at)
    VALUES (v_job.job_id, reserve_dispatch.backend, v_job.generation, 'reserved',
            reserve_dispatch.reservation_ref, clock_timestamp())
    ON CONFLICT (job_id) DO UPDATE
       SET backend = excluded.backend, generation = excluded.generation, state = 'reserved',
           reservation_ref = excluded.reservation_ref, execution_ref = NULL,
           reserved_at = excluded.reserved_at, finalized_at = NULL, checked_at = NULL;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_reserved', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', reserve_dispatch.backend, 'reservation_ref', reserve_dispatch.reservation_ref));
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.reserve_dispatch(text, text, bigint, text, text, text) IS
    'Record that this live claim is about to start work in an external system under reservation_ref. True when reserved (or already so: a retry); false for a fence that is not live or a cancel-requested job; QF305 when the claim holds another dispatch.';

-- finalize_dispatch: the external system accepted the work: record its id.
-- True: the reservation under reservation_ref is now running as
-- execution_ref, or already was (a retried call; nothing written). False:
-- the fence is not live, there is no live dispatch, it was reserved under
-- another ref, or it runs under another execution ref (replace_dispatch_ref
-- moves it); nothing changed. A requested cancel does not refuse: the work
-- exists and must be recorded before it can be stopped.
-- Locking: the job row, then the dispatch row.
CREATE OR REPLACE FUNCTION fenceq.finalize_dispatch(
    job_id text, owner_id text, generation bigint, claim_token text,
    reservation_ref text, execution_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(finalize_dispatch.job_id, finalize_dispatch.owner_id,
                                finalize_dispatch.generation, finalize_dispatch.claim_token);
    PERFORM fenceq._check_ref(finalize_dispatch.reservation_ref, 'reservation_ref');
    PERFORM fenceq._check_ref(finalize_dispatch.execution_ref, 'execution_ref');
    v_job := fenceq._lock_live(finalize_dispatch.job_id, finalize_dispatch.owner_id,
                               finalize_dispatch.generation, finalize_dispatch.claim_token);
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NULL OR v_dispatch.reservation_ref <> finalize_dispatch.reservation_ref THEN
        RETURN false;
    END IF;
    IF v_dispatch.state = 'running' THEN
        RETURN v_dispatch.execution_ref = finalize_dispatch.execution_ref;
    END IF;
    UPDATE fenceq._dispatches AS d
       SET state = 'running', execution_ref = finalize_dispatch.execution_ref, finalized_at = clock_timestamp()
     WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_finalized', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'reservation_ref', v_dispatch.reservation_ref,
                           'execution_ref', finalize_dispatch.execution_ref));
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.finalize_dispatch(text, text, bigint, text, text, text) IS
    'Record the external system''s execution_ref for this live claim''s reservation. True when recorded (or already so: a retry); false for a fence that is not live, no dispatch, or another reservation or execution ref.';

-- release_dispatch: the external call was never made: drop the
-- reservation. The claim stays live and may reserve again, or release,
-- complete or fail as usual. True when dropped; false when the fence is not
-- live or there is no reservation under reservation_ref (a running dispatch
-- is never released: its work exists). A requested cancel does not refuse.
-- Locking: the job row, then the dispatch row.
CREATE OR REPLACE FUNCTION fenceq.release_dispatch(
    job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(release_dispatch.job_id, release_dispatch.owner_id,
                                release_dispatch.generation, release_dispatch.claim_token);
    PERFORM fenceq._check_ref(release_dispatch.reservation_ref, 'reservation_ref');
    v_job := fenceq._lock_live(release_dispatch.job_id, release_dispatch.owner_id,
                               release_dispatch.generation, release_dispatch.claim_token);
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NULL OR v_dispatch.state <> 'reserved'
       OR v_dispatch.reservation_ref <> release_dispatch.reservation_ref THEN
        RETURN false;
    END IF;
    DELETE FROM fenceq._dispatches AS d WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_released', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'reservation_ref', v_dispatch.reservation_ref));
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.release_dispatch(text, text, bigint, text, text) IS
    'Drop this live claim''s dispatch reservation because the external call was never made; the claim stays live. False for a fence that is not live, another ref, or a running dispatch.';

-- replace_dispatch_ref: the external system moved the work to another id.
-- True when the running dispatch's execution ref was expected_ref and is
-- now execution_ref, or already is execution_ref (a retried call; nothing
-- written). False otherwise (fence not live, no running dispatch, another
-- ref); nothing changed. A requested cancel does not refuse.
-- Locking: the job row, then the dispatch row.
CREATE OR REPLACE FUNCTION fenceq.replace_dispatch_ref(
    job_id text, owner_id text, generation bigint, claim_token text,
    expected_ref text, execution_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(replace_dispatch_ref.job_id, replace_dispatch_ref.owner_id,
                                replace_dispatch_ref.generation, replace_dispatch_ref.claim_token);
    PERFORM fenceq._check_ref(replace_dispatch_ref.expected_ref, 'expected_ref');
    PERFORM fenceq._check_ref(replace_dispatch_ref.execution_ref, 'execution_ref');
    v_job := fenceq._lock_live(replace_dispatch_ref.job_id, replace_dispatch_ref.owner_id,
                               replace_dispatch_ref.generation, replace_dispatch_ref.claim_token);
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NULL OR v_dispatch.state <> 'running' THEN
        RETURN false;
    END IF;
    IF v_dispatch.execution_ref = replace_dispatch_ref.execution_ref THEN
        RETURN true;
    END IF;
    IF v_dispatch.execution_ref <> replace_dispatch_ref.expected_ref THEN
        RETURN false;
    END IF;
    UPDATE fenceq._dispatches AS d SET execution_ref = replace_dispatch_ref.execution_ref
     WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_replaced', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'expected_ref', replace_dispatch_ref.expected_ref,
                           'execution_ref', replace_dispatch_ref.execution_ref));
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.replace_dispatch_ref(text, text, bigint, text, text, text) IS
    'Move this live claim''s running dispatch from expected_ref to execution_ref. True when moved (or already there: a retry); false otherwise.';

-- adopt_dispatch: take over a dispatched job whose claim lapsed, to
-- reconcile it with the external system. One claim row (the job stays
-- claimed; generation + 1 under the new owner and token, the attempt not
-- counted again, the lease from `lease` or the queue's, no budget) when the
-- job's lease has lapsed and its live dispatch is for `backend` with the
-- recorded ref (the reservation ref while reserved, the execution ref once
-- running) exactly expected_ref. No row otherwise: a live claim, another
-- backend or ref, no dispatch, an unknown job. The old fence is dead from
-- then on. QF301 for a used token, QF303 at the largest generation.
-- Locking: the job row, then the dispatch row; the clock is read after the
-- job row's lock.
CREATE OR REPLACE FUNCTION fenceq.adopt_dispatch(
    job_id text, backend text, expected_ref text, owner_id text, claim_token text,
    lease interval DEFAULT NULL)
RETURNS SETOF fenceq.claim
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
    v_now timestamptz;
    v_lease interval;
    v_recorded boolean;
    v_previous_owner text;
    v_recorded_ref text;
BEGIN
    PERFORM fenceq._check_name(adopt_dispatch.job_id, 'job_id');
    PERFORM fenceq._check_name(adopt_dispatch.backend, 'backend');
    PERFORM fenceq._check_ref(adopt_dispatch.expected_ref, 'expected_ref');
    PERFORM fenceq._check_name(adopt_dispatch.owner_id, 'owner_id');
    PERFORM fenceq._check_name(adopt_dispatch.claim_token, 'claim_token');
    PERFORM fenceq._check_interval(adopt_dispatch.lease, 'lease');
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = adopt_dispatch.job_id FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND OR v_job.status <> 'claimed' OR v_job.lease_expires_at > v_now THEN
        RETURN;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    -- The ref the dispatch is known by: its reservation's until finalized.
    v_recorded_ref := coalesce(v_dispatch.execution_ref, v_dispatch.reservation_ref);
    IF v_dispatch.job_id IS NULL OR v_dispatch.backend <> adopt_dispatch.backend
       OR v_recorded_ref <> adopt_dispatch.expected_ref THEN
        RETURN;
    END IF;
    IF v_job.generation = 9223372036854775807 THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    v_previous_owner := v_job.owner_id;
    SELECT coalesce(adopt_dispatch.lease, q.lease) INTO v_lease
      FROM fenceq._queues AS q WHERE q.queue = v_job.queue;
    UPDATE fenceq._jobs AS j
       SET generation = j.generation + 1, owner_id = adopt_dispatch.owner_id,
           claim_token = adopt_dispatch.claim_token, lease = v_lease,
           lease_expires_at = v_now + v_lease, budget_expires_at = NULL, pid = NULL
     WHERE j.job_id = v_job.job_id
    RETURNING j.* INTO v_job;
    IF v_job.owner_id IS DISTINCT FROM adopt_dispatch.owner_id
       OR v_job.claim_token IS DISTINCT FROM adopt_dispatch.claim_token THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at)
    VALUES (adopt_dispatch.claim_token, v_job.job_id, v_job.generation, adopt_dispatch.owner_id, v_now)
    ON CONFLICT (claim_token) DO NOTHING
    RETURNING true INTO v_recorded;
    IF v_recorded IS NULL THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    UPDATE fenceq._dispatches AS d SET generation = v_job.generation WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_adopted', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'ref', adopt_dispatch.expected_ref,
                           'previous_owner_id', v_previous_owner));
    RETURN NEXT ROW(v_job.job_id, v_job.queue, v_job.task, v_job.payload, v_job.priority, v_job.attempts,
                    v_job.max_attempts, v_job.owner_id, v_job.generation, v_job.claim_token,
                    v_job.lease_expires_at, v_job.budget_expires_at, v_job.cancel_requested,
                    v_job.submission_id, fenceq._checkpoints_of(v_job.job_id))::fenceq.claim;
END
$$;
COMMENT ON FUNCTION fenceq.adopt_dispatch(text, text, text, text, text, interval) IS
    'Take over a job whose dispatching claim lapsed, when its recorded ref is exactly expected_ref: one claim row (generation + 1, the attempt not counted again), else no row. QF301 for a used token.';

-- dispatch_repair_candidates: a bounded, fair page of one backend's live
-- dispatches whose claim lapsed, for a reconciler to adopt: never checked
-- first (by when the claim lapsed), then the oldest check, then job id.
-- Each row returned is marked checked now, so the next call pages onward;
-- a newer mark by a concurrent call is never overwritten, and rows another
-- call holds are skipped. Does not lock job rows.
CREATE OR REPLACE FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer DEFAULT 100)
RETURNS TABLE(job_id text, queue text, task text, state text, ref text, generation bigint,
              lapsed_at timestamptz, checked_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(dispatch_repair_candidates.backend, 'backend');
    IF dispatch_repair_candidates.max_rows IS NULL OR dispatch_repair_candidates.max_rows NOT BETWEEN 1 AND 100000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be 1 to 100000');
    END IF;
    v_now := clock_timestamp();
    RETURN QUERY
    WITH picked AS (
        SELECT d.job_id, j.queue, j.task, d.state,
               CASE d.state WHEN 'reserved' THEN d.reservation_ref ELSE d.execution_ref END AS ref,
               d.generation, j.lease_expires_at AS lapsed_at, d.checked_at AS last_checked
          FROM fenceq._dispatches AS d
          JOIN fenceq._jobs AS j ON j.job_id = d.job_id
         WHERE d.backend = dispatch_repair_candidates.backend
           AND j.status = 'claimed' AND j.generation = d.generation AND j.lease_expires_at <= v_now
         ORDER BY d.checked_at IS NOT NULL, CASE WHEN d.checked_at IS NULL THEN j.lease_expires_at END,
                  d.checked_at, d.job_id
         LIMIT dispatch_repair_candidates.max_rows
           FOR UPDATE OF d SKIP LOCKED),
    marked AS (
        UPDATE fenceq._dispatches AS d SET checked_at = greatest(d.checked_at, v_now)
          FROM picked AS p WHERE d.job_id = p.job_id
        RETURNING d.job_id, d.checked_at)
    SELECT p.job_id, p.queue, p.task, p.state, p.ref, p.generation, p.lapsed_at, m.checked_at
      FROM picked AS p JOIN marked AS m ON m.job_id = p.job_id
     ORDER BY p.last_checked IS NOT NULL, CASE WHEN p.last_checked IS NULL THEN p.lapsed_at END,
              p.last_checked, p.job_id;
END
$$;
COMMENT ON FUNCTION fenceq.dispatch_repair_candidates(text, integer) IS
    'A bounded, fair page (max_rows) of one backend''s dispatches whose claim lapsed, never-checked first; each returned row is marked checked now.';

-- dispatches: every live dispatch (its job claimed at its generation).
CREATE OR REPLACE VIEW fenceq.dispatches AS
SELECT j.job_id, j.queue, d.backend, d.state, d.reservation_ref, d.execution_ref, j.owner_id,
       j.generation, j.lease_expires_at, d.checked_at
  FROM fenceq._dispatches AS d
  JOIN fenceq._jobs AS j ON j.job_id = d.job_id
 WHERE j.status = 'claimed' AND j.generation = d.generation;
COMMENT ON VIEW fenceq.dispatches IS
    'One row per job whose dispatch to an external system is live (reserved or running, the job claimed at that generation).';

-- fenceq for PostgreSQL, part 8b (version 6): the job history. What it
-- holds: the _events writers every transition calls, set_queue_history,
-- the job_events view and get_job_events. Who writes _events: only
-- _record_event and _record_events, called by the function that makes the
-- transition, in its transaction, while the job's queue has history on
-- (docs/design-v6.md, docs/guarantees.md §20). purge (part 6) deletes them.

-- _record_event: one event of one job, written when its queue keeps a
-- history, else nothing. generation and owner_id are the caller's to say
-- (a fence that just ended is no longer on the row); an event of a job no
-- claim holds (no owner) has no generation either. An error text in the
-- detail is the caller's to cut (2,000 characters).
-- PL/pgSQL rather than SQL: a SECURITY DEFINER SQL function is never
-- inlined, and PostgreSQL plans its body again on every call (measured:
-- 208 µs a call against 24 µs for the insert; docs/performance.md).
CREATE OR REPLACE FUNCTION fenceq._record_event(
    job_id text, queue text, event text, generation bigint, owner_id text, detail jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
    SELECT _record_event.job_id, q.queue, clock_timestamp(), _record_event.event,
           CASE WHEN _record_event.owner_id IS NOT NULL THEN _record_event.generation END,
           _record_event.owner_id, coalesce(_record_event.detail, '{}')
      FROM fenceq._queues AS q
     WHERE q.queue = _record_event.queue AND q.history;
END
$$;
COMMENT ON FUNCTION fenceq._record_event(text, text, text, bigint, text, jsonb) IS
    'Private. Write one history event of a job when its queue has history on; nothing otherwise.';

-- _record_events: the same event for many jobs, each with the generation
-- and owner its row holds now (after the transition; neither for a job no
-- claim holds). 'claimed' and
-- 'submitted' take their detail from the row (attempt; priority, run_at);
-- every other event gets `detail`.
CREATE OR REPLACE FUNCTION fenceq._record_events(job_ids text[], event text, detail jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
    SELECT j.job_id, j.queue, clock_timestamp(), _record_events.event,
           CASE WHEN j.owner_id IS NOT NULL THEN j.generation END, j.owner_id,
           CASE _record_events.event
                WHEN 'claimed' THEN jsonb_build_object('attempt', j.attempts)
                WHEN 'submitted' THEN jsonb_build_object('priority', j.priority, 'run_at', j.run_at)
                ELSE coalesce(_record_events.detail, '{}') END
      FROM unnest(_record_events.job_ids) WITH ORDINALITY AS e(job_id, ordinal)
      JOIN fenceq._jobs AS j ON j.job_id = e.job_id
      JOIN fenceq._queues AS q ON q.queue = j.queue
     WHERE q.history
     ORDER BY e.ordinal;
END
$$;
COMMENT ON FUNCTION fenceq._record_events(text[], text, jsonb) IS
    'Private. Write the same history event for each of these jobs whose queue has history on, with the generation and owner on its row.';

-- set_queue_history: turn a queue's history on or off, and bound how long
-- purge keeps its events (retention; NULL: as long as their job). Turning
-- it off keeps the events written. True when (history, retention) changed.
-- Locking: the queue row, for the update.
CREATE OR REPLACE FUNCTION fenceq.set_queue_history(
    queue text, enabled boolean, retention interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(set_queue_history.queue, 'queue');
    IF set_queue_history.enabled IS NULL THEN
        PERFORM fenceq._raise('QF100', 'enabled is required');
    END IF;
    PERFORM fenceq._check_interval(set_queue_history.retention, 'retention');
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = set_queue_history.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF v_queue.history = set_queue_history.enabled
       AND v_queue.history_retention IS NOT DISTINCT FROM set_queue_history.retention THEN
        RETURN false;
    END IF;
    UPDATE fenceq._queues AS q
       SET history = set_queue_history.enabled, history_retention = set_queue_history.retention
     WHERE q.queue = set_queue_history.queue;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.set_queue_history(text, boolean, interval) IS
    'Turn a queue''s job history on or off (events already written are kept), with an optional retention applied by purge. True when the setting changed; QF101 for an unknown queue. Admins only.';

-- job_events: every recorded transition, in order per job.
CREATE OR REPLACE VIEW fenceq.job_events AS
SELECT e.job_id, e.seq, e.at, e.event, e.generation, e.owner_id, e.detail
  FROM fenceq._events AS e;
COMMENT ON VIEW fenceq.job_events IS
    'The recorded transitions of jobs whose queues have history on: one row each, seq ascending per job. Never a claim token.';

-- get_job_events: one job's timeline; no rows for an unknown job or one
-- whose queue kept no history.
CREATE OR REPLACE FUNCTION fenceq.get_job_events(job_id text)
RETURNS SETOF fenceq.job_events
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    PERFORM fenceq._check_name(get_job_events.job_id, 'job_id');
    RETURN QUERY
        SELECT e.job_id, e.seq, e.at, e.event, e.generation, e.owner_id, e.detail
          FROM fenceq._events AS e
         WHERE e.job_id = get_job_events.job_id
         ORDER BY e.seq;
END
$$;
COMMENT ON FUNCTION fenceq.get_job_events(text) IS
    'One job''s recorded transitions, oldest first; no rows for an unknown job or one whose queue kept no history.';

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
        SELECT 'ALTER TYPE fenceq.claim OWNER TO fenceq_owner'
          FROM pg_type AS t WHERE t.oid = 'fenceq.claim'::regtype AND t.typowner <> 'fenceq_owner'::regrole
    LOOP
        EXECUTE v_object.stmt;
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA fenceq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA fenceq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA fenceq FROM PUBLIC;

-- Group roles (docs/guarantees.md §10), NOLOGIN; applications log in as their own
-- roles and are granted one of these. Roles are cluster-wide: membership
-- grants the same rights in every database of the cluster where fenceq is
-- installed. An existing role of these names that can log in is refused.
--   fenceq_producer: submit, submit_batch, get_job, version
--   fenceq_worker:   the producer's rights, every fenced worker function,
--                    reap, tick, next_due, and the views
--                    (and the named locks, docs/guarantees.md §15; the
--                    external dispatch calls and get_job_events, §19-§20)
--   fenceq_admin:    everything (queue settings, cancel, purge, dead
--                    letters, verify_schema) and the views
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
            'claim_next', 'claim_batch', 'recover_claim', 'heartbeat', 'heartbeat_batch', 'complete',
            'complete_batch', 'fail', 'release', 'checkpoint', 'set_pid', 'claim_state',
            'acknowledge_cancel', 'reap',
            'tick', 'next_due', 'extend', 'acquire_lock', 'renew_lock', 'release_lock', 'check_lock',
            'progress', 'reserve_dispatch', 'finalize_dispatch', 'release_dispatch', 'replace_dispatch_ref',
            'adopt_dispatch', 'dispatch_repair_candidates', 'get_job_events'));
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
