-- fenceq for SQLite: set_queue_notify -- turn a queue's notify flag on or off.
--
-- True when the flag changed; QF101 for an unknown queue.
--
-- Parameters: :queue TEXT; :notify INTEGER 0/1.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the flag is only recorded (queue_stats
-- shows it): SQLite has no LISTEN/NOTIFY, so nothing is ever sent.
{{error_table}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_queue_flag (changed INTEGER NOT NULL);
DELETE FROM temp.fenceq_queue_flag;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT {{identifier(:queue, 255)}}
    UNION ALL SELECT 2, 'QF100', 'fenceq: notify is required'
     WHERE :notify IS NULL OR NOT {{optional_integer(:notify, IN (0, 1))}}
    UNION ALL SELECT 3, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_queue_flag (changed)
SELECT q.notify <> :notify FROM fenceq__queues AS q
 WHERE q.queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__queues SET notify = :notify
 WHERE queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT changed FROM temp.fenceq_queue_flag) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
