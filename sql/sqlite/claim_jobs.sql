-- fenceq for SQLite: claim_jobs -- claim up to max_jobs jobs under one nonce.
-- Generated from templates/claim_jobs.sql by scripts/gen-sqlite: edit the template.
--
-- The next eligible jobs (pending, due, not expired, queue not paused)
-- across the queues, in priority desc, run_at, submission order, as
-- claim_batch picks them, at most max_jobs. Every job of the call gets the
-- fence (job_id, owner_id, generation, claim_nonce): its claim_token is the
-- nonce. The call spends the nonce once: one ledger row (claim_token = the
-- nonce, the jobs in claim order in job_ids), and each job's claim is
-- appended to its call_claims. A nonce already spent, by claim_jobs or as
-- a claim_next, claim_batch or adopt_dispatch token (one namespace), raises
-- QF301 before anything is claimed, also when there is nothing to claim.
-- Nothing eligible: no rows, nothing recorded, the nonce not spent. An
-- empty queue array QF100, an undeclared queue QF101, max_jobs outside 1 to
-- 10000 QF104. NULL lease takes the queue's; with a budget,
-- lease_expires_at = min(now + lease, now + budget).
--
-- Parameters: :queues JSON array of TEXT; :owner_id TEXT; :claim_nonce
-- TEXT; :max_jobs INTEGER; :lease, :budget INTEGER microseconds or NULL.
-- Result: zero or more rows (sqlstate, message, detail, then the claim
-- columns as claim_batch returns them), or one error row.
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that there is no SKIP LOCKED, as in
-- claim_batch: concurrent claimers take turns on the write lock, so of two
-- calls with one nonce the second finds it spent (QF301) before it claims
-- anything (PostgreSQL: the second fails on the ledger's key and rolls its
-- claims back). The call's jobs (job_ids) and each job's claims by
-- claim_jobs (call_claims, claimed_at in INTEGER microseconds) are JSON
-- arrays. A claim time beyond year 9999 raises 22008 (PostgreSQL:
-- timestamp out of range).
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_claim (
    ord INTEGER PRIMARY KEY, seq INTEGER NOT NULL, token TEXT NOT NULL, generation INTEGER NOT NULL,
    lease INTEGER NOT NULL, history INTEGER NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_claim;
-- The clock, read once after BEGIN IMMEDIATE took the write lock: the move
-- and the claim use the same reading, so a job due by it is claimable.
CREATE TEMP TABLE IF NOT EXISTS fenceq_claim_clock (
    id INTEGER PRIMARY KEY CHECK (id = 1), now INTEGER NOT NULL);
INSERT OR REPLACE INTO temp.fenceq_claim_clock (id, now)
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
                 AND l.run_at <= (SELECT c.now FROM temp.fenceq_claim_clock AS c)
               ORDER BY l.run_at
               LIMIT 1000));
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF100' AS sqlstate,
           'fenceq: queues must be a non-empty array of at most 10000 elements' AS message
     WHERE NOT coalesce(typeof(:queues) = 'text'
                        AND json_array_length(CASE WHEN json_valid(:queues)
                                                   THEN CASE WHEN json_type(:queues) = 'array'
                                                             THEN :queues END END) BETWEEN 1 AND 10000, 0)
    UNION ALL SELECT 2, 'QF102', 'fenceq: queues must hold strings of 1 to 255 characters'
     WHERE NOT instr(replace(:queues, '\\', ''), '\u0000') = 0
        OR EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(:queues)
                                                THEN CASE WHEN json_type(:queues) = 'array'
                                                          THEN :queues END END) AS a
                    WHERE NOT (a.type = 'text' AND (typeof(a.value) = 'text' AND length(a.value) BETWEEN 1 AND 255
                                                    AND instr(CAST(a.value AS BLOB), x'00') = 0)))
    UNION ALL SELECT 3, 'QF102', 'fenceq: owner_id must be 1 to 255 characters'
     WHERE NOT (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
    UNION ALL SELECT 4, 'QF102', 'fenceq: claim_nonce must be 1 to 255 characters'
     WHERE NOT (typeof(:claim_nonce) = 'text' AND length(:claim_nonce) BETWEEN 1 AND 255
                AND instr(CAST(:claim_nonce AS BLOB), x'00') = 0)
    UNION ALL SELECT 5, 'QF104', 'fenceq: max_jobs must be an integer from 1 to 10000'
     WHERE NOT (typeof(:max_jobs) = 'integer' AND :max_jobs BETWEEN 1 AND 10000)
    UNION ALL SELECT 6, 'QF105', 'fenceq: lease must be positive'
     WHERE NOT (:lease IS NULL
                OR (typeof(:lease) = 'integer' AND :lease > 0))
    UNION ALL SELECT 7, 'QF105', 'fenceq: budget must be positive'
     WHERE NOT (:budget IS NULL
                OR (typeof(:budget) = 'integer' AND :budget > 0))
    UNION ALL SELECT 8, 'QF301', 'fenceq: a claim token was already used; recover the claim instead'
     WHERE EXISTS (SELECT 1 FROM fenceq__claims AS c WHERE c.claim_token = :claim_nonce)
    UNION ALL SELECT 9, 'QF101', 'fenceq: unknown queue'
     WHERE (SELECT count(DISTINCT a.value) FROM json_each(CASE WHEN json_valid(:queues)
                                                               THEN CASE WHEN json_type(:queues) = 'array'
                                                                         THEN :queues END END) AS a)
           <> (SELECT count(*) FROM fenceq__queues AS q
                WHERE q.queue IN (SELECT a.value FROM json_each(CASE WHEN json_valid(:queues)
                                                                     THEN CASE WHEN json_type(:queues) = 'array'
                                                                               THEN :queues END END) AS a))
) ORDER BY rank LIMIT 1;
-- Each active queue's first max_jobs heads through the claim index, merged
-- in claim order, the first max_jobs of them taken under the nonce.
WITH clock(now) AS MATERIALIZED (
        SELECT c.now FROM temp.fenceq_claim_clock AS c),
     heads AS (
        SELECT j.seq, j.priority, j.run_at, j.generation, q.lease AS queue_lease, q.history
          FROM fenceq__queues AS q
          JOIN clock
          JOIN fenceq__jobs AS j ON j.seq IN (
               SELECT h.seq FROM fenceq__jobs AS h
                WHERE h.queue = q.queue AND h.status = 'pending' AND h.scheduled = 0 AND h.run_at <= clock.now
                  AND (h.expires_at IS NULL OR h.expires_at > clock.now)
                ORDER BY h.priority DESC, h.run_at, h.seq
                LIMIT CASE WHEN typeof(:max_jobs) = 'integer' AND :max_jobs BETWEEN 1 AND 10000
                           THEN :max_jobs ELSE 0 END)
         WHERE q.queue IN (SELECT a.value FROM json_each(CASE WHEN json_valid(:queues)
                                                              THEN CASE WHEN json_type(:queues) = 'array'
                                                                        THEN :queues END END) AS a) AND NOT q.paused
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
                WHERE h.rank <= CASE WHEN typeof(:max_jobs) = 'integer' AND :max_jobs BETWEEN 1 AND 10000
                                     THEN :max_jobs ELSE 0 END
                  AND h.rank <= coalesce(q.max_claimed - (SELECT count(*) FROM fenceq__jobs AS c
                                                           WHERE c.queue = q.queue AND c.status = 'claimed'), h.rank)
                  AND h.rank <= coalesce(q.rate_limit - (SELECT count(*) FROM fenceq__rate_window AS w
                                                          WHERE w.queue = q.queue
                                                            AND w.claimed_at > clock.now - q.rate_period), h.rank))
         WHERE q.queue IN (SELECT a.value FROM json_each(CASE WHEN json_valid(:queues)
                                                              THEN CASE WHEN json_type(:queues) = 'array'
                                                                        THEN :queues END END) AS a) AND NOT q.paused
           AND (q.max_claimed IS NOT NULL OR q.max_claimed_per_key IS NOT NULL OR q.rate_limit IS NOT NULL))
INSERT INTO temp.fenceq_claim (ord, seq, token, generation, lease, history, now)
SELECT c.ord, c.seq, :claim_nonce, c.generation, coalesce(:lease, c.queue_lease), c.history, clock.now
  FROM (SELECT row_number() OVER (ORDER BY h.priority DESC, h.run_at, h.seq) AS ord, h.*
          FROM heads AS h) AS c
  JOIN clock
 WHERE c.ord <= CASE WHEN typeof(:max_jobs) = 'integer' AND :max_jobs BETWEEN 1 AND 10000
                     THEN :max_jobs ELSE 0 END AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
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
   SET status = 'claimed',
       attempts = attempts + 1,
       generation = c.generation + 1,
       owner_id = :owner_id,
       claim_token = c.token,
       lease = c.lease,
       lease_expires_at = CASE WHEN :budget IS NULL THEN c.now + c.lease
                               ELSE min(c.now + c.lease, c.now + :budget) END,
       budget_expires_at = c.now + :budget,
       cancel_requested = 0,
       pid = NULL,
       call_claims = json_insert(coalesce(fenceq__jobs.call_claims, '[]'), '$[#]',
                                 json_object('generation', c.generation + 1, 'owner_id', :owner_id,
                                             'claimed_at', c.now, 'claim_nonce', c.token))
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
-- The call's one ledger row, when it claimed anything: the nonce is spent.
INSERT INTO fenceq__claims (claim_token, owner_id, claimed_at, job_ids)
SELECT :claim_nonce, :owner_id, a.now, a.job_ids
  FROM (SELECT count(*) AS n, max(c.now) AS now, json_group_array(c.job_id) AS job_ids
          FROM (SELECT c.now, j.job_id
                  FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
                 ORDER BY c.ord) AS c) AS a
 WHERE a.n > 0 AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__rate_window
 WHERE EXISTS (SELECT 1 FROM fenceq__queues AS q
                WHERE q.queue = fenceq__rate_window.queue AND q.rate_limit IS NOT NULL
                  AND fenceq__rate_window.claimed_at + q.rate_period
                      <= (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000);
INSERT INTO fenceq__rate_window (queue, claimed_at)
SELECT j.queue, c.now
  FROM (SELECT c.seq, c.token, c.now FROM temp.fenceq_claim AS c
                       WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)) AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.rate_limit IS NOT NULL AND j.claim_token = c.token;
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'claimed', j.generation, j.owner_id, json_object('attempt', j.attempts), c.now
  FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
 WHERE c.history AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT sqlstate, message, detail, job_id, queue, task, payload, priority, attempt, max_attempts, owner_id,
       generation, claim_token, lease_expires_at, budget_expires_at, cancel_requested, submission_id,
       checkpoints
  FROM (
    SELECT 0 AS ord, e.sqlstate, e.message, e.detail,
           NULL AS job_id, NULL AS queue, NULL AS task, NULL AS payload, NULL AS priority, NULL AS attempt,
           NULL AS max_attempts, NULL AS owner_id, NULL AS generation, NULL AS claim_token,
           NULL AS lease_expires_at, NULL AS budget_expires_at, NULL AS cancel_requested, NULL AS submission_id,
           NULL AS checkpoints
      FROM temp.fenceq_error AS e
    UNION ALL
    SELECT c.ord, NULL, NULL, NULL,
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
      FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
     WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error))
 ORDER BY ord;
