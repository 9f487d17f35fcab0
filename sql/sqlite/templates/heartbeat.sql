-- fenceq for SQLite: heartbeat -- renew a live claim.
--
-- The lease is renewed to min(now + lease, budget_expires_at); NULL lease
-- reuses the claim's own lease length. True while the claim is live (also
-- when the budget clamps the renewal); false once the lease or budget ran
-- out or the fence is stale. QF106 for a malformed fence.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :lease INTEGER
-- microseconds or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that a renewal beyond year 9999 raises 22008.
{{error_table}}
{{fence_check}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF105', 'fenceq: lease must be positive'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT {{optional_integer(:lease, > 0)}};
{{fence_decision}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT '22008', 'fenceq: the lease ends after year 9999'
  FROM temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq
 WHERE f.live AND coalesce(:lease, j.lease) > 253402300799999999 - f.now
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET lease_expires_at = CASE WHEN budget_expires_at IS NULL THEN f.now + coalesce(:lease, lease)
                               ELSE min(f.now + coalesce(:lease, lease), budget_expires_at) END
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT f.live FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
