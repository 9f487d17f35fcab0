-- fenceq for PostgreSQL, part 8d (version 7): bounded search of the jobs
-- (docs/design-v7.md §3, docs/guarantees.md §21). Read-only: it writes
-- nothing and locks no row.

-- search_jobs: jobs matching every filter given, newest (highest seq)
-- first, at most max_rows (1 to 1,000), only those with seq below
-- before_seq when given (the next page: the last row's seq). Bounded both
-- ways: the candidates come from one index range, chosen by the filters,
-- and at most max_scan (1 to 1,000,000) of them are read, whatever the
-- other filters then keep; when the range holds more, the rest are not
-- seen (narrow it: a longer prefix, an earlier until). The ranges:
--   * submission_prefix (1 to 255 characters): the retained submission ids
--     that start with it (the primary key of _submissions, in id order),
--     then their jobs by id;
--   * status 'pending' or 'claimed': those jobs, of the queue or of every
--     queue (their partial indexes, in the index's order);
--   * otherwise a terminal status, since, until or error_contains: the jobs
--     that finished in [since, until) (_jobs_finished_idx), the most
--     recently finished first.
-- With none of these: QF100, never a read of all history. since and until
-- bound when a job finished: with status 'pending' or 'claimed', QF100.
-- payload_contains is jsonb containment (@>) as cancel_matching uses it,
-- with its checks; error_contains (1 to 1,000 characters) a case-
-- insensitive substring of last_error, taken literally. QF101 for an
-- unknown queue. No row: nothing matched in what was read.
-- Locking: none; it reads under the statement's snapshot and writes nothing.
CREATE OR REPLACE FUNCTION fenceq.search_jobs(
    queue text DEFAULT NULL, status text DEFAULT NULL, task text DEFAULT NULL,
    payload_contains jsonb DEFAULT NULL, error_contains text DEFAULT NULL, submission_prefix text DEFAULT NULL,
    since timestamptz DEFAULT NULL, until timestamptz DEFAULT NULL, before_seq bigint DEFAULT NULL,
    max_rows integer DEFAULT 50, max_scan integer DEFAULT 10000)
RETURNS SETOF fenceq.job_search_row
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_range text;
    v_prefix_end text;
    v_needle text := lower(search_jobs.error_contains);
BEGIN
    PERFORM fenceq._check_name(search_jobs.queue, 'queue', nullable => true);
    IF search_jobs.status NOT IN ('pending', 'claimed', 'completed', 'failed', 'cancelled', 'expired') THEN
        PERFORM fenceq._raise('QF100', 'status must be a job status');
    END IF;
    PERFORM fenceq._check_name(search_jobs.task, 'task', nullable => true);
    IF jsonb_typeof(search_jobs.payload_contains) NOT IN ('object', 'array') THEN
        PERFORM fenceq._raise('QF100', 'payload_contains must be a JSON object or array');
    END IF;
    PERFORM fenceq._check_json(search_jobs.payload_contains, 'payload_contains');
    PERFORM fenceq._check_name(search_jobs.error_contains, 'error_contains', max_length => 1000,
                               nullable => true, code => 'QF100');
    PERFORM fenceq._check_name(search_jobs.submission_prefix, 'submission_prefix', nullable => true);
    PERFORM fenceq._check_time(search_jobs.since, 'since');
    PERFORM fenceq._check_time(search_jobs.until, 'until');
    IF search_jobs.max_rows IS NULL OR search_jobs.max_rows NOT BETWEEN 1 AND 1000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be an integer from 1 to 1000');
    END IF;
    IF search_jobs.max_scan IS NULL OR search_jobs.max_scan NOT BETWEEN 1 AND 1000000 THEN
        PERFORM fenceq._raise('QF104', 'max_scan must be an integer from 1 to 1000000');
    END IF;
    IF search_jobs.status IN ('pending', 'claimed')
       AND (search_jobs.since IS NOT NULL OR search_jobs.until IS NOT NULL) THEN
        PERFORM fenceq._raise('QF100', 'since and until bound when a job finished: not with a live status');
    END IF;
    v_range := CASE WHEN search_jobs.submission_prefix IS NOT NULL THEN 'prefix'
                    WHEN search_jobs.status IN ('pending', 'claimed') THEN search_jobs.status
                    WHEN search_jobs.status IS NOT NULL OR search_jobs.since IS NOT NULL
                         OR search_jobs.until IS NOT NULL OR search_jobs.error_contains IS NOT NULL THEN 'finished'
               END;
    IF v_range IS NULL THEN
        PERFORM fenceq._raise('QF100', 'search needs a submission prefix, a status or a time window');
    END IF;
    IF search_jobs.queue IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = search_jobs.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    -- Submission ids are compared byte by byte (COLLATE "C": code point
    -- order) and hold at most 255 characters, so those that start with the
    -- prefix are exactly those from it up to the prefix followed by 256 -
    -- length(prefix) of the greatest code point: a range of the primary key
    -- whatever the plan, where LIKE would need its pattern known when planned.
    v_prefix_end := search_jobs.submission_prefix
                    || repeat(chr(1114111), 256 - length(search_jobs.submission_prefix));
    RETURN QUERY
    SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.status, j.attempts, j.max_attempts,
           coalesce(j.blocked_run_at, j.run_at), j.expires_at, j.owner_id, j.generation, j.lease_expires_at,
           j.budget_expires_at, j.cancel_requested, j.pid, j.result, j.last_error, j.submission_id,
           j.fingerprint, j.active_key, j.dlq_id, j.created_at, j.finished_at, j.concurrency_key,
           coalesce(j.blocked_by, 0), j.progress, j.progress_at, j.seq
      FROM (
        -- One of these reads rows; the others are cut off by their first,
        -- constant condition before they read any.
        (SELECT c.* FROM (SELECT s.job_id FROM fenceq._submissions AS s
                           WHERE v_range = 'prefix'
                             AND s.submission_id >= search_jobs.submission_prefix
                             AND s.submission_id < v_prefix_end
                           ORDER BY s.submission_id
                           LIMIT search_jobs.max_scan) AS s
           JOIN fenceq._jobs AS c ON c.job_id = s.job_id)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'pending' AND search_jobs.queue IS NOT NULL
            AND c.queue = search_jobs.queue AND c.status = 'pending'
          ORDER BY c.queue, c.scheduled, c.priority DESC, c.run_at, c.seq
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'pending' AND search_jobs.queue IS NULL AND c.status = 'pending'
          ORDER BY c.queue, c.scheduled, c.priority DESC, c.run_at, c.seq
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'claimed' AND search_jobs.queue IS NOT NULL
            AND c.queue = search_jobs.queue AND c.status = 'claimed'
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'claimed' AND search_jobs.queue IS NULL AND c.status = 'claimed'
          ORDER BY c.queue
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'finished'
            AND c.finished_at >= coalesce(search_jobs.since, '-infinity')
            AND c.finished_at < coalesce(search_jobs.until, 'infinity')
          ORDER BY c.finished_at DESC
          LIMIT search_jobs.max_scan)) AS j
     WHERE (search_jobs.queue IS NULL OR j.queue = search_jobs.queue)
       AND (search_jobs.status IS NULL OR j.status = search_jobs.status)
       AND (search_jobs.task IS NULL OR j.task = search_jobs.task)
       AND (search_jobs.payload_contains IS NULL OR j.payload @> search_jobs.payload_contains)
       AND (v_needle IS NULL OR strpos(lower(j.last_error), v_needle) > 0)
       AND (search_jobs.since IS NULL OR j.finished_at >= search_jobs.since)
       AND (search_jobs.until IS NULL OR j.finished_at < search_jobs.until)
       AND (search_jobs.before_seq IS NULL OR j.seq < search_jobs.before_seq)
     ORDER BY j.seq DESC
     LIMIT search_jobs.max_rows;
END
$$;
COMMENT ON FUNCTION fenceq.search_jobs(text, text, text, jsonb, text, text, timestamptz, timestamptz, bigint, integer, integer) IS
    'Jobs matching every filter, newest (seq) first, at most max_rows, below before_seq: read from one bounded index range (a submission prefix, the pending or claimed jobs, or the jobs finished in [since, until)), at most max_scan rows of it. QF100 without a prefix, status or time window. Workers and admins.';
