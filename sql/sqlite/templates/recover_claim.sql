-- fenceq for SQLite: recover_claim -- the live claim this exact owner made with this nonce.
--
-- No row when there is none. Read-only: it neither claims again nor renews.
--
-- Parameters: :owner_id TEXT; :claim_token TEXT.
-- Result: zero or one row (sqlstate, message, detail, then the claim
-- columns as claim_next returns them), or one error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
SELECT sqlstate, message, detail,
       {{claim_nulls}}
  FROM (SELECT 'QF102' AS sqlstate, 'fenceq: owner_id must be 1 to 255 characters' AS message,
               NULL AS detail
         WHERE NOT {{identifier(:owner_id, 255)}}
        UNION ALL
        SELECT 'QF102', 'fenceq: claim_token must be 1 to 255 characters', NULL
         WHERE {{identifier(:owner_id, 255)}}
           AND NOT {{identifier(:claim_token, 255)}})
UNION ALL
SELECT NULL, NULL, NULL,
       {{claim_columns}}
  FROM fenceq__claims AS c JOIN fenceq__jobs AS j ON j.job_id = c.job_id
 WHERE c.claim_token = :claim_token
   AND {{identifier(:owner_id, 255)}}
   AND {{identifier(:claim_token, 255)}}
   AND j.status = 'claimed' AND j.owner_id = :owner_id AND j.claim_token = :claim_token
   AND j.lease_expires_at > {{now}};
