-- fenceq for SQLite: claim_state -- (cancel_requested, pid) of a live claim.
-- Generated from templates/claim_state.sql by scripts/gen-sqlite: edit the template.
--
-- No row when the fence is not the live owner. A snapshot, not an
-- authority. QF106 for a malformed fence.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT.
-- Result: zero or one row (sqlstate, message, detail, cancel_requested
-- INTEGER 0/1, pid INTEGER or NULL), or one error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
SELECT 'QF106' AS sqlstate, 'fenceq: the fence is malformed' AS message, NULL AS detail,
       NULL AS cancel_requested, NULL AS pid
 WHERE NOT ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
             AND instr(CAST(:job_id AS BLOB), x'00') = 0)
            AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                 AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
            AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
                 AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
            AND typeof(:generation) = 'integer' AND :generation >= 1)
UNION ALL
SELECT NULL, NULL, NULL, j.cancel_requested, j.pid
  FROM fenceq__jobs AS j
 WHERE j.job_id = :job_id
   AND ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
         AND instr(CAST(:job_id AS BLOB), x'00') = 0)
        AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
             AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
        AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
             AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
        AND typeof(:generation) = 'integer' AND :generation >= 1)
   AND coalesce(j.status = 'claimed' AND j.owner_id = :owner_id AND j.generation = :generation
                AND j.claim_token = :claim_token AND j.lease_expires_at
                    > (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000, 0);
