-- fenceq for SQLite: fail -- record a failed attempt of a live claim.
-- Generated from templates/fail.sql by scripts/gen-sqlite: edit the template.
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
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF106', 'fenceq: the fence is malformed'
 WHERE NOT ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
             AND instr(CAST(:job_id AS BLOB), x'00') = 0)
            AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                 AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
            AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
                 AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
            AND typeof(:generation) = 'integer' AND :generation >= 1);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF100' AS sqlstate, 'fenceq: error is required' AS message
     WHERE NOT (typeof(:error) = 'text' AND instr(CAST(:error AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF100', 'fenceq: retry must be a boolean'
     WHERE NOT (:retry IS NULL
                OR (typeof(:retry) = 'integer' AND :retry IN (0, 1)))
    UNION ALL SELECT 3, 'QF105', 'fenceq: retry_at must be UTC text within years 0001-9999'
     WHERE NOT (:retry_at IS NULL
                OR (typeof(:retry_at) = 'text' AND length(:retry_at) = 27
                    AND :retry_at GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                    || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                    || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                    AND substr(:retry_at, 1, 4) <> '0000'
                    AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(:retry_at, 1, 19)), 'unixepoch')
                        = substr(:retry_at, 1, 19)))
) WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_fence (
    seq INTEGER, now INTEGER NOT NULL, live INTEGER NOT NULL, cancel_requested INTEGER);
DELETE FROM temp.fenceq_fence;
-- The decision: the clock is read here, after BEGIN IMMEDIATE took the
-- write lock, and the same reading is used for the write below.
INSERT INTO temp.fenceq_fence (seq, now, live, cancel_requested)
SELECT j.seq, c.now,
       coalesce(j.status = 'claimed' AND j.owner_id = :owner_id AND j.generation = :generation
                AND j.claim_token = :claim_token AND j.lease_expires_at
                    > c.now, 0),
       j.cancel_requested
  FROM (SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000 AS now) AS c
  LEFT JOIN fenceq__jobs AS j ON j.job_id = :job_id
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
CREATE TEMP TABLE IF NOT EXISTS fenceq_retry (
    seq INTEGER PRIMARY KEY, requeue INTEGER NOT NULL, backoff INTEGER, dlq_id TEXT,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_retry;
INSERT INTO temp.fenceq_retry (seq, requeue, backoff, dlq_id, now)
SELECT c.seq, c.requeue,
       CASE WHEN c.requeue
            THEN CASE WHEN c.backoff_base <= 0 THEN 0
                      WHEN ln(c.backoff_base) + max(c.attempts - 1, 0) * ln(c.backoff_factor)
                           >= ln(c.backoff_max) THEN c.backoff_max
                      ELSE CAST(round(c.backoff_base * power(c.backoff_factor, max(c.attempts - 1, 0)))
                                AS INTEGER) END END,
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
       run_at = coalesce((unixepoch(substr(:retry_at, 1, 19)) * 1000000
                          + CAST(substr(:retry_at, 21, 6) AS INTEGER)), r.now + r.backoff),
       -- In back-off, or retried at a time still ahead: waits apart (version 5).
       scheduled = coalesce((unixepoch(substr(:retry_at, 1, 19)) * 1000000
                             + CAST(substr(:retry_at, 21, 6) AS INTEGER)), r.now + r.backoff) > r.now,
       last_error = substr(:error, 1, 65536),
       owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
       budget_expires_at = NULL, pid = NULL
  FROM temp.fenceq_retry AS r
 WHERE fenceq__jobs.seq = r.seq AND r.requeue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET status = 'failed', last_error = substr(:error, 1, 65536), finished_at = r.now, dlq_id = r.dlq_id
  FROM temp.fenceq_retry AS r
 WHERE fenceq__jobs.seq = r.seq AND NOT r.requeue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__dead_letters (dlq_id, job_id, queue, task, error, attempts, failed_at)
SELECT r.dlq_id, j.job_id, j.queue, j.task, j.last_error, j.attempts, r.now
  FROM temp.fenceq_retry AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
 WHERE r.dlq_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, CASE WHEN r.requeue THEN 'retried' ELSE 'failed' END, :generation, :owner_id,
       CASE WHEN r.requeue
            THEN json_object('error', substr(:error, 1, 2000), 'retry_at',
                             strftime('%Y-%m-%dT%H:%M:%S', j.run_at / 1000000 - (j.run_at % 1000000 < 0),
                                      'unixepoch')
                             || printf('.%06dZ', (j.run_at % 1000000 + 1000000) % 1000000))
            ELSE json_object('error', substr(:error, 1, 2000)) END,
       r.now
  FROM temp.fenceq_retry AS r
       JOIN fenceq__jobs AS j ON j.seq = r.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'dead_lettered', :generation, :owner_id,
       json_object('dlq_id', r.dlq_id),
       r.now
  FROM temp.fenceq_retry AS r
       JOIN fenceq__jobs AS j ON j.seq = r.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND r.dlq_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- A job that failed for good takes its dependents with it.
CREATE TEMP TABLE IF NOT EXISTS fenceq_dependents (job_id TEXT PRIMARY KEY, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_dependents;
INSERT INTO temp.fenceq_dependents (job_id, now)
SELECT j.job_id, (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
  FROM fenceq__jobs AS j
 WHERE j.status IN ('pending', 'claimed')
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND j.job_id IN (
       WITH RECURSIVE down(job_id, depth) AS (
           SELECT d.job_id, 1
             FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
            WHERE f.status IN ('failed', 'cancelled', 'expired')
              AND d.depends_on IN (
                  SELECT j.job_id FROM temp.fenceq_retry AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
                   WHERE NOT r.requeue)
           UNION
           SELECT d.job_id, w.depth + 1
             FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
            WHERE w.depth <= 17)
       SELECT w.job_id FROM down AS w);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'cancelled', CASE WHEN j.status = 'claimed' THEN j.generation END,
                                       CASE WHEN j.status = 'claimed' THEN j.owner_id END,
       '{"reason":"dependency_failed"}',
       x.now
  FROM temp.fenceq_dependents AS x JOIN fenceq__jobs AS j ON j.job_id = x.job_id
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.status IN ('pending', 'claimed');
UPDATE fenceq__jobs
   SET status = 'cancelled', last_error = 'dependency_failed', lease_expires_at = NULL, pid = NULL,
       finished_at = x.now
  FROM temp.fenceq_dependents AS x
 WHERE fenceq__jobs.job_id = x.job_id;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN EXISTS (SELECT 1 FROM temp.fenceq_retry) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
