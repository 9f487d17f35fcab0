-- fenceq migration 0004: version 3 -> 4, for PostgreSQL. Frozen at release.
--
-- Why: see 0004_fenceq_v4.py. A pending job that is not due yet now sends
-- fenceq_jobs like one due now, so that an idle worker re-reads next_due
-- and starts it on time rather than at its next poll; a batch element
-- stored cancelled cancels the elements waiting on it, purge deletes
-- the dependency edges of the jobs it deletes, and heartbeat_batch and
-- complete_batch cost in proportion to their batch. Only functions
-- change, none of their signatures: each is replaced in place (CREATE OR
-- REPLACE keeps its owner and grants), then the admission check runs.
-- No table, index or view is touched.

SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

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
                       blocked_run_at = CASE WHEN j.blocked_by = c.n THEN NULL ELSE j.blocked_run_at END
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
            blocked_by, blocked_run_at, last_error, finished_at)
        VALUES (v_job_id, _submit.queue, _submit.task, v_payload, coalesce(_submit.priority, 0),
            CASE WHEN v_dependency_failed THEN 'cancelled' ELSE 'pending' END,
            coalesce(_submit.max_attempts, v_queue.max_attempts),
            CASE WHEN v_blocked_by > 0 THEN 'infinity' ELSE v_run_at END,
            _submit.expires_at, _submit.submission_id, v_fingerprint,
            CASE WHEN v_dependency_failed THEN NULL ELSE _submit.active_key END, v_now, _submit.concurrency_key,
            nullif(v_blocked_by, 0), CASE WHEN v_blocked_by > 0 THEN v_run_at END,
            CASE WHEN v_dependency_failed THEN 'dependency_failed' END,
            CASE WHEN v_dependency_failed THEN v_now END)
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
            run_at, expires_at, submission_id, fingerprint, created_at, concurrency_key)
        SELECT q.job_id, q.queue, submit.task, v_payload, coalesce(submit.priority, 0),
               coalesce(submit.max_attempts, q.max_attempts), coalesce(submit.run_at, q.now),
               submit.expires_at, submit.submission_id, v_fingerprint, q.now, submit.concurrency_key
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
               budget_expires_at = NULL, pid = NULL
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
           budget_expires_at = NULL, pid = NULL
     WHERE j.job_id = release.job_id;
    PERFORM fenceq._notify_jobs(v_job.queue);  -- due now or later: idle workers re-read next_due
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.release(text, text, bigint, text, timestamptz) IS
    'Hand a live claim back to pending (at run_at, default now) without spending an attempt. False when stale, expired, terminal or cancel-requested.';

-- purge: delete terminal jobs finished before now - older_than, oldest first,
-- at most max_rows, with their checkpoints, claim ledger rows (their tokens
-- are forgotten) and dependency edges. Jobs with a dead letter that is
-- neither replayed nor discarded are kept; handled dead letters stay listed.
-- Submission identities outlive the purge unless submissions_older_than is
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
    DELETE FROM fenceq._jobs AS j WHERE j.job_id = ANY (v_ids);
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
COMMENT ON FUNCTION fenceq.complete_batch(text[], text[], bigint[], text[], jsonb[]) IS
    'Complete many fences in one transaction; element i answers as complete would for fence i. QF100 for arrays of unequal length.';

-- version: the installed schema version.
CREATE OR REPLACE FUNCTION fenceq.version()
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN '4';
END
$$;
COMMENT ON FUNCTION fenceq.version() IS 'The installed fenceq schema version.';

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
