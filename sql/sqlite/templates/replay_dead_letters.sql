-- fenceq for SQLite: replay_dead_letters -- replay the dead letters of chosen failed jobs of a queue.
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
{{error_table}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_replay (
    ord INTEGER PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, job_id TEXT NOT NULL, dlq_id TEXT NOT NULL,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_replay;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{bulk_checks(replay_dead_letters,
                  :task IS NOT NULL OR :payload_contains IS NOT NULL OR :error_contains IS NOT NULL,
                  {{error_pattern_check}})}}
) ORDER BY rank LIMIT 1;
-- The queue's open letters, oldest first (fenceq__dead_letters_unhandled_idx),
-- lead to their jobs; a job's first letter stands for it (ord: this order).
WITH {{clock}}
INSERT OR IGNORE INTO temp.fenceq_replay (seq, job_id, dlq_id, now)
SELECT j.seq, j.job_id, d.dlq_id, clock.now
  FROM clock
  JOIN fenceq__dead_letters AS d INDEXED BY fenceq__dead_letters_unhandled_idx
  JOIN fenceq__jobs AS j ON j.job_id = d.job_id
 WHERE d.queue = :queue AND d.replayed_at IS NULL AND d.discarded_at IS NULL
   AND j.queue = :queue AND j.status = 'failed'
   AND {{selected(j)}}
   AND (:task IS NULL OR j.task = :task)
   AND {{payload_contains(j, :payload_contains)}}
   AND {{error_contains(j)}}
   AND NOT (j.active_key IS NOT NULL
            AND EXISTS (SELECT 1 FROM fenceq__jobs AS h
                         WHERE h.queue = j.queue AND h.active_key = j.active_key
                           AND h.status IN ('pending', 'claimed')))
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY d.failed_at, d.dlq_id
 LIMIT {{row_limit(:max_rows, 1000)}};
-- Of the jobs of one active key, the first replayed holds it: the others are skipped.
DELETE FROM temp.fenceq_replay
 WHERE ord IN (SELECT r.ord FROM temp.fenceq_replay AS r CROSS JOIN fenceq__jobs AS j ON j.seq = r.seq
                WHERE j.active_key IS NOT NULL
                  AND EXISTS (SELECT 1 FROM temp.fenceq_replay AS o JOIN fenceq__jobs AS k ON k.seq = o.seq
                               WHERE k.active_key = j.active_key AND o.ord < r.ord));
-- Each job by its rowid (+r.seq: never a scan of the jobs for the scratch rows).
UPDATE fenceq__jobs
   SET status = 'pending', attempts = 0, run_at = r.now, scheduled = 0, finished_at = NULL,
       {{cleared_claim}}, cancel_requested = 0, result = NULL
  FROM temp.fenceq_replay AS r
 WHERE fenceq__jobs.seq = +r.seq;
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'replayed', NULL, NULL,
       json_object('action', 'replay_dead_letters', 'by', NULL, 'dlq_id', r.dlq_id,
                   'filter', {{failure_filter}}),
       r.now
  FROM temp.fenceq_replay AS r JOIN fenceq__jobs AS j ON j.seq = r.seq;
UPDATE fenceq__dead_letters SET replayed_at = r.now
  FROM temp.fenceq_replay AS r
 WHERE fenceq__dead_letters.dlq_id = r.dlq_id;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_replay) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
