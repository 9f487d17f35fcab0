-- fenceq for SQLite: set_queue_notify_done -- turn a queue's notify_done flag on or off.
-- Generated from templates/set_queue_notify_done.sql by scripts/gen-sqlite: edit the template.
--
-- True when the flag changed; false when it had this value already; QF101
-- for an unknown queue.
--
-- Parameters: :queue TEXT; :notify INTEGER 0/1.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the flag is only recorded: SQLite has no
-- LISTEN/NOTIFY, so no fenceq_done notification is ever sent, and a client
-- waiting for a job polls (docs/guarantees.md §17).
--
-- Two statements, no scratch table: the write is guarded by the checks
-- (functions of the parameters), and the answer repeats them and reads
-- changes() of the write.
UPDATE fenceq__queues SET notify_done = :notify
 WHERE queue = :queue AND notify_done <> :notify
   AND (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
        AND instr(CAST(:queue AS BLOB), x'00') = 0)
   AND typeof(:notify) = 'integer' AND :notify IN (0, 1);
SELECT substr(e.error, 1, 5) AS sqlstate, substr(e.error, 7) AS message, NULL AS detail,
       CASE WHEN e.error IS NULL THEN changes() > 0 END AS value
  FROM (SELECT CASE
        WHEN NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                  AND instr(CAST(:queue AS BLOB), x'00') = 0)
             THEN 'QF102 fenceq: queue must be 1 to 255 characters'
        WHEN :notify IS NULL OR NOT (typeof(:notify) = 'integer' AND :notify IN (0, 1))
             THEN 'QF100 fenceq: notify is required'
        WHEN NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
             THEN 'QF101 fenceq: unknown queue'
        END AS error) AS e;
