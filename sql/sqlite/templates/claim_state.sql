-- fenceq for SQLite: claim_state -- (cancel_requested, pid) of a live claim.
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
 WHERE NOT {{well_formed_fence}}
UNION ALL
SELECT NULL, NULL, NULL, j.cancel_requested, j.pid
  FROM fenceq__jobs AS j
 WHERE j.job_id = :job_id
   AND {{well_formed_fence}}
   AND coalesce({{holds_fence(j, :owner_id, :generation, :claim_token, {{now}})}}, 0);
