-- fenceq for SQLite: heartbeat_batch -- heartbeat many fences in one transaction.
--
-- Element i answers exactly as heartbeat would for fence i. Arrays of
-- unequal length (or more than 10,000 elements) raise QF100, a malformed
-- fence QF106.
--
-- Parameters: :job_ids, :owner_ids, :claim_tokens JSON arrays of TEXT;
-- :generations JSON array of INTEGER; :lease INTEGER microseconds or NULL.
-- Result: one row (sqlstate, message, detail, value JSON array of booleans).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the whole batch is judged on one clock
-- reading (there are no row locks to take in order: BEGIN IMMEDIATE holds
-- the file), and a renewal beyond year 9999 raises 22008.
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{fence_array_checks}}
    UNION ALL SELECT 3, 'QF105', 'fenceq: lease must be positive'
     WHERE NOT {{optional_integer(:lease, > 0)}}
) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_heartbeat_batch (
    i INTEGER PRIMARY KEY, seq INTEGER, live INTEGER NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_heartbeat_batch;
WITH {{clock}}
INSERT INTO temp.fenceq_heartbeat_batch (i, seq, live, now)
SELECT f.i, j.seq,
       coalesce({{holds_fence(j, f.owner_id, f.generation, f.claim_token, clock.now)}}, 0),
       clock.now
  FROM {{fence_arrays}}
  JOIN clock
  LEFT JOIN fenceq__jobs AS j ON j.job_id = f.job_id
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT '22008', 'fenceq: the lease ends after year 9999'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND EXISTS (SELECT 1 FROM temp.fenceq_heartbeat_batch AS b JOIN fenceq__jobs AS j ON j.seq = b.seq
                WHERE b.live AND coalesce(:lease, j.lease) > 253402300799999999 - b.now);
UPDATE fenceq__jobs
   SET lease_expires_at = CASE WHEN budget_expires_at IS NULL THEN b.now + coalesce(:lease, lease)
                               ELSE min(b.now + coalesce(:lease, lease), budget_expires_at) END
  FROM (SELECT DISTINCT seq, now FROM temp.fenceq_heartbeat_batch WHERE live) AS b
 WHERE fenceq__jobs.seq = b.seq AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT {{json_boolean_array(b.live)}}
                    FROM (SELECT live FROM temp.fenceq_heartbeat_batch ORDER BY i) AS b) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
