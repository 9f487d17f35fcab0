-- fenceq for SQLite: retry_jobs -- make the jobs of a queue that wait for a retry due now.
--
-- The pending jobs of :queue that wait for a retry (attempts > 0, run_at
-- still ahead, not waiting on dependencies) among the selection job_ids
-- (when given) that match every filter given (task, payload_contains as
-- cancel_matching decides it, error_contains as a case-insensitive
-- substring of last_error) become due now; soonest due first, at most
-- max_rows (1 to 100,000). A job id not in the queue is ignored.
-- Each job changed gets the event retry_forced, whatever the queue's
-- history setting, with detail {"action", "by", "filter"} (the arguments
-- given, job_ids as their number). Answers how many jobs changed. Bad
-- input changes nothing: QF102 for a bad queue or task or a job id that
-- is not 1 to 255 characters, QF100 for job_ids that are not an array of
-- 1 to 10,000 elements, a bad error_contains or a call with neither
-- job_ids nor a filter, QF100/QF103 for payload_contains as in
-- cancel_matching, QF104 for max_rows out of range, QF101 for an
-- undeclared queue.
--
-- Parameters: :queue TEXT; :job_ids JSON array TEXT or NULL; :task TEXT
-- or NULL; :payload_contains canonical JSON TEXT or NULL; :error_contains
-- TEXT or NULL (1 to 1,000 characters); :max_rows INTEGER or NULL (1000).
-- Result: one row (sqlstate, message, detail, value INTEGER).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_jobs notification is sent, an
-- event's by is null (SQLite has no users), error_contains folds ASCII
-- letters only, payload_contains may not hold an object or array inside an
-- array (QF100), and a NULL max_rows takes its default.
{{error_table}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_retry_forced (seq INTEGER PRIMARY KEY, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_retry_forced;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{bulk_checks(retry_jobs, :task IS NOT NULL OR :payload_contains IS NOT NULL OR :error_contains IS NOT NULL,
                  {{error_pattern_check}})}}
) ORDER BY rank LIMIT 1;
-- A job that waits for a retry waits in the later set (version 5), by due time.
WITH {{clock}}
INSERT INTO temp.fenceq_retry_forced (seq, now)
SELECT j.seq, clock.now
  FROM clock JOIN fenceq__jobs AS j
 WHERE j.queue = :queue AND j.status = 'pending' AND j.scheduled AND j.run_at > clock.now
   AND j.attempts > 0 AND j.blocked_by IS NULL
   AND {{selected(j)}}
   AND (:task IS NULL OR j.task = :task)
   AND {{payload_contains(j, :payload_contains)}}
   AND {{error_contains(j)}}
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY j.run_at, j.job_id
 LIMIT {{row_limit(:max_rows, 1000)}};
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'retry_forced', NULL, NULL,
       json_object('action', 'retry_jobs', 'by', NULL,
                   'filter', {{failure_filter}}),
       r.now
  FROM temp.fenceq_retry_forced AS r JOIN fenceq__jobs AS j ON j.seq = r.seq;
-- Each job by its rowid (+r.seq: never a scan of the jobs for the scratch rows).
UPDATE fenceq__jobs SET run_at = r.now, scheduled = 0
  FROM temp.fenceq_retry_forced AS r
 WHERE fenceq__jobs.seq = +r.seq;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_retry_forced) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
