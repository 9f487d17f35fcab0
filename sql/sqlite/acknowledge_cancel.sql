-- fenceq for SQLite: acknowledge_cancel -- the worker confirms a requested cancellation.
-- Generated from templates/acknowledge_cancel.sql by scripts/gen-sqlite: edit the template.
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
UPDATE fenceq__jobs
   SET status = 'cancelled', lease_expires_at = NULL, pid = NULL, finished_at = f.now
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND f.cancel_requested
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'cancelled', :generation, :owner_id,
       '{"reason":"acknowledged"}',
       f.now
  FROM temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND f.live AND f.cancel_requested AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- A cancelled job takes its dependents with it.
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
                  SELECT j.job_id FROM temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq
                   WHERE f.live AND f.cancel_requested)
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
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT f.live AND f.cancel_requested FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
