-- fenceq for SQLite: get_job_events -- a job's history, in order.
--
-- The rows of fenceq_job_events for the job, by seq; none for an unknown
-- job or one whose queue never kept history.
--
-- Parameters: :job_id TEXT (1 to 36 characters).
-- Result: zero or more rows (sqlstate, message, detail, then job_id, seq,
-- at (UTC text), event, generation, owner_id, detail (JSON object text)),
-- or one error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
SELECT 'QF102' AS sqlstate, 'fenceq: job_id must be 1 to 36 characters' AS message, NULL AS detail,
       NULL AS job_id, NULL AS seq, NULL AS at, NULL AS event, NULL AS generation, NULL AS owner_id,
       NULL AS detail
 WHERE NOT {{identifier(:job_id, 36)}}
UNION ALL
SELECT NULL, NULL, NULL, e.job_id, e.seq, e.at, e.event, e.generation, e.owner_id, e.detail
  FROM fenceq_job_events AS e
 WHERE e.job_id = :job_id AND {{identifier(:job_id, 36)}}
 ORDER BY 5;
