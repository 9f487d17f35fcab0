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
{{claim_scratch}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{claim_caller_checks}}
    UNION ALL SELECT 4, 'QF100', 'fenceq: claim_tokens must be a non-empty array of at most 10000 elements'
     WHERE NOT coalesce(typeof(:claim_tokens) = 'text'
                        AND json_array_length({{as_json_array(:claim_tokens)}}) BETWEEN 1 AND 10000, 0)
    UNION ALL SELECT 5, 'QF102', 'fenceq: claim_tokens must hold strings of 1 to 255 characters'
     WHERE NOT {{no_nul_escape(:claim_tokens)}}
        OR EXISTS (SELECT 1 FROM json_each({{as_json_array(:claim_tokens)}}) AS t
                    WHERE NOT (t.type = 'text' AND {{identifier(t.value, 255)}}))
    {{claim_lease_checks}}
    UNION ALL SELECT 8, 'QF301', 'fenceq: a claim token was already used; recover the claim instead'
     WHERE (SELECT count(DISTINCT t.value) FROM json_each({{as_json_array(:claim_tokens)}}) AS t)
           <> json_array_length({{as_json_array(:claim_tokens)}})
        OR EXISTS (SELECT 1 FROM json_each({{as_json_array(:claim_tokens)}}) AS t
                     JOIN fenceq__claims AS c ON c.claim_token = t.value)
    {{unknown_queue_check}}
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
{{claim_writes({{claimed_by(c.token)}})}}
INSERT INTO fenceq__claims (claim_token, job_id, generation, owner_id, claimed_at)
SELECT c.token, j.job_id, j.generation, :owner_id, c.now
  FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{claims_recorded_and_answered}}
