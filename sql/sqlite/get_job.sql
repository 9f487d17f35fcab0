-- fenceq for SQLite: get_job -- one job as the fenceq_jobs view shows it, or no row.
-- Generated from templates/get_job.sql by scripts/gen-sqlite: edit the template.
--
-- Parameters: :job_id TEXT (1 to 36 characters).
-- Result: zero or one row (sqlstate, message, detail, then the columns of
-- fenceq_jobs: timestamps as UTC text, booleans 0/1, JSON as text), or one
-- error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
SELECT 'QF102' AS sqlstate, 'fenceq: job_id must be 1 to 36 characters' AS message, NULL AS detail,
       NULL AS job_id, NULL AS queue, NULL AS task, NULL AS payload, NULL AS priority, NULL AS status,
       NULL AS attempts, NULL AS max_attempts, NULL AS run_at, NULL AS expires_at, NULL AS owner_id,
       NULL AS generation, NULL AS lease_expires_at, NULL AS budget_expires_at,
       NULL AS cancel_requested, NULL AS pid, NULL AS result, NULL AS last_error,
       NULL AS submission_id, NULL AS fingerprint, NULL AS active_key, NULL AS dlq_id,
       NULL AS created_at, NULL AS finished_at, NULL AS concurrency_key,
       NULL AS blocked_by
 WHERE NOT (typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
            AND instr(CAST(:job_id AS BLOB), x'00') = 0)
UNION ALL
SELECT NULL, NULL, NULL, j.*
  FROM fenceq_jobs AS j
 WHERE j.job_id = :job_id AND (typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
                               AND instr(CAST(:job_id AS BLOB), x'00') = 0);
