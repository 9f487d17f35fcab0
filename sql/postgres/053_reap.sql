-- fenceq for PostgreSQL, part 5: reap, which settles what nobody settled.
--
-- What it holds: reap and _requeue_at (where a job whose lease lapsed
-- re-enters its queue, by the queue's requeue_priority).
-- What it writes: expired claims (cancelled, back to pending, or failed
-- with a dead letter through _retry_or_fail, 052_settle.sql) and overdue
-- pending jobs (expired) in _jobs, the dependents of the jobs it ends
-- (045_dependencies.sql), _events for queues with history on (part 8b),
-- and the notifications fenceq_jobs and fenceq_done.
-- Who calls it: any worker (the fenceq_worker role, part 9) or a scheduled
-- job (docs/dba.md §3), as often as it likes: reapers anywhere never
-- settle a row twice.

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
