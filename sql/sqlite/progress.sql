-- fenceq for SQLite: progress -- record a progress report on a live claim and renew its lease.
-- Generated from templates/progress.sql by scripts/gen-sqlite: edit the template.
--
-- The report (any JSON value of at most 64 KiB; JSON null clears it)
-- replaces the job's earlier one, with progress_at the time it was
-- recorded. A sign of life: the lease is renewed as heartbeat renews it
-- without a lease, to min(now + the claim's lease, budget_expires_at), also
-- for a cancel-requested claim. True while the claim is live (also when the
-- budget clamps the renewal); false, with nothing changed, once the lease
-- or budget ran out, the job is terminal or the fence is stale. QF103 for a
-- bad value, QF106 for a malformed fence (in this order).
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :progress canonical JSON
-- TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the report is stored as sent (the caller
-- sends canonical JSON, and its size is measured as sent), and a renewal
-- beyond year 9999 raises 22008.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF103' AS sqlstate, 'fenceq: progress must be finite JSON without \u0000' AS message
     WHERE NOT (:progress IS NULL
                OR (typeof(:progress) = 'text' AND json_valid(:progress)
                    AND instr(replace(:progress, '\\', ''), '\u0000') = 0))
    UNION ALL SELECT 2, 'QF103', 'fenceq: progress exceeds 64 KiB in canonical form'
     WHERE length(CAST(:progress AS BLOB)) > 65536
    UNION ALL SELECT 3, 'QF106', 'fenceq: the fence is malformed'
     WHERE NOT ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
                 AND instr(CAST(:job_id AS BLOB), x'00') = 0)
                AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                     AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
                AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
                     AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
                AND typeof(:generation) = 'integer' AND :generation >= 1)
) ORDER BY rank LIMIT 1;
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
SELECT '22008', 'fenceq: the lease ends after year 9999'
  FROM temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq
 WHERE f.live AND j.lease > 253402300799999999 - f.now
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET progress = nullif(:progress, 'null'), progress_at = f.now,
       lease_expires_at = CASE WHEN budget_expires_at IS NULL THEN f.now + lease
                               ELSE min(f.now + lease, budget_expires_at) END
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT f.live FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
