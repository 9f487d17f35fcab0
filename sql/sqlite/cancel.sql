-- fenceq for SQLite: cancel -- cancel a job.
-- Generated from templates/cancel.sql by scripts/gen-sqlite: edit the template.
--
-- Pending -> 'cancelled'. Claimed -> 'cancel_requested' (the worker
-- acknowledges), or 'cancelled' at once with force, which kills the fence.
-- A terminal job answers with its unchanged status; an unknown job NULL.
--
-- Parameters: :job_id TEXT (1 to 36 characters); :force INTEGER 0/1 (NULL = 0).
-- Result: one row (sqlstate, message, detail, value TEXT or NULL).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_control notification is sent
-- (workers see the request through claim_state), and a NULL force means
-- false (PostgreSQL refuses an explicit NULL with QF100).
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_cancel (
    seq INTEGER NOT NULL, answer TEXT NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_cancel;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: job_id must be 1 to 36 characters' AS message
     WHERE NOT (typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
                AND instr(CAST(:job_id AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF100', 'fenceq: force must be a boolean'
     WHERE NOT (:force IS NULL
                OR (typeof(:force) = 'integer' AND :force IN (0, 1)))
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_cancel (seq, answer, now)
SELECT j.seq,
       CASE WHEN j.status = 'pending' OR (j.status = 'claimed' AND coalesce(:force, 0)) THEN 'cancelled'
            WHEN j.status = 'claimed' THEN 'cancel_requested'
            ELSE j.status END,
       (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
  FROM fenceq__jobs AS j
 WHERE j.job_id = :job_id AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, c.answer, CASE WHEN j.status = 'claimed' THEN j.generation END,
                                    CASE WHEN j.status = 'claimed' THEN j.owner_id END,
       CASE WHEN c.answer = 'cancel_requested' THEN '{}'
            WHEN j.status = 'claimed' THEN '{"reason":"force"}' ELSE '{"reason":"cancel"}' END,
       c.now
  FROM temp.fenceq_cancel AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.status IN ('pending', 'claimed') AND NOT (c.answer = 'cancel_requested' AND j.cancel_requested)
       AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs SET status = 'cancelled', finished_at = c.now
  FROM temp.fenceq_cancel AS c
 WHERE fenceq__jobs.seq = c.seq AND c.answer = 'cancelled' AND fenceq__jobs.status IN ('pending', 'claimed')
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs SET cancel_requested = 1
  FROM temp.fenceq_cancel AS c
 WHERE fenceq__jobs.seq = c.seq AND c.answer = 'cancel_requested'
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
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
                  SELECT j.job_id FROM temp.fenceq_cancel AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
                   WHERE c.answer = 'cancelled')
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
       CASE WHEN e.sqlstate IS NULL THEN (SELECT c.answer FROM temp.fenceq_cancel AS c) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
