-- fenceq for SQLite: claim_next -- claim the next eligible job across queues.
-- Generated from templates/claim_next.sql by scripts/gen-sqlite: edit the template.
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
SELECT 1, (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000;
-- Before the checks: a failed check rolls the move back with the rest, and
-- a malformed queue array moves nothing.
UPDATE fenceq__jobs
   SET scheduled = 0
 WHERE seq IN (
       SELECT d.seq
         FROM json_each(CASE WHEN json_valid(:queues)
                             THEN CASE WHEN json_type(:queues) = 'array'
                                       THEN :queues END END) AS a
         JOIN fenceq__jobs AS d ON d.seq IN (
              SELECT l.seq FROM fenceq__jobs AS l
               WHERE l.queue = a.value AND l.status = 'pending' AND l.scheduled
                 AND l.run_at <= (SELECT c.now FROM temp.fenceq_claim_next AS c)
               ORDER BY l.run_at
               LIMIT 1000));
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
        WHEN NOT instr(replace(:queues, '\\', ''), '\u0000') = 0
             OR EXISTS (SELECT 1 FROM json_each(d.doc) AS a
                         WHERE NOT (a.type = 'text' AND (typeof(a.value) = 'text' AND length(a.value) BETWEEN 1 AND 255
                                                         AND instr(CAST(a.value AS BLOB), x'00') = 0)))
             THEN 'QF102 fenceq: queues must hold strings of 1 to 255 characters'
        WHEN NOT (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                  AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
             THEN 'QF102 fenceq: owner_id must be 1 to 255 characters'
        WHEN NOT (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
                  AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
             THEN 'QF102 fenceq: claim_token must be 1 to 255 characters'
        WHEN NOT (:lease IS NULL
                  OR (typeof(:lease) = 'integer' AND :lease > 0))
             THEN 'QF105 fenceq: lease must be positive'
        WHEN NOT (:budget IS NULL
                  OR (typeof(:budget) = 'integer' AND :budget > 0))
             THEN 'QF105 fenceq: budget must be positive'
        WHEN EXISTS (SELECT 1 FROM fenceq__claims AS c WHERE c.claim_token = :claim_token)
             THEN 'QF301 fenceq: a claim token was already used; recover the claim instead'
        WHEN EXISTS (SELECT 1 FROM json_each(d.doc) AS a
                      WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = a.value))
             THEN 'QF101 fenceq: unknown queue'
        END AS error FROM doc AS d),
     heads AS (
        SELECT j.seq, j.priority, j.run_at, j.generation, q.lease AS queue_lease, q.history
          FROM fenceq__queues AS q
          JOIN clock
          JOIN fenceq__jobs AS j ON j.seq IN (
               SELECT h.seq FROM fenceq__jobs AS h
                WHERE h.queue = q.queue AND h.status = 'pending' AND h.scheduled = 0 AND h.run_at <= clock.now
                  AND (h.expires_at IS NULL OR h.expires_at > clock.now)
                ORDER BY h.priority DESC, h.run_at, h.seq
                LIMIT 1)
         WHERE q.queue IN (SELECT a.value FROM json_each((SELECT d.doc FROM doc AS d)) AS a) AND NOT q.paused
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
                WHERE h.rank <= 1
                  AND h.rank <= coalesce(q.max_claimed - (SELECT count(*) FROM fenceq__jobs AS c
                                                           WHERE c.queue = q.queue AND c.status = 'claimed'), h.rank)
                  AND h.rank <= coalesce(q.rate_limit - (SELECT count(*) FROM fenceq__rate_window AS w
                                                          WHERE w.queue = q.queue
                                                            AND w.claimed_at > clock.now - q.rate_period), h.rank))
         WHERE q.queue IN (SELECT a.value FROM json_each((SELECT d.doc FROM doc AS d)) AS a) AND NOT q.paused
           AND (q.max_claimed IS NOT NULL OR q.max_claimed_per_key IS NOT NULL OR q.rate_limit IS NOT NULL)),
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
   SET status = 'claimed',
       attempts = attempts + 1,
       generation = c.generation + 1,
       owner_id = :owner_id,
       claim_token = :claim_token,
       lease = c.lease,
       lease_expires_at = CASE WHEN :budget IS NULL THEN c.now + c.lease
                               ELSE min(c.now + c.lease, c.now + :budget) END,
       budget_expires_at = c.now + :budget,
       cancel_requested = 0,
       pid = NULL
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
DELETE FROM fenceq__rate_window
 WHERE EXISTS (SELECT 1 FROM fenceq__queues AS q
                WHERE q.queue = fenceq__rate_window.queue AND q.rate_limit IS NOT NULL
                  AND fenceq__rate_window.claimed_at + q.rate_period
                      <= (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000);
INSERT INTO fenceq__rate_window (queue, claimed_at)
SELECT j.queue, c.now
  FROM (SELECT c.seq, :claim_token AS token, c.now FROM temp.fenceq_claim_next AS c
                       WHERE c.sqlstate IS NULL) AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.rate_limit IS NOT NULL AND j.claim_token = c.token;
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'claimed', j.generation, j.owner_id, json_object('attempt', j.attempts), c.now
  FROM temp.fenceq_claim_next AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE c.history AND c.sqlstate IS NULL;
SELECT c.sqlstate, c.message, NULL AS detail,
       NULL AS job_id, NULL AS queue, NULL AS task, NULL AS payload, NULL AS priority, NULL AS attempt,
       NULL AS max_attempts, NULL AS owner_id, NULL AS generation, NULL AS claim_token,
       NULL AS lease_expires_at, NULL AS budget_expires_at, NULL AS cancel_requested, NULL AS submission_id,
       NULL AS checkpoints
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
       j.job_id, j.queue, j.task, j.payload, j.priority, j.attempts, j.max_attempts, j.owner_id,
       j.generation, j.claim_token,
       strftime('%Y-%m-%dT%H:%M:%S', j.lease_expires_at / 1000000 - (j.lease_expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.lease_expires_at % 1000000 + 1000000) % 1000000),
       strftime('%Y-%m-%dT%H:%M:%S', j.budget_expires_at / 1000000 - (j.budget_expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.budget_expires_at % 1000000 + 1000000) % 1000000),
       j.cancel_requested, j.submission_id,
       (SELECT json_group_object(k.step, json(k.value)) FROM fenceq__checkpoints AS k WHERE k.job_id = j.job_id)
  FROM temp.fenceq_claim_next AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE c.sqlstate IS NULL
   AND j.owner_id IS :owner_id AND j.claim_token IS :claim_token AND j.generation IS c.generation + 1;
