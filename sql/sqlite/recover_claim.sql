-- fenceq for SQLite: recover_claim -- the live claims this exact owner made with this nonce.
-- Generated from templates/recover_claim.sql by scripts/gen-sqlite: edit the template.
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
           NULL AS job_id, NULL AS queue, NULL AS task, NULL AS payload, NULL AS priority, NULL AS attempt,
           NULL AS max_attempts, NULL AS owner_id, NULL AS generation, NULL AS claim_token,
           NULL AS lease_expires_at, NULL AS budget_expires_at, NULL AS cancel_requested, NULL AS submission_id,
           NULL AS checkpoints
      FROM (SELECT 'QF102' AS sqlstate, 'fenceq: owner_id must be 1 to 255 characters' AS message
             WHERE NOT (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                        AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
            UNION ALL
            SELECT 'QF102', 'fenceq: claim_token must be 1 to 255 characters'
             WHERE (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                    AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
               AND NOT (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
                        AND instr(CAST(:claim_token AS BLOB), x'00') = 0)) AS e
    UNION ALL
    SELECT m.key, NULL, NULL, NULL,
           j.job_id, j.queue, j.task, j.payload, j.priority, j.attempts, j.max_attempts, j.owner_id,
           j.generation, j.claim_token,
           strftime('%Y-%m-%dT%H:%M:%S', j.lease_expires_at / 1000000 - (j.lease_expires_at % 1000000 < 0),
                    'unixepoch')
           || printf('.%06dZ', (j.lease_expires_at % 1000000 + 1000000) % 1000000),
           strftime('%Y-%m-%dT%H:%M:%S', j.budget_expires_at / 1000000 - (j.budget_expires_at % 1000000 < 0),
                    'unixepoch')
           || printf('.%06dZ', (j.budget_expires_at % 1000000 + 1000000) % 1000000),
           j.cancel_requested, j.submission_id,
           (SELECT json_group_object(k.step, json(k.value)) FROM fenceq__checkpoints AS k WHERE k.job_id = j.job_id)
      FROM fenceq__claims AS c
      JOIN json_each(coalesce(c.job_ids, json_array(c.job_id))) AS m
      JOIN fenceq__jobs AS j ON j.job_id = m.value
     WHERE c.claim_token = :claim_token
       AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
            AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
       AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
            AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
       AND j.status = 'claimed' AND j.owner_id = :owner_id AND j.generation = j.generation
           AND j.claim_token = :claim_token AND j.lease_expires_at
               > (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
 ORDER BY ord;
