-- fenceq for SQLite: submit -- enqueue one job and return its id.
-- Generated from templates/submit.sql by scripts/gen-sqlite: edit the template.
--
-- With a submission_id an exact replay returns the original job id (also
-- after the job finished or was purged); a changed request raises QF201
-- before anything changes. An explicit job_id reserved by another job, live
-- or purged, raises QF203. An active key held by a pending or claimed job
-- raises QF202, unless force: then that job is cancelled (its fence dies,
-- its dependents are cancelled) and the new one inserted, in this
-- transaction. With depends_on the job waits until every job named there
-- completed, and is inserted cancelled ('dependency_failed') when one of
-- them already failed, was cancelled or expired (docs/guarantees.md §16).
-- A refused submission stores nothing. Event submitted (not for a replay),
-- and cancelled for each job this cancels.
--
-- Parameters: :queue, :task TEXT; :payload canonical JSON TEXT or NULL;
-- :submission_id, :job_id (at most 36 characters), :active_key,
-- :concurrency_key TEXT or NULL; :priority INTEGER or NULL (0); :run_at, :expires_at UTC TEXT
-- 'YYYY-MM-DDTHH:MM:SS.ffffffZ' or NULL (run_at NULL = now);
-- :max_attempts INTEGER or NULL (the queue's); :force INTEGER 0/1 or NULL
-- (0); :fingerprint TEXT, required with a submission_id; :depends_on JSON
-- array of job ids or NULL.
-- Result: one row (sqlstate, message, detail, value TEXT job id).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the caller computes the submission
-- fingerprint ('fq1:' || lower hex SHA-256 of the canonical request
-- document, docs/guarantees.md §4; SQLite has no SHA-256) and passes it as
-- :fingerprint; the payload must already be canonical JSON text (§4),
-- which is stored as sent; no fenceq_jobs or fenceq_control notification
-- is sent; a generated job id is a random (version 4) UUID made from
-- randomblob(); no row lock is needed to keep a dependency from finishing
-- unseen (BEGIN IMMEDIATE holds the file); the event submitted of a job
-- that waits on dependencies records the run_at it asked for, as get_job
-- shows it, where PostgreSQL's records the 'infinity' it stores meanwhile.
-- One scratch row per connection (temp.fenceq_submit_call, overwritten by
-- each call): the first failing check in this order (sqlstate, message), a
-- replayed job id, the new job's id, the clock reading, the active key's
-- holder and what the dependencies say (how many have not completed,
-- whether one failed). Every later statement is guarded by its sqlstate
-- being NULL.
CREATE TEMP TABLE IF NOT EXISTS fenceq_submit_call (
    id INTEGER PRIMARY KEY CHECK (id = 1), sqlstate TEXT, message TEXT, detail TEXT,
    replay_job_id TEXT, job_id TEXT, now INTEGER NOT NULL, holder TEXT,
    blocked_by INTEGER, dependency_failed INTEGER);
-- randomblob is read once, hence MATERIALIZED.
WITH r(h, now) AS MATERIALIZED (
        SELECT lower(hex(randomblob(16))),
               (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000),
     deps(id, status) AS (
        SELECT DISTINCT d.value, j.status
          FROM json_each(CASE WHEN json_valid(:depends_on)
                              THEN CASE WHEN json_type(:depends_on) = 'array'
                                        THEN :depends_on END END) AS d
          LEFT JOIN fenceq__jobs AS j ON j.job_id = d.value AND d.type = 'text'),
     judged(blocked_by, failed) AS (
        SELECT count(*) FILTER (WHERE d.status IN ('pending', 'claimed')),
               coalesce(max(d.status IN ('failed', 'cancelled', 'expired')), 0)
          FROM deps AS d),
     -- With force, the job that holds the active key (cancelled below), and
     -- whether the new job depends on it: forced over its own dependency, it
     -- is stored cancelled too (§16).
     held(holder, depended_on) AS (
        SELECT h.holder, coalesce(h.holder IN (SELECT x.id FROM deps AS x), 0) FROM (
            SELECT CASE WHEN :active_key IS NOT NULL AND coalesce(:force, 0) AND NOT d.failed
                        THEN (SELECT j.job_id FROM fenceq__jobs AS j
                               WHERE j.queue = :queue AND j.active_key = :active_key
                                 AND j.status IN ('pending', 'claimed')) END AS holder
              FROM judged AS d) AS h),
     e(error) AS (SELECT CASE
        WHEN NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                  AND instr(CAST(:queue AS BLOB), x'00') = 0)
             THEN 'QF102 fenceq: queue must be 1 to 255 characters'
        WHEN NOT (typeof(:task) = 'text' AND length(:task) BETWEEN 1 AND 255
                  AND instr(CAST(:task AS BLOB), x'00') = 0)
             THEN 'QF102 fenceq: task must be 1 to 255 characters'
        WHEN NOT (:submission_id IS NULL
                  OR (typeof(:submission_id) = 'text' AND length(:submission_id) BETWEEN 1 AND 255
                      AND instr(CAST(:submission_id AS BLOB), x'00') = 0))
             THEN 'QF102 fenceq: submission_id must be 1 to 255 characters'
        WHEN NOT (:job_id IS NULL OR (typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
                                      AND instr(CAST(:job_id AS BLOB), x'00') = 0))
             THEN 'QF102 fenceq: job_id must be 1 to 36 characters'
        WHEN NOT (:active_key IS NULL OR (typeof(:active_key) = 'text' AND length(:active_key) BETWEEN 1 AND 255
                                          AND instr(CAST(:active_key AS BLOB), x'00') = 0))
             THEN 'QF102 fenceq: active_key must be 1 to 255 characters'
        WHEN NOT (:concurrency_key IS NULL
                  OR (typeof(:concurrency_key) = 'text' AND length(:concurrency_key) BETWEEN 1 AND 255
                      AND instr(CAST(:concurrency_key AS BLOB), x'00') = 0))
             THEN 'QF102 fenceq: concurrency_key must be 1 to 255 characters'
        WHEN NOT (:max_attempts IS NULL
                  OR (typeof(:max_attempts) = 'integer' AND :max_attempts BETWEEN 1 AND 2147483647))
             THEN 'QF104 fenceq: max_attempts must be a positive integer'
        WHEN NOT (:priority IS NULL
                  OR (typeof(:priority) = 'integer' AND :priority BETWEEN -2147483648 AND 2147483647))
             THEN 'QF104 fenceq: priority must be a 32-bit integer'
        WHEN NOT (:run_at IS NULL
                  OR (typeof(:run_at) = 'text' AND length(:run_at) = 27
                      AND :run_at GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                      || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                      || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                      AND substr(:run_at, 1, 4) <> '0000'
                      AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(:run_at, 1, 19)), 'unixepoch')
                          = substr(:run_at, 1, 19)))
             THEN 'QF105 fenceq: run_at must be UTC text within years 0001-9999'
        WHEN NOT (:expires_at IS NULL
                  OR (typeof(:expires_at) = 'text' AND length(:expires_at) = 27
                      AND :expires_at GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                      || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                      || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                      AND substr(:expires_at, 1, 4) <> '0000'
                      AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(:expires_at, 1, 19)), 'unixepoch')
                          = substr(:expires_at, 1, 19)))
             THEN 'QF105 fenceq: expires_at must be UTC text within years 0001-9999'
        WHEN NOT (:payload IS NULL
                  OR (typeof(:payload) = 'text' AND json_valid(:payload)
                      AND instr(replace(:payload, '\\', ''), '\u0000') = 0))
             THEN 'QF103 fenceq: payload must be finite JSON without \u0000'
        WHEN NOT (:payload IS NULL OR length(CAST(:payload AS BLOB)) <= 1048576)
             THEN 'QF103 fenceq: payload exceeds 1 MiB in canonical form'
        WHEN NOT (:force IS NULL
                  OR (typeof(:force) = 'integer' AND :force IN (0, 1)))
             THEN 'QF100 fenceq: force must be a boolean'
        WHEN :submission_id IS NOT NULL
             AND NOT (typeof(:fingerprint) = 'text' AND length(:fingerprint) = 68
                      AND substr(:fingerprint, 1, 4) = 'fq1:'
                      AND substr(:fingerprint, 5) NOT GLOB '*[^0-9a-f]*')
             THEN 'QF100 fenceq: fingerprint must be fq1: and 64 lowercase hex digits'
        WHEN NOT (:depends_on IS NULL OR CASE WHEN json_valid(:depends_on)
                                              THEN CASE WHEN json_type(:depends_on) = 'array'
                                                        THEN :depends_on END END IS NOT NULL)
             THEN 'QF100 fenceq: depends_on must be a JSON array'
        WHEN EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(:depends_on)
                                                  THEN CASE WHEN json_type(:depends_on) = 'array'
                                                            THEN :depends_on END END) AS d
                      WHERE NOT (d.type = 'text' AND (typeof(d.value) = 'text' AND length(d.value) BETWEEN 1 AND 36
                                                      AND instr(CAST(d.value AS BLOB), x'00') = 0)))
             THEN 'QF102 fenceq: depends_on must hold job ids of 1 to 36 characters'
        WHEN (SELECT count(*) FROM deps) > 100
             THEN 'QF100 fenceq: a job may depend on at most 100 jobs'
        WHEN :job_id IN (SELECT d.id FROM deps AS d)
             THEN 'QF100 fenceq: a job cannot depend on itself'
        WHEN NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
             THEN 'QF101 fenceq: unknown queue'
        WHEN EXISTS (SELECT 1 FROM fenceq__submissions AS s
                      WHERE s.submission_id = :submission_id AND s.fingerprint <> :fingerprint)
             THEN 'QF201 fenceq: the submission id is retained for a different request'
        WHEN :job_id IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM fenceq__submissions AS s WHERE s.submission_id = :submission_id)
             AND (EXISTS (SELECT 1 FROM fenceq__jobs AS j WHERE j.job_id = :job_id)
                  OR EXISTS (SELECT 1 FROM fenceq__submissions AS s WHERE s.job_id = :job_id))
             THEN 'QF203 fenceq: the job id is taken'
        WHEN NOT EXISTS (SELECT 1 FROM fenceq__submissions AS s WHERE s.submission_id = :submission_id)
             AND EXISTS (SELECT 1 FROM deps AS d WHERE d.status IS NULL)
             THEN 'QF100 fenceq: a dependency names no job'
        WHEN NOT EXISTS (SELECT 1 FROM fenceq__submissions AS s WHERE s.submission_id = :submission_id)
             AND (EXISTS (SELECT 1 FROM fenceq__dependencies AS b
                           WHERE b.depends_on IN (
                                 SELECT d.id FROM deps AS d)
                           GROUP BY b.depends_on HAVING count(*) >= 1000)
                  OR EXISTS (WITH RECURSIVE up(job_id, depth) AS (
                                 SELECT s.job_id, 1 FROM fenceq__jobs AS s
                                  WHERE s.job_id IN (
                                        SELECT d.id FROM deps AS d)
                                 UNION
                                 SELECT e.depends_on, u.depth + 1
                                   FROM up AS u JOIN fenceq__dependencies AS e ON e.job_id = u.job_id
                                  WHERE u.depth <= 16)
                             SELECT 1 FROM up AS u WHERE u.depth > 16))
             THEN 'QF100 fenceq: a job may have at most 1000 dependents, in chains at most 16 deep'
        WHEN :active_key IS NOT NULL AND NOT coalesce(:force, 0)
             AND NOT (SELECT j.failed FROM judged AS j)
             AND NOT EXISTS (SELECT 1 FROM fenceq__submissions AS s WHERE s.submission_id = :submission_id)
             AND EXISTS (SELECT 1 FROM fenceq__jobs AS j
                          WHERE j.queue = :queue AND j.active_key = :active_key
                            AND j.status IN ('pending', 'claimed'))
             THEN 'QF202 fenceq: the active key is held by another active job'
        END)
INSERT OR REPLACE INTO temp.fenceq_submit_call (id, sqlstate, message, replay_job_id, job_id, now, holder,
                                                 blocked_by, dependency_failed)
SELECT 1, substr(e.error, 1, 5), substr(e.error, 7),
       (SELECT s.job_id FROM fenceq__submissions AS s WHERE s.submission_id = :submission_id),
       coalesce(:job_id, substr(r.h, 1, 8) || '-' || substr(r.h, 9, 4)
                         || '-4' || substr(r.h, 14, 3)
                         || '-' || substr('89ab', (instr('0123456789abcdef', substr(r.h, 17, 1)) - 1) % 4 + 1, 1)
                         || substr(r.h, 18, 3)
                         || '-' || substr(r.h, 21, 12)),
       r.now, h.holder,
       -- A job stored cancelled waits for nothing (blocked_by NULL).
       CASE WHEN NOT (d.failed OR h.depended_on) THEN nullif(d.blocked_by, 0) END,
       d.failed OR h.depended_on
  FROM r, e, judged AS d, held AS h;
INSERT INTO fenceq__submissions (submission_id, fingerprint, job_id, queue, created_at)
SELECT :submission_id, :fingerprint, t.job_id, :queue, t.now
  FROM temp.fenceq_submit_call AS t
 WHERE :submission_id IS NOT NULL AND t.sqlstate IS NULL AND t.replay_job_id IS NULL;
-- force: the predecessor holding the active key is cancelled (its fence
-- dies), and with it every job that depends on it, transitively, with
-- last_error 'dependency_failed'; their events first (reason replaced, or
-- dependency_failed), while they are as they were. One statement each: the
-- usual submit has no predecessor, and pays for one.
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'cancelled', CASE WHEN j.status = 'claimed' THEN j.generation END,
                                       CASE WHEN j.status = 'claimed' THEN j.owner_id END,
       CASE WHEN j.job_id = t.holder THEN '{"reason":"replaced"}' ELSE '{"reason":"dependency_failed"}' END,
       t.now
  FROM temp.fenceq_submit_call AS t JOIN fenceq__jobs AS j
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.status IN ('pending', 'claimed')
       AND j.job_id IN (
           WITH RECURSIVE down(job_id, depth) AS (
               SELECT t.holder, 0 FROM temp.fenceq_submit_call AS t
                WHERE t.holder IS NOT NULL AND t.sqlstate IS NULL AND t.replay_job_id IS NULL
               UNION
               SELECT d.job_id, w.depth + 1
                 FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
                WHERE w.depth <= 17)
           SELECT w.job_id FROM down AS w);
UPDATE fenceq__jobs
   SET status = 'cancelled', finished_at = (SELECT t.now FROM temp.fenceq_submit_call AS t),
       last_error = CASE WHEN job_id = (SELECT t.holder FROM temp.fenceq_submit_call AS t) THEN last_error
                         ELSE 'dependency_failed' END,
       lease_expires_at = CASE WHEN job_id = (SELECT t.holder FROM temp.fenceq_submit_call AS t)
                               THEN lease_expires_at END,
       pid = CASE WHEN job_id = (SELECT t.holder FROM temp.fenceq_submit_call AS t) THEN pid END
 WHERE status IN ('pending', 'claimed')
   AND job_id IN (
       WITH RECURSIVE down(job_id, depth) AS (
           SELECT t.holder, 0 FROM temp.fenceq_submit_call AS t
            WHERE t.holder IS NOT NULL AND t.sqlstate IS NULL AND t.replay_job_id IS NULL
           UNION
           SELECT d.job_id, w.depth + 1
             FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
            WHERE w.depth <= 17)
       SELECT w.job_id FROM down AS w);
INSERT INTO fenceq__jobs (job_id, queue, task, payload, priority, status, max_attempts, run_at, expires_at,
                          submission_id, fingerprint, active_key, created_at, concurrency_key,
                          blocked_by, blocked_run_at, last_error, finished_at, scheduled)
SELECT t.job_id, :queue, :task, nullif(:payload, 'null'), coalesce(:priority, 0),
       CASE WHEN t.dependency_failed THEN 'cancelled' ELSE 'pending' END,
       coalesce(:max_attempts, q.max_attempts),
       CASE WHEN t.blocked_by IS NOT NULL THEN 253402300800000000
            ELSE coalesce((unixepoch(substr(:run_at, 1, 19)) * 1000000
                           + CAST(substr(:run_at, 21, 6) AS INTEGER)), t.now) END,
       (unixepoch(substr(:expires_at, 1, 19)) * 1000000
        + CAST(substr(:expires_at, 21, 6) AS INTEGER)),
       :submission_id, CASE WHEN :submission_id IS NOT NULL THEN :fingerprint END,
       CASE WHEN NOT t.dependency_failed THEN :active_key END, t.now,
       :concurrency_key,
       t.blocked_by,
       CASE WHEN t.blocked_by IS NOT NULL THEN coalesce((unixepoch(substr(:run_at, 1, 19)) * 1000000
                                                         + CAST(substr(:run_at, 21, 6) AS INTEGER)), t.now) END,
       CASE WHEN t.dependency_failed THEN 'dependency_failed' END,
       CASE WHEN t.dependency_failed THEN t.now END,
       -- Waits apart (version 5) while blocked or due later.
       NOT coalesce(t.dependency_failed, 0)
       AND (t.blocked_by IS NOT NULL OR coalesce((unixepoch(substr(:run_at, 1, 19)) * 1000000
                                                  + CAST(substr(:run_at, 21, 6) AS INTEGER)) > t.now, 0))
  FROM temp.fenceq_submit_call AS t JOIN fenceq__queues AS q ON q.queue = :queue
 WHERE t.sqlstate IS NULL AND t.replay_job_id IS NULL;
-- Event submitted (also for a job stored cancelled: it never was anything
-- else, as on PostgreSQL).
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
  FROM temp.fenceq_submit_call AS t JOIN fenceq__jobs AS j ON j.job_id = t.job_id
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND t.sqlstate IS NULL AND t.replay_job_id IS NULL;
INSERT INTO fenceq__dependencies (depends_on, job_id, satisfied)
SELECT DISTINCT d.value, t.job_id, j.status = 'completed'
  FROM temp.fenceq_submit_call AS t, json_each(CASE WHEN json_valid(:depends_on)
                                                    THEN CASE WHEN json_type(:depends_on) = 'array'
                                                              THEN :depends_on END END) AS d
  JOIN fenceq__jobs AS j ON j.job_id = d.value
 WHERE t.sqlstate IS NULL AND t.replay_job_id IS NULL;
SELECT t.sqlstate, t.message, NULL AS detail,
       CASE WHEN t.sqlstate IS NULL THEN coalesce(t.replay_job_id, t.job_id) END AS value
  FROM temp.fenceq_submit_call AS t;
