-- fenceq for SQLite: replay_dead_letters -- replay the dead letters of chosen failed jobs of a queue.
-- Generated from templates/replay_dead_letters.sql by scripts/gen-sqlite: edit the template.
--
-- The dead letters of :queue neither replayed nor discarded whose failed
-- job is among the selection job_ids (when given) and matches every filter
-- given (task, payload_contains as cancel_matching decides it,
-- error_contains as a case-insensitive substring of last_error), oldest
-- letter first, at most max_rows (1 to 100,000) of them, are replayed as
-- replay_dead_letter replays one: the job back to pending with a fresh
-- attempt budget, the letter marked replayed. A job id not in the queue is
-- ignored; a job whose active key another active job holds (one this call
-- replayed before it, say) is skipped. Each job replayed gets the event
-- replayed, whatever the queue's history setting, with detail {"action",
-- "by", "dlq_id", "filter"} (the arguments given, job_ids as their
-- number). Answers how many jobs changed. Bad input changes nothing: as
-- retry_jobs.
--
-- Parameters: :queue TEXT; :job_ids JSON array TEXT or NULL; :task TEXT
-- or NULL; :payload_contains canonical JSON TEXT or NULL; :error_contains
-- TEXT or NULL (1 to 1,000 characters); :max_rows INTEGER or NULL (1000).
-- Result: one row (sqlstate, message, detail, value INTEGER).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_jobs notification is sent, an
-- event's by is null (SQLite has no users), error_contains folds ASCII
-- letters only, payload_contains may not hold an object or array inside an
-- array (QF100), and a NULL max_rows takes its default.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_replay (
    ord INTEGER PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, job_id TEXT NOT NULL, dlq_id TEXT NOT NULL,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_replay;
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
    UNION ALL SELECT 9, 'QF100', 'fenceq: error_contains must be 1 to 1000 characters'
     WHERE NOT (:error_contains IS NULL
                OR (typeof(:error_contains) = 'text' AND length(:error_contains) BETWEEN 1 AND 1000
                    AND instr(CAST(:error_contains AS BLOB), x'00') = 0))
    UNION ALL SELECT 10, 'QF104', 'fenceq: max_rows must be an integer from 1 to 100000'
     WHERE NOT (:max_rows IS NULL
                OR (typeof(:max_rows) = 'integer' AND :max_rows BETWEEN 1 AND 100000))
    UNION ALL SELECT 11, 'QF100', 'fenceq: replay_dead_letters needs job_ids or a filter'
     WHERE :job_ids IS NULL AND NOT (:task IS NOT NULL OR :payload_contains IS NOT NULL OR :error_contains IS NOT NULL)
    UNION ALL SELECT 12, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
-- The queue's open letters, oldest first (fenceq__dead_letters_unhandled_idx),
-- lead to their jobs; a job's first letter stands for it (ord: this order).
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT OR IGNORE INTO temp.fenceq_replay (seq, job_id, dlq_id, now)
SELECT j.seq, j.job_id, d.dlq_id, clock.now
  FROM clock
  JOIN fenceq__dead_letters AS d INDEXED BY fenceq__dead_letters_unhandled_idx
  JOIN fenceq__jobs AS j ON j.job_id = d.job_id
 WHERE d.queue = :queue AND d.replayed_at IS NULL AND d.discarded_at IS NULL
   AND j.queue = :queue AND j.status = 'failed'
   AND (:job_ids IS NULL OR j.job_id IN (SELECT e.value FROM json_each(CASE WHEN json_valid(:job_ids)
                                                                            THEN CASE WHEN json_type(:job_ids) = 'array'
                                                                                      THEN :job_ids END END) AS e))
   AND (:task IS NULL OR j.task = :task)
   AND (:payload_contains IS NULL OR NOT EXISTS (
        SELECT 1 FROM json_tree(CASE WHEN typeof(:payload_contains) = 'text' AND json_valid(:payload_contains)
                                     THEN :payload_contains END) AS b
         WHERE NOT EXISTS (
               SELECT 1 FROM json_tree(j.payload) AS a
                WHERE CASE WHEN typeof(b.key) = 'integer' THEN typeof(a.key) = 'integer' AND a.path = b.path
                           ELSE a.fullkey = b.fullkey END
                  AND CASE WHEN a.type IN ('integer', 'real') THEN 'number' ELSE a.type END
                      = CASE WHEN b.type IN ('integer', 'real') THEN 'number' ELSE b.type END
                  AND (b.type NOT IN ('integer', 'real', 'text') OR a.value = b.value))))
   AND (:error_contains IS NULL OR instr(lower(j.last_error), lower(:error_contains)) > 0)
   AND NOT (j.active_key IS NOT NULL
            AND EXISTS (SELECT 1 FROM fenceq__jobs AS h
                         WHERE h.queue = j.queue AND h.active_key = j.active_key
                           AND h.status IN ('pending', 'claimed')))
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY d.failed_at, d.dlq_id
 LIMIT CASE WHEN typeof(:max_rows) = 'integer' THEN :max_rows
            ELSE 1000 END;
-- Of the jobs of one active key, the first replayed holds it: the others are skipped.
DELETE FROM temp.fenceq_replay
 WHERE ord IN (SELECT r.ord FROM temp.fenceq_replay AS r CROSS JOIN fenceq__jobs AS j ON j.seq = r.seq
                WHERE j.active_key IS NOT NULL
                  AND EXISTS (SELECT 1 FROM temp.fenceq_replay AS o JOIN fenceq__jobs AS k ON k.seq = o.seq
                               WHERE k.active_key = j.active_key AND o.ord < r.ord));
-- Each job by its rowid (+r.seq: never a scan of the jobs for the scratch rows).
UPDATE fenceq__jobs
   SET status = 'pending', attempts = 0, run_at = r.now, scheduled = 0, finished_at = NULL,
       owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
       budget_expires_at = NULL, pid = NULL, cancel_requested = 0, result = NULL
  FROM temp.fenceq_replay AS r
 WHERE fenceq__jobs.seq = +r.seq;
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'replayed', NULL, NULL,
       json_object('action', 'replay_dead_letters', 'by', NULL, 'dlq_id', r.dlq_id,
                   'filter', json_patch('{}', json_object(
                                 'error_contains', :error_contains,
                                 'job_ids', json_array_length(:job_ids),
                                 'payload_contains', json(:payload_contains),
                                 'task', :task))),
       r.now
  FROM temp.fenceq_replay AS r JOIN fenceq__jobs AS j ON j.seq = r.seq;
UPDATE fenceq__dead_letters SET replayed_at = r.now
  FROM temp.fenceq_replay AS r
 WHERE fenceq__dead_letters.dlq_id = r.dlq_id;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_replay) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
