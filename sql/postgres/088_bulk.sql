-- fenceq for PostgreSQL, part 8e (version 7): bulk actions (docs/design-v7.md
-- §4, docs/guarantees.md §21). What it holds: retry_jobs, cancel_jobs and
-- replay_dead_letters, for admins: each one call that answers how many
-- jobs it changed, at most max_rows (1 to 100,000), refusing a call with
-- neither job ids nor a filter (QF100), and recording each change as an
-- event whatever the queue's history setting, with who made it and how it
-- chose the jobs: detail {"by": session_user, "action": the function's
-- name, "filter": the selection as given (job_ids: their number)}.
--
-- Each chooses its jobs without locks, then locks them in one order and
-- judges them again on the locked rows, as cancel_matching does: a job
-- that stopped matching meanwhile is left alone and not counted. A job id
-- of another queue, or of no job, is ignored. Given both job ids and a
-- filter, a job must match both.

-- _action_detail: the detail every bulk action adds to its events.
CREATE OR REPLACE FUNCTION fenceq._action_detail(action text, filter jsonb)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object('by', session_user::text, 'action', _action_detail.action,
                              'filter', jsonb_strip_nulls(_action_detail.filter));
END
$$;
COMMENT ON FUNCTION fenceq._action_detail(text, jsonb) IS
    'Private. A bulk action''s event detail: who (session_user), which action, and its filter without the NULLs.';

-- _record_action: the event of a bulk action on one job it changed just
-- now through the function one call would use. Where the job's queue keeps
-- history, that function wrote the transition's event (of this name, after
-- after_seq): it gains the action's detail, so the change is one event.
-- Elsewhere the event is written now, with the generation and owner the
-- job's row holds (none for a job no claim holds), as _record_events would.
-- The caller holds the job's row lock.
CREATE OR REPLACE FUNCTION fenceq._record_action(job_id text, after_seq bigint, event text, detail jsonb)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    UPDATE fenceq._events AS e SET detail = e.detail || _record_action.detail
     WHERE e.job_id = _record_action.job_id AND e.seq > coalesce(_record_action.after_seq, 0)
       AND e.event = _record_action.event;
    IF NOT FOUND THEN
        INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
        SELECT j.job_id, j.queue, clock_timestamp(), _record_action.event,
               CASE WHEN j.owner_id IS NOT NULL THEN j.generation END, j.owner_id, _record_action.detail
          FROM fenceq._jobs AS j
         WHERE j.job_id = _record_action.job_id;
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._record_action(text, bigint, text, jsonb) IS
    'Private. Record a bulk action''s change of one job as one event: the transition''s own event gains the detail, or the event is written.';

-- _check_bulk: the checks the three bulk actions share: queue (declared,
-- QF101), job_ids (when given: 1 to 10,000 ids), task, payload_contains as
-- cancel_matching checks it, error_contains (1 to 1,000 characters, QF100),
-- max_rows (1 to 100,000, QF104), and a selection: job ids or a filter
-- (QF100). Every input is checked before the queue is looked up.
CREATE OR REPLACE FUNCTION fenceq._check_bulk(
    queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    PERFORM fenceq._check_name(_check_bulk.queue, 'queue');
    IF _check_bulk.job_ids IS NOT NULL THEN
        PERFORM fenceq._check_names(_check_bulk.job_ids, 'job_ids');
    END IF;
    PERFORM fenceq._check_name(_check_bulk.task, 'task', nullable => true);
    IF jsonb_typeof(_check_bulk.payload_contains) NOT IN ('object', 'array') THEN
        PERFORM fenceq._raise('QF100', 'payload_contains must be a JSON object or array');
    END IF;
    PERFORM fenceq._check_json(_check_bulk.payload_contains, 'payload_contains');
    PERFORM fenceq._check_name(_check_bulk.error_contains, 'error_contains', max_length => 1000,
                               nullable => true, code => 'QF100');
    IF _check_bulk.max_rows IS NULL OR _check_bulk.max_rows NOT BETWEEN 1 AND 100000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be an integer from 1 to 100000');
    END IF;
    IF _check_bulk.job_ids IS NULL AND _check_bulk.task IS NULL AND _check_bulk.payload_contains IS NULL
       AND _check_bulk.error_contains IS NULL THEN
        PERFORM fenceq._raise('QF100', 'a bulk action needs job_ids or a filter');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = _check_bulk.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_bulk(text, text[], text, jsonb, text, integer) IS
    'Private. The input checks of the bulk actions; QF100 for a call with neither job ids nor a filter.';

-- retry_jobs: make due now the pending jobs of a queue that wait for a
-- retry (attempts > 0, run_at still ahead, not waiting on dependencies)
-- and match the selection: job_ids, task, payload_contains (@>),
-- error_contains (a case-insensitive substring of last_error, 1 to 1,000
-- characters). Soonest due first, at most max_rows. Answers how many
-- changed; each gets a 'retry_forced' event. Sends fenceq_jobs when the
-- queue notifies and a job changed. Admins only.
-- Locking: the chosen jobs' rows in job id order, then the clock: a job
-- that fell due or changed meanwhile is left alone and not counted.
-- Without job ids it reads the queue's jobs due later (_jobs_later_idx).
-- Again: a job it made due waits no more, so a second call changes none
-- of them; more than max_rows match: call it until it answers 0.
CREATE OR REPLACE FUNCTION fenceq.retry_jobs(
    queue text, job_ids text[] DEFAULT NULL, task text DEFAULT NULL, payload_contains jsonb DEFAULT NULL,
    error_contains text DEFAULT NULL, max_rows integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_needle text := lower(retry_jobs.error_contains);
    v_ids text[];
    v_now timestamptz;
    v_changed integer;
BEGIN
    PERFORM fenceq._check_bulk(retry_jobs.queue, retry_jobs.job_ids, retry_jobs.task, retry_jobs.payload_contains,
                               retry_jobs.error_contains, retry_jobs.max_rows);
    v_now := clock_timestamp();
    SELECT coalesce(array_agg(l.job_id), '{}') INTO v_ids FROM (
        SELECT j.job_id FROM fenceq._jobs AS j
         WHERE j.job_id IN (
                SELECT m.job_id FROM (
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE retry_jobs.job_ids IS NOT NULL AND c.job_id = ANY (retry_jobs.job_ids)
                    UNION ALL
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE retry_jobs.job_ids IS NULL AND c.queue = retry_jobs.queue
                       AND c.status = 'pending' AND c.scheduled AND c.run_at > v_now) AS m
                 WHERE m.queue = retry_jobs.queue AND m.status = 'pending' AND m.attempts > 0
                   AND m.blocked_by IS NULL AND m.run_at > v_now
                   AND (retry_jobs.task IS NULL OR m.task = retry_jobs.task)
                   AND (retry_jobs.payload_contains IS NULL OR m.payload @> retry_jobs.payload_contains)
                   AND (v_needle IS NULL OR strpos(lower(m.last_error), v_needle) > 0)
                 ORDER BY m.run_at, m.job_id
                 LIMIT retry_jobs.max_rows)
         ORDER BY j.job_id
           FOR UPDATE) AS l;
    v_now := clock_timestamp();
    WITH retried AS (
        UPDATE fenceq._jobs AS j
           SET run_at = v_now, scheduled = false  -- due now: ready (part 1c)
         WHERE j.job_id = ANY (v_ids)
           AND j.status = 'pending' AND j.attempts > 0 AND j.blocked_by IS NULL AND j.run_at > v_now
        RETURNING j.job_id, j.queue)
    INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
    SELECT r.job_id, r.queue, clock_timestamp(), 'retry_forced', NULL, NULL,
           fenceq._action_detail('retry_jobs', jsonb_build_object(
               'job_ids', cardinality(retry_jobs.job_ids), 'task', retry_jobs.task,
               'payload_contains', retry_jobs.payload_contains, 'error_contains', retry_jobs.error_contains))
      FROM retried AS r
     ORDER BY r.job_id;
    GET DIAGNOSTICS v_changed = ROW_COUNT;
    IF v_changed > 0 THEN
        PERFORM fenceq._notify_jobs(retry_jobs.queue);
    END IF;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION fenceq.retry_jobs(text, text[], text, jsonb, text, integer) IS
    'Make due now up to max_rows pending jobs of a queue waiting for a retry (attempts > 0, run_at ahead, not blocked) that match job_ids, task, payload_contains and error_contains; each gets a retry_forced event. Returns how many changed. QF100 without job ids or a filter. Admins only.';

-- cancel_jobs: cancel_matching's rule for a selection: the queue's pending
-- jobs (with include_claimed, also its claimed ones: a cancel request, or
-- with force a cancel at once, which kills the fence; a claimed job whose
-- cancel is already requested changes only with force) that match job_ids,
-- task and payload_contains (@>), each as cancel would, oldest (first
-- submitted) first, at most max_rows. Answers how many changed, not
-- counting dependents cancelled with them (§16); a fenceq_control
-- notification for each claimed one. Each change is one event as cancel
-- writes it ('cancelled' with its reason, or 'cancel_requested') with the
-- action's detail. force without include_claimed: QF100. Admins only.
-- (cancel_matching stays as it is.)
-- Locking: the chosen jobs' rows in job id order (cancel_matching's), judged
-- again once locked; it waits for a row another call holds.
-- Again: a cancelled job, or a claimed one whose cancel is requested
-- (without force), no longer matches; call it until it answers 0.
CREATE OR REPLACE FUNCTION fenceq.cancel_jobs(
    queue text, job_ids text[] DEFAULT NULL, task text DEFAULT NULL, payload_contains jsonb DEFAULT NULL,
    include_claimed boolean DEFAULT false, force boolean DEFAULT false, max_rows integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_detail jsonb;
    v_ids text[];
    v_id text;
    v_job fenceq._jobs;
    v_after bigint;
    v_changed integer := 0;
BEGIN
    PERFORM fenceq._check_bulk(cancel_jobs.queue, cancel_jobs.job_ids, cancel_jobs.task,
                               cancel_jobs.payload_contains, NULL, cancel_jobs.max_rows);
    IF cancel_jobs.include_claimed IS NULL OR cancel_jobs.force IS NULL THEN
        PERFORM fenceq._raise('QF100', 'include_claimed and force are required');
    END IF;
    IF cancel_jobs.force AND NOT cancel_jobs.include_claimed THEN
        PERFORM fenceq._raise('QF100', 'force applies to claimed jobs: it needs include_claimed');
    END IF;
    v_detail := fenceq._action_detail('cancel_jobs', jsonb_build_object(
        'job_ids', cardinality(cancel_jobs.job_ids), 'task', cancel_jobs.task,
        'payload_contains', cancel_jobs.payload_contains, 'include_claimed', cancel_jobs.include_claimed,
        'force', cancel_jobs.force));
    SELECT coalesce(array_agg(l.job_id ORDER BY l.job_id), '{}') INTO v_ids FROM (
        SELECT j.job_id FROM fenceq._jobs AS j
         WHERE j.job_id IN (
                SELECT m.job_id FROM (
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE cancel_jobs.job_ids IS NOT NULL AND c.job_id = ANY (cancel_jobs.job_ids)
                    UNION ALL
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE cancel_jobs.job_ids IS NULL AND c.queue = cancel_jobs.queue AND c.status = 'pending'
                    UNION ALL
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE cancel_jobs.job_ids IS NULL AND cancel_jobs.include_claimed
                       AND c.queue = cancel_jobs.queue AND c.status = 'claimed') AS m
                 WHERE m.queue = cancel_jobs.queue
                   AND (m.status = 'pending'
                        OR (cancel_jobs.include_claimed AND m.status = 'claimed'
                            AND (cancel_jobs.force OR NOT m.cancel_requested)))
                   AND (cancel_jobs.task IS NULL OR m.task = cancel_jobs.task)
                   AND (cancel_jobs.payload_contains IS NULL OR m.payload @> cancel_jobs.payload_contains)
                 ORDER BY m.seq
                 LIMIT cancel_jobs.max_rows)
           -- Judged again on the row as it is once locked.
           AND (j.status = 'pending'
                OR (cancel_jobs.include_claimed AND j.status = 'claimed'
                    AND (cancel_jobs.force OR NOT j.cancel_requested)))
         ORDER BY j.job_id
           FOR UPDATE) AS l;
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = v_id;
        -- A job of the selection that depends on one cancelled just before
        -- was cancelled with it: nothing is left to do.
        CONTINUE WHEN v_job.status NOT IN ('pending', 'claimed');
        v_after := (SELECT max(e.seq) FROM fenceq._events AS e WHERE e.job_id = v_id);
        PERFORM fenceq._record_action(v_id, v_after, fenceq._cancel_locked(v_job, cancel_jobs.force),
            CASE WHEN v_job.status = 'pending' THEN jsonb_build_object('reason', 'cancel')
                 WHEN cancel_jobs.force THEN jsonb_build_object('reason', 'force')
                 ELSE '{}' END || v_detail);
        IF v_job.status = 'claimed' THEN
            PERFORM pg_notify('fenceq_control', v_id);
        END IF;
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION fenceq.cancel_jobs(text, text[], text, jsonb, boolean, boolean, integer) IS
    'Cancel, as cancel would, up to max_rows pending (with include_claimed, also claimed) jobs of a queue matching job_ids, task and payload_contains, oldest first; each change is one event with who and which filter. Returns how many changed. QF100 without job ids or a filter. Admins only.';

-- replay_dead_letters: replay, as replay_dead_letter would, the unhandled
-- dead letters of the queue's failed jobs that match job_ids, task,
-- payload_contains (@>) and error_contains (a case-insensitive substring
-- of last_error), oldest letter first, at most max_rows. A job whose
-- active key another active job holds now (one replayed just before, say)
-- is skipped, where replay_dead_letter would raise QF202. Answers how many
-- jobs were replayed; each gets one 'replayed' event with the action's
-- detail. Admins only.
-- Locking: the letters' rows in letter id order, then the advisory locks of
-- their jobs' active keys (all at once, in _lock_identities' order), then
-- each job's row: replay_dead_letter's order. Without job ids it reads the
-- queue's unhandled letters (_dead_letters_unhandled_idx).
-- Again: a replayed letter is handled, so a second call replays it no more;
-- call it until it answers 0.
CREATE OR REPLACE FUNCTION fenceq.replay_dead_letters(
    queue text, job_ids text[] DEFAULT NULL, task text DEFAULT NULL, payload_contains jsonb DEFAULT NULL,
    error_contains text DEFAULT NULL, max_rows integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_needle text := lower(replay_dead_letters.error_contains);
    v_detail jsonb;
    v_letters text[];
    v_letter fenceq._dead_letters;
    v_job fenceq._jobs;
    v_after bigint;
    v_changed integer := 0;
BEGIN
    PERFORM fenceq._check_bulk(replay_dead_letters.queue, replay_dead_letters.job_ids, replay_dead_letters.task,
                               replay_dead_letters.payload_contains, replay_dead_letters.error_contains,
                               replay_dead_letters.max_rows);
    v_detail := fenceq._action_detail('replay_dead_letters', jsonb_build_object(
        'job_ids', cardinality(replay_dead_letters.job_ids), 'task', replay_dead_letters.task,
        'payload_contains', replay_dead_letters.payload_contains,
        'error_contains', replay_dead_letters.error_contains));
    SELECT coalesce(array_agg(l.dlq_id), '{}') INTO v_letters FROM (
        SELECT d.dlq_id FROM fenceq._dead_letters AS d
         WHERE d.dlq_id IN (
                SELECT m.dlq_id FROM (
                    SELECT c.dlq_id, c.job_id, c.failed_at FROM fenceq._dead_letters AS c
                     WHERE replay_dead_letters.job_ids IS NOT NULL AND c.job_id = ANY (replay_dead_letters.job_ids)
                       AND c.replayed_at IS NULL AND c.discarded_at IS NULL
                    UNION ALL
                    SELECT c.dlq_id, c.job_id, c.failed_at FROM fenceq._dead_letters AS c
                     WHERE replay_dead_letters.job_ids IS NULL AND c.queue = replay_dead_letters.queue
                       AND c.replayed_at IS NULL AND c.discarded_at IS NULL) AS m
                  JOIN fenceq._jobs AS j ON j.job_id = m.job_id
                 WHERE j.queue = replay_dead_letters.queue AND j.status = 'failed'
                   AND (replay_dead_letters.task IS NULL OR j.task = replay_dead_letters.task)
                   AND (replay_dead_letters.payload_contains IS NULL
                        OR j.payload @> replay_dead_letters.payload_contains)
                   AND (v_needle IS NULL OR strpos(lower(j.last_error), v_needle) > 0)
                 ORDER BY m.failed_at, m.dlq_id
                 LIMIT replay_dead_letters.max_rows)
           AND d.replayed_at IS NULL AND d.discarded_at IS NULL
         ORDER BY d.dlq_id
           FOR UPDATE) AS l;
    PERFORM fenceq._lock_identities(ARRAY(
        SELECT k.key FROM fenceq._dead_letters AS d
          JOIN fenceq._jobs AS j ON j.job_id = d.job_id
         CROSS JOIN LATERAL unnest(fenceq._identity_keys(j.queue, j.active_key, NULL, NULL)) AS k(key)
         WHERE d.dlq_id = ANY (v_letters) AND j.active_key IS NOT NULL));
    FOR v_letter IN
        SELECT d.* FROM fenceq._dead_letters AS d WHERE d.dlq_id = ANY (v_letters) ORDER BY d.failed_at, d.dlq_id
    LOOP
        SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id FOR UPDATE;
        CONTINUE WHEN v_job.status IS DISTINCT FROM 'failed';
        CONTINUE WHEN v_job.active_key IS NOT NULL
            AND EXISTS (SELECT 1 FROM fenceq._jobs AS a
                         WHERE a.queue = v_job.queue AND a.active_key = v_job.active_key
                           AND a.status IN ('pending', 'claimed'));
        v_after := (SELECT max(e.seq) FROM fenceq._events AS e WHERE e.job_id = v_job.job_id);
        IF fenceq.replay_dead_letter(v_letter.dlq_id) IS NOT NULL THEN
            PERFORM fenceq._record_action(v_job.job_id, v_after, 'replayed',
                                          jsonb_build_object('dlq_id', v_letter.dlq_id) || v_detail);
            v_changed := v_changed + 1;
        END IF;
    END LOOP;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION fenceq.replay_dead_letters(text, text[], text, jsonb, text, integer) IS
    'Replay, as replay_dead_letter would, up to max_rows unhandled dead letters of a queue''s failed jobs matching job_ids, task, payload_contains and error_contains, oldest first, skipping a job whose active key is held; each replay is one event with who and which filter. Returns how many jobs were replayed. QF100 without job ids or a filter. Admins only.';
