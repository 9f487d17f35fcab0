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
                        FROM json_each(CASE WHEN json_valid(:job_ids)
                                            THEN CASE WHEN json_type(:job_ids) = 'array'
                                                      THEN :job_ids END END) AS a
                             JOIN json_each(CASE WHEN json_valid(:owner_ids)
                                                 THEN CASE WHEN json_type(:owner_ids) = 'array'
                                                           THEN :owner_ids END END) AS o ON o.key = a.key
                             JOIN json_each(CASE WHEN json_valid(:generations)
                                                 THEN CASE WHEN json_type(:generations) = 'array'
                                                           THEN :generations END END) AS g ON g.key = a.key
                             JOIN json_each(CASE WHEN json_valid(:claim_tokens)
                                                 THEN CASE WHEN json_type(:claim_tokens) = 'array'
                                                           THEN :claim_tokens END END) AS t ON t.key = a.key
                       WHERE NOT (a.type = 'text'
                                  AND (typeof(a.value) = 'text' AND length(a.value) BETWEEN 1 AND 36
                                       AND instr(CAST(a.value AS BLOB), x'00') = 0)
                                  AND o.type = 'text'
                                  AND (typeof(o.value) = 'text' AND length(o.value) BETWEEN 1 AND 255
                                       AND instr(CAST(o.value AS BLOB), x'00') = 0)
                                  AND t.type = 'text'
                                  AND (typeof(t.value) = 'text' AND length(t.value) BETWEEN 1 AND 255
                                       AND instr(CAST(t.value AS BLOB), x'00') = 0)
                                  AND typeof(g.value) = 'integer' AND g.value >= 1))
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
                    WHERE length(CAST(CASE WHEN json_valid(:results)
                                           THEN CASE WHEN json_type(:results) = 'array'
                                                     THEN :results END END -> ('$[' || r.key || ']') AS BLOB))
                          > 1048576)
) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_complete_batch (
    i INTEGER PRIMARY KEY, seq INTEGER, usable INTEGER NOT NULL, result TEXT, answer INTEGER,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_complete_batch;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_complete_batch (i, seq, usable, result, now)
SELECT a.key, j.seq,
       coalesce(j.status = 'claimed' AND j.owner_id = o.value AND j.generation = g.value
                AND j.claim_token = t.value AND j.lease_expires_at > clock.now AND NOT j.cancel_requested, 0),
       nullif(CASE WHEN json_valid(:results)
                   THEN CASE WHEN json_type(:results) = 'array'
                             THEN :results END END -> ('$[' || a.key || ']'), 'null'),
       clock.now
  FROM json_each(CASE WHEN json_valid(:job_ids)
                      THEN CASE WHEN json_type(:job_ids) = 'array'
                                THEN :job_ids END END) AS a
       JOIN json_each(CASE WHEN json_valid(:owner_ids)
                           THEN CASE WHEN json_type(:owner_ids) = 'array'
                                     THEN :owner_ids END END) AS o ON o.key = a.key
       JOIN json_each(CASE WHEN json_valid(:generations)
                           THEN CASE WHEN json_type(:generations) = 'array'
                                     THEN :generations END END) AS g ON g.key = a.key
       JOIN json_each(CASE WHEN json_valid(:claim_tokens)
                           THEN CASE WHEN json_type(:claim_tokens) = 'array'
                                     THEN :claim_tokens END END) AS t ON t.key = a.key
  JOIN clock
  LEFT JOIN fenceq__jobs AS j ON j.job_id = a.value
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- The first usable element of each job completes it; later ones find it
-- completed, as they would one call after another.
UPDATE temp.fenceq_complete_batch AS b
   SET answer = b.usable AND b.i = (SELECT min(b2.i) FROM temp.fenceq_complete_batch AS b2
                                     WHERE b2.seq = b.seq AND b2.usable);
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
                             ELSE fenceq__jobs.blocked_run_at END
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
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT '[' || coalesce(group_concat(CASE WHEN b.answer THEN 'true' ELSE 'false' END, ','), '') || ']'
                    FROM (SELECT answer FROM temp.fenceq_complete_batch ORDER BY i) AS b) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
