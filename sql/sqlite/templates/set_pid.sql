-- fenceq for SQLite: set_pid -- record the OS process id working a live claim.
--
-- True when recorded; false for a stale, expired, terminal or
-- cancel-requested fence. QF104 unless pid is a positive 32-bit integer.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :pid INTEGER.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
{{error_table}}
{{fence_check}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF104', 'fenceq: pid must be a positive integer'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT (:pid IS NOT NULL AND {{optional_integer(:pid, BETWEEN 1 AND 2147483647)}});
{{fence_decision}}
UPDATE fenceq__jobs SET pid = :pid
  FROM temp.fenceq_fence AS f
 WHERE fenceq__jobs.seq = f.seq AND f.live AND NOT f.cancel_requested
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT f.live AND NOT f.cancel_requested FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
