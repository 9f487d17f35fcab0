-- fenceq for SQLite: alter_queue -- change some settings of a queue.
-- Generated from templates/alter_queue.sql by scripts/gen-sqlite: edit the template.
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
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                AND instr(CAST(:queue AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
    UNION ALL SELECT 3, 'QF105', 'fenceq: lease must be positive'
     WHERE NOT (:lease IS NULL
                OR (typeof(:lease) = 'integer' AND :lease > 0))
    UNION ALL SELECT 4, 'QF105', 'fenceq: backoff_base must not be negative'
     WHERE NOT (:backoff_base IS NULL
                OR (typeof(:backoff_base) = 'integer' AND :backoff_base >= 0))
    UNION ALL SELECT 5, 'QF105', 'fenceq: backoff_max must not be negative'
     WHERE NOT (:backoff_max IS NULL
                OR (typeof(:backoff_max) = 'integer' AND :backoff_max >= 0))
    UNION ALL SELECT 6, 'QF104', 'fenceq: max_attempts must be a positive integer'
     WHERE NOT (:max_attempts IS NULL
                OR (typeof(:max_attempts) = 'integer' AND :max_attempts BETWEEN 1 AND 2147483647))
    UNION ALL SELECT 7, 'QF104', 'fenceq: backoff_factor must be finite and at least 1'
     WHERE NOT (:backoff_factor IS NULL OR (typeof(:backoff_factor) IN ('integer', 'real')
                AND :backoff_factor BETWEEN 1 AND 1.7976931348623157e308))
    UNION ALL SELECT 10, 'QF100', 'fenceq: requeue_priority must be keep, first or last'
     WHERE NOT coalesce(:requeue_priority IN ('keep', 'first', 'last'), 1)
    UNION ALL SELECT 8, 'QF105', 'fenceq: backoff_max must not be less than backoff_base'
      FROM fenceq__queues AS q
     WHERE q.queue = :queue
       AND coalesce(:backoff_max, q.backoff_max) < coalesce(:backoff_base, q.backoff_base)
    UNION ALL SELECT 9, 'QF100', 'fenceq: dead_letter must be a boolean'
     WHERE NOT (:dead_letter IS NULL
                OR (typeof(:dead_letter) = 'integer' AND :dead_letter IN (0, 1)))
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
