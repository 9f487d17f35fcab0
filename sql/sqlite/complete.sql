-- fenceq for SQLite: complete -- record success for a live claim.
-- Generated from templates/complete.sql by scripts/gen-sqlite: edit the template.
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
       finished_at = (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
 WHERE job_id = :job_id AND status = 'claimed' AND owner_id = :owner_id AND generation = :generation
   AND claim_token = :claim_token AND NOT cancel_requested
   AND lease_expires_at > (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
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
-- The answer: the first failing check (in this order), else whether the
-- write above happened.
SELECT substr(e.error, 1, 5) AS sqlstate, substr(e.error, 7) AS message, NULL AS detail,
       CASE WHEN e.error IS NULL THEN changes() > 0 END AS value
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
