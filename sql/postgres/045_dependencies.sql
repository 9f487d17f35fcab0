-- fenceq for PostgreSQL, part 4b: dependencies between jobs (docs/guarantees.md §16).
--
-- submit(depends_on => ...) names jobs that must complete before the new job
-- may be claimed. Until then the job is pending with blocked_by > 0 and
-- run_at 'infinity' (so claims pass over it as over a job due later). When a
-- dependency completes, _settle_dependents counts it off in the same
-- transaction and a dependent whose count reaches zero becomes due; when one
-- ends failed, cancelled or expired, every job that depends on it,
-- transitively, is cancelled with last_error 'dependency_failed'.
--
-- Bounds keep each of those transactions bounded: at most 100 dependencies
-- per job, at most 1000 dependents per job, and chains at most 16 deep.

-- _check_dependencies: a submit's depends_on, validated and made canonical
-- (distinct, sorted by code point; an empty array is no dependencies). A
-- self-dependency is QF100. Pure: reads nothing.
CREATE OR REPLACE FUNCTION fenceq._check_dependencies(depends_on text[], job_id text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_ids text[];
BEGIN
    IF cardinality(_check_dependencies.depends_on) = 0 THEN
        RETURN NULL;
    END IF;
    IF array_ndims(_check_dependencies.depends_on) <> 1 THEN
        PERFORM fenceq._raise('QF100', 'depends_on must be a one-dimensional array');
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(_check_dependencies.depends_on) AS d(id)
                WHERE NOT coalesce(length(d.id) BETWEEN 1 AND 36, false)) THEN
        PERFORM fenceq._raise('QF102', 'depends_on must hold job ids of 1 to 36 characters');
    END IF;
    v_ids := ARRAY(SELECT DISTINCT d.id COLLATE "C" FROM unnest(_check_dependencies.depends_on) AS d(id)
                    ORDER BY 1);
    IF cardinality(v_ids) > 100 THEN
        PERFORM fenceq._raise('QF100', 'a job may depend on at most 100 jobs');
    END IF;
    IF _check_dependencies.job_id = ANY (v_ids) THEN
        PERFORM fenceq._raise('QF100', 'a job cannot depend on itself');
    END IF;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION fenceq._check_dependencies(text[], text) IS
    'Private. A submit''s depends_on validated and canonical (distinct, sorted); QF100/QF102 otherwise.';

-- _lock_dependencies: lock the named dependencies FOR SHARE, in id order,
-- so that none can finish while the dependent is being submitted (a
-- finishing job waits for this transaction, then sees the new edge), and
-- judge them: how many are not completed yet, and whether one already
-- failed, was cancelled or expired. A dependency that is neither a job nor
-- an element of the submit_batch being run (fenceq.batch_job_ids) is QF100,
-- as are graphs past the bounds (1000 dependents per job, 16 deep).
CREATE OR REPLACE FUNCTION fenceq._lock_dependencies(depends_on text[])
RETURNS TABLE(blocked_by integer, failed boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_found text[];
    v_statuses text[];
    v_batch text[];
    v_missing integer;
    v_depth integer;
BEGIN
    SELECT array_agg(j.job_id), array_agg(j.status) INTO v_found, v_statuses FROM (
        SELECT j.job_id, j.status FROM fenceq._jobs AS j
         WHERE j.job_id = ANY (_lock_dependencies.depends_on)
         ORDER BY j.job_id
           FOR SHARE) AS j;
    v_batch := ARRAY(SELECT jsonb_array_elements_text(
        coalesce(nullif(current_setting('fenceq.batch_job_ids', true), ''), '[]')::jsonb));
    SELECT count(*) INTO v_missing FROM unnest(_lock_dependencies.depends_on) AS d(id)
     WHERE d.id <> ALL (coalesce(v_found, '{}'));
    IF EXISTS (SELECT 1 FROM unnest(_lock_dependencies.depends_on) AS d(id)
                WHERE d.id <> ALL (coalesce(v_found, '{}')) AND d.id <> ALL (v_batch)) THEN
        PERFORM fenceq._raise('QF100', 'a dependency names no job');
    END IF;
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (_lock_dependencies.depends_on)
                GROUP BY d.depends_on HAVING count(*) >= 1000) THEN
        PERFORM fenceq._raise('QF100', 'a job may have at most 1000 dependents');
    END IF;
    WITH RECURSIVE up(job_id, depth) AS (
        SELECT d.id COLLATE "C", 1 FROM unnest(_lock_dependencies.depends_on) AS d(id)
        UNION
        SELECT e.depends_on, u.depth + 1 FROM up AS u JOIN fenceq._dependencies AS e ON e.job_id = u.job_id
         WHERE u.depth <= 16)
    SELECT max(u.depth) INTO v_depth FROM up AS u;
    IF v_depth > 16 THEN
        PERFORM fenceq._raise('QF100', 'dependency chains may be at most 16 deep');
    END IF;
    blocked_by := v_missing + (SELECT count(*) FROM unnest(v_statuses) AS s(status)
                                WHERE s.status IN ('pending', 'claimed'));
    failed := coalesce('failed' = ANY (v_statuses) OR 'cancelled' = ANY (v_statuses)
                       OR 'expired' = ANY (v_statuses), false);
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION fenceq._lock_dependencies(text[]) IS
    'Private. Lock a submit''s dependencies FOR SHARE and count the unfinished ones; QF100 for unknown ones or graphs past the bounds.';

-- _json_text_array: a submit_batch field that is a JSON array of strings.
CREATE OR REPLACE FUNCTION fenceq._json_text_array(value jsonb, what text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF _json_text_array.value IS NULL OR jsonb_typeof(_json_text_array.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_text_array.value) <> 'array' THEN
        PERFORM fenceq._raise('QF100', _json_text_array.what || ' must be a JSON array');
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(_json_text_array.value) AS e
                WHERE jsonb_typeof(e.value) <> 'string') THEN
        PERFORM fenceq._raise('QF102', _json_text_array.what || ' must hold strings');
    END IF;
    RETURN ARRAY(SELECT jsonb_array_elements_text(_json_text_array.value));
END
$$;
COMMENT ON FUNCTION fenceq._json_text_array(jsonb, text) IS
    'Private. A JSON array of strings as text[] (NULL for null); QF100/QF102 otherwise.';

-- _check_batch_graph: before submit_batch runs its elements, publish the
-- batch's explicit job ids (fenceq.batch_job_ids, transaction-local) so an
-- element may depend on an element after it, and refuse a cycle among the
-- elements (QF100, DETAIL: the index of the first element on or behind it;
-- also for a chain inside the batch deeper than the bound).
CREATE OR REPLACE FUNCTION fenceq._check_batch_graph(requests jsonb)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_cyclic bigint;
    v_from bigint[];
    v_to bigint[];
    v_left bigint[];
    v_round integer;
BEGIN
    PERFORM set_config('fenceq.batch_job_ids', coalesce((
        SELECT jsonb_agg(r.value ->> 'job_id') FROM jsonb_array_elements(_check_batch_graph.requests) AS r
         WHERE jsonb_typeof(r.value) = 'object' AND jsonb_typeof(r.value -> 'job_id') = 'string'), '[]')::text,
        true);
    -- Peel off, round by round, the elements with no dependency left inside
    -- the batch. Chains are at most 16 deep, so 17 rounds peel every element
    -- of a sound batch; what is left lies on a cycle, behind one, or too deep.
    SELECT array_agg(n.i), array_agg(t.i) INTO v_from, v_to
      FROM jsonb_array_elements(_check_batch_graph.requests) WITH ORDINALITY AS n(value, i)
     CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.value -> 'depends_on') = 'array'
                                                       THEN n.value -> 'depends_on' ELSE '[]' END) AS d(id)
      JOIN jsonb_array_elements(_check_batch_graph.requests) WITH ORDINALITY AS t(value, i)
        ON jsonb_typeof(t.value) = 'object' AND t.value ->> 'job_id' = d.id AND t.i <> n.i
     WHERE jsonb_typeof(n.value) = 'object';
    IF v_from IS NULL THEN
        RETURN;
    END IF;
    v_left := ARRAY(SELECT DISTINCT x FROM unnest(v_from) AS x);
    FOR v_round IN 1 .. 17 LOOP
        v_left := ARRAY(SELECT DISTINCT e.f FROM unnest(v_from, v_to) AS e(f, t) WHERE e.t = ANY (v_left));
        EXIT WHEN cardinality(v_left) = 0;
    END LOOP;
    v_cyclic := (SELECT min(x) - 1 FROM unnest(v_left) AS x);
    IF v_cyclic IS NOT NULL THEN
        PERFORM set_config('fenceq.batch_index', v_cyclic::text, true);
        PERFORM fenceq._raise('QF100', 'the batch''s dependencies form a cycle or a chain deeper than 16');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_batch_graph(jsonb) IS
    'Private. Publish a batch''s explicit job ids for its dependencies and refuse a cycle among its elements (QF100).';

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
