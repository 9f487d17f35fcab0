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
