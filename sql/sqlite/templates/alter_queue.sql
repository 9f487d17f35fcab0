-- fenceq for SQLite: alter_queue -- change some settings of a queue.
--
-- NULL leaves a setting unchanged. The rules of create_queue apply to the
-- settings as they are after the change. QF101 for an unknown queue.
--
-- Parameters: :queue TEXT; :lease, :backoff_base, :backoff_max INTEGER
-- microseconds; :max_attempts INTEGER; :backoff_factor REAL; :dead_letter
-- INTEGER 0/1; :requeue_priority TEXT keep, first or last (each NULL =
-- unchanged).
-- Result: one row (sqlstate, message, detail, value NULL).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT {{identifier(:queue, 255)}}
    UNION ALL SELECT 2, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
    {{queue_setting_checks}}
    UNION ALL SELECT 8, 'QF105', 'fenceq: backoff_max must not be less than backoff_base'
      FROM fenceq__queues AS q
     WHERE q.queue = :queue
       AND coalesce(:backoff_max, q.backoff_max) < coalesce(:backoff_base, q.backoff_base)
    UNION ALL SELECT 9, 'QF100', 'fenceq: dead_letter must be a boolean'
     WHERE NOT {{optional_integer(:dead_letter, IN (0, 1))}}
) ORDER BY rank LIMIT 1;
UPDATE fenceq__queues
   SET lease = coalesce(:lease, lease),
       max_attempts = coalesce(:max_attempts, max_attempts),
       backoff_base = coalesce(:backoff_base, backoff_base),
       backoff_factor = coalesce(:backoff_factor, backoff_factor),
       backoff_max = coalesce(:backoff_max, backoff_max),
       dead_letter = coalesce(:dead_letter, dead_letter),
       requeue_priority = coalesce(:requeue_priority, requeue_priority)
 WHERE queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN NULL END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
