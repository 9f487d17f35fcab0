-- fenceq for SQLite: claim_batch -- claim up to one job per token.
--
-- The next eligible jobs (pending, due, not expired, queue not paused)
-- across the queues, in priority desc, run_at, submission order, paired
-- with the tokens in array order. A token repeated in the array, or already
-- in the claim ledger, raises QF301 before anything is claimed; an empty
-- queue array QF100, an undeclared queue QF101. NULL lease takes the
-- queue's; with a budget, lease_expires_at = min(now + lease, now + budget).
--
-- Parameters: :queues JSON array of TEXT; :owner_id TEXT; :claim_tokens
-- JSON array of TEXT; :lease, :budget INTEGER microseconds or NULL.
-- Result: zero or more rows (sqlstate, message, detail, then the claim
-- columns job_id, queue, task, payload, priority, attempt, max_attempts,
-- owner_id, generation, claim_token, lease_expires_at, budget_expires_at,
-- cancel_requested, submission_id, checkpoints), or one error row.
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that there is no SKIP LOCKED: BEGIN
-- IMMEDIATE serialises writers on the whole file, so concurrent claimers
-- take turns (waiting up to the busy timeout) and still never get the same
-- job; order is strict across callers too. Each queue's jobs that fell
-- due are moved from the later set to the ready set first (a plain bounded
-- UPDATE: no row is locked or skipped), then each queue's heads are read
-- through the partial claim index over its ready jobs, and the heads are
-- merged. A claim time beyond year 9999 raises 22008 (PostgreSQL:
-- timestamp out of range).
{{error_table}}
-- The claims to make: job, token, generation before, lease, the queue's
-- history flag and the clock reading.
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
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
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
    UNION ALL SELECT 4, 'QF100', 'fenceq: claim_tokens must be a non-empty array of at most 10000 elements'
     WHERE NOT coalesce(typeof(:claim_tokens) = 'text'
                        AND json_array_length({{as_json_array(:claim_tokens)}}) BETWEEN 1 AND 10000, 0)
    UNION ALL SELECT 5, 'QF102', 'fenceq: claim_tokens must hold strings of 1 to 255 characters'
     WHERE NOT {{no_nul_escape(:claim_tokens)}}
        OR EXISTS (SELECT 1 FROM json_each({{as_json_array(:claim_tokens)}}) AS t
                    WHERE NOT (t.type = 'text' AND {{identifier(t.value, 255)}}))
    UNION ALL SELECT 6, 'QF105', 'fenceq: lease must be positive'
     WHERE NOT {{optional_integer(:lease, > 0)}}
    UNION ALL SELECT 7, 'QF105', 'fenceq: budget must be positive'
     WHERE NOT {{optional_integer(:budget, > 0)}}
    UNION ALL SELECT 8, 'QF301', 'fenceq: a claim token was already used; recover the claim instead'
     WHERE (SELECT count(DISTINCT t.value) FROM json_each({{as_json_array(:claim_tokens)}}) AS t)
           <> json_array_length({{as_json_array(:claim_tokens)}})
        OR EXISTS (SELECT 1 FROM json_each({{as_json_array(:claim_tokens)}}) AS t
                     JOIN fenceq__claims AS c ON c.claim_token = t.value)
    UNION ALL SELECT 9, 'QF101', 'fenceq: unknown queue'
     WHERE (SELECT count(DISTINCT a.value) FROM json_each({{as_json_array(:queues)}}) AS a)
           <> (SELECT count(*) FROM fenceq__queues AS q
                WHERE q.queue IN (SELECT a.value FROM json_each({{as_json_array(:queues)}}) AS a))
) ORDER BY rank LIMIT 1;
-- Each active queue's head rows through the claim index (at most one per
-- token), merged in claim order and paired with the tokens. The tokens are
-- materialised with a computed ord, which SQLite indexes for the join: a
-- join on json_each's own key rescans the array for every head.
WITH clock(now) AS MATERIALIZED (
        SELECT c.now FROM temp.fenceq_claim_clock AS c),
     heads AS (
        {{queue_heads(coalesce(json_array_length({{as_json_array(:claim_tokens)}}), 0), {{as_json_array(:queues)}})}}),
     tokens AS MATERIALIZED (
        SELECT t.key + 1 AS ord, t.value AS token FROM json_each({{as_json_array(:claim_tokens)}}) AS t)
INSERT INTO temp.fenceq_claim (ord, seq, token, generation, lease, history, now)
SELECT c.ord, c.seq, t.token, c.generation, coalesce(:lease, c.queue_lease), c.history, clock.now
  FROM (SELECT row_number() OVER (ORDER BY h.priority DESC, h.run_at, h.seq) AS ord, h.*
          FROM heads AS h) AS c
  JOIN tokens AS t ON t.ord = c.ord
  JOIN clock
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
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
   SET {{claimed_by(c.token)}}
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
INSERT INTO fenceq__claims (claim_token, job_id, generation, owner_id, claimed_at)
SELECT c.token, j.job_id, j.generation, :owner_id, c.now
  FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
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
