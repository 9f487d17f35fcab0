-- fenceq for SQLite: complete -- record success for a live claim.
--
-- True once; false for a stale, expired, terminal or cancel-requested
-- fence. QF106 for a malformed fence, QF103 for a bad result.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :result canonical JSON
-- TEXT or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Two statements, no scratch table: the write is guarded by the checks
-- (all of them functions of the parameters), and the answer repeats them
-- and reads changes() of the write.
-- The decision and the write: the clock is read once, inside this
-- statement, after BEGIN IMMEDIATE took the write lock.
UPDATE fenceq__jobs
   SET status = 'completed', result = nullif(:result, 'null'),
       finished_at = {{now}}
 WHERE job_id = :job_id AND status = 'claimed' AND owner_id = :owner_id AND generation = :generation
   AND claim_token = :claim_token AND NOT cancel_requested
   AND lease_expires_at > {{now}}
   AND {{well_formed_fence}}
   AND {{optional_json(:result)}}
   AND {{optional_within_1_mib(:result)}};
-- The answer: the first failing check (in this order), else whether the
-- write above happened.
SELECT substr(e.error, 1, 5) AS sqlstate, substr(e.error, 7) AS message, NULL AS detail,
       CASE WHEN e.error IS NULL THEN changes() > 0 END AS value
  FROM (SELECT CASE
        WHEN NOT {{well_formed_fence}}
             THEN 'QF106 fenceq: the fence is malformed'
        WHEN NOT {{optional_json(:result)}}
             THEN 'QF103 fenceq: result must be finite JSON without \u0000'
        WHEN NOT {{optional_within_1_mib(:result)}}
             THEN 'QF103 fenceq: result exceeds 1 MiB in canonical form'
        END AS error) AS e;
