-- fenceq for SQLite: checkpoint -- record a step's value once per job under a live fence.
-- Generated from templates/checkpoint.sql by scripts/gen-sqlite: edit the template.
--
-- Returns what is recorded: the earlier value when the step was already
-- recorded (by this or an earlier claim). It also renews the lease as
-- heartbeat would. Without a live fence it records nothing and returns
-- NULL (a recorded value is never JSON null). QF103 for a null or bad
-- value, QF100 past 10,000 checkpoints per job.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :step TEXT; :value
-- canonical JSON TEXT.
-- Result: one row (sqlstate, message, detail, value JSON TEXT or NULL).
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
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: step must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:step) = 'text' AND length(:step) BETWEEN 1 AND 255
                AND instr(CAST(:step AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF103', 'fenceq: a checkpoint value may not be null'
     WHERE :value IS NULL OR :value = 'null'
    UNION ALL SELECT 3, 'QF103', 'fenceq: value must be finite JSON without \u0000'
     WHERE NOT (:value IS NULL
                OR (typeof(:value) = 'text' AND json_valid(:value)
                    AND instr(replace(:value, '\\', ''), '\u0000') = 0))
    UNION ALL SELECT 4, 'QF103', 'fenceq: value exceeds 1 MiB in canonical form'
     WHERE NOT (:value IS NULL OR length(CAST(:value AS BLOB)) <= 1048576)
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
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF100', 'fenceq: a job may hold at most 10000 checkpoints'
  FROM temp.fenceq_fence AS f
 WHERE f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT EXISTS (SELECT 1 FROM fenceq__checkpoints AS k WHERE k.job_id = :job_id AND k.step = :step)
   AND (SELECT count(*) FROM fenceq__checkpoints AS k WHERE k.job_id = :job_id) >= 10000;
INSERT INTO fenceq__checkpoints (job_id, step, value, generation, recorded_at)
SELECT :job_id, :step, :value, :generation, f.now
  FROM temp.fenceq_fence AS f
 WHERE f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
ON CONFLICT (job_id, step) DO NOTHING;
UPDATE fenceq__jobs
   SET lease_expires_at = CASE WHEN budget_expires_at IS NULL THEN f.now + lease
                               ELSE min(f.now + lease, budget_expires_at) END
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT k.value
                    FROM temp.fenceq_fence AS f
                    JOIN fenceq__checkpoints AS k ON k.job_id = :job_id AND k.step = :step
                   WHERE f.live) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
