-- fenceq for SQLite: claim_next -- claim the next eligible job across queues.
--
-- The next eligible job (pending, due, not expired, queue not paused)
-- across the queues, in priority desc, run_at, submission order. Not
-- idempotent by design: each call needs a fresh claim_token (QF301 for one
-- in the claim ledger); after an uncertain answer call recover_claim with
-- the same token. An empty queue array raises QF100, an undeclared queue
-- QF101. NULL lease takes the queue's; with a budget, lease_expires_at =
-- min(now + lease, now + budget).
--
-- Parameters: :queues JSON array of TEXT; :owner_id TEXT; :claim_token
-- TEXT; :lease, :budget INTEGER microseconds or NULL.
-- Result: zero or one row (sqlstate, message, detail, then the claim
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
-- UPDATE: no row is locked or skipped), then each queue's head is read
-- through the partial claim index over its ready jobs, and the heads are
-- merged. A claim time beyond year 9999 raises 22008 (PostgreSQL:
-- timestamp out of range).
-- One scratch row per connection (temp.fenceq_claim_next, overwritten by
-- each call): the clock reading, then the first failing check in this
-- order (sqlstate, message), else the chosen job (seq, its generation, the
-- lease, its queue's history flag). The writes are guarded by its sqlstate
-- being NULL.
CREATE TEMP TABLE IF NOT EXISTS fenceq_claim_next (
    id INTEGER PRIMARY KEY CHECK (id = 1), sqlstate TEXT, message TEXT,
    seq INTEGER, generation INTEGER, lease INTEGER, history INTEGER, now INTEGER NOT NULL);
-- The clock, read once after BEGIN IMMEDIATE took the write lock: the move
-- and the claim use the same reading, so a job due by it is claimable.
INSERT OR REPLACE INTO temp.fenceq_claim_next (id, now)
SELECT 1, {{now}};
-- Before the checks: a failed check rolls the move back with the rest, and
-- a malformed queue array moves nothing.
{{move_due({{as_json_array(:queues)}}, (SELECT c.now FROM temp.fenceq_claim_next AS c))}}
-- The checks, then each active queue's head row through the claim index,
-- merged in claim order; then the head's own checks.
WITH clock(now) AS MATERIALIZED (
        SELECT c.now FROM temp.fenceq_claim_next AS c),
     doc(doc) AS MATERIALIZED (
        SELECT CASE WHEN typeof(:queues) = 'text' AND json_valid(:queues)
                    THEN CASE WHEN json_type(:queues) = 'array' THEN :queues END END),
     e(error) AS (SELECT CASE
        WHEN NOT coalesce(json_array_length(d.doc) BETWEEN 1 AND 10000, 0)
             THEN 'QF100 fenceq: queues must be a non-empty array of at most 10000 elements'
        WHEN NOT {{no_nul_escape(:queues)}}
             OR EXISTS (SELECT 1 FROM json_each(d.doc) AS a
                         WHERE NOT (a.type = 'text' AND {{identifier(a.value, 255)}}))
             THEN 'QF102 fenceq: queues must hold strings of 1 to 255 characters'
        WHEN NOT {{identifier(:owner_id, 255)}}
             THEN 'QF102 fenceq: owner_id must be 1 to 255 characters'
        WHEN NOT {{identifier(:claim_token, 255)}}
             THEN 'QF102 fenceq: claim_token must be 1 to 255 characters'
        WHEN NOT {{optional_integer(:lease, > 0)}}
             THEN 'QF105 fenceq: lease must be positive'
        WHEN NOT {{optional_integer(:budget, > 0)}}
             THEN 'QF105 fenceq: budget must be positive'
        WHEN EXISTS (SELECT 1 FROM fenceq__claims AS c WHERE c.claim_token = :claim_token)
             THEN 'QF301 fenceq: a claim token was already used; recover the claim instead'
        WHEN EXISTS (SELECT 1 FROM json_each(d.doc) AS a
                      WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = a.value))
             THEN 'QF101 fenceq: unknown queue'
        END AS error FROM doc AS d),
     heads AS (
        {{queue_heads(1, (SELECT d.doc FROM doc AS d))}}),
     head AS (
        SELECT h.seq, h.generation, coalesce(:lease, h.queue_lease) AS lease, h.history
          FROM heads AS h
         WHERE (SELECT e.error IS NULL FROM e)
         ORDER BY h.priority DESC, h.run_at, h.seq
         LIMIT 1),
     decision(error, seq, generation, lease, history, now) AS (
        SELECT coalesce(e.error, CASE
                 WHEN h.generation >= 9223372036854775807
                      THEN 'QF303 fenceq: the job''s generation is exhausted'
                 WHEN h.seq IS NOT NULL AND (h.lease > 253402300799999999 - clock.now
                                             OR coalesce(:budget, 0) > 253402300799999999 - clock.now)
                      THEN '22008 fenceq: the lease or budget ends after year 9999'
                 END),
               h.seq, h.generation, h.lease, h.history, clock.now
          FROM clock JOIN e LEFT JOIN head AS h)
INSERT OR REPLACE INTO temp.fenceq_claim_next (id, sqlstate, message, seq, generation, lease, history, now)
SELECT 1, substr(x.error, 1, 5), substr(x.error, 7), CASE WHEN x.error IS NULL THEN x.seq END,
       x.generation, x.lease, x.history, x.now
  FROM decision AS x;
UPDATE fenceq__jobs
   SET {{claimed_by(:claim_token)}}
  FROM temp.fenceq_claim_next AS c
 WHERE fenceq__jobs.seq = c.seq AND c.sqlstate IS NULL;
-- Storage must keep exactly what was sent: anything that changed it rolls
-- the whole claim back (QF302, answered below), so the ledger row is only
-- written for an intact claim.
INSERT INTO fenceq__claims (claim_token, job_id, generation, owner_id, claimed_at)
SELECT :claim_token, j.job_id, j.generation, :owner_id, c.now
  FROM temp.fenceq_claim_next AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE c.sqlstate IS NULL
   AND j.owner_id IS :owner_id AND j.claim_token IS :claim_token AND j.generation IS c.generation + 1;
{{record_rate_window((SELECT c.seq, :claim_token AS token, c.now FROM temp.fenceq_claim_next AS c
                       WHERE c.sqlstate IS NULL))}}
{{claimed_events(temp.fenceq_claim_next, c.sqlstate IS NULL)}}
SELECT c.sqlstate, c.message, NULL AS detail,
       {{claim_nulls}}
  FROM temp.fenceq_claim_next AS c
 WHERE c.sqlstate IS NOT NULL
UNION ALL
SELECT 'QF302', 'fenceq: storage changed the claim identity', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM temp.fenceq_claim_next AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE c.sqlstate IS NULL
   AND NOT (j.owner_id IS :owner_id AND j.claim_token IS :claim_token AND j.generation IS c.generation + 1)
UNION ALL
SELECT NULL, NULL, NULL,
       {{claim_columns}}
  FROM temp.fenceq_claim_next AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE c.sqlstate IS NULL
   AND j.owner_id IS :owner_id AND j.claim_token IS :claim_token AND j.generation IS c.generation + 1;
