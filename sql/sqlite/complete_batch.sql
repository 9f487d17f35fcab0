-- fenceq for SQLite: complete_batch -- complete many fences in one transaction.
-- Generated from templates/complete_batch.sql by scripts/gen-sqlite: edit the template.
--
-- Element i answers exactly as complete would for fence i (a fence given
-- twice completes once: the first element wins). Arrays of unequal length
-- (or more than 10,000 elements) raise QF100, a malformed fence QF106, a
-- bad result QF103.
--
-- Parameters: :job_ids, :owner_ids, :claim_tokens JSON arrays of TEXT;
-- :generations JSON array of INTEGER; :results JSON array of canonical
-- JSON values (null = no result), one per fence, or NULL.
-- Result: one row (sqlstate, message, detail, value JSON array of booleans).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the whole batch is judged on one clock
-- reading (there are no row locks to take in order: BEGIN IMMEDIATE holds
-- the file), and results travel as one JSON array instead of jsonb[].
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
    UNION ALL SELECT 3, 'QF100', 'fenceq: results must have one element per fence'
     WHERE :results IS NOT NULL
       AND coalesce(json_array_length(CASE WHEN json_valid(:results)
                                           THEN CASE WHEN json_type(:results) = 'array'
                                                     THEN :results END END)
                    <> json_array_length(CASE WHEN json_valid(:job_ids)
                                              THEN CASE WHEN json_type(:job_ids) = 'array'
                                                        THEN :job_ids END END), 1)
    UNION ALL SELECT 4, 'QF103', 'fenceq: result must be finite JSON without \u0000'
     WHERE :results IS NOT NULL AND NOT instr(replace(:results, '\\', ''), '\u0000') = 0
    UNION ALL SELECT 5, 'QF103', 'fenceq: result exceeds 1 MiB in canonical form'
     WHERE EXISTS (SELECT 1
                     FROM json_each(CASE WHEN json_valid(:results)
                                         THEN CASE WHEN json_type(:results) = 'array'
                                                   THEN :results END END) AS r
                    WHERE length(CAST(
                              CASE r.type
                                   WHEN 'null' THEN NULL
                                   WHEN 'true' THEN 'true'
                                   WHEN 'false' THEN 'false'
                                   WHEN 'object' THEN r.value
                                   WHEN 'array' THEN r.value
                                   WHEN 'text'
                                   THEN CASE WHEN instr(lower(:results), '\ud') = 0 THEN json_quote(r.value)
                                             ELSE :results -> ('$[' || r.key || ']') END
                                   ELSE CASE WHEN typeof(r.value) = 'integer' THEN CAST(r.value AS TEXT)
                                             ELSE :results -> ('$[' || r.key || ']') END END
                              AS BLOB)) > 1048576)
) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_complete_batch (
    i INTEGER PRIMARY KEY, seq INTEGER, usable INTEGER NOT NULL, result TEXT, answer INTEGER,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_complete_batch;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_complete_batch (i, seq, usable, now)
SELECT f.i, j.seq,
       coalesce(j.status = 'claimed' AND j.owner_id = f.owner_id AND j.generation = f.generation
                AND j.claim_token = f.claim_token AND j.lease_expires_at
                    > clock.now
                AND NOT j.cancel_requested, 0),
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
-- Each result as sent, in one pass over :results (reading element i by
-- path parses or compares the whole array once per element).
UPDATE temp.fenceq_complete_batch AS b
   SET result = CASE r.type
                     WHEN 'null' THEN NULL
                     WHEN 'true' THEN 'true'
                     WHEN 'false' THEN 'false'
                     WHEN 'object' THEN r.value
                     WHEN 'array' THEN r.value
                     WHEN 'text'
                     THEN CASE WHEN instr(lower(:results), '\ud') = 0 THEN json_quote(r.value)
                               ELSE :results -> ('$[' || r.key || ']') END
                     ELSE CASE WHEN typeof(r.value) = 'integer' THEN CAST(r.value AS TEXT)
                               ELSE :results -> ('$[' || r.key || ']') END END
  FROM json_each(CASE WHEN json_valid(:results)
                      THEN CASE WHEN json_type(:results) = 'array'
                                THEN :results END END) AS r
 WHERE b.i = r.key;
-- The first usable element of each job completes it; later ones find it
-- completed, as they would one call after another.
UPDATE temp.fenceq_complete_batch
   SET answer = usable AND i IN (SELECT min(b.i) FROM temp.fenceq_complete_batch AS b
                                  WHERE b.usable GROUP BY b.seq);
UPDATE fenceq__jobs
   SET status = 'completed', result = b.result, finished_at = b.now
  FROM temp.fenceq_complete_batch AS b
 WHERE fenceq__jobs.seq = b.seq AND b.answer AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- The completed jobs' dependents are counted off.
UPDATE fenceq__jobs
   SET blocked_by = nullif(fenceq__jobs.blocked_by - c.n, 0),
       run_at = CASE WHEN fenceq__jobs.blocked_by = c.n
                     THEN max(fenceq__jobs.blocked_run_at, c.now) ELSE fenceq__jobs.run_at END,
       blocked_run_at = CASE WHEN fenceq__jobs.blocked_by = c.n THEN NULL
                             ELSE fenceq__jobs.blocked_run_at END,
       -- Freed: ready when due now, else still waiting apart (version 5).
       scheduled = fenceq__jobs.blocked_by > c.n OR coalesce(fenceq__jobs.blocked_run_at > c.now, 0)
  FROM (SELECT d.job_id, count(*) AS n,
               (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000 AS now
          FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
         WHERE NOT d.satisfied AND f.status = 'completed'
           AND d.depends_on IN (
               SELECT j.job_id FROM temp.fenceq_complete_batch AS b JOIN fenceq__jobs AS j ON j.seq = b.seq
                WHERE b.answer)
         GROUP BY d.job_id) AS c
 WHERE fenceq__jobs.job_id = c.job_id AND fenceq__jobs.status = 'pending'
   AND fenceq__jobs.blocked_by IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__dependencies SET satisfied = 1
 WHERE NOT satisfied
   AND depends_on IN (
       SELECT f.job_id FROM fenceq__jobs AS f
        WHERE f.status = 'completed'
          AND f.job_id IN (
              SELECT j.job_id FROM temp.fenceq_complete_batch AS b JOIN fenceq__jobs AS j ON j.seq = b.seq
               WHERE b.answer))
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'completed', j.generation, j.owner_id, '{}', j.finished_at
  FROM fenceq__jobs AS j JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.job_id IN (
       SELECT j.job_id FROM temp.fenceq_complete_batch AS b JOIN fenceq__jobs AS j ON j.seq = b.seq
        WHERE b.answer AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error))
UNION ALL
SELECT j.job_id, j.queue, 'unblocked', NULL, NULL, '{}',
       (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
  FROM fenceq__jobs AS j JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history AND j.status = 'pending' AND j.blocked_by IS NULL
   AND j.job_id IN (
       SELECT d.job_id FROM fenceq__dependencies AS d
        WHERE d.depends_on IN (
              SELECT j.job_id FROM temp.fenceq_complete_batch AS b JOIN fenceq__jobs AS j ON j.seq = b.seq
               WHERE b.answer AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)));
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT '[' || coalesce(group_concat(CASE WHEN b.answer THEN 'true' ELSE 'false' END, ','), '') || ']'
                    FROM (SELECT answer FROM temp.fenceq_complete_batch ORDER BY i) AS b) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
