-- fenceq for SQLite: tick -- submit the jobs of due schedules.
-- Generated from templates/tick.sql by scripts/gen-sqlite: edit the template.
--
-- For each element of :ticks (a due schedule as tick_due.sql read it, with
-- the caller's evaluation): one job for its occurrence, with run_at = the
-- occurrence and submission_id = 'fenceq:schedule:' || schedule || ':' ||
-- occurrence (UTC, YYYY-MM-DDTHH:MM:SSZ); an occurrence already submitted
-- under that id is not submitted again, and one whose active key is held by
-- an active job (or by an earlier job of this call) is skipped, never
-- forced. Then the schedule's next occurrence is the one the caller
-- computed. Returns the number of jobs submitted (event submitted for each).
--
-- Parameters: :max_rows INTEGER or NULL (100); :ticks TEXT, a JSON array
-- with one object per row of tick_due.sql, read in this transaction:
-- "schedule" and "revision" as read; "next_run_at" as read; "occurrence"
-- the latest occurrence at or before tick_due's now, or null when none
-- lies at or after next_run_at; "following" the first occurrence after
-- that now, or null; "fingerprint" the submission fingerprint
-- (docs/guarantees.md §4) of the job for the occurrence: the schedule's
-- queue, task, payload, priority, max_attempts and active_key, the
-- submission id above, run_at = the occurrence, job_id and expires_at
-- null, force false (null without an occurrence). Times as UTC TEXT
-- 'YYYY-MM-DDTHH:MM:SS.ffffffZ'.
-- Result: one row (sqlstate, message, detail, value INTEGER jobs submitted).
-- How to run: inside BEGIN IMMEDIATE (it writes), after tick_due.sql, as README.md describes.
--
-- Differs from PostgreSQL in that the caller evaluates the schedules
-- (tick_due.sql, then fenceq/cron.py's rules of docs/guarantees.md §14),
-- and ticks take turns on the write lock instead of skipping each other's
-- rows (SKIP LOCKED). An element whose schedule changed since it was read
-- (another revision or next_run_at) or whose occurrence lies after now is
-- left alone, so no occurrence makes two jobs whoever calls and however
-- stale its reading. No fenceq_jobs notification is sent; a generated job
-- id is a random (version 4) UUID made from randomblob().
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF104' AS sqlstate, 'fenceq: max_rows must be a positive integer' AS message
     WHERE NOT (:max_rows IS NULL
                OR (typeof(:max_rows) = 'integer' AND :max_rows BETWEEN 1 AND 2147483647))
    UNION ALL SELECT 2, 'QF100', 'fenceq: ticks must be a JSON array of at most max_rows elements'
     WHERE NOT coalesce(json_array_length(CASE WHEN json_valid(:ticks)
                                               THEN CASE WHEN json_type(:ticks) = 'array'
                                                         THEN :ticks END END) <= coalesce(:max_rows, 100), 0)
    UNION ALL SELECT 3, 'QF100', 'fenceq: a tick must hold a schedule, its revision, UTC times and a fingerprint'
     WHERE EXISTS (
        SELECT 1
          FROM (SELECT t.type, t.value ->> 'schedule' AS schedule, t.value ->> 'revision' AS revision,
                       t.value ->> 'next_run_at' AS n, t.value ->> 'occurrence' AS o,
                       t.value ->> 'following' AS f, t.value ->> 'fingerprint' AS fingerprint
                  FROM (SELECT a.type, CASE WHEN a.type = 'object' THEN a.value END AS value
                          FROM json_each(CASE WHEN json_valid(:ticks)
                                              THEN CASE WHEN json_type(:ticks) = 'array'
                                                        THEN :ticks END END) AS a) AS t) AS e
         WHERE NOT coalesce(e.type = 'object' AND typeof(e.schedule) = 'text' AND typeof(e.revision) = 'integer'
                            AND e.n IS NOT NULL
                            AND (e.n IS NULL
                                 OR (typeof(e.n) = 'text' AND length(e.n) = 27
                                     AND e.n GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                                     || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                                     || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                                     AND substr(e.n, 1, 4) <> '0000'
                                     AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(e.n, 1, 19)), 'unixepoch')
                                         = substr(e.n, 1, 19)))
                            AND (e.o IS NULL
                                 OR (typeof(e.o) = 'text' AND length(e.o) = 27
                                     AND e.o GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                                     || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                                     || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                                     AND substr(e.o, 1, 4) <> '0000'
                                     AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(e.o, 1, 19)), 'unixepoch')
                                         = substr(e.o, 1, 19)))
                            AND (e.f IS NULL
                                 OR (typeof(e.f) = 'text' AND length(e.f) = 27
                                     AND e.f GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                                     || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                                     || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                                     AND substr(e.f, 1, 4) <> '0000'
                                     AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(e.f, 1, 19)), 'unixepoch')
                                         = substr(e.f, 1, 19)))
                            AND CASE WHEN e.o IS NULL THEN e.fingerprint IS NULL
                                     ELSE typeof(e.fingerprint) = 'text' AND length(e.fingerprint) = 68
                                          AND substr(e.fingerprint, 1, 4) = 'fq1:'
                                          AND substr(e.fingerprint, 5) NOT GLOB '*[^0-9a-f]*' END, 0))
) ORDER BY rank LIMIT 1;
-- One row per element whose schedule is as read: what to do with its
-- occurrence (action 'new', 'replay', 'busy', or NULL without one).
CREATE TEMP TABLE IF NOT EXISTS fenceq_tick (
    schedule TEXT PRIMARY KEY, ord INTEGER NOT NULL, queue TEXT NOT NULL, active_key TEXT,
    occurrence INTEGER, following INTEGER, submission_id TEXT, fingerprint TEXT, action TEXT,
    random_hex TEXT NOT NULL, job_id TEXT, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_tick;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT OR IGNORE INTO temp.fenceq_tick (schedule, ord, queue, active_key, occurrence, following,
                                        submission_id, fingerprint, random_hex, now)
SELECT s.schedule, t.key, s.queue, s.active_key,
       (unixepoch(substr(t.value ->> 'occurrence', 1, 19)) * 1000000
        + CAST(substr(t.value ->> 'occurrence', 21, 6) AS INTEGER)),
       (unixepoch(substr(t.value ->> 'following', 1, 19)) * 1000000
        + CAST(substr(t.value ->> 'following', 21, 6) AS INTEGER)),
       'fenceq:schedule:' || s.schedule || ':' || substr(t.value ->> 'occurrence', 1, 19) || 'Z',
       t.value ->> 'fingerprint', lower(hex(randomblob(16))), clock.now
  FROM clock, json_each(CASE WHEN json_valid(:ticks)
                             THEN CASE WHEN json_type(:ticks) = 'array'
                                       THEN :ticks END END) AS t
  JOIN fenceq__schedules AS s ON s.schedule = t.value ->> 'schedule'
 WHERE s.revision = t.value ->> 'revision'
   AND s.next_run_at = (unixepoch(substr(t.value ->> 'next_run_at', 1, 19)) * 1000000
                        + CAST(substr(t.value ->> 'next_run_at', 21, 6) AS INTEGER))
   AND coalesce((unixepoch(substr(t.value ->> 'occurrence', 1, 19)) * 1000000
                 + CAST(substr(t.value ->> 'occurrence', 21, 6) AS INTEGER)) <= clock.now, 1)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE temp.fenceq_tick
   SET job_id = (SELECT s.job_id FROM fenceq__submissions AS s WHERE s.submission_id = fenceq_tick.submission_id),
       action = CASE WHEN EXISTS (SELECT 1 FROM fenceq__submissions AS s
                                   WHERE s.submission_id = fenceq_tick.submission_id) THEN 'replay'
                     WHEN EXISTS (SELECT 1 FROM fenceq__jobs AS j
                                   WHERE j.queue = fenceq_tick.queue AND j.active_key = fenceq_tick.active_key
                                     AND j.status IN ('pending', 'claimed')) THEN 'busy'
                     ELSE 'new' END
 WHERE occurrence IS NOT NULL;
-- Of the new jobs of this call that share an active key, the first holds it.
UPDATE temp.fenceq_tick
   SET action = 'busy'
 WHERE action = 'new' AND active_key IS NOT NULL
   AND EXISTS (SELECT 1 FROM temp.fenceq_tick AS e
                WHERE e.action = 'new' AND e.queue = fenceq_tick.queue AND e.active_key = fenceq_tick.active_key
                  AND e.ord < fenceq_tick.ord);
UPDATE temp.fenceq_tick
   SET job_id = substr(random_hex, 1, 8) || '-' || substr(random_hex, 9, 4)
                || '-4' || substr(random_hex, 14, 3)
                || '-' || substr('89ab', (instr('0123456789abcdef', substr(random_hex, 17, 1)) - 1) % 4 + 1, 1)
                || substr(random_hex, 18, 3)
                || '-' || substr(random_hex, 21, 12)
 WHERE action = 'new';
INSERT INTO fenceq__submissions (submission_id, fingerprint, job_id, queue, created_at)
SELECT t.submission_id, t.fingerprint, t.job_id, t.queue, t.now
  FROM temp.fenceq_tick AS t
 WHERE t.action = 'new';
INSERT INTO fenceq__jobs (job_id, queue, task, payload, priority, max_attempts, run_at, submission_id,
                          fingerprint, active_key, created_at, scheduled)
SELECT t.job_id, s.queue, s.task, s.payload, coalesce(s.priority, 0), coalesce(s.max_attempts, q.max_attempts),
       t.occurrence, t.submission_id, t.fingerprint, s.active_key, t.now,
       t.occurrence > t.now  -- an occurrence still ahead waits apart (version 5)
  FROM temp.fenceq_tick AS t
  JOIN fenceq__schedules AS s ON s.schedule = t.schedule
  JOIN fenceq__queues AS q ON q.queue = s.queue
 WHERE t.action = 'new'
 ORDER BY t.ord;
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'submitted', NULL, NULL,
       json_object('priority', j.priority, 'run_at', CASE WHEN j.blocked_run_at IS NULL
           THEN strftime('%Y-%m-%dT%H:%M:%S', j.run_at / 1000000 - (j.run_at % 1000000 < 0),
                         'unixepoch')
                || printf('.%06dZ', (j.run_at % 1000000 + 1000000) % 1000000)
           ELSE strftime('%Y-%m-%dT%H:%M:%S', j.blocked_run_at / 1000000 - (j.blocked_run_at % 1000000 < 0),
                         'unixepoch')
                || printf('.%06dZ', (j.blocked_run_at % 1000000 + 1000000) % 1000000) END),
       t.now
  FROM temp.fenceq_tick AS t JOIN fenceq__jobs AS j ON j.job_id = t.job_id
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND t.action = 'new';
UPDATE fenceq__schedules
   SET next_run_at = t.following,
       last_run_at = CASE WHEN t.action IN ('new', 'replay') THEN t.occurrence ELSE last_run_at END,
       last_job_id = CASE WHEN t.action IN ('new', 'replay') THEN t.job_id ELSE last_job_id END
  FROM temp.fenceq_tick AS t
 WHERE fenceq__schedules.schedule = t.schedule;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT count(*) FROM temp.fenceq_tick WHERE action = 'new') END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
