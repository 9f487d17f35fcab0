-- fenceq for SQLite: replay_dead_letters -- replay the dead letters of chosen failed jobs of a queue.
--
-- The failed jobs of :queue with a dead letter neither replayed nor
-- discarded, among the selection job_ids (when given), that match every
-- filter given (task, payload_contains as cancel_matching decides it,
-- error_contains as a case-insensitive substring of last_error), oldest
-- (first submitted) first, at most max_rows (1 to 100,000), are replayed
-- as replay_dead_letter replays one: back to pending with a fresh attempt
-- budget, every open letter of the job marked replayed. A job id not in
-- the queue is ignored; so is a job whose active key another active job
-- holds now, or an older job of this call holds. Each job replayed gets
-- the event replayed, whatever the queue's history setting, with detail
-- {"action", "by", "dlq_id" (its latest open letter), "filter"}. Answers
-- how many jobs changed. Bad input changes nothing: as retry_jobs.
--
-- Parameters: :queue TEXT; :job_ids JSON array TEXT or NULL; :task TEXT
-- or NULL; :payload_contains canonical JSON TEXT or NULL; :error_contains
-- TEXT or NULL (1 to 1,000 characters); :max_rows INTEGER or NULL (1000).
-- Result: one row (sqlstate, message, detail, value INTEGER).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL as retry_jobs does.
{{error_table}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_replay (
    seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL, dlq_id TEXT NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_replay;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{bulk_checks(replay_dead_letters,
                  :task IS NOT NULL OR :payload_contains IS NOT NULL OR :error_contains IS NOT NULL,
                  {{error_pattern_check}})}}
) ORDER BY rank LIMIT 1;
-- The open letters of the queue lead to their jobs.
WITH {{clock}}
INSERT INTO temp.fenceq_replay (seq, job_id, dlq_id, now)
SELECT j.seq, j.job_id,
       (SELECT d.dlq_id FROM fenceq__dead_letters AS d
         WHERE d.job_id = j.job_id AND d.replayed_at IS NULL AND d.discarded_at IS NULL
         ORDER BY d.failed_at DESC, d.dlq_id DESC LIMIT 1),
       clock.now
  FROM clock JOIN fenceq__jobs AS j
 WHERE j.job_id IN (SELECT d.job_id FROM fenceq__dead_letters AS d
                     WHERE d.queue = :queue AND d.replayed_at IS NULL AND d.discarded_at IS NULL)
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
 ORDER BY j.seq
 LIMIT {{row_limit(:max_rows, 1000)}};
-- Of the jobs of one active key, the oldest alone becomes active.
DELETE FROM temp.fenceq_replay
 WHERE seq IN (SELECT r.seq FROM temp.fenceq_replay AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
                WHERE j.active_key IS NOT NULL
                  AND EXISTS (SELECT 1 FROM temp.fenceq_replay AS o JOIN fenceq__jobs AS k ON k.seq = o.seq
                               WHERE k.active_key = j.active_key AND o.seq < r.seq));
UPDATE fenceq__jobs
   SET status = 'pending', attempts = 0, run_at = r.now, scheduled = 0, finished_at = NULL,
       {{cleared_claim}}, cancel_requested = 0, result = NULL
  FROM temp.fenceq_replay AS r
 WHERE fenceq__jobs.seq = r.seq;
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'replayed', NULL, NULL,
       json_object('action', 'replay_dead_letters', 'by', NULL, 'dlq_id', r.dlq_id,
                   'filter', {{failure_filter}}),
       r.now
  FROM temp.fenceq_replay AS r JOIN fenceq__jobs AS j ON j.seq = r.seq;
UPDATE fenceq__dead_letters SET replayed_at = r.now
  FROM temp.fenceq_replay AS r
 WHERE fenceq__dead_letters.job_id = r.job_id
   AND fenceq__dead_letters.replayed_at IS NULL AND fenceq__dead_letters.discarded_at IS NULL;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_replay) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
