-- fenceq for SQLite: submit_batch -- many submissions in one call, all or nothing.
--
-- requests is a JSON array of objects whose keys are submit's parameter
-- names (except queue). Each element follows submit's rules, as if the
-- elements were submitted one after another: a submission id repeated in
-- the batch with the same request answers with the same job id (with a
-- different one QF201); a repeated active key raises QF202 unless forced
-- (then the earlier element's job is inserted cancelled). An element may
-- depend on jobs and on other elements (by their explicit job_id, in any
-- order); a cycle among the elements raises QF100 with the index of the
-- first element on or behind it. Job ids come back
-- in input order. A failure names the element's index, from 0, in detail
-- ('request index N'), never its content. Unknown keys raise QF100.
--
-- Parameters: :queue TEXT; :requests JSON array of objects with the keys
-- task, payload (any JSON value), submission_id, job_id, priority,
-- run_at, expires_at (ISO 8601 text with an offset), max_attempts,
-- active_key, concurrency_key, force (JSON boolean), depends_on (JSON array
-- of job ids), and fingerprint (see below).
-- Result: one row (sqlstate, message, detail, value JSON array of job ids).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that each request with a submission_id
-- carries its fingerprint ('fq1:' || lower hex SHA-256 of the canonical
-- request document, docs/guarantees.md §4) under the key "fingerprint";
-- payloads must be canonical JSON (§4) and are stored as sent; no
-- notification is sent; the elements are checked and written set-wise with
-- the same outcome as one after another; the event submitted of a job that
-- waits on dependencies records the run_at it asked for, as get_job shows
-- it, where PostgreSQL's records the 'infinity' it stores meanwhile.
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT {{identifier(:queue, 255)}}
    UNION ALL SELECT 2, 'QF100', 'fenceq: requests must be a JSON array'
     WHERE NOT coalesce(typeof(:requests) = 'text'
                        AND json_array_length({{as_json_array(:requests)}}) >= 0, 0)
    UNION ALL SELECT 3, 'QF100', 'fenceq: requests may hold at most 10000 elements'
     WHERE json_array_length({{as_json_array(:requests)}}) > 10000
    UNION ALL SELECT 4, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_submit_batch (
    i INTEGER PRIMARY KEY, kind TEXT NOT NULL, raw TEXT NOT NULL,
    task, payload, submission_id, job_id, priority, run_at_text, expires_at_text, max_attempts,
    active_key, force, fingerprint, concurrency_key, depends_on,
    run_at INTEGER, expires_at INTEGER, run_at_ok INTEGER, expires_at_ok INTEGER,
    db_fingerprint TEXT, db_job_id TEXT, first_i INTEGER, fresh INTEGER,
    new_job_id TEXT, cancelled INTEGER, blocked_by INTEGER, dependency_failed INTEGER,
    now INTEGER NOT NULL);
-- The batch is matched against itself by these (replays, active keys,
-- dependencies): without them each match scans the whole batch.
CREATE INDEX IF NOT EXISTS temp.fenceq_submit_batch_submission_idx ON fenceq_submit_batch (submission_id);
CREATE INDEX IF NOT EXISTS temp.fenceq_submit_batch_active_key_idx ON fenceq_submit_batch (active_key);
CREATE INDEX IF NOT EXISTS temp.fenceq_submit_batch_job_id_idx ON fenceq_submit_batch (job_id);
DELETE FROM temp.fenceq_submit_batch;
-- Each element's dependencies, once each (string ids only: others are refused).
CREATE TEMP TABLE IF NOT EXISTS fenceq_submit_batch_deps (
    i INTEGER NOT NULL, depends_on TEXT NOT NULL, PRIMARY KEY (i, depends_on)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS temp.fenceq_submit_batch_deps_on_idx ON fenceq_submit_batch_deps (depends_on);
DELETE FROM temp.fenceq_submit_batch_deps;
WITH {{clock}},
     elements AS (SELECT r.key AS i, r.type AS kind,
                         CASE WHEN r.type = 'object' THEN r.value ELSE '{}' END AS raw
                    FROM json_each({{as_json_array(:requests)}}) AS r)
INSERT INTO temp.fenceq_submit_batch (i, kind, raw, task, payload, submission_id, job_id, priority,
    run_at_text, expires_at_text, max_attempts, active_key, force, fingerprint, concurrency_key, depends_on,
    now)
SELECT e.i, e.kind, e.raw,
       iif(json_type(e.raw, '$.task') = 'text', json_extract(e.raw, '$.task'), NULL),
       nullif(e.raw -> '$.payload', 'null'),
       iif(json_type(e.raw, '$.submission_id') = 'text', json_extract(e.raw, '$.submission_id'), NULL),
       iif(json_type(e.raw, '$.job_id') = 'text', json_extract(e.raw, '$.job_id'), NULL),
       iif(json_type(e.raw, '$.priority') IN ('integer', 'real'), json_extract(e.raw, '$.priority'), NULL),
       iif(json_type(e.raw, '$.run_at') = 'text', json_extract(e.raw, '$.run_at'), NULL),
       iif(json_type(e.raw, '$.expires_at') = 'text', json_extract(e.raw, '$.expires_at'), NULL),
       iif(json_type(e.raw, '$.max_attempts') IN ('integer', 'real'), json_extract(e.raw, '$.max_attempts'),
           NULL),
       iif(json_type(e.raw, '$.active_key') = 'text', json_extract(e.raw, '$.active_key'), NULL),
       CASE json_type(e.raw, '$.force') WHEN 'true' THEN 1 WHEN 'false' THEN 0 END,
       iif(json_type(e.raw, '$.fingerprint') = 'text', json_extract(e.raw, '$.fingerprint'), NULL),
       iif(json_type(e.raw, '$.concurrency_key') = 'text', json_extract(e.raw, '$.concurrency_key'), NULL),
       iif(json_type(e.raw, '$.depends_on') = 'array', e.raw -> '$.depends_on', NULL),
       clock.now
  FROM elements AS e JOIN clock
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Timestamps as PostgreSQL's submit_batch accepts them: ISO 8601
-- YYYY-MM-DD[T ]HH:MM[:SS[.f{1,6}]] with Z, z, +HH, +HHMM or +HH:MM; every
-- field range-checked, the instant within years 0001-9999 UTC.
WITH texts(i, field, t) AS (
        SELECT i, 'run_at', run_at_text FROM temp.fenceq_submit_batch WHERE run_at_text IS NOT NULL
        UNION ALL
        SELECT i, 'expires_at', expires_at_text FROM temp.fenceq_submit_batch
         WHERE expires_at_text IS NOT NULL),
     split AS (
        SELECT i, field, t, substr(t, 17) AS rest,
               min(iif(instr(substr(t, 17), 'Z') > 0, instr(substr(t, 17), 'Z'), 99),
                   iif(instr(substr(t, 17), 'z') > 0, instr(substr(t, 17), 'z'), 99),
                   iif(instr(substr(t, 17), '+') > 0, instr(substr(t, 17), '+'), 99),
                   iif(instr(substr(t, 17), '-') > 0, instr(substr(t, 17), '-'), 99)) AS p
          FROM texts),
     parts AS (
        SELECT i, field, t, substr(rest, 1, p - 1) AS secs, substr(rest, p) AS off FROM split),
     fields AS (
        SELECT i, field, t, secs, off,
               substr(t, 1, 10) || ' ' || substr(t, 12, 5) || ':' || iif(secs = '', '00', substr(secs, 2, 2))
                   AS local,
               CAST(substr(substr(secs, 5) || '000000', 1, 6) AS INTEGER) AS micros,
               iif(off IN ('Z', 'z'), 0, CAST(substr(off, 2, 2) AS INTEGER)) AS off_hours,
               iif(off IN ('Z', 'z') OR length(off) = 3, 0, CAST(substr(replace(off, ':', ''), 4, 2) AS INTEGER))
                   AS off_minutes,
               iif(substr(off, 1, 1) = '-', -1, 1) AS off_sign
          FROM parts),
     parsed AS (
        SELECT i, field,
               unixepoch(local) * 1000000 + micros - off_sign * (off_hours * 3600 + off_minutes * 60) * 1000000
                   AS us,
               substr(t, 1, 10) GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
               AND substr(t, 11, 1) IN ('T', ' ')
               AND substr(t, 12, 5) GLOB '[0-9][0-9]:[0-9][0-9]'
               AND (secs = '' OR secs GLOB ':[0-9][0-9]'
                    OR (secs GLOB ':[0-9][0-9].[0-9]*' AND length(secs) <= 10
                        AND substr(secs, 5) NOT GLOB '*[^0-9]*'))
               AND (off IN ('Z', 'z') OR off GLOB '[+-][0-9][0-9]' OR off GLOB '[+-][0-9][0-9][0-9][0-9]'
                    OR off GLOB '[+-][0-9][0-9]:[0-9][0-9]')
               AND substr(t, 1, 4) <> '0000'
               AND strftime('%Y-%m-%d %H:%M:%S', unixepoch(local), 'unixepoch') = local
               AND off_hours <= 15 AND off_minutes <= 59 AS shaped
          FROM fields),
     checked AS (
        SELECT i, field, us,
               coalesce(shaped AND us BETWEEN -62135596800000000 AND 253402300799999999, 0) AS ok
          FROM parsed)
UPDATE temp.fenceq_submit_batch
   SET run_at = coalesce((SELECT c.us FROM checked AS c
                           WHERE c.i = fenceq_submit_batch.i AND c.field = 'run_at' AND c.ok), run_at),
       run_at_ok = coalesce((SELECT c.ok FROM checked AS c
                              WHERE c.i = fenceq_submit_batch.i AND c.field = 'run_at'), 1),
       expires_at = (SELECT c.us FROM checked AS c
                      WHERE c.i = fenceq_submit_batch.i AND c.field = 'expires_at' AND c.ok),
       expires_at_ok = coalesce((SELECT c.ok FROM checked AS c
                                  WHERE c.i = fenceq_submit_batch.i AND c.field = 'expires_at'), 1);
-- Replays: of a retained identity, or of an earlier element of this batch.
UPDATE temp.fenceq_submit_batch
   SET db_fingerprint = (SELECT s.fingerprint FROM fenceq__submissions AS s
                          WHERE s.submission_id = fenceq_submit_batch.submission_id),
       db_job_id = (SELECT s.job_id FROM fenceq__submissions AS s
                     WHERE s.submission_id = fenceq_submit_batch.submission_id),
       first_i = (SELECT min(b.i) FROM temp.fenceq_submit_batch AS b
                   WHERE b.submission_id = fenceq_submit_batch.submission_id);
UPDATE temp.fenceq_submit_batch SET fresh = db_job_id IS NULL AND (first_i IS NULL OR first_i = i);
INSERT OR IGNORE INTO temp.fenceq_submit_batch_deps (i, depends_on)
SELECT b.i, d.value
  FROM temp.fenceq_submit_batch AS b, json_each(b.depends_on) AS d
 WHERE d.type = 'text';
-- A cycle among the elements (or a chain among them deeper than the
-- bound) is refused before any element is judged, as PostgreSQL does:
-- level k holds the elements from which a path of k edges leads through
-- the batch; what reaches level 18 lies on a cycle, behind one, or too deep.
WITH RECURSIVE
     edges(f, t) AS (
        SELECT d.i, e.i
          FROM temp.fenceq_submit_batch_deps AS d
          JOIN temp.fenceq_submit_batch AS e ON e.job_id = d.depends_on AND e.kind = 'object' AND e.i <> d.i),
     levels(k, node) AS (
        SELECT DISTINCT 1, f FROM edges
        UNION
        SELECT l.k + 1, e.f FROM levels AS l JOIN edges AS e ON e.t = l.node WHERE l.k < 18)
INSERT INTO temp.fenceq_error (sqlstate, message, detail)
SELECT 'QF100', 'fenceq: the batch''s dependencies form a cycle or a chain deeper than 16',
       'request index ' || min(l.node)
  FROM levels AS l
 WHERE l.k = 18 AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
HAVING count(*) > 0;
-- What each fresh element's dependencies say: how many have not completed
-- (an element of the batch has not), and whether one failed, was cancelled
-- or expired.
UPDATE temp.fenceq_submit_batch AS b
   SET blocked_by = (SELECT count(*) FROM temp.fenceq_submit_batch_deps AS d
                       LEFT JOIN fenceq__jobs AS j ON j.job_id = d.depends_on
                      WHERE d.i = b.i AND coalesce(j.status IN ('pending', 'claimed'), 1)),
       dependency_failed = EXISTS (SELECT 1 FROM temp.fenceq_submit_batch_deps AS d
                                     JOIN fenceq__jobs AS j ON j.job_id = d.depends_on
                                    WHERE d.i = b.i AND j.status IN ('failed', 'cancelled', 'expired'))
 WHERE b.fresh AND b.depends_on IS NOT NULL;
-- The first failing element, and its first failing check, in the order
-- PostgreSQL checks them.
INSERT INTO temp.fenceq_error (sqlstate, message, detail)
SELECT sqlstate, message, 'request index ' || i FROM (
    SELECT i, 1 AS rank, 'QF100' AS sqlstate, 'fenceq: each request must be a JSON object' AS message
      FROM temp.fenceq_submit_batch WHERE kind <> 'object'
    UNION ALL SELECT b.i, 2, 'QF100', 'fenceq: a request has an unknown key'
      FROM temp.fenceq_submit_batch AS b
     WHERE EXISTS (SELECT 1 FROM json_each(b.raw) AS k
                    WHERE k.key NOT IN ('task', 'payload', 'submission_id', 'job_id', 'priority', 'run_at',
                                        'expires_at', 'max_attempts', 'active_key', 'force', 'fingerprint',
                                        'concurrency_key', 'depends_on'))
    UNION ALL SELECT i, 3, 'QF102', 'fenceq: task must be a string'
      FROM temp.fenceq_submit_batch WHERE coalesce(json_type(raw, '$.task'), 'null') NOT IN ('text', 'null')
    UNION ALL SELECT i, 4, 'QF102', 'fenceq: submission_id must be a string'
      FROM temp.fenceq_submit_batch
     WHERE coalesce(json_type(raw, '$.submission_id'), 'null') NOT IN ('text', 'null')
    UNION ALL SELECT i, 5, 'QF102', 'fenceq: job_id must be a string'
      FROM temp.fenceq_submit_batch WHERE coalesce(json_type(raw, '$.job_id'), 'null') NOT IN ('text', 'null')
    UNION ALL SELECT i, 6, 'QF104', 'fenceq: priority must be a 32-bit integer'
      FROM temp.fenceq_submit_batch
     WHERE coalesce(json_type(raw, '$.priority'), 'null') NOT IN ('integer', 'real', 'null')
        OR (priority IS NOT NULL AND NOT (priority = CAST(priority AS INTEGER)
                                          AND priority BETWEEN -2147483648 AND 2147483647))
    UNION ALL SELECT i, 7, 'QF105',
                     'fenceq: run_at must be an ISO 8601 timestamp with an offset within years 0001-9999'
      FROM temp.fenceq_submit_batch
     WHERE coalesce(json_type(raw, '$.run_at'), 'null') NOT IN ('text', 'null') OR NOT run_at_ok
    UNION ALL SELECT i, 8, 'QF105',
                     'fenceq: expires_at must be an ISO 8601 timestamp with an offset within years 0001-9999'
      FROM temp.fenceq_submit_batch
     WHERE coalesce(json_type(raw, '$.expires_at'), 'null') NOT IN ('text', 'null') OR NOT expires_at_ok
    UNION ALL SELECT i, 9, 'QF104', 'fenceq: max_attempts must be a 32-bit integer'
      FROM temp.fenceq_submit_batch
     WHERE coalesce(json_type(raw, '$.max_attempts'), 'null') NOT IN ('integer', 'real', 'null')
        OR (max_attempts IS NOT NULL AND NOT (max_attempts = CAST(max_attempts AS INTEGER)
                                              AND max_attempts BETWEEN -2147483648 AND 2147483647))
    UNION ALL SELECT i, 10, 'QF102', 'fenceq: active_key must be a string'
      FROM temp.fenceq_submit_batch WHERE coalesce(json_type(raw, '$.active_key'), 'null') NOT IN ('text', 'null')
    UNION ALL SELECT i, 11, 'QF100', 'fenceq: force must be a boolean'
      FROM temp.fenceq_submit_batch WHERE coalesce(json_type(raw, '$.force'), 'null') NOT IN ('true', 'false', 'null')
    UNION ALL SELECT i, 11.1, 'QF100', 'fenceq: depends_on must be a JSON array'
      FROM temp.fenceq_submit_batch
     WHERE coalesce(json_type(raw, '$.depends_on'), 'null') NOT IN ('array', 'null')
    UNION ALL SELECT i, 11.2, 'QF102', 'fenceq: depends_on must hold strings'
      FROM temp.fenceq_submit_batch AS b
     WHERE EXISTS (SELECT 1 FROM json_each(b.depends_on) AS d WHERE d.type <> 'text')
    UNION ALL SELECT i, 12, 'QF102', 'fenceq: task must be 1 to 255 characters'
      FROM temp.fenceq_submit_batch WHERE NOT {{identifier(task, 255)}}
    UNION ALL SELECT i, 13, 'QF102', 'fenceq: submission_id must be 1 to 255 characters'
      FROM temp.fenceq_submit_batch
     WHERE NOT (submission_id IS NULL
                OR {{identifier(submission_id, 255)}})
    UNION ALL SELECT i, 14, 'QF102', 'fenceq: job_id must be 1 to 36 characters'
      FROM temp.fenceq_submit_batch
     WHERE NOT (job_id IS NULL OR {{identifier(job_id, 36)}})
    UNION ALL SELECT i, 15, 'QF102', 'fenceq: active_key must be 1 to 255 characters'
      FROM temp.fenceq_submit_batch
     WHERE NOT (active_key IS NULL OR {{identifier(active_key, 255)}})
    UNION ALL SELECT i, 15, 'QF102', 'fenceq: concurrency_key must be 1 to 255 characters'
      FROM temp.fenceq_submit_batch
     WHERE coalesce(json_type(raw, '$.concurrency_key'), 'null') NOT IN ('text', 'null')
        OR NOT (concurrency_key IS NULL
                OR {{identifier(concurrency_key, 255)}})
    UNION ALL SELECT i, 16, 'QF104', 'fenceq: max_attempts must be a positive integer'
      FROM temp.fenceq_submit_batch WHERE max_attempts < 1
    UNION ALL SELECT i, 17, 'QF103', 'fenceq: payload must be finite JSON without \u0000'
      FROM temp.fenceq_submit_batch WHERE NOT {{optional_json(payload)}}
    UNION ALL SELECT i, 18, 'QF103', 'fenceq: payload exceeds 1 MiB in canonical form'
      FROM temp.fenceq_submit_batch WHERE NOT {{optional_within_1_mib(payload)}}
    UNION ALL SELECT b.i, 18.1, 'QF102', 'fenceq: depends_on must hold job ids of 1 to 36 characters'
      FROM temp.fenceq_submit_batch AS b
     WHERE EXISTS (SELECT 1 FROM temp.fenceq_submit_batch_deps AS d
                    WHERE d.i = b.i AND NOT {{identifier(d.depends_on, 36)}})
    UNION ALL SELECT b.i, 18.2, 'QF100', 'fenceq: a job may depend on at most 100 jobs'
      FROM temp.fenceq_submit_batch AS b
     WHERE (SELECT count(*) FROM temp.fenceq_submit_batch_deps AS d WHERE d.i = b.i) > 100
    UNION ALL SELECT b.i, 18.3, 'QF100', 'fenceq: a job cannot depend on itself'
      FROM temp.fenceq_submit_batch AS b
     WHERE EXISTS (SELECT 1 FROM temp.fenceq_submit_batch_deps AS d WHERE d.i = b.i AND d.depends_on = b.job_id)
    UNION ALL SELECT i, 19, 'QF100', 'fenceq: fingerprint must be fq1: and 64 lowercase hex digits'
      FROM temp.fenceq_submit_batch
     WHERE submission_id IS NOT NULL
       AND NOT coalesce(length(fingerprint) = 68 AND substr(fingerprint, 1, 4) = 'fq1:'
                        AND substr(fingerprint, 5) NOT GLOB '*[^0-9a-f]*', 0)
    UNION ALL SELECT b.i, 20, 'QF201', 'fenceq: the submission id is retained for a different request'
      FROM temp.fenceq_submit_batch AS b
     WHERE b.db_fingerprint <> b.fingerprint
        OR (b.db_fingerprint IS NULL AND b.first_i < b.i
            AND (SELECT f.fingerprint FROM temp.fenceq_submit_batch AS f WHERE f.i = b.first_i) <> b.fingerprint)
    UNION ALL SELECT b.i, 21, 'QF203', 'fenceq: the job id is taken'
      FROM temp.fenceq_submit_batch AS b
     WHERE b.fresh AND b.job_id IS NOT NULL
       AND (EXISTS (SELECT 1 FROM fenceq__jobs AS j WHERE j.job_id = b.job_id)
            OR EXISTS (SELECT 1 FROM fenceq__submissions AS s WHERE s.job_id = b.job_id)
            OR EXISTS (SELECT 1 FROM temp.fenceq_submit_batch AS e
                        WHERE e.i < b.i AND e.fresh AND e.job_id = b.job_id))
    UNION ALL SELECT b.i, 21.1, 'QF100', 'fenceq: a dependency names no job'
      FROM temp.fenceq_submit_batch AS b
     WHERE b.fresh
       AND EXISTS (SELECT 1 FROM temp.fenceq_submit_batch_deps AS d
                    WHERE d.i = b.i
                      AND NOT EXISTS (SELECT 1 FROM fenceq__jobs AS j WHERE j.job_id = d.depends_on)
                      AND NOT EXISTS (SELECT 1 FROM temp.fenceq_submit_batch AS e
                                       WHERE e.kind = 'object' AND e.job_id = d.depends_on))
    UNION ALL SELECT b.i, 21.2, 'QF100', 'fenceq: a job may have at most 1000 dependents'
      FROM temp.fenceq_submit_batch AS b
     WHERE b.fresh
       AND EXISTS (SELECT 1 FROM temp.fenceq_submit_batch_deps AS d
                    WHERE d.i = b.i
                      AND (SELECT count(*) FROM fenceq__dependencies AS x WHERE x.depends_on = d.depends_on)
                          + (SELECT count(*) FROM temp.fenceq_submit_batch_deps AS y
                               JOIN temp.fenceq_submit_batch AS e ON e.i = y.i
                              WHERE y.depends_on = d.depends_on AND y.i < b.i AND e.fresh) >= 1000)
    UNION ALL SELECT u.start, 21.3, 'QF100', 'fenceq: dependency chains may be at most 16 deep'
      FROM (WITH RECURSIVE up(start, job_id, depth) AS (
                SELECT d.i, d.depends_on, 1
                  FROM temp.fenceq_submit_batch_deps AS d JOIN temp.fenceq_submit_batch AS b ON b.i = d.i
                 WHERE b.fresh
                UNION
                SELECT u.start, e.depends_on, u.depth + 1
                  FROM up AS u JOIN fenceq__dependencies AS e ON e.job_id = u.job_id
                 WHERE u.depth <= 16
                UNION
                SELECT u.start, y.depends_on, u.depth + 1
                  FROM up AS u
                  JOIN temp.fenceq_submit_batch AS x ON x.job_id = u.job_id AND x.fresh AND x.i < u.start
                  JOIN temp.fenceq_submit_batch_deps AS y ON y.i = x.i
                 WHERE u.depth <= 16)
            SELECT DISTINCT up.start FROM up WHERE up.depth > 16) AS u
    UNION ALL SELECT b.i, 22, 'QF202', 'fenceq: the active key is held by another active job'
      FROM temp.fenceq_submit_batch AS b
     WHERE b.fresh AND b.active_key IS NOT NULL AND NOT coalesce(b.force, 0)
       AND NOT coalesce(b.dependency_failed, 0)
       AND (EXISTS (SELECT 1 FROM fenceq__jobs AS j
                     WHERE j.queue = :queue AND j.active_key = b.active_key AND j.status IN ('pending', 'claimed'))
            OR EXISTS (SELECT 1 FROM temp.fenceq_submit_batch AS e
                        WHERE e.i < b.i AND e.fresh AND e.active_key = b.active_key
                          AND NOT coalesce(e.dependency_failed, 0)))
) WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY i, rank LIMIT 1;
-- New job ids: random hex first, then shaped as version 4 UUIDs.
UPDATE temp.fenceq_submit_batch SET new_job_id = coalesce(job_id, lower(hex(randomblob(16)))) WHERE fresh;
UPDATE temp.fenceq_submit_batch
   SET new_job_id = {{uuid4(new_job_id)}}
 WHERE fresh AND job_id IS NULL;
-- A fresh job whose active key a later (forced) element takes over is
-- inserted already cancelled; so is one whose dependency already failed,
-- was cancelled or expired (and it holds no active key).
UPDATE temp.fenceq_submit_batch AS b
   SET cancelled = b.active_key IS NOT NULL AND NOT coalesce(b.dependency_failed, 0)
                   AND EXISTS (SELECT 1 FROM temp.fenceq_submit_batch AS l
                                WHERE l.i > b.i AND l.fresh AND l.active_key = b.active_key
                                  AND NOT coalesce(l.dependency_failed, 0))
 WHERE b.fresh;
INSERT INTO fenceq__submissions (submission_id, fingerprint, job_id, queue, created_at)
SELECT submission_id, fingerprint, new_job_id, :queue, now
  FROM temp.fenceq_submit_batch
 WHERE fresh AND submission_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY i;
-- force: the predecessors outside the batch holding a key are cancelled
-- (their events first, while they are as they were).
{{history_event(
    fenceq__jobs AS j,
    j.queue = :queue AND j.status IN ('pending', 'claimed') AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
    AND j.active_key IN (SELECT b.active_key FROM temp.fenceq_submit_batch AS b
                          WHERE b.fresh AND NOT coalesce(b.dependency_failed, 0)),
    'cancelled', {{claim_of(j)}}, '{"reason":"replaced"}',
    (SELECT max(b.now) FROM temp.fenceq_submit_batch AS b))}}
UPDATE fenceq__jobs
   SET status = 'cancelled', finished_at = (SELECT max(b.now) FROM temp.fenceq_submit_batch AS b)
 WHERE queue = :queue AND status IN ('pending', 'claimed') AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND active_key IN (SELECT b.active_key FROM temp.fenceq_submit_batch AS b
                       WHERE b.fresh AND NOT coalesce(b.dependency_failed, 0));
INSERT INTO fenceq__jobs (job_id, queue, task, payload, priority, status, max_attempts, run_at, expires_at,
                          submission_id, fingerprint, active_key, created_at, finished_at, concurrency_key,
                          blocked_by, blocked_run_at, last_error, scheduled)
SELECT b.new_job_id, :queue, b.task, b.payload, coalesce(CAST(b.priority AS INTEGER), 0),
       CASE WHEN b.cancelled OR b.dependency_failed THEN 'cancelled' ELSE 'pending' END,
       coalesce(CAST(b.max_attempts AS INTEGER), q.max_attempts),
       CASE WHEN b.blocked_by > 0 AND NOT b.dependency_failed THEN {{blocked_run_at}}
            ELSE coalesce(b.run_at, b.now) END,
       b.expires_at,
       b.submission_id, CASE WHEN b.submission_id IS NOT NULL THEN b.fingerprint END,
       CASE WHEN NOT coalesce(b.dependency_failed, 0) THEN b.active_key END, b.now,
       CASE WHEN b.cancelled OR b.dependency_failed THEN b.now END, b.concurrency_key,
       CASE WHEN NOT b.dependency_failed THEN nullif(b.blocked_by, 0) END,
       CASE WHEN b.blocked_by > 0 AND NOT b.dependency_failed THEN coalesce(b.run_at, b.now) END,
       CASE WHEN b.dependency_failed THEN 'dependency_failed' END,
       -- Waits apart (version 5) while pending and blocked or due later.
       NOT coalesce(b.cancelled OR b.dependency_failed, 0)
       AND CASE WHEN b.blocked_by > 0 AND NOT b.dependency_failed THEN 1 ELSE coalesce(b.run_at > b.now, 0) END
  FROM temp.fenceq_submit_batch AS b JOIN fenceq__queues AS q ON q.queue = :queue
 WHERE b.fresh AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY b.i;
-- Events submitted, then cancelled (reason replaced) for an element whose
-- active key a later forced element took (one stored cancelled because a
-- dependency failed was never anything else, as on PostgreSQL).
{{history_event(
    temp.fenceq_submit_batch AS b JOIN fenceq__jobs AS j ON j.job_id = b.new_job_id,
    b.fresh AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'submitted', {{by(NULL, NULL)}},
    {{submitted_detail(j)}},
    b.now)}}
{{history_event(
    temp.fenceq_submit_batch AS b JOIN fenceq__jobs AS j ON j.job_id = b.new_job_id,
    b.fresh AND b.cancelled AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'cancelled', {{by(NULL, NULL)}}, '{"reason":"replaced"}',
    b.now)}}
INSERT INTO fenceq__dependencies (depends_on, job_id, satisfied)
SELECT d.depends_on, b.new_job_id, coalesce(j.status = 'completed', 0)
  FROM temp.fenceq_submit_batch_deps AS d
  JOIN temp.fenceq_submit_batch AS b ON b.i = d.i
  LEFT JOIN fenceq__jobs AS j ON j.job_id = d.depends_on
 WHERE b.fresh AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Jobs cancelled by this batch (forced predecessors, elements inserted
-- cancelled) take the jobs that depend on them with them.
{{cancel_dependents(
    SELECT b.new_job_id FROM temp.fenceq_submit_batch AS b
     WHERE b.fresh AND (b.cancelled OR b.dependency_failed)
    UNION ALL
    SELECT j.job_id FROM fenceq__jobs AS j
     WHERE j.finished_at = (SELECT max(b.now) FROM temp.fenceq_submit_batch AS b)
       AND j.queue = :queue AND j.status = 'cancelled',
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT json_group_array(a.job_id)
                    FROM (SELECT coalesce(b.db_job_id, f.new_job_id) AS job_id
                            FROM temp.fenceq_submit_batch AS b
                            LEFT JOIN temp.fenceq_submit_batch AS f
                                   ON f.i = b.first_i OR (b.first_i IS NULL AND f.i = b.i)
                           ORDER BY b.i) AS a) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
