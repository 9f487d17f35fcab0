-- fenceq for SQLite: discard_dead_letter -- mark a dead letter handled without replay.
--
-- True once; false for an unknown or already handled letter. QF102 unless
-- dlq_id is 32 lowercase hex characters.
--
-- Parameters: :dlq_id TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
{{error_table}}
{{dead_letter_check}}
INSERT INTO temp.fenceq_letter (dlq_id, job_id, now)
SELECT d.dlq_id, d.job_id, {{now}}
  FROM fenceq__dead_letters AS d
 WHERE d.dlq_id = :dlq_id AND d.replayed_at IS NULL AND d.discarded_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__dead_letters SET discarded_at = l.now
  FROM temp.fenceq_letter AS l
 WHERE fenceq__dead_letters.dlq_id = l.dlq_id AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN EXISTS (SELECT 1 FROM temp.fenceq_letter) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
