-- fenceq for SQLite: release -- hand a live claim back to pending.
--
-- Graceful shutdown or snooze: the job is pending again at run_at (default
-- now), and the claim does not count as an attempt. False for a stale,
-- expired, terminal or cancel-requested fence.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :run_at UTC TEXT
-- 'YYYY-MM-DDTHH:MM:SS.ffffffZ' or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_jobs notification is sent.
{{error_table}}
{{fence_check}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF105', 'fenceq: run_at must be UTC text within years 0001-9999'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT {{optional_utc_text(:run_at)}};
{{fence_decision}}
UPDATE fenceq__jobs
   SET status = 'pending', attempts = attempts - 1,
       run_at = coalesce({{utc_text_micros(:run_at)}}, f.now),
       -- Released for later: waits apart (version 5).
       scheduled = coalesce({{utc_text_micros(:run_at)}}, f.now) > f.now,
       {{cleared_claim}}
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND NOT f.cancel_requested
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT f.live AND NOT f.cancel_requested FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
