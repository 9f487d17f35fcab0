-- fenceq for SQLite: cancel_jobs -- cancel chosen jobs of a queue, each change recorded.
-- Generated from templates/cancel_jobs.sql by scripts/gen-sqlite: edit the template.
--
-- cancel_matching's rule on the jobs of :queue among the selection job_ids
-- (when given) that match every filter given (task, payload_contains):
-- pending -> 'cancelled'; with include_claimed, claimed -> cancel
-- requested, or cancelled at once with force, which kills the fence. A
-- claimed job whose cancel is already requested does not change without
-- force and is not counted; a job id not in the queue is ignored. Oldest
-- (first submitted) first, at most max_rows (1 to 100,000). Each job
-- changed gets the event a cancel writes (cancelled with reason cancel or
-- force, or cancel_requested), whatever the queue's history setting, its
-- detail adding {"action", "by", "filter"} (the arguments given, job_ids
-- as their number); dependents cancelled with their job write theirs as
-- history says. Answers how many jobs changed. Bad input changes nothing,
-- checked as retry_jobs checks it, then QF100 for a non-boolean flag or
-- force without include_claimed.
--
-- Parameters: :queue TEXT; :job_ids JSON array TEXT or NULL; :task TEXT
-- or NULL; :payload_contains canonical JSON TEXT or NULL;
-- :include_claimed, :force INTEGER 0/1 (NULL = 0); :max_rows INTEGER or
-- NULL (1000).
-- Result: one row (sqlstate, message, detail, value INTEGER).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_control notification is sent
-- (workers see the request through claim_state); BEGIN IMMEDIATE holds the
-- whole file, so no job changes between the choice and the write; an
-- event's by is null (SQLite has no users); payload_contains may not hold
-- an object or array inside an array (QF100); and a NULL flag or max_rows
-- takes its default (PostgreSQL refuses a NULL flag).
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_cancel (
    seq INTEGER NOT NULL, answer TEXT NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_cancel;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                AND instr(CAST(:queue AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF100', 'fenceq: job_ids must be an array of 1 to 10000 elements'
     WHERE :job_ids IS NOT NULL
       AND NOT coalesce(json_array_length(CASE WHEN json_valid(:job_ids)
                                               THEN CASE WHEN json_type(:job_ids) = 'array'
                                                         THEN :job_ids END END) BETWEEN 1 AND 10000, 0)
    UNION ALL SELECT 3, 'QF102', 'fenceq: job_ids must hold strings of 1 to 255 characters'
     WHERE EXISTS (SELECT 1
                     FROM json_each(CASE WHEN json_valid(:job_ids)
                                         THEN CASE WHEN json_type(:job_ids) = 'array'
                                                   THEN :job_ids END END) AS e
                    WHERE NOT (e.type = 'text' AND (typeof(e.value) = 'text' AND length(e.value) BETWEEN 1 AND 255
                                                    AND instr(CAST(e.value AS BLOB), x'00') = 0)))
    UNION ALL SELECT 4, 'QF102', 'fenceq: task must be 1 to 255 characters'
     WHERE NOT (:task IS NULL OR (typeof(:task) = 'text' AND length(:task) BETWEEN 1 AND 255
                                  AND instr(CAST(:task AS BLOB), x'00') = 0))
    UNION ALL SELECT 5, 'QF103', 'fenceq: payload_contains must be finite JSON without \u0000'
     WHERE NOT (:payload_contains IS NULL
                OR (typeof(:payload_contains) = 'text' AND json_valid(:payload_contains)
                    AND instr(replace(:payload_contains, '\\', ''), '\u0000') = 0))
    UNION ALL SELECT 6, 'QF100', 'fenceq: payload_contains must be a JSON object or array'
     WHERE json_type(CASE WHEN typeof(:payload_contains) = 'text' AND json_valid(:payload_contains)
                          THEN :payload_contains END) NOT IN ('object', 'array')
    UNION ALL SELECT 7, 'QF103', 'fenceq: payload_contains exceeds 1 MiB in canonical form'
     WHERE NOT (:payload_contains IS NULL OR length(CAST(:payload_contains AS BLOB)) <= 1048576)
    UNION ALL SELECT 8, 'QF100', 'fenceq: on SQLite payload_contains may not hold an object or array inside an array'
     WHERE EXISTS (SELECT 1
                     FROM json_tree(CASE WHEN typeof(:payload_contains) = 'text' AND json_valid(:payload_contains)
                                         THEN :payload_contains END) AS b
                    WHERE typeof(b.key) = 'integer' AND b.type IN ('object', 'array'))
    
    UNION ALL SELECT 10, 'QF104', 'fenceq: max_rows must be an integer from 1 to 100000'
     WHERE NOT (:max_rows IS NULL
                OR (typeof(:max_rows) = 'integer' AND :max_rows BETWEEN 1 AND 100000))
    UNION ALL SELECT 11, 'QF100', 'fenceq: cancel_jobs needs job_ids or a filter'
     WHERE :job_ids IS NULL AND NOT (:task IS NOT NULL OR :payload_contains IS NOT NULL)
    UNION ALL SELECT 12, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
    UNION ALL SELECT 13, 'QF100', 'fenceq: include_claimed and force must be booleans'
     WHERE NOT ((:include_claimed IS NULL
                 OR (typeof(:include_claimed) = 'integer' AND :include_claimed IN (0, 1)))
                AND (:force IS NULL
                     OR (typeof(:force) = 'integer' AND :force IN (0, 1))))
    UNION ALL SELECT 14, 'QF100', 'fenceq: force applies to claimed jobs: it needs include_claimed'
     WHERE coalesce(:force, 0) IS 1 AND coalesce(:include_claimed, 0) IS NOT 1
) ORDER BY rank LIMIT 1;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_cancel (seq, answer, now)
SELECT m.seq, CASE WHEN m.status = 'pending' OR (m.status = 'claimed' AND coalesce(:force, 0)) THEN 'cancelled'
                   WHEN m.status = 'claimed' THEN 'cancel_requested'
                   ELSE m.status END, clock.now
  FROM clock JOIN fenceq__jobs AS m
 WHERE m.queue = :queue
   AND (m.status = 'pending'
        OR (coalesce(:include_claimed, 0) AND m.status = 'claimed'
            AND (coalesce(:force, 0) OR NOT m.cancel_requested)))
   AND (:job_ids IS NULL OR m.job_id IN (SELECT e.value FROM json_each(CASE WHEN json_valid(:job_ids)
                                                                            THEN CASE WHEN json_type(:job_ids) = 'array'
                                                                                      THEN :job_ids END END) AS e))
   AND (:task IS NULL OR m.task = :task)
   AND (:payload_contains IS NULL OR NOT EXISTS (
        SELECT 1 FROM json_tree(CASE WHEN typeof(:payload_contains) = 'text' AND json_valid(:payload_contains)
                                     THEN :payload_contains END) AS b
         WHERE NOT EXISTS (
               SELECT 1 FROM json_tree(m.payload) AS a
                WHERE CASE WHEN typeof(b.key) = 'integer' THEN typeof(a.key) = 'integer' AND a.path = b.path
                           ELSE a.fullkey = b.fullkey END
                  AND CASE WHEN a.type IN ('integer', 'real') THEN 'number' ELSE a.type END
                      = CASE WHEN b.type IN ('integer', 'real') THEN 'number' ELSE b.type END
                  AND (b.type NOT IN ('integer', 'real', 'text') OR a.value = b.value))))
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY m.seq
 LIMIT CASE WHEN typeof(:max_rows) = 'integer' THEN :max_rows
            ELSE 1000 END;
-- The events, while the jobs are as they were.
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, c.answer, CASE WHEN j.status = 'claimed' THEN j.generation END,
                                    CASE WHEN j.status = 'claimed' THEN j.owner_id END,
       json_patch(json_object('action', 'cancel_jobs', 'by', NULL, 'filter',
                              json_patch('{}', json_object(
                                  'force', json(iif(coalesce(:force, 0), 'true', 'false')),
                                  'include_claimed', json(iif(coalesce(:include_claimed, 0), 'true', 'false')),
                                  'job_ids', json_array_length(:job_ids),
                                  'payload_contains', json(:payload_contains),
                                  'task', :task))),
                  CASE WHEN c.answer = 'cancel_requested' THEN '{}'
                       WHEN j.status = 'claimed' THEN '{"reason":"force"}' ELSE '{"reason":"cancel"}' END),
       c.now
  FROM temp.fenceq_cancel AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE j.status IN ('pending', 'claimed') AND NOT (c.answer = 'cancel_requested' AND j.cancel_requested)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs SET status = 'cancelled', finished_at = c.now
  FROM temp.fenceq_cancel AS c
 WHERE fenceq__jobs.seq = c.seq AND c.answer = 'cancelled' AND fenceq__jobs.status IN ('pending', 'claimed')
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs SET cancel_requested = 1
  FROM temp.fenceq_cancel AS c
 WHERE fenceq__jobs.seq = c.seq AND c.answer = 'cancel_requested'
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
CREATE TEMP TABLE IF NOT EXISTS fenceq_dependents (job_id TEXT PRIMARY KEY, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_dependents;
INSERT INTO temp.fenceq_dependents (job_id, now)
SELECT j.job_id, (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
  FROM fenceq__jobs AS j
 WHERE j.status IN ('pending', 'claimed')
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND j.job_id IN (
       WITH RECURSIVE down(job_id, depth) AS (
           SELECT d.job_id, 1
             FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
            WHERE f.status IN ('failed', 'cancelled', 'expired')
              AND d.depends_on IN (
                  SELECT j.job_id FROM temp.fenceq_cancel AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
                   WHERE c.answer = 'cancelled')
           UNION
           SELECT d.job_id, w.depth + 1
             FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
            WHERE w.depth <= 17)
       SELECT w.job_id FROM down AS w);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'cancelled', CASE WHEN j.status = 'claimed' THEN j.generation END,
                                       CASE WHEN j.status = 'claimed' THEN j.owner_id END,
       '{"reason":"dependency_failed"}',
       x.now
  FROM temp.fenceq_dependents AS x JOIN fenceq__jobs AS j ON j.job_id = x.job_id
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.status IN ('pending', 'claimed');
UPDATE fenceq__jobs
   SET status = 'cancelled', last_error = 'dependency_failed', lease_expires_at = NULL, pid = NULL,
       finished_at = x.now
  FROM temp.fenceq_dependents AS x
 WHERE fenceq__jobs.job_id = x.job_id;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_cancel) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
