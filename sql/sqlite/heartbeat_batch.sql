-- fenceq for SQLite: heartbeat_batch -- heartbeat many fences in one transaction.
-- Generated from templates/heartbeat_batch.sql by scripts/gen-sqlite: edit the template.
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
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF100' AS sqlstate,
           'fenceq: fence arrays must be non-NULL, of equal length, with at most 10000 elements' AS message
     WHERE NOT coalesce(typeof(:job_ids) = 'text' AND typeof(:owner_ids) = 'text' AND typeof(:generations) = 'text'
                        AND typeof(:claim_tokens) = 'text'
                        AND json_array_length(CASE WHEN json_valid(:job_ids)
                                                   THEN CASE WHEN json_type(:job_ids) = 'array'
                                                             THEN :job_ids END END) <= 10000
                        AND json_array_length(CASE WHEN json_valid(:owner_ids)
                                                   THEN CASE WHEN json_type(:owner_ids) = 'array'
                                                             THEN :owner_ids END END)
                            = json_array_length(CASE WHEN json_valid(:job_ids)
                                                     THEN CASE WHEN json_type(:job_ids) = 'array'
                                                               THEN :job_ids END END)
                        AND json_array_length(CASE WHEN json_valid(:generations)
                                                   THEN CASE WHEN json_type(:generations) = 'array'
                                                             THEN :generations END END)
                            = json_array_length(CASE WHEN json_valid(:job_ids)
                                                     THEN CASE WHEN json_type(:job_ids) = 'array'
                                                               THEN :job_ids END END)
                        AND json_array_length(CASE WHEN json_valid(:claim_tokens)
                                                   THEN CASE WHEN json_type(:claim_tokens) = 'array'
                                                             THEN :claim_tokens END END)
                            = json_array_length(CASE WHEN json_valid(:job_ids)
                                                     THEN CASE WHEN json_type(:job_ids) = 'array'
                                                               THEN :job_ids END END), 0)
    UNION ALL SELECT 2, 'QF106', 'fenceq: a fence is malformed'
     WHERE NOT (instr(replace(:job_ids, '\\', ''), '\u0000') = 0 AND instr(replace(:owner_ids, '\\', ''), '\u0000') = 0
                AND instr(replace(:claim_tokens, '\\', ''), '\u0000') = 0)
           OR EXISTS (SELECT 1
                        FROM (SELECT e.key AS i,
                                     max(CASE WHEN e.part = 1 THEN e.value END) AS job_id,
                                     max(CASE WHEN e.part = 1 THEN e.type END) AS job_type,
                                     max(CASE WHEN e.part = 2 THEN e.value END) AS owner_id,
                                     max(CASE WHEN e.part = 2 THEN e.type END) AS owner_type,
                                     max(CASE WHEN e.part = 3 THEN e.value END) AS generation,
                                     max(CASE WHEN e.part = 4 THEN e.value END) AS claim_token,
                                     max(CASE WHEN e.part = 4 THEN e.type END) AS token_type
                                FROM (SELECT 1 AS part, key, value, type
                                        FROM json_each(CASE WHEN json_valid(:job_ids)
                                                            THEN CASE WHEN json_type(:job_ids) = 'array'
                                                                      THEN :job_ids END END)
                                      UNION ALL
                                      SELECT 2, key, value, type
                                        FROM json_each(CASE WHEN json_valid(:owner_ids)
                                                            THEN CASE WHEN json_type(:owner_ids) = 'array'
                                                                      THEN :owner_ids END END)
                                      UNION ALL
                                      SELECT 3, key, value, type
                                        FROM json_each(CASE WHEN json_valid(:generations)
                                                            THEN CASE WHEN json_type(:generations) = 'array'
                                                                      THEN :generations END END)
                                      UNION ALL
                                      SELECT 4, key, value, type
                                        FROM json_each(CASE WHEN json_valid(:claim_tokens)
                                                            THEN CASE WHEN json_type(:claim_tokens) = 'array'
                                                                      THEN :claim_tokens END END)) AS e
                               GROUP BY e.key) AS f
                       WHERE NOT coalesce(
                             f.job_type = 'text'
                             AND (typeof(f.job_id) = 'text' AND length(f.job_id) BETWEEN 1 AND 36
                                  AND instr(CAST(f.job_id AS BLOB), x'00') = 0)
                             AND f.owner_type = 'text'
                             AND (typeof(f.owner_id) = 'text' AND length(f.owner_id) BETWEEN 1 AND 255
                                  AND instr(CAST(f.owner_id AS BLOB), x'00') = 0)
                             AND f.token_type = 'text'
                             AND (typeof(f.claim_token) = 'text' AND length(f.claim_token) BETWEEN 1 AND 255
                                  AND instr(CAST(f.claim_token AS BLOB), x'00') = 0)
                             AND typeof(f.generation) = 'integer' AND f.generation >= 1,
                             0))
    UNION ALL SELECT 3, 'QF105', 'fenceq: lease must be positive'
     WHERE NOT (:lease IS NULL
                OR (typeof(:lease) = 'integer' AND :lease > 0))
) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_heartbeat_batch (
    i INTEGER PRIMARY KEY, seq INTEGER, live INTEGER NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_heartbeat_batch;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_heartbeat_batch (i, seq, live, now)
SELECT f.i, j.seq,
       coalesce(j.status = 'claimed' AND j.owner_id = f.owner_id AND j.generation = f.generation
                AND j.claim_token = f.claim_token AND j.lease_expires_at
                    > clock.now, 0),
       clock.now
  FROM (SELECT e.key AS i,
               max(CASE WHEN e.part = 1 THEN e.value END) AS job_id,
               max(CASE WHEN e.part = 1 THEN e.type END) AS job_type,
               max(CASE WHEN e.part = 2 THEN e.value END) AS owner_id,
               max(CASE WHEN e.part = 2 THEN e.type END) AS owner_type,
               max(CASE WHEN e.part = 3 THEN e.value END) AS generation,
               max(CASE WHEN e.part = 4 THEN e.value END) AS claim_token,
               max(CASE WHEN e.part = 4 THEN e.type END) AS token_type
          FROM (SELECT 1 AS part, key, value, type
                  FROM json_each(CASE WHEN json_valid(:job_ids)
                                      THEN CASE WHEN json_type(:job_ids) = 'array'
                                                THEN :job_ids END END)
                UNION ALL
                SELECT 2, key, value, type
                  FROM json_each(CASE WHEN json_valid(:owner_ids)
                                      THEN CASE WHEN json_type(:owner_ids) = 'array'
                                                THEN :owner_ids END END)
                UNION ALL
                SELECT 3, key, value, type
                  FROM json_each(CASE WHEN json_valid(:generations)
                                      THEN CASE WHEN json_type(:generations) = 'array'
                                                THEN :generations END END)
                UNION ALL
                SELECT 4, key, value, type
                  FROM json_each(CASE WHEN json_valid(:claim_tokens)
                                      THEN CASE WHEN json_type(:claim_tokens) = 'array'
                                                THEN :claim_tokens END END)) AS e
         GROUP BY e.key) AS f
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
            THEN (SELECT '[' || coalesce(group_concat(CASE WHEN b.live THEN 'true' ELSE 'false' END, ','), '') || ']'
                    FROM (SELECT live FROM temp.fenceq_heartbeat_batch ORDER BY i) AS b) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
