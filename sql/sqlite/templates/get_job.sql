-- fenceq for SQLite: get_job -- one job as the fenceq_jobs view shows it, or no row.
--
-- Parameters: :job_id TEXT (1 to 36 characters).
-- Result: zero or one row (sqlstate, message, detail, then the columns of
-- fenceq_jobs: timestamps as UTC text, booleans 0/1, JSON as text), or one
-- error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
-- The error row's columns are the view's, all NULL (joined on a key no job
-- has), so both halves follow the view, also an earlier version's.
SELECT 'QF102' AS sqlstate, 'fenceq: job_id must be 1 to 36 characters' AS message, NULL AS detail, j.*
  FROM (SELECT 1) LEFT JOIN fenceq_jobs AS j ON j.job_id = NULL
 WHERE NOT {{identifier(:job_id, 36)}}
UNION ALL
SELECT NULL, NULL, NULL, j.*
  FROM fenceq_jobs AS j
 WHERE j.job_id = :job_id AND {{identifier(:job_id, 36)}};
