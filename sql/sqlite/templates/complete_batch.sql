-- fenceq for SQLite: complete_batch -- complete many fences in one transaction.
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
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{fence_array_checks}}
    UNION ALL SELECT 3, 'QF100', 'fenceq: results must have one element per fence'
     WHERE :results IS NOT NULL
       AND coalesce(json_array_length({{as_json_array(:results)}})
                    <> json_array_length({{as_json_array(:job_ids)}}), 1)
    UNION ALL SELECT 4, 'QF103', 'fenceq: result must be finite JSON without \u0000'
     WHERE :results IS NOT NULL AND NOT {{no_nul_escape(:results)}}
    UNION ALL SELECT 5, 'QF103', 'fenceq: result exceeds 1 MiB in canonical form'
     WHERE EXISTS (SELECT 1
                     FROM json_each({{as_json_array(:results)}}) AS r
                    WHERE length(CAST(
                              {{json_element_text(r, :results)}}
                              AS BLOB)) > 1048576)
) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_complete_batch (
    i INTEGER PRIMARY KEY, seq INTEGER, usable INTEGER NOT NULL, result TEXT, answer INTEGER,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_complete_batch;
WITH {{clock}}
INSERT INTO temp.fenceq_complete_batch (i, seq, usable, now)
SELECT f.i, j.seq,
       coalesce({{holds_fence(j, f.owner_id, f.generation, f.claim_token, clock.now)}}
                AND NOT j.cancel_requested, 0),
       clock.now
  FROM {{fence_arrays}}
  JOIN clock
  LEFT JOIN fenceq__jobs AS j ON j.job_id = f.job_id
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Each result as sent, in one pass over :results (reading element i by
-- path parses or compares the whole array once per element).
UPDATE temp.fenceq_complete_batch AS b
   SET result = {{json_element_text(r, :results)}}
  FROM json_each({{as_json_array(:results)}}) AS r
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
{{release_dependents(
    SELECT j.job_id FROM temp.fenceq_complete_batch AS b JOIN fenceq__jobs AS j ON j.seq = b.seq
     WHERE b.answer,
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
{{completed_events(
    SELECT j.job_id FROM temp.fenceq_complete_batch AS b JOIN fenceq__jobs AS j ON j.seq = b.seq
     WHERE b.answer AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT {{json_boolean_array(b.answer)}}
                    FROM (SELECT answer FROM temp.fenceq_complete_batch ORDER BY i) AS b) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
