-- fenceq for SQLite: acknowledge_cancel -- the worker confirms a requested cancellation.
--
-- Needs the live fence and a pending cancel request: the job becomes
-- cancelled, its lease and pid are cleared and its active key freed, and
-- every job that depends on it is cancelled too (a dispatch it had ends
-- with the claim). Event cancelled (reason acknowledged). False otherwise.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
{{error_table}}
{{fence_check}}
{{fence_decision}}
UPDATE fenceq__jobs
   SET status = 'cancelled', lease_expires_at = NULL, pid = NULL, finished_at = f.now
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND f.cancel_requested
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{history_event(
    temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq,
    f.live AND f.cancel_requested AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'cancelled', {{by(:generation, :owner_id)}},
    '{"reason":"acknowledged"}',
    f.now)}}
-- A cancelled job takes its dependents with it.
{{cancel_dependents(
    SELECT j.job_id FROM temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq
     WHERE f.live AND f.cancel_requested,
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT f.live AND f.cancel_requested FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
