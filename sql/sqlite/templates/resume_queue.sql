-- fenceq for SQLite: resume_queue -- allow claims from a paused queue again.
--
-- True when the flag changed; QF101 for an unknown queue.
--
-- Parameters: :queue TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_jobs notification is sent:
-- SQLite has no LISTEN/NOTIFY, so workers poll.
{{error_table}}
{{queue_flag_check}}
INSERT INTO temp.fenceq_queue_flag (changed)
SELECT q.paused FROM fenceq__queues AS q
 WHERE q.queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__queues SET paused = 0
 WHERE queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT changed FROM temp.fenceq_queue_flag) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
