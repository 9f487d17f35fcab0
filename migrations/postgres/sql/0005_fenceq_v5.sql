-- fenceq migration 0005: version 4 -> 5, for PostgreSQL. Frozen at release.
--
-- Why: see 0005_fenceq_v5.py. Jobs due later wait apart from the jobs a
-- claim reads (part 1c: a column, its data and two indexes in place of the
-- version 4 claim index), the claims move jobs in as they fall due, and
-- submit_batch makes its ids set-wise. Then the functions that write or
-- read those sets are replaced in place (no signature changes: nothing is
-- dropped or overloaded; owners and grants stay), two private helpers are
-- added, part 9 (ownership, privileges, the admission check) runs again
-- for them.

SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

-- fenceq for PostgreSQL, part 1c: jobs due later wait apart (version 5).
--
-- What it holds: a pending job is in exactly one of two sets, told apart by
-- _jobs.scheduled:
--   * ready (scheduled = false): due; each queue's ready jobs lead its
--     stretch of _jobs_pending_idx, in claim order (priority, run_at,
--     submission order), and every claim reads them there;
--   * later (scheduled = true): due at a run_at still ahead when it was
--     written (submitted for later, a retry in back-off, released for
--     later, waiting on dependencies with run_at 'infinity'); they follow
--     the ready ones in _jobs_pending_idx (where the dashboard and
--     queue_stats count every pending job) and are also in
--     _jobs_later_idx, by due time.
-- Who writes it: every statement that makes a job pending sets scheduled to
-- whether its run_at is after the clock of that statement; a claim of a
-- queue first moves the queue's jobs that have fallen due from later to
-- ready (_move_due), so a due job is claimable by the first claim after its
-- run_at, as in version 4. Why: in version 4 one claim index held both, and
-- a claim or next_due with many jobs due later read past all of them (an
-- empty claim 7.5 ms, next_due 31.5 ms with 100,000 such jobs); now each
-- is one index probe (docs/design-v5.md).
--
-- A job whose scheduled flag is false while its run_at is ahead is still
-- never claimed early (every claim also compares run_at with its clock):
-- the flag decides where a job waits, never whether it is due.
--
-- Idempotent like part 1, and an upgrade from version 4 in itself: the
-- column has a constant default (no row is rewritten) and the version 4
-- claim index is replaced. The pending jobs version 4 left waiting for a
-- later run_at are not marked here, inside the step's ACCESS EXCLUSIVE
-- lock: `fenceq migrate` marks them after the step commits, in batches of
-- row locks (docs/dba.md §7). Until then they wait among the due jobs,
-- which is correct (every claim compares run_at with its clock) but costs
-- an empty claim what it cost in version 4.

ALTER TABLE fenceq._jobs
    ADD COLUMN IF NOT EXISTS scheduled boolean NOT NULL DEFAULT false;

-- Claim path: one ordered scan per queue over its ready jobs
-- (docs/guarantees.md §11: a single index over queue = ANY(...) cannot
-- serve ORDER BY, so claims merge per-queue heads).
CREATE INDEX IF NOT EXISTS _jobs_pending_idx
    ON fenceq._jobs (queue, scheduled, priority DESC, run_at, seq)
    WHERE status = 'pending';
-- Jobs due later, by due time: the claim's move and next_due read its head.
CREATE INDEX IF NOT EXISTS _jobs_later_idx
    ON fenceq._jobs (queue, run_at)
    WHERE status = 'pending' AND scheduled;
DROP INDEX IF EXISTS fenceq._jobs_claim_idx;

-- _new_job_ids: n new job ids for one submit_batch, made set-wise (version
-- 5): version 7 UUIDs that share one clock reading (48 bits of Unix
-- milliseconds) and 26 random bits, and end in a 48-bit counter that starts
-- at a random 44-bit value (RFC 9562's fixed-length counter method), so
-- they sort in batch order. One random UUID per batch instead of one per
-- job: _new_job_id per row cost 3.5 ms of a 13.9 ms batch of 1,000.
-- Ids of two batches in the same millisecond differ unless 70 random bits
-- agree; a collision is refused like any taken id (QF203).
CREATE OR REPLACE FUNCTION fenceq._new_job_ids(n integer)
RETURNS text[]
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
RETURN (SELECT coalesce(array_agg(b.prefix || lpad(to_hex(b.start + g.i), 12, '0') ORDER BY g.i), '{}')
          FROM (SELECT overlay(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
                               PLACING '-' FROM 9 FOR 0)
                       || '-7' || substring(r.uuid FROM 16 FOR 9) AS prefix,
                       ('x' || substring(r.uuid FROM 26 FOR 11))::bit(44)::bigint AS start
                  FROM (SELECT gen_random_uuid()::text AS uuid) AS r) AS b,
               generate_series(1, n) AS g(i));
COMMENT ON FUNCTION fenceq._new_job_ids(integer) IS
    'Private. n new job ids for one batch: version 7 UUIDs as text sharing a clock reading, in batch order.';

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
        SELECT q.queue, q.max_attempts, q.notify, clock_timestamp() AS now,
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
    SELECT i.job_id, q.notify, EXISTS (SELECT 1 FROM reserved)
      INTO v_job_id, v_notify, v_reserved
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
    IF v_notify THEN
        PERFORM pg_notify('fenceq_jobs', submit.queue);
    END IF;
    RETURN v_job_id;
END
$$;
COMMENT ON FUNCTION fenceq.submit(text, text, jsonb, text, text, integer, timestamptz, timestamptz, integer, text, boolean, text, text[]) IS
    'Enqueue a job; returns its id. With submission_id an exact replay returns the original id (QF201 if the request changed). QF202 busy active key unless force; QF203 taken job id.';

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

-- _settle_dependents: what a finished job means for the jobs that depend on
-- it, in the transaction that finished it. completed: each dependent counts
-- it off; one whose count reaches zero becomes due at the run_at it asked
-- for or now, whichever is later (and notifies like a submit). Otherwise
-- (failed, cancelled, expired): every pending or claimed job that depends on
-- it, transitively, is cancelled with last_error 'dependency_failed'; a
-- claimed one's fence dies (and it gets a fenceq_control notification).
-- Locking: the dependents' rows FOR UPDATE in job id order, so two
-- finishing dependencies never deadlock on shared dependents.
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
        FOR v_queue IN
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
                RETURNING j.queue, j.blocked_by IS NULL AS free)
            -- Free now, due now or later: idle workers re-read next_due.
            SELECT DISTINCT r.queue FROM released AS r JOIN fenceq._queues AS q ON q.queue = r.queue
             WHERE r.free AND q.notify
        LOOP
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
    -- fenceq_done (part 58) for the jobs cancelled just now: at this reading.
    PERFORM fenceq._notify_done(ARRAY(SELECT j.job_id FROM fenceq._jobs AS j
                                       WHERE j.job_id = ANY (v_targets) AND j.status = 'cancelled'
                                         AND j.finished_at = v_now));
END
$$;
COMMENT ON FUNCTION fenceq._settle_dependents(text[], boolean) IS
    'Private. Count a completed job off its dependents (releasing those left with none), or cancel every job that transitively depends on a job that did not complete.';

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
        SELECT q.lease FROM fenceq._queues AS q
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
                  j.cancel_requested, j.submission_id, p.generation AS old_generation, p.locked_at),
    recorded AS (
        INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at)
        SELECT claim_next.claim_token, c.job_id, c.generation, claim_next.owner_id, c.locked_at
          FROM claimed AS c
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING 1)
    SELECT ARRAY[ROW(c.job_id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts,
                     c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                     c.cancel_requested, c.submission_id, '{}'::jsonb)::fenceq.claim],
           c.old_generation, EXISTS (SELECT 1 FROM recorded)
      INTO v_claim, v_old_generation, v_recorded
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
        RETURNING j.*, p.ordinal, p.token AS sent_token, q.rate_limit IS NOT NULL AS rated),
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
           bool_or(c.owner_id IS DISTINCT FROM claim_batch.owner_id OR c.claim_token IS DISTINCT FROM c.sent_token)
      INTO v_claims, v_recorded, v_changed
      FROM claimed AS c;
    IF v_changed OR cardinality(v_claims) <> cardinality(v_picked) THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    IF v_recorded <> cardinality(v_claims) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_claims);
END
$$;
COMMENT ON FUNCTION fenceq.claim_batch(text[], text, text[], interval, interval) IS
    'Claim up to one job per token across queues; QF301 before anything is claimed when a token repeats or was used.';

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
     WHERE j.job_id = (_retry_or_fail.job).job_id;
    PERFORM fenceq._settle_dependents(ARRAY[(_retry_or_fail.job).job_id], false);
    IF v_queue.notify_done THEN
        PERFORM fenceq._notify_done(ARRAY[(_retry_or_fail.job).job_id]);
    END IF;
    RETURN 'failed';
END
$$;
COMMENT ON FUNCTION fenceq._retry_or_fail(fenceq._jobs, text, boolean, timestamptz, timestamptz) IS
    'Private. Requeue a failed attempt with backoff, or fail it for good (with a dead letter when the queue keeps them).';

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
    v_run_at := coalesce(release.run_at, v_now);
    UPDATE fenceq._jobs AS j
       SET status = 'pending', attempts = j.attempts - 1, run_at = v_run_at,
           owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
           budget_expires_at = NULL, pid = NULL,
           scheduled = v_run_at > v_now  -- released for later: waits apart (part 1c)
     WHERE j.job_id = release.job_id;
    PERFORM fenceq._notify_jobs(v_job.queue);  -- due now or later: idle workers re-read next_due
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.release(text, text, bigint, text, timestamptz) IS
    'Hand a live claim back to pending (at run_at, default now) without spending an attempt. False when stale, expired, terminal or cancel-requested.';

-- next_due: the earliest run_at of a pending, unexpired job in the named,
-- unpaused queues; in the past when something is due now, NULL when there
-- is none (a run_at of 'infinity', a job that waits for something else,
-- never counts). An idle worker waits no later than this, so a retry or a
-- delayed job starts on time without a notification.
-- QF100 for an empty array, QF102 for a malformed name, QF101 for an
-- undeclared queue. Read-only, no locks.
--
-- Per queue, the earliest of two heads (part 1c). The jobs due later wait
-- apart by due time: their head is one probe of _jobs_later_idx. The ready
-- jobs (due, not yet claimed) are ordered by priority first, so their
-- earliest run_at is the first entry of each priority's stretch of the
-- claim index: the levels are walked from the highest down, one probe each
-- (a loose index scan), and below the 32nd level the rest is read in one
-- range scan. An idle worker, the one that asks, finds the ready set empty:
-- one probe.
CREATE OR REPLACE FUNCTION fenceq.next_due(queues text[])
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_active text[];
    v_known integer;
    v_queue text;
    v_now timestamptz;
    v_queue_due timestamptz;
    v_floor integer;
    v_due timestamptz;
BEGIN
    PERFORM fenceq._check_names(next_due.queues, 'queues');
    SELECT array_agg(q.queue) FILTER (WHERE NOT q.paused), count(*)
      INTO v_active, v_known
      FROM fenceq._queues AS q WHERE q.queue = ANY (next_due.queues);
    IF v_known <> (SELECT count(DISTINCT n.name) FROM unnest(next_due.queues) AS n(name)) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    v_now := clock_timestamp();
    FOREACH v_queue IN ARRAY coalesce(v_active, '{}') LOOP
        -- The priority levels from the highest down, one probe each, and
        -- the earliest due job of each level.
        WITH RECURSIVE levels(priority, depth) AS (
            (SELECT j.priority, 1 FROM fenceq._jobs AS j
              WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled
              ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM fenceq._jobs AS j
                     WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority < l.priority
                     ORDER BY j.priority DESC LIMIT 1), l.depth + 1
              FROM levels AS l
             WHERE l.priority IS NOT NULL AND l.depth < 32)
        SELECT min(d.run_at), min(l.priority) FILTER (WHERE l.depth = 32)
          INTO v_queue_due, v_floor
          FROM levels AS l
          LEFT JOIN LATERAL (
            SELECT j.run_at FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority = l.priority
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.run_at LIMIT 1) AS d ON true
         WHERE l.priority IS NOT NULL;
        IF v_floor IS NOT NULL THEN
            -- Levels below the 32nd: the rest of the queue in one range scan.
            SELECT least(v_queue_due, min(j.run_at)) INTO v_queue_due
              FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority < v_floor
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now);
        END IF;
        -- The head of the jobs due later (a run_at of 'infinity' never counts).
        v_queue_due := least(v_queue_due, (
            SELECT j.run_at FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND j.scheduled
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.run_at LIMIT 1));
        v_due := least(v_due, v_queue_due);  -- least() skips NULLs
    END LOOP;
    RETURN v_due;
END
$$;
COMMENT ON FUNCTION fenceq.next_due(text[]) IS
    'The earliest run_at of a pending, unexpired job in the named, unpaused queues (in the past when one is due now); NULL when there is none. QF100 for an empty array, QF101 for an undeclared queue.';

-- replay_dead_letter: put a dead-lettered job back to pending with a fresh
-- attempt budget; its submission identity and generation history are kept.
-- Returns the job id; NULL for an unknown or already handled dead letter;
-- QF202 when another active job now holds the job's active key.
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
    PERFORM fenceq._notify_jobs(v_letter.queue);
    RETURN v_letter.job_id;
END
$$;
COMMENT ON FUNCTION fenceq.replay_dead_letter(text) IS
    'Return a dead-lettered job to pending with a fresh attempt budget; returns the job id, or NULL for an unknown or already handled letter; QF202 when its active key is now held by another active job.';

-- version: the installed schema version.
CREATE OR REPLACE FUNCTION fenceq.version()
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN '5';
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
--                    (and the named locks, docs/guarantees.md §15)
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
            'progress'));
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
