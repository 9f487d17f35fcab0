-- fenceq for SQLite: fail -- record a failed attempt of a live claim.
--
-- With retry and attempts left: pending again at retry_at, or at now +
-- min(backoff_base * backoff_factor^(attempt-1), backoff_max) (compared in
-- logarithms first, so it never overflows); otherwise failed, with a dead
-- letter written in the same transaction when the queue keeps them. The
-- job keeps the error (its first 65,536 characters) as last_error. True
-- once; false for a stale, expired, terminal or cancel-requested fence.
-- Events retried or failed (+ dead_lettered); a dispatch the claim had
-- ends with it.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :error TEXT; :retry
-- INTEGER 0/1 (NULL = 1); :retry_at UTC TEXT 'YYYY-MM-DDTHH:MM:SS.ffffffZ'
-- or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that a retry time beyond year 9999 raises
-- 22008, no fenceq_jobs notification is sent, and a NULL retry means true
-- (PostgreSQL refuses an explicit NULL with QF100).
{{error_table}}
{{fence_check}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF100' AS sqlstate, 'fenceq: error is required' AS message
     WHERE NOT (typeof(:error) = 'text' AND instr(CAST(:error AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF100', 'fenceq: retry must be a boolean'
     WHERE NOT {{optional_integer(:retry, IN (0, 1))}}
    UNION ALL SELECT 3, 'QF105', 'fenceq: retry_at must be UTC text within years 0001-9999'
     WHERE NOT {{optional_utc_text(:retry_at)}}
) WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error) ORDER BY rank LIMIT 1;
{{fence_decision}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_retry (
    seq INTEGER PRIMARY KEY, requeue INTEGER NOT NULL, backoff INTEGER, dlq_id TEXT,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_retry;
INSERT INTO temp.fenceq_retry (seq, requeue, backoff, dlq_id, now)
SELECT c.seq, c.requeue,
       CASE WHEN c.requeue
            THEN {{backoff(c)}} END,
       CASE WHEN NOT c.requeue AND c.dead_letter THEN lower(hex(randomblob(16))) END,
       c.now
  FROM (SELECT j.seq, coalesce(:retry, 1) AND j.attempts < j.max_attempts AS requeue, j.attempts,
               q.backoff_base, q.backoff_factor, q.backoff_max, q.dead_letter, f.now
          FROM temp.fenceq_fence AS f
          JOIN fenceq__jobs AS j ON j.seq = f.seq
          JOIN fenceq__queues AS q ON q.queue = j.queue
         WHERE f.live AND NOT f.cancel_requested) AS c
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT '22008', 'fenceq: the retry time is after year 9999'
  FROM temp.fenceq_retry AS r
 WHERE r.requeue AND :retry_at IS NULL AND r.backoff > 253402300799999999 - r.now
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET status = 'pending',
       run_at = coalesce({{utc_text_micros(:retry_at)}}, r.now + r.backoff),
       -- In back-off, or retried at a time still ahead: waits apart (version 5).
       scheduled = coalesce({{utc_text_micros(:retry_at)}}, r.now + r.backoff) > r.now,
       last_error = substr(:error, 1, 65536),
       owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
       budget_expires_at = NULL, pid = NULL
  FROM temp.fenceq_retry AS r
 WHERE fenceq__jobs.seq = r.seq AND r.requeue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET status = 'failed', last_error = substr(:error, 1, 65536), finished_at = r.now, dlq_id = r.dlq_id
  FROM temp.fenceq_retry AS r
 WHERE fenceq__jobs.seq = r.seq AND NOT r.requeue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{dead_letters_from(temp.fenceq_retry)}}
{{failed_events(temp.fenceq_retry, r.requeue, :error, {{by(:generation, :owner_id)}})}}
-- A job that failed for good takes its dependents with it.
{{cancel_dependents(
    SELECT j.job_id FROM temp.fenceq_retry AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
     WHERE NOT r.requeue,
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN EXISTS (SELECT 1 FROM temp.fenceq_retry) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
