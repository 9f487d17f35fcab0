-- fenceq for SQLite: set_schedule -- create a schedule or replace its definition.
--
-- True when anything changed (the cron text, zone name and payload compared
-- exactly); false when the schedule exists exactly so, and then nothing is
-- written. Replacing stores the caller's next occurrence and keeps the last
-- run and job. QF101 for an undeclared queue. Nothing changes on an error.
--
-- Parameters: :schedule TEXT (1 to 218 characters); :queue, :task TEXT;
-- :cron TEXT (1 to 255 characters); :time_zone TEXT, an IANA name;
-- :payload canonical JSON TEXT or NULL; :priority INTEGER or NULL;
-- :max_attempts INTEGER or NULL (the queue's at submission); :active_key
-- TEXT or NULL; :paused INTEGER 0/1 (NULL = 0); :next_run_at UTC TEXT
-- 'YYYY-MM-DDTHH:MM:SS.ffffffZ' or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the caller evaluates the schedule (SQLite
-- has no time zones): it refuses (QF100) a cron expression that does not
-- parse or can never fire and a zone that Python's
-- zoneinfo.available_timezones() does not list by that exact name (the
-- grammar and rules of docs/guarantees.md §14; fenceq/cron.py implements
-- them), and passes as :next_run_at the first occurrence after the clock,
-- read inside this transaction (NULL while paused or when none is left
-- before year 10000; a paused schedule stores NULL whatever is passed).
-- A NULL paused means false.
{{error_table}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_set_schedule (changed INTEGER NOT NULL);
DELETE FROM temp.fenceq_set_schedule;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: schedule must be 1 to 218 characters' AS message
     WHERE NOT {{identifier(:schedule, 218)}}
    UNION ALL SELECT 2, 'QF102', 'fenceq: queue must be 1 to 255 characters'
     WHERE NOT {{identifier(:queue, 255)}}
    UNION ALL SELECT 3, 'QF102', 'fenceq: task must be 1 to 255 characters'
     WHERE NOT {{identifier(:task, 255)}}
    UNION ALL SELECT 4, 'QF102', 'fenceq: active_key must be 1 to 255 characters'
     WHERE NOT (:active_key IS NULL OR {{identifier(:active_key, 255)}})
    UNION ALL SELECT 5, 'QF104', 'fenceq: max_attempts must be a positive integer'
     WHERE NOT {{optional_integer(:max_attempts, BETWEEN 1 AND 2147483647)}}
    UNION ALL SELECT 6, 'QF104', 'fenceq: priority must be a 32-bit integer'
     WHERE NOT {{optional_integer(:priority, BETWEEN -2147483648 AND 2147483647)}}
    UNION ALL SELECT 7, 'QF100', 'fenceq: paused must be a boolean'
     WHERE NOT {{optional_integer(:paused, IN (0, 1))}}
    UNION ALL SELECT 8, 'QF103', 'fenceq: payload must be finite JSON without \u0000'
     WHERE NOT {{optional_json(:payload)}}
    UNION ALL SELECT 9, 'QF103', 'fenceq: payload exceeds 1 MiB in canonical form'
     WHERE NOT {{optional_within_1_mib(:payload)}}
    UNION ALL SELECT 10, 'QF100', 'fenceq: cron expression must be a string of 1 to 255 characters'
     WHERE NOT {{identifier(:cron, 255)}}
    UNION ALL SELECT 11, 'QF100', 'fenceq: time_zone must name a known IANA time zone'
     WHERE NOT {{identifier(:time_zone, 255)}}
    UNION ALL SELECT 12, 'QF105', 'fenceq: next_run_at must be UTC text within years 0001-9999'
     WHERE NOT {{optional_utc_text(:next_run_at)}}
    UNION ALL SELECT 13, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_set_schedule (changed)
SELECT NOT EXISTS (SELECT 1 FROM fenceq__schedules AS s
                    WHERE s.schedule = :schedule AND s.queue = :queue AND s.task = :task
                      AND s.cron = :cron AND s.time_zone = :time_zone
                      AND s.payload IS nullif(:payload, 'null') AND s.priority IS :priority
                      AND s.max_attempts IS :max_attempts AND s.active_key IS :active_key
                      AND s.paused = coalesce(:paused, 0))
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__schedules (schedule, queue, task, cron, time_zone, payload, priority, max_attempts,
                               active_key, paused, next_run_at, revision)
SELECT :schedule, :queue, :task, :cron, :time_zone, nullif(:payload, 'null'), :priority, :max_attempts,
       :active_key, coalesce(:paused, 0),
       CASE WHEN NOT coalesce(:paused, 0) THEN {{utc_text_micros(:next_run_at)}} END, 1
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error) AND (SELECT changed FROM temp.fenceq_set_schedule)
    ON CONFLICT (schedule) DO UPDATE
   SET queue = excluded.queue, task = excluded.task, cron = excluded.cron, time_zone = excluded.time_zone,
       payload = excluded.payload, priority = excluded.priority, max_attempts = excluded.max_attempts,
       active_key = excluded.active_key, paused = excluded.paused, next_run_at = excluded.next_run_at,
       revision = revision + 1;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT changed FROM temp.fenceq_set_schedule) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
