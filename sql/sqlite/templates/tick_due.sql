-- fenceq for SQLite: tick_due -- the due schedules, for tick's caller to evaluate.
--
-- The first half of tick (SQLite has no time zones, so the caller evaluates
-- the cron expressions): the schedules whose next occurrence has come, the
-- longest due first, at most max_rows, each with what the caller needs to
-- compute the occurrence to submit, the next one and the submission
-- fingerprint for tick.sql, and the clock reading now to compute them at.
--
-- Parameters: :max_rows INTEGER or NULL (100).
-- Result: zero or more rows (sqlstate, message, detail, schedule, revision,
-- queue, task, cron, time_zone, payload, priority, max_attempts, active_key,
-- next_run_at UTC TEXT, now UTC TEXT), or one error row (QF104 for a
-- max_rows below 1).
-- How to run: in tick's BEGIN IMMEDIATE transaction, before tick.sql (README.md).
SELECT 'QF104' AS sqlstate, 'fenceq: max_rows must be a positive integer' AS message, NULL AS detail,
       NULL AS schedule, NULL AS revision, NULL AS queue, NULL AS task, NULL AS cron, NULL AS time_zone,
       NULL AS payload, NULL AS priority, NULL AS max_attempts, NULL AS active_key, NULL AS next_run_at,
       NULL AS now
 WHERE NOT {{optional_integer(:max_rows, BETWEEN 1 AND 2147483647)}}
UNION ALL
SELECT * FROM (
    SELECT NULL, NULL, NULL, s.schedule, s.revision, s.queue, s.task, s.cron, s.time_zone, s.payload,
           s.priority, s.max_attempts, s.active_key,
           {{micros_utc_text(s.next_run_at)}},
           {{micros_utc_text(c.now)}}
      FROM (SELECT {{now}} AS now) AS c
      JOIN fenceq__schedules AS s ON s.next_run_at <= c.now
     WHERE {{optional_integer(:max_rows, BETWEEN 1 AND 2147483647)}}
     ORDER BY s.next_run_at, s.schedule
     LIMIT {{row_limit(:max_rows, 100)}});
