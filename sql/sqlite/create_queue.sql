-- fenceq for SQLite: create_queue -- declare a queue with its defaults.
-- Generated from templates/create_queue.sql by scripts/gen-sqlite: edit the template.
--
-- True when created; false when the queue exists with exactly these
-- settings; QF100 when it exists with other settings (use alter_queue).
--
-- Parameters: :queue TEXT; :lease INTEGER microseconds (default 30 s);
-- :max_attempts INTEGER (default 5); :backoff_base INTEGER microseconds
-- (default 1 s); :backoff_factor REAL (default 2); :backoff_max INTEGER
-- microseconds (default 1 h); :dead_letter INTEGER 0/1 (default 1);
-- :requeue_priority TEXT keep, first or last: where reap requeues a job
-- whose lease lapsed (default keep for a new queue; NULL matches any
-- setting of an existing one, as on PostgreSQL).
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that a NULL setting takes the default (a
-- PostgreSQL caller that passes NULL explicitly gets QF105/QF104/QF100).
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_create_queue (existed INTEGER NOT NULL);
DELETE FROM temp.fenceq_create_queue;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                AND instr(CAST(:queue AS BLOB), x'00') = 0)
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
     WHERE coalesce(:backoff_max, 3600000000) < coalesce(:backoff_base, 1000000)
    UNION ALL SELECT 9, 'QF100', 'fenceq: dead_letter must be a boolean'
     WHERE NOT (:dead_letter IS NULL
                OR (typeof(:dead_letter) = 'integer' AND :dead_letter IN (0, 1)))
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_create_queue (existed)
SELECT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF100', 'fenceq: the queue exists with other settings; use alter_queue'
  FROM fenceq__queues AS q
 WHERE q.queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT (q.lease = coalesce(:lease, 30000000)
            AND q.max_attempts = coalesce(:max_attempts, 5)
            AND q.backoff_base = coalesce(:backoff_base, 1000000)
            AND q.backoff_factor = coalesce(:backoff_factor, 2.0)
            AND q.backoff_max = coalesce(:backoff_max, 3600000000)
            AND q.dead_letter = coalesce(:dead_letter, 1)
            AND q.requeue_priority = coalesce(:requeue_priority, q.requeue_priority));
INSERT INTO fenceq__queues (queue, lease, max_attempts, backoff_base, backoff_factor, backoff_max,
                            dead_letter, requeue_priority, created_at)
SELECT :queue, coalesce(:lease, 30000000), coalesce(:max_attempts, 5), coalesce(:backoff_base, 1000000),
       coalesce(:backoff_factor, 2.0), coalesce(:backoff_max, 3600000000), coalesce(:dead_letter, 1),
       coalesce(:requeue_priority, 'keep'),
       (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT (SELECT existed FROM temp.fenceq_create_queue);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN NOT (SELECT existed FROM temp.fenceq_create_queue) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
