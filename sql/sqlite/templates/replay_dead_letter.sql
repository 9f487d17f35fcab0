-- fenceq for SQLite: replay_dead_letter -- a dead-lettered job back to pending.
--
-- The job gets a fresh attempt budget; its submission identity and
-- generation history are kept (event replayed). Returns the job id; NULL for an unknown or
-- already handled letter. QF102 unless dlq_id is 32 lowercase hex
-- characters; QF202 when another active job now holds the job's active key
-- (nothing changes).
--
-- Parameters: :dlq_id TEXT.
-- Result: one row (sqlstate, message, detail, value TEXT or NULL).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_jobs notification is sent.
{{error_table}}
{{dead_letter_check}}
INSERT INTO temp.fenceq_letter (dlq_id, job_id, now)
SELECT d.dlq_id, d.job_id, {{now}}
  FROM fenceq__dead_letters AS d JOIN fenceq__jobs AS j ON j.job_id = d.job_id
 WHERE d.dlq_id = :dlq_id AND d.replayed_at IS NULL AND d.discarded_at IS NULL AND j.status = 'failed'
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF202', 'fenceq: the active key is held by another active job'
  FROM temp.fenceq_letter AS l JOIN fenceq__jobs AS j ON j.job_id = l.job_id
 WHERE j.active_key IS NOT NULL
   AND EXISTS (SELECT 1 FROM fenceq__jobs AS h
                WHERE h.queue = j.queue AND h.active_key = j.active_key AND h.job_id <> j.job_id
                  AND h.status IN ('pending', 'claimed'));
UPDATE fenceq__jobs
   SET status = 'pending', attempts = 0, run_at = l.now, scheduled = 0, finished_at = NULL,
       {{cleared_claim}}, cancel_requested = 0, result = NULL
  FROM temp.fenceq_letter AS l
 WHERE fenceq__jobs.job_id = l.job_id AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{history_event(
    temp.fenceq_letter AS l JOIN fenceq__jobs AS j ON j.job_id = l.job_id,
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'replayed', {{by(NULL, NULL)}},
    json_object('dlq_id', l.dlq_id),
    l.now)}}
UPDATE fenceq__dead_letters SET replayed_at = l.now
  FROM temp.fenceq_letter AS l
 WHERE fenceq__dead_letters.dlq_id = l.dlq_id AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT l.job_id FROM temp.fenceq_letter AS l) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
