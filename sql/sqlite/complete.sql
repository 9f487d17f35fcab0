-- fenceq for SQLite: complete -- record success for a live claim.
-- Generated from templates/complete.sql by scripts/gen-sqlite: edit the template.
--
-- True once; false for a stale, expired, terminal or cancel-requested
-- fence. QF106 for a malformed fence, QF103 for a bad result. A dispatch
-- the claim had ends with it. Events completed, and unblocked for each
-- dependent it frees.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :result canonical JSON
-- TEXT or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- The write is guarded by the checks (all of them functions of the
-- parameters); a scratch row per connection (temp.fenceq_complete_call)
-- keeps changes() of the write for the answer, which repeats the checks.
-- Between them the job's dependents are counted off (no statement of
-- theirs writes a row for a job without dependents).
CREATE TEMP TABLE IF NOT EXISTS fenceq_complete_call (
    id INTEGER PRIMARY KEY CHECK (id = 1), changed INTEGER NOT NULL);
-- The decision and the write: the clock is read once, inside this
-- statement, after BEGIN IMMEDIATE took the write lock.
UPDATE fenceq__jobs
   SET status = 'completed', result = nullif(:result, 'null'),
       finished_at = (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
 WHERE job_id = :job_id
   AND fenceq__jobs.status = 'claimed' AND fenceq__jobs.owner_id = :owner_id AND fenceq__jobs.generation = :generation
       AND fenceq__jobs.claim_token = :claim_token AND fenceq__jobs.lease_expires_at
           > (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
   AND NOT cancel_requested
   AND ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
         AND instr(CAST(:job_id AS BLOB), x'00') = 0)
        AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
             AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
        AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
             AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
        AND typeof(:generation) = 'integer' AND :generation >= 1)
   AND (:result IS NULL
        OR (typeof(:result) = 'text' AND json_valid(:result)
            AND instr(replace(:result, '\\', ''), '\u0000') = 0))
   AND (:result IS NULL OR length(CAST(:result AS BLOB)) <= 1048576);
INSERT OR REPLACE INTO temp.fenceq_complete_call (id, changed) VALUES (1, changes());
UPDATE fenceq__jobs
   SET blocked_by = nullif(fenceq__jobs.blocked_by - c.n, 0),
       run_at = CASE WHEN fenceq__jobs.blocked_by = c.n
                     THEN max(fenceq__jobs.blocked_run_at, c.now) ELSE fenceq__jobs.run_at END,
       blocked_run_at = CASE WHEN fenceq__jobs.blocked_by = c.n THEN NULL
                             ELSE fenceq__jobs.blocked_run_at END,
       -- Freed: ready when due now, else still waiting apart (version 5).
       scheduled = fenceq__jobs.blocked_by > c.n OR coalesce(fenceq__jobs.blocked_run_at > c.now, 0)
  FROM (SELECT d.job_id, count(*) AS n,
               (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000 AS now
          FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
         WHERE NOT d.satisfied AND f.status = 'completed'
           AND d.depends_on IN (
               :job_id)
         GROUP BY d.job_id) AS c
 WHERE fenceq__jobs.job_id = c.job_id AND fenceq__jobs.status = 'pending'
   AND fenceq__jobs.blocked_by IS NOT NULL
   AND 1;
UPDATE fenceq__dependencies SET satisfied = 1
 WHERE NOT satisfied
   AND depends_on IN (
       SELECT f.job_id FROM fenceq__jobs AS f
        WHERE f.status = 'completed'
          AND f.job_id IN (
              :job_id))
   AND 1;
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'completed', j.generation, j.owner_id, '{}', j.finished_at
  FROM fenceq__jobs AS j JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.job_id IN (
       SELECT :job_id FROM temp.fenceq_complete_call AS c WHERE c.changed > 0)
UNION ALL
SELECT j.job_id, j.queue, 'unblocked', NULL, NULL, '{}',
       (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
  FROM fenceq__jobs AS j JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history AND j.status = 'pending' AND j.blocked_by IS NULL
   AND j.job_id IN (
       SELECT d.job_id FROM fenceq__dependencies AS d
        WHERE d.depends_on IN (
              SELECT :job_id FROM temp.fenceq_complete_call AS c WHERE c.changed > 0));
-- The answer: the first failing check (in this order), else whether the
-- write above happened.
SELECT substr(e.error, 1, 5) AS sqlstate, substr(e.error, 7) AS message, NULL AS detail,
       CASE WHEN e.error IS NULL
            THEN (SELECT c.changed > 0 FROM temp.fenceq_complete_call AS c) END AS value
  FROM (SELECT CASE
        WHEN NOT ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
                   AND instr(CAST(:job_id AS BLOB), x'00') = 0)
                  AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                       AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
                  AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
                       AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
                  AND typeof(:generation) = 'integer' AND :generation >= 1)
             THEN 'QF106 fenceq: the fence is malformed'
        WHEN NOT (:result IS NULL
                  OR (typeof(:result) = 'text' AND json_valid(:result)
                      AND instr(replace(:result, '\\', ''), '\u0000') = 0))
             THEN 'QF103 fenceq: result must be finite JSON without \u0000'
        WHEN NOT (:result IS NULL OR length(CAST(:result AS BLOB)) <= 1048576)
             THEN 'QF103 fenceq: result exceeds 1 MiB in canonical form'
        END AS error) AS e;
