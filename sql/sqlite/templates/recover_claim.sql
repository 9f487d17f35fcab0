-- fenceq for SQLite: recover_claim -- the live claims this exact owner made with this nonce.
--
-- For a per-job token (claim_next, claim_batch, adopt_dispatch): its job's
-- claim while still live, else no row. For the nonce of a claim_jobs call:
-- every job of the call still claimed live under (owner_id, nonce), in the
-- call's claim order; those completed, released or reaped since are left
-- out. Read-only: it neither claims again nor renews.
--
-- Parameters: :owner_id TEXT; :claim_token TEXT.
-- Result: zero or more rows (sqlstate, message, detail, then the claim
-- columns as claim_next returns them), or one error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
--
-- Differs from PostgreSQL in that a call's jobs are read from the JSON
-- array job_ids of its ledger row.
SELECT sqlstate, message, detail, job_id, queue, task, payload, priority, attempt, max_attempts, owner_id,
       generation, claim_token, lease_expires_at, budget_expires_at, cancel_requested, submission_id,
       checkpoints
  FROM (
    SELECT -1 AS ord, e.sqlstate, e.message, NULL AS detail,
           {{claim_nulls}}
      FROM (SELECT 'QF102' AS sqlstate, 'fenceq: owner_id must be 1 to 255 characters' AS message
             WHERE NOT {{identifier(:owner_id, 255)}}
            UNION ALL
            SELECT 'QF102', 'fenceq: claim_token must be 1 to 255 characters'
             WHERE {{identifier(:owner_id, 255)}}
               AND NOT {{identifier(:claim_token, 255)}}) AS e
    UNION ALL
    SELECT m.key, NULL, NULL, NULL,
           {{claim_columns}}
      FROM fenceq__claims AS c
      JOIN json_each(coalesce(c.job_ids, json_array(c.job_id))) AS m
      JOIN fenceq__jobs AS j ON j.job_id = m.value
     WHERE c.claim_token = :claim_token
       AND {{identifier(:owner_id, 255)}}
       AND {{identifier(:claim_token, 255)}}
       AND {{holds_fence(j, :owner_id, j.generation, :claim_token, {{now}})}})
 ORDER BY ord;
