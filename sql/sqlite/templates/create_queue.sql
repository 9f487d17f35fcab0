-- fenceq for SQLite: create_queue -- declare a queue with its defaults.
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
{{error_table}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_create_queue (existed INTEGER NOT NULL);
DELETE FROM temp.fenceq_create_queue;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT {{identifier(:queue, 255)}}
    {{queue_setting_checks}}
    UNION ALL SELECT 8, 'QF105', 'fenceq: backoff_max must not be less than backoff_base'
     WHERE coalesce(:backoff_max, 3600000000) < coalesce(:backoff_base, 1000000)
    UNION ALL SELECT 9, 'QF100', 'fenceq: dead_letter must be a boolean'
     WHERE NOT {{optional_integer(:dead_letter, IN (0, 1))}}
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
       {{now}}
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT (SELECT existed FROM temp.fenceq_create_queue);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN NOT (SELECT existed FROM temp.fenceq_create_queue) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
