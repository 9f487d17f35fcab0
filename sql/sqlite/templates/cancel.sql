-- fenceq for SQLite: cancel -- cancel a job.
--
-- Pending -> 'cancelled'. Claimed -> 'cancel_requested' (the worker
-- acknowledges), or 'cancelled' at once with force, which kills the fence.
-- A terminal job answers with its unchanged status; an unknown job NULL.
--
-- Parameters: :job_id TEXT (1 to 36 characters); :force INTEGER 0/1 (NULL = 0).
-- Result: one row (sqlstate, message, detail, value TEXT or NULL).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_control notification is sent
-- (workers see the request through claim_state), and a NULL force means
-- false (PostgreSQL refuses an explicit NULL with QF100).
{{error_table}}
{{cancel_scratch}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: job_id must be 1 to 36 characters' AS message
     WHERE NOT {{identifier(:job_id, 36)}}
    UNION ALL SELECT 2, 'QF100', 'fenceq: force must be a boolean'
     WHERE NOT {{optional_integer(:force, IN (0, 1))}}
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_cancel (seq, answer, now)
SELECT j.seq,
       {{cancel_answer(j, coalesce(:force, 0))}},
       {{now}}
  FROM fenceq__jobs AS j
 WHERE j.job_id = :job_id AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{cancel_writes}}
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT c.answer FROM temp.fenceq_cancel AS c) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
