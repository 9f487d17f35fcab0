-- fenceq for SQLite: cancel_jobs -- cancel chosen jobs of a queue, each change recorded.
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
{{error_table}}
{{cancel_scratch}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{bulk_checks(cancel_jobs, :task IS NOT NULL OR :payload_contains IS NOT NULL, )}}
    {{cancel_flag_checks(13, 14)}}
) ORDER BY rank LIMIT 1;
WITH {{clock}}
INSERT INTO temp.fenceq_cancel (seq, answer, now)
SELECT m.seq, {{cancel_answer(m, coalesce(:force, 0))}}, clock.now
  FROM clock JOIN fenceq__jobs AS m
 WHERE m.queue = :queue
   AND {{cancel_chooses(m)}}
   AND {{selected(m)}}
   AND (:task IS NULL OR m.task = :task)
   AND {{payload_contains(m, :payload_contains)}}
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY m.seq
 LIMIT {{row_limit(:max_rows, 1000)}};
-- The events, while the jobs are as they were.
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, c.answer, {{claim_of(j)}},
       json_patch(json_object('action', 'cancel_jobs', 'by', NULL, 'filter',
                              {{cancel_filter}}),
                  {{cancel_detail(c, j)}}),
       c.now
  FROM temp.fenceq_cancel AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE {{cancel_changes(c, j)}}
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{cancel_updates}}
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_cancel) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
