-- fenceq for SQLite: search_jobs -- a page of jobs found through one index range, newest first.
--
-- The candidates come from one index range, at most max_scan (1 to
-- 1,000,000) rows of it, whatever the other filters then keep (when the
-- range holds more, the rest are not seen): with submission_prefix, the
-- retained submission ids that start with it (in id order; exact text, no
-- pattern), then their jobs; else with status pending or claimed, that
-- status's jobs of the queue or of every queue (their partial index, in
-- its order); else with a terminal status, since, until or error_contains,
-- the jobs that finished in [since, until), the most recently finished
-- first. Any other search is QF100: none reads all history. The candidates
-- that match every filter given (queue, status, task, payload_contains as
-- cancel_matching decides it, error_contains as a case-insensitive
-- substring of last_error, since <= finished_at < until, seq < before_seq)
-- are answered as fenceq_jobs shows them with their seq, newest (highest
-- seq) first, at most max_rows (1 to 1,000). The next page: before_seq =
-- the last row's seq. QF102 for a bad queue, task or prefix, QF100 for a
-- bad status or error_contains, QF100/QF103 for payload_contains as in
-- cancel_matching, QF105 for a bad time, QF104 for a before_seq that is not
-- an integer or max_rows or max_scan out of range, QF100 for since or
-- until with a live status (they bound when a job finished), QF101 for an
-- undeclared queue.
--
-- Parameters: :queue, :status, :task TEXT or NULL; :payload_contains
-- canonical JSON TEXT or NULL; :error_contains TEXT or NULL (1 to 1,000
-- characters); :submission_prefix TEXT or NULL; :since, :until UTC TEXT or
-- NULL; :before_seq INTEGER or NULL; :max_rows INTEGER or NULL (50);
-- :max_scan INTEGER or NULL (10000).
-- Result: zero or more rows (sqlstate, message, detail, then the columns
-- of fenceq_jobs and seq), or one error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
--
-- Differs from PostgreSQL in that error_contains folds ASCII letters only
-- (SQLite's lower()), payload_contains may not hold an object or array
-- inside an array (QF100, as in cancel_matching), and a NULL max_rows or
-- max_scan takes its default.
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT (:queue IS NULL OR {{identifier(:queue, 255)}})
    UNION ALL SELECT 2, 'QF100', 'fenceq: status must be pending, claimed, completed, failed, cancelled or expired'
     WHERE NOT coalesce(:status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled', 'expired'), 1)
    UNION ALL SELECT 3, 'QF102', 'fenceq: task must be 1 to 255 characters'
     WHERE NOT (:task IS NULL OR {{identifier(:task, 255)}})
    {{payload_contains_checks(:payload_contains, 4, 5, 6, 7)}}
    UNION ALL SELECT 8, 'QF100', 'fenceq: error_contains must be 1 to 1000 characters'
     WHERE NOT (:error_contains IS NULL
                OR {{identifier(:error_contains, 1000)}})
    UNION ALL SELECT 9, 'QF102', 'fenceq: submission_prefix must be 1 to 255 characters'
     WHERE NOT (:submission_prefix IS NULL
                OR {{identifier(:submission_prefix, 255)}})
    UNION ALL SELECT 10, 'QF105', 'fenceq: since and until must be UTC times within years 0001-9999'
     WHERE NOT {{optional_utc_text(:since)}}
        OR NOT {{optional_utc_text(:until)}}
    UNION ALL SELECT 11, 'QF104', 'fenceq: before_seq must be an integer'
     WHERE NOT (:before_seq IS NULL OR typeof(:before_seq) = 'integer')
    UNION ALL SELECT 12, 'QF104', 'fenceq: max_rows must be an integer from 1 to 1000'
     WHERE NOT {{optional_integer(:max_rows, BETWEEN 1 AND 1000)}}
    UNION ALL SELECT 13, 'QF104', 'fenceq: max_scan must be an integer from 1 to 1000000'
     WHERE NOT {{optional_integer(:max_scan, BETWEEN 1 AND 1000000)}}
    UNION ALL SELECT 14, 'QF100', 'fenceq: since and until bound when a job finished: not with a live status'
     WHERE coalesce(:status IN ('pending', 'claimed'), 0) AND (:since IS NOT NULL OR :until IS NOT NULL)
    UNION ALL SELECT 15, 'QF100', 'fenceq: search needs a submission prefix, a status or a time window'
     WHERE :submission_prefix IS NULL AND :status IS NULL AND :since IS NULL AND :until IS NULL
       AND :error_contains IS NULL
    UNION ALL SELECT 16, 'QF101', 'fenceq: unknown queue'
     WHERE :queue IS NOT NULL AND NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
-- The candidates (seq), from the one index range the search names.
CREATE TEMP TABLE IF NOT EXISTS fenceq_search (seq INTEGER PRIMARY KEY);
DELETE FROM temp.fenceq_search;
-- A prefix: the ids from the prefix up to the prefix followed by byte FF,
-- which no UTF-8 text holds (BINARY compares bytes).
INSERT INTO temp.fenceq_search (seq)
SELECT j.seq
  FROM fenceq__submissions AS s JOIN fenceq__jobs AS j ON j.job_id = s.job_id
 WHERE s.submission_id IN (
       SELECT p.submission_id FROM fenceq__submissions AS p
        WHERE :submission_prefix IS NOT NULL
          AND p.submission_id >= :submission_prefix
          AND p.submission_id < CAST(CAST(:submission_prefix AS BLOB) || x'ff' AS TEXT)
          AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
        ORDER BY p.submission_id
        LIMIT {{row_limit(:max_scan, 10000)}});
-- A live status: its backlog, through its partial index.
{{backlog_candidates('pending', fenceq__jobs_pending_idx, {{pending_order}})}}
{{backlog_candidates('claimed', fenceq__jobs_claimed_idx, {{claimed_order}})}}
-- Else the jobs finished in the window, the most recently finished first.
INSERT INTO temp.fenceq_search (seq)
SELECT j.seq
  FROM fenceq__jobs AS j INDEXED BY fenceq__jobs_finished_idx
 WHERE :submission_prefix IS NULL AND coalesce(:status NOT IN ('pending', 'claimed'), 1)
   AND j.finished_at IS NOT NULL
   AND j.finished_at >= coalesce({{utc_text_micros(:since)}}, -9223372036854775808)
   AND j.finished_at < coalesce({{utc_text_micros(:until)}}, 9223372036854775807)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY j.finished_at DESC
 LIMIT {{row_limit(:max_scan, 10000)}};
SELECT e.sqlstate, e.message, e.detail, NULL AS job_id, NULL AS queue, NULL AS task, NULL AS payload,
       NULL AS priority, NULL AS status, NULL AS attempts, NULL AS max_attempts, NULL AS run_at,
       NULL AS expires_at, NULL AS owner_id, NULL AS generation, NULL AS lease_expires_at,
       NULL AS budget_expires_at, NULL AS cancel_requested, NULL AS pid, NULL AS result, NULL AS last_error,
       NULL AS submission_id, NULL AS fingerprint, NULL AS active_key, NULL AS dlq_id, NULL AS created_at,
       NULL AS finished_at, NULL AS concurrency_key, NULL AS blocked_by, NULL AS progress, NULL AS progress_at,
       NULL AS seq
  FROM temp.fenceq_error AS e
UNION ALL
SELECT * FROM (
    SELECT NULL, NULL, NULL, v.job_id, v.queue, v.task, v.payload, v.priority, v.status, v.attempts,
           v.max_attempts, v.run_at, v.expires_at, v.owner_id, v.generation, v.lease_expires_at,
           v.budget_expires_at, v.cancel_requested, v.pid, v.result, v.last_error, v.submission_id, v.fingerprint,
           v.active_key, v.dlq_id, v.created_at, v.finished_at, v.concurrency_key, v.blocked_by, v.progress,
           v.progress_at, t.seq
      FROM temp.fenceq_search AS c
     CROSS JOIN fenceq__jobs AS t ON t.seq = c.seq
      JOIN fenceq_jobs AS v ON v.job_id = t.job_id
     WHERE (:queue IS NULL OR t.queue = :queue)
       AND (:status IS NULL OR t.status = :status)
       AND (:task IS NULL OR t.task = :task)
       AND {{payload_contains(t, :payload_contains)}}
       AND {{error_contains(t)}}
       AND (:since IS NULL OR t.finished_at >= {{utc_text_micros(:since)}})
       AND (:until IS NULL OR t.finished_at < {{utc_text_micros(:until)}})
       AND (:before_seq IS NULL OR t.seq < :before_seq)
     ORDER BY t.seq DESC
     LIMIT {{row_limit(:max_rows, 50)}})
 ORDER BY 32 DESC;
