-- fenceq for SQLite: set_schedule -- create a schedule or replace its definition.
-- Generated from templates/set_schedule.sql by scripts/gen-sqlite: edit the template.
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
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_set_schedule (changed INTEGER NOT NULL);
DELETE FROM temp.fenceq_set_schedule;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: schedule must be 1 to 218 characters' AS message
     WHERE NOT (typeof(:schedule) = 'text' AND length(:schedule) BETWEEN 1 AND 218
                AND instr(CAST(:schedule AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF102', 'fenceq: queue must be 1 to 255 characters'
     WHERE NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                AND instr(CAST(:queue AS BLOB), x'00') = 0)
    UNION ALL SELECT 3, 'QF102', 'fenceq: task must be 1 to 255 characters'
     WHERE NOT (typeof(:task) = 'text' AND length(:task) BETWEEN 1 AND 255
                AND instr(CAST(:task AS BLOB), x'00') = 0)
    UNION ALL SELECT 4, 'QF102', 'fenceq: active_key must be 1 to 255 characters'
     WHERE NOT (:active_key IS NULL OR (typeof(:active_key) = 'text' AND length(:active_key) BETWEEN 1 AND 255
                                        AND instr(CAST(:active_key AS BLOB), x'00') = 0))
    UNION ALL SELECT 5, 'QF104', 'fenceq: max_attempts must be a positive integer'
     WHERE NOT (:max_attempts IS NULL
                OR (typeof(:max_attempts) = 'integer' AND :max_attempts BETWEEN 1 AND 2147483647))
    UNION ALL SELECT 6, 'QF104', 'fenceq: priority must be a 32-bit integer'
     WHERE NOT (:priority IS NULL
                OR (typeof(:priority) = 'integer' AND :priority BETWEEN -2147483648 AND 2147483647))
    UNION ALL SELECT 7, 'QF100', 'fenceq: paused must be a boolean'
     WHERE NOT (:paused IS NULL
                OR (typeof(:paused) = 'integer' AND :paused IN (0, 1)))
    UNION ALL SELECT 8, 'QF103', 'fenceq: payload must be finite JSON without \u0000'
     WHERE NOT (:payload IS NULL
                OR (typeof(:payload) = 'text' AND json_valid(:payload)
                    AND instr(replace(:payload, '\\', ''), '\u0000') = 0))
    UNION ALL SELECT 9, 'QF103', 'fenceq: payload exceeds 1 MiB in canonical form'
     WHERE NOT (:payload IS NULL OR length(CAST(:payload AS BLOB)) <= 1048576)
    UNION ALL SELECT 10, 'QF100', 'fenceq: cron expression must be a string of 1 to 255 characters'
     WHERE NOT (typeof(:cron) = 'text' AND length(:cron) BETWEEN 1 AND 255
                AND instr(CAST(:cron AS BLOB), x'00') = 0)
    UNION ALL SELECT 11, 'QF100', 'fenceq: time_zone must name a known IANA time zone'
     WHERE NOT (typeof(:time_zone) = 'text' AND length(:time_zone) BETWEEN 1 AND 255
                AND instr(CAST(:time_zone AS BLOB), x'00') = 0)
    UNION ALL SELECT 12, 'QF105', 'fenceq: next_run_at must be UTC text within years 0001-9999'
     WHERE NOT (:next_run_at IS NULL
                OR (typeof(:next_run_at) = 'text' AND length(:next_run_at) = 27
                    AND :next_run_at GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                    || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                    || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                    AND substr(:next_run_at, 1, 4) <> '0000'
                    AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(:next_run_at, 1, 19)), 'unixepoch')
                        = substr(:next_run_at, 1, 19)))
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
       CASE WHEN NOT coalesce(:paused, 0) THEN (unixepoch(substr(:next_run_at, 1, 19)) * 1000000
                                                + CAST(substr(:next_run_at, 21, 6) AS INTEGER)) END, 1
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error) AND (SELECT changed FROM temp.fenceq_set_schedule)
    ON CONFLICT (schedule) DO UPDATE
   SET queue = excluded.queue, task = excluded.task, cron = excluded.cron, time_zone = excluded.time_zone,
       payload = excluded.payload, priority = excluded.priority, max_attempts = excluded.max_attempts,
       active_key = excluded.active_key, paused = excluded.paused, next_run_at = excluded.next_run_at,
       revision = revision + 1;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT changed FROM temp.fenceq_set_schedule) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
