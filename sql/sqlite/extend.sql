-- fenceq for SQLite: extend -- grow a live claim's budget.
-- Generated from templates/extend.sql by scripts/gen-sqlite: edit the template.
--
-- budget_expires_at becomes the later of its current value and now +
-- budget (a shorter budget takes nothing away); on a claim without a budget
-- it sets one. The lease is renewed as heartbeat renews it, to min(now +
-- the claim's lease, the new budget); a cancel-requested claim too. True
-- when the claim is live; false (nothing changed) when the fence is stale,
-- the lease or budget ran out, or the job is terminal. QF106 for a
-- malformed fence, QF100 without a budget, QF105 for one that is not
-- positive.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :budget INTEGER
-- microseconds.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that a budget or renewal beyond year 9999
-- raises 22008 once the fence is judged live (PostgreSQL refuses such a
-- budget with QF105 first).
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF100' AS sqlstate, 'fenceq: budget is required' AS message
     WHERE :budget IS NULL
    UNION ALL SELECT 2, 'QF105', 'fenceq: budget must be positive'
     WHERE NOT (:budget IS NULL
                OR (typeof(:budget) = 'integer' AND :budget > 0))
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF106', 'fenceq: the fence is malformed'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
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
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT '22008', 'fenceq: the budget or lease ends after year 9999'
  FROM temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq
 WHERE f.live AND (:budget > 253402300799999999 - f.now OR j.lease > 253402300799999999 - f.now)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET budget_expires_at = max(coalesce(budget_expires_at, f.now + :budget), f.now + :budget),
       lease_expires_at = min(f.now + lease, max(coalesce(budget_expires_at, f.now + :budget), f.now + :budget))
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT f.live FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
