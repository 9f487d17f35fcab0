-- fenceq for SQLite: extend -- grow a live claim's budget.
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
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF100' AS sqlstate, 'fenceq: budget is required' AS message
     WHERE :budget IS NULL
    UNION ALL SELECT 2, 'QF105', 'fenceq: budget must be positive'
     WHERE NOT {{optional_integer(:budget, > 0)}}
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF106', 'fenceq: the fence is malformed'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT {{well_formed_fence}};
{{fence_decision}}
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
