-- Macros for the SQLite statement templates: scripts/gen-sqlite expands
-- them into the statement files next to this folder.
--
-- A definition is a line `-- macro: name` or `-- macro: name(a, b)`, the
-- comment lines that explain it, and then its body, up to the next
-- definition. Inside the body, $a stands for the argument given for a.
-- A template calls a macro as {{name}} or {{name(x, y)}} (arguments are
-- separated by commas outside parentheses and quotes; a body may call other
-- macros). Lines after the first of an expansion are indented to the
-- column where the call stands, so a multi-line body lines up under it.

-- Values ---------------------------------------------------------------------

-- macro: now
-- The clock as INTEGER microseconds since 1970 UTC (SQLite's clock has
-- millisecond resolution).
(unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000

-- macro: clock
-- A common table expression clock(now): one reading of the clock for the
-- whole statement.
clock(now) AS MATERIALIZED (
    SELECT {{now}})

-- macro: utc_text_micros(text)
-- UTC text YYYY-MM-DDTHH:MM:SS.ffffffZ as INTEGER microseconds (NULL stays NULL).
(unixepoch(substr($text, 1, 19)) * 1000000
 + CAST(substr($text, 21, 6) AS INTEGER))

-- macro: micros_utc_text(micros)
-- INTEGER microseconds as UTC text YYYY-MM-DDTHH:MM:SS.ffffffZ (floor
-- division, so that years before 1970 work too).
strftime('%Y-%m-%dT%H:%M:%S', $micros / 1000000 - ($micros % 1000000 < 0),
         'unixepoch')
|| printf('.%06dZ', ($micros % 1000000 + 1000000) % 1000000)

-- macro: valid_json(value)
-- The value when it is valid JSON text, else NULL (json_type and json_tree
-- raise an error on malformed JSON; on NULL they answer nothing).
CASE WHEN typeof($value) = 'text' AND json_valid($value)
     THEN $value END

-- macro: as_json_array(value)
-- The value when it is JSON text holding an array, else NULL.
CASE WHEN json_valid($value)
     THEN CASE WHEN json_type($value) = 'array'
               THEN $value END END

-- macro: row_limit(value, default)
-- A LIMIT taken from a parameter: $value when it is an INTEGER, else
-- $default. SQLite evaluates a LIMIT before any row, so before the guard
-- on the failed check, and raises 'datatype mismatch' for TEXT, REAL or
-- NULL; the file's check refuses such a value, and the guard stops the write.
CASE WHEN typeof($value) = 'integer' THEN $value
     ELSE $default END

-- macro: uuid4(hex)
-- 32 random hex digits shaped as a version 4 UUID.
substr($hex, 1, 8) || '-' || substr($hex, 9, 4)
|| '-4' || substr($hex, 14, 3)
|| '-' || substr('89ab', (instr('0123456789abcdef', substr($hex, 17, 1)) - 1) % 4 + 1, 1)
|| substr($hex, 18, 3)
|| '-' || substr($hex, 21, 12)

-- macro: backoff(row)
-- The retry delay after $row.attempts attempts (microseconds):
-- min(backoff_base * backoff_factor^(attempts - 1), backoff_max), compared
-- in logarithms first, so that it never overflows.
CASE WHEN $row.backoff_base <= 0 THEN 0
     WHEN ln($row.backoff_base) + max($row.attempts - 1, 0) * ln($row.backoff_factor)
          >= ln($row.backoff_max) THEN $row.backoff_max
     ELSE CAST(round($row.backoff_base * power($row.backoff_factor, max($row.attempts - 1, 0)))
               AS INTEGER) END

-- macro: floor_to(micros, width)
-- INTEGER microseconds $micros down to a multiple of $width since 1970
-- (floor division, so that times before 1970 round down too).
(($micros) - ((($micros) % $width) + $width) % $width)

-- macro: activity_end(now)
-- Where the closed minutes end at the clock reading $now (the start of the
-- first minute not yet closed): a minute closes 10 seconds after it ends,
-- so that a transition stamped in it and committed a moment later is in
-- it when it is sampled (docs/design-v7.md).
{{floor_to($now - 10000000, 60000000)}}

-- macro: duration_bucket(micros)
-- The histogram bucket of a duration of $micros microseconds (version 7,
-- docs/design-v7.md §1): floor(4 * log2(max(milliseconds, 1))), at most 127
-- (quarter powers of two: 1 ms to about 50 days).
min(CAST(floor(4 * log2(max(($micros) / 1000.0, 1))) AS INTEGER), 127)

-- macro: bucket_middle(k)
-- The geometric middle of histogram bucket $k, in INTEGER microseconds: how
-- a percentile that falls in the bucket is read.
CAST(round(power(2, ($k + 0.5) / 4) * 1000) AS INTEGER)

-- macro: histogram(minute, kind)
-- sample_activity: the histogram $kind of the row $minute (queue, minute)
-- as a JSON array of counts from bucket 0 to its last non-zero bucket ([]
-- for none), from temp.fenceq_sample_hist.
(SELECT '[' || coalesce(group_concat(coalesce(b.n, 0), ','), '') || ']'
   FROM (SELECT k.k, h.n
           FROM (WITH RECURSIVE ks(k) AS (SELECT 0 UNION ALL SELECT ks.k + 1 FROM ks WHERE ks.k < 127)
                 SELECT ks.k FROM ks) AS k
           LEFT JOIN temp.fenceq_sample_hist AS h
                  ON h.queue = $minute.queue AND h.minute = $minute.minute AND h.kind = $kind AND h.k = k.k
          WHERE k.k <= (SELECT max(x.k) FROM temp.fenceq_sample_hist AS x
                         WHERE x.queue = $minute.queue AND x.minute = $minute.minute AND x.kind = $kind)
          ORDER BY k.k) AS b)

-- Checks: each is true for an acceptable value ------------------------------

-- macro: identifier(value, longest)
-- An id or name: TEXT of 1 to $longest characters without NUL.
(typeof($value) = 'text' AND length($value) BETWEEN 1 AND $longest
 AND instr(CAST($value AS BLOB), x'00') = 0)

-- macro: well_formed_fence
-- The fence parameters :job_id, :owner_id, :generation, :claim_token.
({{identifier(:job_id, 36)}}
 AND {{identifier(:owner_id, 255)}}
 AND {{identifier(:claim_token, 255)}}
 AND typeof(:generation) = 'integer' AND :generation >= 1)

-- macro: optional_integer(value, condition)
-- NULL, or an INTEGER (not REAL or TEXT) that meets the condition.
($value IS NULL
 OR (typeof($value) = 'integer' AND $value $condition))

-- macro: optional_utc_text(text)
-- NULL, or a timestamp in exactly the form YYYY-MM-DDTHH:MM:SS.ffffffZ,
-- within years 0001-9999, that names a real instant.
($text IS NULL
 OR (typeof($text) = 'text' AND length($text) = 27
     AND $text GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                     || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                     || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
     AND substr($text, 1, 4) <> '0000'
     AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr($text, 1, 19)), 'unixepoch')
         = substr($text, 1, 19)))

-- macro: no_nul_escape(json)
-- JSON text without a \u0000 escape (escaped backslashes set aside first).
instr(replace($json, '\\', ''), '\u0000') = 0

-- macro: optional_json(json)
-- NULL, or valid JSON text without \u0000 (canonical JSON is finite: NaN
-- and Infinity are not JSON).
($json IS NULL
 OR (typeof($json) = 'text' AND json_valid($json)
     AND {{no_nul_escape($json)}}))

-- macro: optional_within_1_mib(json)
-- NULL, or at most 1 MiB of UTF-8.
($json IS NULL OR length(CAST($json AS BLOB)) <= 1048576)

-- macro: queue_setting_checks
-- The checks of the settings a caller passes to create_queue or alter_queue,
-- as branches of a ranked UNION ALL (ranks 3 to 7 and 10; each file ranks
-- its own checks around them).
UNION ALL SELECT 3, 'QF105', 'fenceq: lease must be positive'
 WHERE NOT {{optional_integer(:lease, > 0)}}
UNION ALL SELECT 4, 'QF105', 'fenceq: backoff_base must not be negative'
 WHERE NOT {{optional_integer(:backoff_base, >= 0)}}
UNION ALL SELECT 5, 'QF105', 'fenceq: backoff_max must not be negative'
 WHERE NOT {{optional_integer(:backoff_max, >= 0)}}
UNION ALL SELECT 6, 'QF104', 'fenceq: max_attempts must be a positive integer'
 WHERE NOT {{optional_integer(:max_attempts, BETWEEN 1 AND 2147483647)}}
UNION ALL SELECT 7, 'QF104', 'fenceq: backoff_factor must be finite and at least 1'
 WHERE NOT (:backoff_factor IS NULL OR (typeof(:backoff_factor) IN ('integer', 'real')
            AND :backoff_factor BETWEEN 1 AND 1.7976931348623157e308))
UNION ALL SELECT 10, 'QF100', 'fenceq: requeue_priority must be keep, first or last'
 WHERE NOT coalesce(:requeue_priority IN ('keep', 'first', 'last'), 1)

-- Statements -------------------------------------------------------------------

-- macro: error_table
-- The scratch table holding the first failing check; every later write is
-- guarded by it being empty.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;

-- macro: fence_check
-- QF106 unless the fence parameters are well formed.
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF106', 'fenceq: the fence is malformed'
 WHERE NOT {{well_formed_fence}};

-- macro: holds_fence(job, owner_id, generation, claim_token, now)
-- The fence rule, written once (docs/guarantees.md §1; on PostgreSQL,
-- fenceq._holds_fence): the job row $job is claimed by exactly the fence
-- ($owner_id, $generation, $claim_token) and its lease ends after $now, the
-- clock reading taken once the write lock is held. NULL for a missing row.
$job.status = 'claimed' AND $job.owner_id = $owner_id AND $job.generation = $generation
AND $job.claim_token = $claim_token AND $job.lease_expires_at
    > $now

-- macro: fence_decision
-- temp.fenceq_fence: the job's row (seq), the clock reading the write uses
-- (now), whether the fence is the live claim (live) and its cancel request.
CREATE TEMP TABLE IF NOT EXISTS fenceq_fence (
    seq INTEGER, now INTEGER NOT NULL, live INTEGER NOT NULL, cancel_requested INTEGER);
DELETE FROM temp.fenceq_fence;
-- The decision: the clock is read here, after BEGIN IMMEDIATE took the
-- write lock, and the same reading is used for the write below.
INSERT INTO temp.fenceq_fence (seq, now, live, cancel_requested)
SELECT j.seq, c.now,
       coalesce({{holds_fence(j, :owner_id, :generation, :claim_token, c.now)}}, 0),
       j.cancel_requested
  FROM (SELECT {{now}} AS now) AS c
  LEFT JOIN fenceq__jobs AS j ON j.job_id = :job_id
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);

-- macro: cleared_claim
-- The assignments that hand a job back to pending: no owner, lease or pid.
owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
budget_expires_at = NULL, pid = NULL

-- Cancels (cancel, cancel_matching) ---------------------------------------

-- macro: cancel_scratch
-- temp.fenceq_cancel: the jobs to cancel (seq), what each becomes (answer)
-- and the clock reading.
CREATE TEMP TABLE IF NOT EXISTS fenceq_cancel (
    seq INTEGER NOT NULL, answer TEXT NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_cancel;

-- macro: cancel_chooses(job)
-- Whether cancel_matching's rule takes job $job: pending, or with
-- :include_claimed claimed, unless its cancel is requested already and
-- :force is not given.
($job.status = 'pending'
 OR (coalesce(:include_claimed, 0) AND $job.status = 'claimed'
     AND (coalesce(:force, 0) OR NOT $job.cancel_requested)))

-- macro: cancel_answer(job, force)
-- What a cancel makes of job $job: pending (or claimed, with $force) ->
-- 'cancelled', which kills any fence; claimed -> 'cancel_requested'; a
-- terminal job keeps its status (and is left as it is).
CASE WHEN $job.status = 'pending' OR ($job.status = 'claimed' AND $force) THEN 'cancelled'
     WHEN $job.status = 'claimed' THEN 'cancel_requested'
     ELSE $job.status END

-- macro: cancel_writes
-- Apply the answers of temp.fenceq_cancel; the jobs cancelled take their
-- dependents with them. Events first, while the jobs are as they were:
-- cancelled (reason cancel, or force for a claimed job), or
-- cancel_requested unless it was requested already.
{{history_event(
    temp.fenceq_cancel AS c JOIN fenceq__jobs AS j ON j.seq = c.seq,
    {{cancel_changes(c, j)}}
    AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    c.answer, {{claim_of(j)}},
    {{cancel_detail(c, j)}},
    c.now)}}
{{cancel_updates}}

-- macro: cancel_changes(answer, job)
-- Whether the answer $answer (a row of temp.fenceq_cancel) changes job
-- $job, as it was before the cancel.
$job.status IN ('pending', 'claimed') AND NOT ($answer.answer = 'cancel_requested' AND $job.cancel_requested)

-- macro: cancel_detail(answer, job)
-- The detail of a cancel's event for job $job as it was before the cancel.
CASE WHEN $answer.answer = 'cancel_requested' THEN '{}'
     WHEN $job.status = 'claimed' THEN '{"reason":"force"}' ELSE '{"reason":"cancel"}' END

-- macro: cancel_updates
-- The writes of cancel_writes after its events.
UPDATE fenceq__jobs SET status = 'cancelled', finished_at = c.now
  FROM temp.fenceq_cancel AS c
 WHERE fenceq__jobs.seq = c.seq AND c.answer = 'cancelled' AND fenceq__jobs.status IN ('pending', 'claimed')
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs SET cancel_requested = 1
  FROM temp.fenceq_cancel AS c
 WHERE fenceq__jobs.seq = c.seq AND c.answer = 'cancel_requested'
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{cancel_dependents(
    SELECT j.job_id FROM temp.fenceq_cancel AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
     WHERE c.answer = 'cancelled',
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}

-- macro: payload_contains_checks(json, too_deep, not_container, too_big, nested)
-- The checks of a payload_contains pattern (cancel_matching's rule, shared
-- by search_jobs and the bulk actions), as branches of a ranked UNION ALL
-- at the four ranks given: QF103 for bad JSON, QF100 unless an object or
-- array, QF103 beyond 1 MiB, QF100 for a container inside an array.
UNION ALL SELECT $too_deep, 'QF103', 'fenceq: payload_contains must be finite JSON without \u0000'
 WHERE NOT {{optional_json($json)}}
UNION ALL SELECT $not_container, 'QF100', 'fenceq: payload_contains must be a JSON object or array'
 WHERE json_type({{valid_json($json)}}) NOT IN ('object', 'array')
UNION ALL SELECT $too_big, 'QF103', 'fenceq: payload_contains exceeds 1 MiB in canonical form'
 WHERE NOT {{optional_within_1_mib($json)}}
UNION ALL SELECT $nested, 'QF100', 'fenceq: on SQLite payload_contains may not hold an object or array inside an array'
 WHERE EXISTS (SELECT 1
                 FROM json_tree({{valid_json($json)}}) AS b
                WHERE typeof(b.key) = 'integer' AND b.type IN ('object', 'array'))

-- macro: payload_contains(job, json)
-- Whether the payload of job $job contains $json, as jsonb @> decides it
-- when no array holds a container (true when $json is NULL): every node b
-- of $json has a node a in the payload of the same JSON type (and, for a
-- number or string, the same value) at the same key path, or, for an
-- element of an array, among the elements of the array at the same key path.
($json IS NULL OR NOT EXISTS (
 SELECT 1 FROM json_tree({{valid_json($json)}}) AS b
  WHERE NOT EXISTS (
        SELECT 1 FROM json_tree($job.payload) AS a
         WHERE CASE WHEN typeof(b.key) = 'integer' THEN typeof(a.key) = 'integer' AND a.path = b.path
                    ELSE a.fullkey = b.fullkey END
           AND CASE WHEN a.type IN ('integer', 'real') THEN 'number' ELSE a.type END
               = CASE WHEN b.type IN ('integer', 'real') THEN 'number' ELSE b.type END
           AND (b.type NOT IN ('integer', 'real', 'text') OR a.value = b.value))))

-- Search and bulk actions (version 7, docs/design-v7.md §3-§4) ---------------

-- macro: backlog_candidates(status, index, order)
-- search_jobs: the candidates of a search of the live status $status: its
-- jobs, of the queue or of every queue, in the order $order of their
-- partial index $index (the backlog), at most :max_scan of them.
INSERT INTO temp.fenceq_search (seq)
SELECT j.seq
  FROM fenceq__jobs AS j INDEXED BY $index
 WHERE :submission_prefix IS NULL AND :status = $status AND j.status = $status
   AND :queue IS NOT NULL AND j.queue = :queue
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY $order
 LIMIT {{row_limit(:max_scan, 10000)}};
INSERT INTO temp.fenceq_search (seq)
SELECT j.seq
  FROM fenceq__jobs AS j INDEXED BY $index
 WHERE :submission_prefix IS NULL AND :status = $status AND j.status = $status
   AND :queue IS NULL
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY $order
 LIMIT {{row_limit(:max_scan, 10000)}};

-- macro: pending_order
-- The order of fenceq__jobs_pending_idx (job j).
j.queue, j.scheduled, j.priority DESC, j.run_at, j.seq

-- macro: claimed_order
-- The order of fenceq__jobs_claimed_idx (job j).
j.queue, j.lease_expires_at

-- macro: error_contains(job)
-- Whether :error_contains (when given) is a substring of the last_error of
-- job $job, ignoring case (SQLite's lower() folds ASCII letters only).
(:error_contains IS NULL OR instr(lower($job.last_error), lower(:error_contains)) > 0)

-- macro: selected(job)
-- Whether job $job is in the selection :job_ids (a JSON array of job ids),
-- or there is none.
(:job_ids IS NULL OR $job.job_id IN (SELECT e.value FROM json_each({{as_json_array(:job_ids)}}) AS e))

-- macro: bulk_checks(action, filters, error_check)
-- The checks of a bulk action, as a ranked UNION ALL, in PostgreSQL's
-- order: the queue (QF102), the selection :job_ids (QF100 unless a JSON
-- array of 1 to 10,000 elements, QF102 for an element that is not a string
-- of 1 to 255 characters), :task (QF102), :payload_contains (as
-- cancel_matching), $error_check (rank 9), :max_rows (1 to 100,000, QF104),
-- then QF100 when neither job_ids nor one of $filters (a condition) is
-- given, and QF101 for an undeclared queue (rank 12).
SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
 WHERE NOT {{identifier(:queue, 255)}}
UNION ALL SELECT 2, 'QF100', 'fenceq: job_ids must be an array of 1 to 10000 elements'
 WHERE :job_ids IS NOT NULL
   AND NOT coalesce(json_array_length({{as_json_array(:job_ids)}}) BETWEEN 1 AND 10000, 0)
UNION ALL SELECT 3, 'QF102', 'fenceq: job_ids must hold strings of 1 to 255 characters'
 WHERE EXISTS (SELECT 1
                 FROM json_each({{as_json_array(:job_ids)}}) AS e
                WHERE NOT (e.type = 'text' AND {{identifier(e.value, 255)}}))
UNION ALL SELECT 4, 'QF102', 'fenceq: task must be 1 to 255 characters'
 WHERE NOT (:task IS NULL OR {{identifier(:task, 255)}})
{{payload_contains_checks(:payload_contains, 5, 6, 7, 8)}}
$error_check
UNION ALL SELECT 10, 'QF104', 'fenceq: max_rows must be an integer from 1 to 100000'
 WHERE NOT {{optional_integer(:max_rows, BETWEEN 1 AND 100000)}}
UNION ALL SELECT 11, 'QF100', 'fenceq: $action needs job_ids or a filter'
 WHERE :job_ids IS NULL AND NOT ($filters)
UNION ALL SELECT 12, 'QF101', 'fenceq: unknown queue'
 WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)

-- macro: error_pattern_check
-- QF100 unless :error_contains is NULL or 1 to 1,000 characters: a branch
-- of a ranked UNION ALL (rank 9).
UNION ALL SELECT 9, 'QF100', 'fenceq: error_contains must be 1 to 1000 characters'
 WHERE NOT (:error_contains IS NULL
            OR {{identifier(:error_contains, 1000)}})

-- macro: cancel_flag_checks(not_boolean, force_alone)
-- QF100 unless :include_claimed and :force are NULL, 0 or 1, and for force
-- without include_claimed: branches of a ranked UNION ALL.
UNION ALL SELECT $not_boolean, 'QF100', 'fenceq: include_claimed and force must be booleans'
 WHERE NOT ({{optional_integer(:include_claimed, IN (0, 1))}}
            AND {{optional_integer(:force, IN (0, 1))}})
UNION ALL SELECT $force_alone, 'QF100', 'fenceq: force applies to claimed jobs: it needs include_claimed'
 WHERE coalesce(:force, 0) IS 1 AND coalesce(:include_claimed, 0) IS NOT 1

-- macro: failure_filter
-- The filter an event of retry_jobs or replay_dead_letters records: the
-- arguments given (not NULL), job_ids as their number.
{{given(json_object(
    'error_contains', :error_contains,
    'job_ids', json_array_length(:job_ids),
    'payload_contains', json(:payload_contains),
    'task', :task))}}

-- macro: cancel_filter
-- The filter an event of cancel_jobs records: the arguments given (not
-- NULL), job_ids as their number, the flags as booleans.
{{given(json_object(
    'force', json(iif(coalesce(:force, 0), 'true', 'false')),
    'include_claimed', json(iif(coalesce(:include_claimed, 0), 'true', 'false')),
    'job_ids', json_array_length(:job_ids),
    'payload_contains', json(:payload_contains),
    'task', :task))}}

-- macro: given(object)
-- The JSON object $object without its null members: the filter an event
-- of a bulk action records.
json_patch('{}', $object)

-- macro: dead_letters_from(scratch)
-- Write the dead letters chosen in a scratch table (its dlq_id is set for
-- each job that fails for good in a queue that keeps them).
INSERT INTO fenceq__dead_letters (dlq_id, job_id, queue, task, error, attempts, failed_at)
SELECT r.dlq_id, j.job_id, j.queue, j.task, j.last_error, j.attempts, r.now
  FROM $scratch AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
 WHERE r.dlq_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);

-- macro: failed_events(scratch, retried, error, by)
-- The events of the jobs of $scratch r (its seq, dlq_id, now) that a fail
-- or reap just wrote: retried (error and retry time) when $retried, else
-- failed (error), then dead_lettered when a letter was written. $error is
-- the error text, $by the fence.
{{history_event(
    $scratch AS r
    JOIN fenceq__jobs AS j ON j.seq = r.seq,
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    CASE WHEN $retried THEN 'retried' ELSE 'failed' END, $by,
    CASE WHEN $retried
         THEN json_object('error', substr($error, 1, 2000), 'retry_at',
                          {{micros_utc_text(j.run_at)}})
         ELSE json_object('error', substr($error, 1, 2000)) END,
    r.now)}}
{{history_event(
    $scratch AS r
    JOIN fenceq__jobs AS j ON j.seq = r.seq,
    r.dlq_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'dead_lettered', $by,
    json_object('dlq_id', r.dlq_id),
    r.now)}}

-- macro: dead_letter_check
-- temp.fenceq_letter (the letter to handle), and QF102 unless :dlq_id is
-- 32 lowercase hex characters.
CREATE TEMP TABLE IF NOT EXISTS fenceq_letter (
    dlq_id TEXT NOT NULL, job_id TEXT NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_letter;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF102', 'fenceq: dlq_id must be 32 lowercase hex characters'
 WHERE NOT (typeof(:dlq_id) = 'text' AND length(:dlq_id) = 32 AND :dlq_id NOT GLOB '*[^0-9a-f]*');

-- macro: queue_flag_check
-- temp.fenceq_queue_flag (whether the flag changed), and the checks of
-- :queue: QF102 for a bad name, QF101 for an unknown queue.
CREATE TEMP TABLE IF NOT EXISTS fenceq_queue_flag (changed INTEGER NOT NULL);
DELETE FROM temp.fenceq_queue_flag;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT {{identifier(:queue, 255)}}
    UNION ALL SELECT 2, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;

-- macro: json_boolean_array(flag)
-- The flags of the rows as JSON text: [true,false,...] ([] for none).
'[' || coalesce(group_concat(CASE WHEN $flag THEN 'true' ELSE 'false' END, ','), '') || ']'

-- Batches of fences (heartbeat_batch, complete_batch) ------------------------

-- macro: fence_arrays
-- The four fence arrays side by side, one row f per index f.i: job_id,
-- owner_id, generation, claim_token, the text ones with their JSON type
-- (job_type, owner_type, token_type). One pass over each array, pivoted by
-- a GROUP BY: joining json_each to json_each on the index rescans the inner
-- array for every outer row (10,000 fences took minutes).
(SELECT e.key AS i,
        max(CASE WHEN e.part = 1 THEN e.value END) AS job_id,
        max(CASE WHEN e.part = 1 THEN e.type END) AS job_type,
        max(CASE WHEN e.part = 2 THEN e.value END) AS owner_id,
        max(CASE WHEN e.part = 2 THEN e.type END) AS owner_type,
        max(CASE WHEN e.part = 3 THEN e.value END) AS generation,
        max(CASE WHEN e.part = 4 THEN e.value END) AS claim_token,
        max(CASE WHEN e.part = 4 THEN e.type END) AS token_type
   FROM (SELECT 1 AS part, key, value, type
           FROM json_each({{as_json_array(:job_ids)}})
         UNION ALL
         SELECT 2, key, value, type
           FROM json_each({{as_json_array(:owner_ids)}})
         UNION ALL
         SELECT 3, key, value, type
           FROM json_each({{as_json_array(:generations)}})
         UNION ALL
         SELECT 4, key, value, type
           FROM json_each({{as_json_array(:claim_tokens)}})) AS e
  GROUP BY e.key) AS f

-- macro: json_element_text(element, array)
-- The JSON text of $element, a json_each row of the JSON array $array, as
-- $array holds it (NULL for JSON null): a container's text as json_each
-- renders it, a string re-quoted (json_quote escapes as canonical JSON does)
-- unless $array has a \ud escape (a lone surrogate would come back as
-- invalid UTF-8), an integer printed, and any other number (a real, or an
-- integer past 64 bits, which json_each reads as a real) extracted by path,
-- digits as sent. Reading every element by path parses or compares the
-- whole array once per element.
CASE $element.type
     WHEN 'null' THEN NULL
     WHEN 'true' THEN 'true'
     WHEN 'false' THEN 'false'
     WHEN 'object' THEN $element.value
     WHEN 'array' THEN $element.value
     WHEN 'text'
     THEN CASE WHEN instr(lower($array), '\ud') = 0 THEN json_quote($element.value)
               ELSE $array -> ('$[' || $element.key || ']') END
     ELSE CASE WHEN typeof($element.value) = 'integer' THEN CAST($element.value AS TEXT)
               ELSE $array -> ('$[' || $element.key || ']') END END

-- macro: fence_array_checks
-- QF100 unless the four fence arrays are JSON arrays of one length (at most
-- 10,000), QF106 when an element is not a well-formed fence: ranks 1 and 2
-- of a ranked UNION ALL.
SELECT 1 AS rank, 'QF100' AS sqlstate,
       'fenceq: fence arrays must be non-NULL, of equal length, with at most 10000 elements' AS message
 WHERE NOT coalesce(typeof(:job_ids) = 'text' AND typeof(:owner_ids) = 'text' AND typeof(:generations) = 'text'
                    AND typeof(:claim_tokens) = 'text'
                    AND json_array_length({{as_json_array(:job_ids)}}) <= 10000
                    AND json_array_length({{as_json_array(:owner_ids)}})
                        = json_array_length({{as_json_array(:job_ids)}})
                    AND json_array_length({{as_json_array(:generations)}})
                        = json_array_length({{as_json_array(:job_ids)}})
                    AND json_array_length({{as_json_array(:claim_tokens)}})
                        = json_array_length({{as_json_array(:job_ids)}}), 0)
UNION ALL SELECT 2, 'QF106', 'fenceq: a fence is malformed'
 WHERE NOT ({{no_nul_escape(:job_ids)}} AND {{no_nul_escape(:owner_ids)}}
            AND {{no_nul_escape(:claim_tokens)}})
       OR EXISTS (SELECT 1
                    FROM {{fence_arrays}}
                   WHERE NOT coalesce(
                         f.job_type = 'text'
                         AND {{identifier(f.job_id, 36)}}
                         AND f.owner_type = 'text'
                         AND {{identifier(f.owner_id, 255)}}
                         AND f.token_type = 'text'
                         AND {{identifier(f.claim_token, 255)}}
                         AND typeof(f.generation) = 'integer' AND f.generation >= 1,
                         0))

-- Claims (claim_next, claim_batch, claim_jobs, recover_claim) ----------------

-- macro: move_due(queues, now)
-- Move the jobs of each queue of $queues (a JSON array, or NULL) that fell
-- due by $now from the later set to the ready set (version 5; schema.sql),
-- at most 1,000 per queue, earliest first, so that the claim that runs
-- this first finds them in its index with the same clock reading. Each
-- queue's probe of fenceq__jobs_later_idx stops at its first job not due
-- yet. When more than 1,000 fell due at once, the rest move on the next
-- claims, so for that moment the claim order among them is due time first.
-- Differs from PostgreSQL in that the rows are not locked and skipped
-- (SKIP LOCKED): BEGIN IMMEDIATE serialises the writers, so a plain bounded
-- UPDATE is enough.
UPDATE fenceq__jobs
   SET scheduled = 0
 WHERE seq IN (
       SELECT d.seq
         FROM json_each($queues) AS a
         JOIN fenceq__jobs AS d ON d.seq IN (
              SELECT l.seq FROM fenceq__jobs AS l
               WHERE l.queue = a.value AND l.status = 'pending' AND l.scheduled
                 AND l.run_at <= $now
               ORDER BY l.run_at
               LIMIT 1000));

-- macro: queue_heads(per_queue, queues)
-- The first $per_queue eligible jobs of each named, unpaused queue, each
-- read through the partial claim index over its ready jobs only (a claim
-- merges these heads; the caller has moved the jobs that fell due). A
-- queue with limits (set_queue_limits) offers only what they allow now: at
-- most max_claimed minus its claimed jobs, at most rate_limit minus its
-- claims in the last rate_period, and per concurrency_key at most
-- max_claimed_per_key minus the key's claimed jobs (a key at its limit is
-- passed over for the next job of another key). Writers are serialised, so
-- the counts are exact. Each head carries its queue's history flag, so the
-- claim's event costs no further read when history is off.
SELECT j.seq, j.priority, j.run_at, j.generation, q.lease AS queue_lease, q.history
  FROM fenceq__queues AS q
  JOIN clock
  JOIN fenceq__jobs AS j ON j.seq IN (
       SELECT h.seq FROM fenceq__jobs AS h
        WHERE h.queue = q.queue AND h.status = 'pending' AND h.scheduled = 0 AND h.run_at <= clock.now
          AND (h.expires_at IS NULL OR h.expires_at > clock.now)
        ORDER BY h.priority DESC, h.run_at, h.seq
        LIMIT $per_queue)
 WHERE q.queue IN (SELECT a.value FROM json_each($queues) AS a) AND NOT q.paused
   AND q.max_claimed IS NULL AND q.max_claimed_per_key IS NULL AND q.rate_limit IS NULL
UNION ALL
SELECT j.seq, j.priority, j.run_at, j.generation, q.lease AS queue_lease, q.history
  FROM fenceq__queues AS q
  JOIN clock
  JOIN fenceq__jobs AS j ON j.seq IN (
       SELECT h.seq FROM (
           SELECT h.seq, h.priority, h.run_at, h.concurrency_key,
                  row_number() OVER (ORDER BY h.priority DESC, h.run_at, h.seq) AS rank
             FROM (SELECT h.seq, h.priority, h.run_at, h.concurrency_key,
                          row_number() OVER (PARTITION BY h.concurrency_key
                                             ORDER BY h.priority DESC, h.run_at, h.seq) AS key_rank
                     FROM fenceq__jobs AS h
                    WHERE h.queue = q.queue AND h.status = 'pending' AND h.scheduled = 0
                      AND h.run_at <= clock.now AND (h.expires_at IS NULL OR h.expires_at > clock.now)) AS h
            WHERE q.max_claimed_per_key IS NULL OR h.concurrency_key IS NULL
               OR h.key_rank + (SELECT count(*) FROM fenceq__jobs AS k
                                 WHERE k.queue = q.queue AND k.status = 'claimed'
                                   AND k.concurrency_key = h.concurrency_key) <= q.max_claimed_per_key) AS h
        WHERE h.rank <= $per_queue
          AND h.rank <= coalesce(q.max_claimed - (SELECT count(*) FROM fenceq__jobs AS c
                                                   WHERE c.queue = q.queue AND c.status = 'claimed'), h.rank)
          AND h.rank <= coalesce(q.rate_limit - (SELECT count(*) FROM fenceq__rate_window AS w
                                                  WHERE w.queue = q.queue
                                                    AND w.claimed_at > clock.now - q.rate_period), h.rank))
 WHERE q.queue IN (SELECT a.value FROM json_each($queues) AS a) AND NOT q.paused
   AND (q.max_claimed IS NOT NULL OR q.max_claimed_per_key IS NOT NULL OR q.rate_limit IS NOT NULL)

-- macro: record_rate_window(claims)
-- Claims of a queue with a rate limit are recorded in its rate window (with
-- the claim's clock reading); entries older than one rate_period go.
DELETE FROM fenceq__rate_window
 WHERE EXISTS (SELECT 1 FROM fenceq__queues AS q
                WHERE q.queue = fenceq__rate_window.queue AND q.rate_limit IS NOT NULL
                  AND fenceq__rate_window.claimed_at + q.rate_period
                      <= {{now}});
INSERT INTO fenceq__rate_window (queue, claimed_at)
SELECT j.queue, c.now
  FROM $claims AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.rate_limit IS NOT NULL AND j.claim_token = c.token;

-- macro: claimed_by(token)
-- The assignments of a claim: row c of a scratch table holds the job's
-- generation before the claim, the lease and the clock reading.
status = 'claimed',
attempts = attempts + 1,
generation = c.generation + 1,
owner_id = :owner_id,
claim_token = $token,
lease = c.lease,
lease_expires_at = CASE WHEN :budget IS NULL THEN c.now + c.lease
                        ELSE min(c.now + c.lease, c.now + :budget) END,
budget_expires_at = c.now + :budget,
cancel_requested = 0,
pid = NULL

-- macro: claimed_events(scratch, guard)
-- Event claimed for each job of the scratch table $scratch (seq, now and
-- the queue's history flag, read with the claim's head) when $guard holds:
-- with history off nothing is read but the scratch row.
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'claimed', j.generation, j.owner_id, json_object('attempt', j.attempts), c.now
  FROM $scratch AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE c.history AND $guard;

-- macro: claim_scratch
-- claim_batch and claim_jobs: temp.fenceq_claim (the claims to make: job,
-- token, generation before, lease, the queue's history flag and the clock
-- reading; claim_jobs gives every job the nonce as its token), the clock
-- read once, and the move of :queues' jobs that fell due by it.
CREATE TEMP TABLE IF NOT EXISTS fenceq_claim (
    ord INTEGER PRIMARY KEY, seq INTEGER NOT NULL, token TEXT NOT NULL, generation INTEGER NOT NULL,
    lease INTEGER NOT NULL, history INTEGER NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_claim;
-- The clock, read once after BEGIN IMMEDIATE took the write lock: the move
-- and the claim use the same reading, so a job due by it is claimable.
CREATE TEMP TABLE IF NOT EXISTS fenceq_claim_clock (
    id INTEGER PRIMARY KEY CHECK (id = 1), now INTEGER NOT NULL);
INSERT OR REPLACE INTO temp.fenceq_claim_clock (id, now)
SELECT 1, {{now}};
-- Before the checks: a failed check rolls the move back with the rest, and
-- a malformed queue array moves nothing.
{{move_due({{as_json_array(:queues)}}, (SELECT c.now FROM temp.fenceq_claim_clock AS c))}}

-- macro: claim_caller_checks
-- claim_batch and claim_jobs: the checks of :queues and :owner_id, ranks 1
-- to 3 of a ranked UNION ALL (the file's own checks follow).
SELECT 1 AS rank, 'QF100' AS sqlstate,
       'fenceq: queues must be a non-empty array of at most 10000 elements' AS message
 WHERE NOT coalesce(typeof(:queues) = 'text'
                    AND json_array_length({{as_json_array(:queues)}}) BETWEEN 1 AND 10000, 0)
UNION ALL SELECT 2, 'QF102', 'fenceq: queues must hold strings of 1 to 255 characters'
 WHERE NOT {{no_nul_escape(:queues)}}
    OR EXISTS (SELECT 1 FROM json_each({{as_json_array(:queues)}}) AS a
                WHERE NOT (a.type = 'text' AND {{identifier(a.value, 255)}}))
UNION ALL SELECT 3, 'QF102', 'fenceq: owner_id must be 1 to 255 characters'
 WHERE NOT {{identifier(:owner_id, 255)}}

-- macro: claim_lease_checks
-- claim_batch and claim_jobs: the checks of :lease and :budget, ranks 6
-- and 7 of a ranked UNION ALL.
UNION ALL SELECT 6, 'QF105', 'fenceq: lease must be positive'
 WHERE NOT {{optional_integer(:lease, > 0)}}
UNION ALL SELECT 7, 'QF105', 'fenceq: budget must be positive'
 WHERE NOT {{optional_integer(:budget, > 0)}}

-- macro: unknown_queue_check
-- claim_batch and claim_jobs: QF101 unless every queue of :queues is
-- declared (rank 9 of the ranked UNION ALL).
UNION ALL SELECT 9, 'QF101', 'fenceq: unknown queue'
 WHERE (SELECT count(DISTINCT a.value) FROM json_each({{as_json_array(:queues)}}) AS a)
       <> (SELECT count(*) FROM fenceq__queues AS q
            WHERE q.queue IN (SELECT a.value FROM json_each({{as_json_array(:queues)}}) AS a))

-- macro: claim_writes(assignments)
-- claim_batch and claim_jobs: the claims of temp.fenceq_claim made, with
-- $assignments (claimed_by and what the file adds), unless a generation is
-- exhausted (QF303) or the lease or budget passes year 9999 (22008); then
-- QF302 if storage did not keep the claim identity as sent.
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF303' AS sqlstate, 'fenceq: the job''s generation is exhausted' AS message
     WHERE EXISTS (SELECT 1 FROM temp.fenceq_claim AS c WHERE c.generation >= 9223372036854775807)
    UNION ALL SELECT 2, '22008', 'fenceq: the lease or budget ends after year 9999'
     WHERE EXISTS (SELECT 1 FROM temp.fenceq_claim AS c
                    WHERE c.lease > 253402300799999999 - c.now
                       OR coalesce(:budget, 0) > 253402300799999999 - c.now)
) WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error) ORDER BY rank LIMIT 1;
UPDATE fenceq__jobs
   SET $assignments
  FROM temp.fenceq_claim AS c
 WHERE fenceq__jobs.seq = c.seq AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Storage must keep exactly what was sent: anything that changed it rolls
-- the whole claim back.
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF302', 'fenceq: storage changed the claim identity'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND EXISTS (SELECT 1 FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
                WHERE j.owner_id IS NOT :owner_id OR j.claim_token IS NOT c.token
                   OR j.generation IS NOT c.generation + 1);

-- macro: claims_recorded_and_answered
-- claim_batch and claim_jobs, once the claims and their ledger row(s) are
-- written: the rate window and the events of temp.fenceq_claim, then the
-- answer: the error row, or the claims in claim order.
{{record_rate_window((SELECT c.seq, c.token, c.now FROM temp.fenceq_claim AS c
                       WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)))}}
{{claimed_events(temp.fenceq_claim, NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
SELECT sqlstate, message, detail, job_id, queue, task, payload, priority, attempt, max_attempts, owner_id,
       generation, claim_token, lease_expires_at, budget_expires_at, cancel_requested, submission_id,
       checkpoints
  FROM (
    SELECT 0 AS ord, e.sqlstate, e.message, e.detail,
           {{claim_nulls}}
      FROM temp.fenceq_error AS e
    UNION ALL
    SELECT c.ord, NULL, NULL, NULL,
           {{claim_columns}}
      FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
     WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error))
 ORDER BY ord;

-- macro: max_jobs
-- claim_jobs: :max_jobs as a LIMIT (0 when it is not an integer from 1 to
-- 10000: the file's check refuses it, and a negative LIMIT has none).
CASE WHEN typeof(:max_jobs) = 'integer' AND :max_jobs BETWEEN 1 AND 10000
     THEN :max_jobs ELSE 0 END

-- macro: call_claimed_by
-- claim_jobs: the assignments of a claim (claimed_by, the nonce as the
-- token), and the claim appended to the job's call_claims.
{{claimed_by(c.token)}},
call_claims = json_insert(coalesce(fenceq__jobs.call_claims, '[]'), '$[#]',
                          json_object('generation', c.generation + 1, 'owner_id', :owner_id,
                                      'claimed_at', c.now, 'claim_nonce', c.token))

-- macro: claim_nulls
-- The claim columns of an error row.
NULL AS job_id, NULL AS queue, NULL AS task, NULL AS payload, NULL AS priority, NULL AS attempt,
NULL AS max_attempts, NULL AS owner_id, NULL AS generation, NULL AS claim_token,
NULL AS lease_expires_at, NULL AS budget_expires_at, NULL AS cancel_requested, NULL AS submission_id,
NULL AS checkpoints

-- macro: claim_columns
-- The claim columns of job j, as fenceq.claim has them.
j.job_id, j.queue, j.task, j.payload, j.priority, j.attempts, j.max_attempts, j.owner_id,
j.generation, j.claim_token,
{{micros_utc_text(j.lease_expires_at)}},
{{micros_utc_text(j.budget_expires_at)}},
j.cancel_requested, j.submission_id,
(SELECT json_group_object(k.step, json(k.value)) FROM fenceq__checkpoints AS k WHERE k.job_id = j.job_id)

-- Named locks (acquire_lock, renew_lock, release_lock, check_lock) ------------

-- macro: lock_name_check
-- QF102 unless :lock is a name: the first branch (rank 1) of a ranked
-- UNION ALL.
SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: lock must be 1 to 255 characters' AS message
 WHERE NOT {{identifier(:lock, 255)}}

-- macro: owner_id_check(rank)
-- QF102 unless :owner_id is an id: a branch of a ranked UNION ALL.
UNION ALL SELECT $rank, 'QF102', 'fenceq: owner_id must be 1 to 255 characters'
 WHERE NOT {{identifier(:owner_id, 255)}}

-- macro: lock_token_check(rank)
-- QF104 unless :token is a positive INTEGER: a branch of a ranked UNION ALL.
UNION ALL SELECT $rank, 'QF104', 'fenceq: token must be a positive integer'
 WHERE NOT (typeof(:token) = 'integer' AND :token >= 1)

-- macro: ttl_checks(rank)
-- QF100 without :ttl, QF105 unless it is a positive INTEGER (microseconds):
-- branches of a ranked UNION ALL (they exclude each other, so share a rank).
UNION ALL SELECT $rank, 'QF100', 'fenceq: ttl is required'
 WHERE :ttl IS NULL
UNION ALL SELECT $rank, 'QF105', 'fenceq: ttl must be positive'
 WHERE NOT {{optional_integer(:ttl, > 0)}}

-- macro: ttl_bound_check(decision)
-- QF105 when now + :ttl passes year 9999, now being the clock reading of
-- the scratch table $decision (PostgreSQL refuses such a ttl as well).
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF105', 'fenceq: ttl reaches beyond years 0001-9999'
  FROM $decision AS d
 WHERE :ttl > 253402300799999999 - d.now AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);

-- macro: lock_hold_decision
-- temp.fenceq_lock_hold: the clock reading the write uses (now) and whether
-- :owner_id holds :lock live with :token (live). The clock is read here,
-- after BEGIN IMMEDIATE took the write lock.
CREATE TEMP TABLE IF NOT EXISTS fenceq_lock_hold (now INTEGER NOT NULL, live INTEGER NOT NULL);
DELETE FROM temp.fenceq_lock_hold;
INSERT INTO temp.fenceq_lock_hold (now, live)
SELECT c.now, coalesce(l.owner_id = :owner_id AND l.token = :token AND l.expires_at > c.now, 0)
  FROM (SELECT {{now}} AS now) AS c
  LEFT JOIN fenceq__locks AS l ON l.lock = :lock
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);

-- macro: lock_hold_answer
-- The result row of renew_lock and release_lock: live as the value.
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT h.live FROM temp.fenceq_lock_hold AS h) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;

-- Dependencies (docs/guarantees.md §16) ------------------------------------

-- macro: blocked_run_at
-- The run_at of a job waiting on dependencies: year 10000 UTC, after every
-- time a job may ask for, so claims and next_due pass over it.
253402300800000000

-- macro: dependency_bounds_exceeded(ids)
-- Whether a new job depending on the jobs of $ids (a SELECT of job ids)
-- would pass the graph's bounds: one of them has 1000 dependents already,
-- or a chain through them would be deeper than 16.
(EXISTS (SELECT 1 FROM fenceq__dependencies AS b
          WHERE b.depends_on IN (
                $ids)
          GROUP BY b.depends_on HAVING count(*) >= 1000)
 OR EXISTS (WITH RECURSIVE up(job_id, depth) AS (
                SELECT s.job_id, 1 FROM fenceq__jobs AS s
                 WHERE s.job_id IN (
                       $ids)
                UNION
                SELECT e.depends_on, u.depth + 1
                  FROM up AS u JOIN fenceq__dependencies AS e ON e.job_id = u.job_id
                 WHERE u.depth <= 16)
            SELECT 1 FROM up AS u WHERE u.depth > 16))

-- macro: release_dependents(completed, guard)
-- Count the jobs of $completed (a SELECT of job ids) that are completed off
-- their dependents: a dependent left with none becomes due at the run_at
-- it asked for or now, whichever is later. Idempotent: a completed job's
-- edges are satisfied once, so the statements may run whether or not this
-- call completed it. Bounded: a job has at most 1000 dependents.
UPDATE fenceq__jobs
   SET blocked_by = nullif(fenceq__jobs.blocked_by - c.n, 0),
       run_at = CASE WHEN fenceq__jobs.blocked_by = c.n
                     THEN max(fenceq__jobs.blocked_run_at, c.now) ELSE fenceq__jobs.run_at END,
       blocked_run_at = CASE WHEN fenceq__jobs.blocked_by = c.n THEN NULL
                             ELSE fenceq__jobs.blocked_run_at END,
       -- Freed: ready when due now, else still waiting apart (version 5).
       scheduled = fenceq__jobs.blocked_by > c.n OR coalesce(fenceq__jobs.blocked_run_at > c.now, 0)
  FROM (SELECT d.job_id, count(*) AS n,
               {{now}} AS now
          FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
         WHERE NOT d.satisfied AND f.status = 'completed'
           AND d.depends_on IN (
               $completed)
         GROUP BY d.job_id) AS c
 WHERE fenceq__jobs.job_id = c.job_id AND fenceq__jobs.status = 'pending'
   AND fenceq__jobs.blocked_by IS NOT NULL
   AND $guard;
UPDATE fenceq__dependencies SET satisfied = 1
 WHERE NOT satisfied
   AND depends_on IN (
       SELECT f.job_id FROM fenceq__jobs AS f
        WHERE f.status = 'completed'
          AND f.job_id IN (
              $completed))
   AND $guard;

-- macro: completed_events(completed)
-- Events completed for the jobs of $completed (a SELECT of the job ids this
-- call completed), then unblocked for each dependent they freed: once they
-- are counted off (release_dependents), a pending dependent of a job just
-- completed with none left was freed by this call, since that job's edge
-- counted until now. One statement; with history off it reads each job's
-- queue flag and the (usually empty) list of its dependents.
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'completed', j.generation, j.owner_id, '{}', j.finished_at
  FROM fenceq__jobs AS j JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.job_id IN (
       $completed)
UNION ALL
SELECT j.job_id, j.queue, 'unblocked', NULL, NULL, '{}',
       {{now}}
  FROM fenceq__jobs AS j JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history AND j.status = 'pending' AND j.blocked_by IS NULL
   AND j.job_id IN (
       SELECT d.job_id FROM fenceq__dependencies AS d
        WHERE d.depends_on IN (
              $completed));

-- macro: cancel_dependents(ended, guard)
-- Every pending or claimed job that depends, transitively, on a job of
-- $ended (a SELECT of job ids) that ended failed, cancelled or expired is
-- cancelled with last_error 'dependency_failed' (event cancelled, reason
-- dependency_failed); a claimed one's fence dies. Idempotent, like
-- release_dependents. Bounded: chains are at most 16 deep (the walk stops
-- past 17) and a job has at most 1000 dependents. The jobs are chosen into
-- temp.fenceq_dependents first, so that their events name what they were.
CREATE TEMP TABLE IF NOT EXISTS fenceq_dependents (job_id TEXT PRIMARY KEY, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_dependents;
INSERT INTO temp.fenceq_dependents (job_id, now)
SELECT j.job_id, {{now}}
  FROM fenceq__jobs AS j
 WHERE j.status IN ('pending', 'claimed')
   AND $guard
   AND j.job_id IN (
       WITH RECURSIVE down(job_id, depth) AS (
           SELECT d.job_id, 1
             FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
            WHERE f.status IN ('failed', 'cancelled', 'expired')
              AND d.depends_on IN (
                  $ended)
           UNION
           SELECT d.job_id, w.depth + 1
             FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
            WHERE w.depth <= 17)
       SELECT w.job_id FROM down AS w);
{{history_event(
    temp.fenceq_dependents AS x JOIN fenceq__jobs AS j ON j.job_id = x.job_id,
    j.status IN ('pending', 'claimed'),
    'cancelled', {{claim_of(j)}},
    '{"reason":"dependency_failed"}',
    x.now)}}
UPDATE fenceq__jobs
   SET status = 'cancelled', last_error = 'dependency_failed', lease_expires_at = NULL, pid = NULL,
       finished_at = x.now
  FROM temp.fenceq_dependents AS x
 WHERE fenceq__jobs.job_id = x.job_id;

-- External execution (reserve_dispatch ... dispatch_repair_candidates) --------

-- macro: first_failing(cases)
-- Record the first failing check of $cases (WHEN branches of a CASE, each
-- answering 'QFnnn message'), unless a check failed before.
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT substr(c.error, 1, 5), substr(c.error, 7)
  FROM (SELECT CASE
               $cases
               END AS error) AS c
 WHERE c.error IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);

-- macro: name_check(name, longest)
-- QF102 unless :$name is a name of 1 to $longest characters: a WHEN branch.
WHEN NOT {{identifier(:$name, $longest)}}
     THEN 'QF102 fenceq: $name must be 1 to $longest characters'

-- macro: live_dispatch
-- temp.fenceq_dispatch: the claim's live dispatch (its job is claimed under
-- the row's generation), one row when the fence is live and has one, else
-- none. Read after fence_decision, on the same clock reading.
CREATE TEMP TABLE IF NOT EXISTS fenceq_dispatch (
    backend TEXT NOT NULL, state TEXT NOT NULL, reservation_ref TEXT NOT NULL, execution_ref TEXT);
DELETE FROM temp.fenceq_dispatch;
INSERT INTO temp.fenceq_dispatch (backend, state, reservation_ref, execution_ref)
SELECT d.backend, d.state, d.reservation_ref, d.execution_ref
  FROM temp.fenceq_fence AS f
  JOIN fenceq__dispatches AS d ON d.job_id = :job_id AND d.generation = :generation
 WHERE f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);

-- macro: dispatch_event(event, condition, detail)
-- The event $event of the fence's job when $condition holds (it reads
-- temp.fenceq_dispatch d) and its queue keeps history.
{{history_event(
    temp.fenceq_fence AS f JOIN temp.fenceq_dispatch AS d JOIN fenceq__jobs AS j ON j.seq = f.seq,
    $condition
    AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    '$event', {{by(:generation, :owner_id)}},
    $detail,
    f.now)}}

-- macro: fence_answer(value)
-- The result row of a fenced call: the error, else $value (it may read
-- temp.fenceq_fence f and temp.fenceq_dispatch).
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT $value
                    FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;

-- History (version 6, docs/design-v6.md) -------------------------------------

-- macro: claim_of(job)
-- An event's generation and owner_id for job $job before the transition:
-- its claim's while claimed, else NULL (an unclaimed job has no fence).
CASE WHEN $job.status = 'claimed' THEN $job.generation END,
CASE WHEN $job.status = 'claimed' THEN $job.owner_id END

-- macro: by(generation, owner_id)
-- An event's generation and owner_id (one argument of history_event).
$generation, $owner_id

-- macro: forced_out
-- submit: the job that holds the active key a forced submission takes
-- over, and every job that depends on it, transitively (job ids).
WITH RECURSIVE down(job_id, depth) AS (
    SELECT t.holder, 0 FROM temp.fenceq_submit_call AS t
     WHERE t.holder IS NOT NULL AND t.sqlstate IS NULL AND t.replay_job_id IS NULL
    UNION
    SELECT d.job_id, w.depth + 1
      FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
     WHERE w.depth <= 17)
SELECT w.job_id FROM down AS w

-- macro: submitted_detail(job)
-- The detail of event submitted: the job's priority and the run_at it
-- asked for (also while it waits on dependencies: the run_at get_job shows;
-- PostgreSQL's event records the stored 'infinity' instead).
json_object('priority', $job.priority, 'run_at', CASE WHEN $job.blocked_run_at IS NULL
    THEN {{micros_utc_text($job.run_at)}}
    ELSE {{micros_utc_text($job.blocked_run_at)}} END)

-- macro: history_event(rows, condition, event, by, detail, at)
-- One event per row of $rows (a FROM list that names the job j) for which
-- $condition holds, written only when the job's queue has history on: with
-- history off the statement reads the queue's flag and writes nothing.
-- $by gives the event's generation and owner_id (by or claim_of).
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, $event, $by,
       $detail,
       $at
  FROM $rows
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND $condition;
