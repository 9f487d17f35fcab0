-- fenceq for SQLite: progress -- record a progress report on a live claim and renew its lease.
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
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF103' AS sqlstate, 'fenceq: progress must be finite JSON without \u0000' AS message
     WHERE NOT {{optional_json(:progress)}}
    UNION ALL SELECT 2, 'QF103', 'fenceq: progress exceeds 64 KiB in canonical form'
     WHERE length(CAST(:progress AS BLOB)) > 65536
    UNION ALL SELECT 3, 'QF106', 'fenceq: the fence is malformed'
     WHERE NOT {{well_formed_fence}}
) ORDER BY rank LIMIT 1;
{{fence_decision}}
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
