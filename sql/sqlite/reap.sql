-- fenceq for SQLite: reap -- settle expired claims and overdue pending jobs.
-- Generated from templates/reap.sql by scripts/gen-sqlite: edit the template.
--
-- Oldest first, at most max_rows in all. Expired claims: cancel-requested
-- -> cancelled; attempts left -> pending (error 'lease_expired'), due where
-- the queue's requeue_priority says: keep, at now + backoff; first, at once
-- and ahead of every pending job of its queue and priority (min(now, their
-- earliest run_at - 1 us)); last, behind every one of them, also those due
-- later (max(now + backoff, their latest run_at + 1 us)); none left ->
-- failed (+ dead letter when the queue keeps them). A claim with a live
-- dispatch (its work runs elsewhere) is never touched, lapsed or not.
-- Overdue pending jobs -> expired. The dependents of a job that failed, was
-- cancelled or expired are cancelled (not counted). Events reaped, then
-- retried, failed (+ dead_lettered) or cancelled (reason reaped); expired.
-- Always one row of counts.
--
-- Parameters: :max_rows INTEGER or NULL (1000).
-- Result: one row (sqlstate, message, detail, requeued, failed, cancelled,
-- expired).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that reapers take turns on the write lock
-- instead of skipping each other's rows (SKIP LOCKED); either way no row is
-- counted twice. A retry time beyond year 9999 raises 22008. Jobs waiting
-- on dependencies (run_at year 10000) do not count for requeue_priority
-- last.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF104', 'fenceq: max_rows must be a positive integer'
 WHERE NOT (:max_rows IS NULL
            OR (typeof(:max_rows) = 'integer' AND :max_rows BETWEEN 1 AND 2147483647));
-- The chosen jobs: their outcome, the requeue's run_at, the dead letter,
-- the claim that lapsed (generation, owner, lease end) and the clock.
CREATE TEMP TABLE IF NOT EXISTS fenceq_reap (
    seq INTEGER PRIMARY KEY, outcome TEXT NOT NULL, run_at INTEGER, dlq_id TEXT, generation INTEGER,
    owner_id TEXT, lease_expires_at INTEGER, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_reap;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_reap (seq, outcome, run_at, dlq_id, generation, owner_id, lease_expires_at, now)
SELECT c.seq, c.outcome,
       CASE WHEN c.outcome <> 'requeued' THEN NULL
            WHEN c.requeue_priority = 'first'
            THEN min(c.now, coalesce((SELECT min(p.run_at) FROM fenceq__jobs AS p
                                       WHERE p.queue = c.queue AND p.status = 'pending'
                                         AND p.priority = c.priority) - 1, c.now))
            WHEN c.requeue_priority = 'last'
            THEN max(c.now + CASE WHEN c.backoff_base <= 0 THEN 0
                                  WHEN ln(c.backoff_base) + max(c.attempts - 1, 0) * ln(c.backoff_factor)
                                       >= ln(c.backoff_max) THEN c.backoff_max
                                  ELSE CAST(round(c.backoff_base * power(c.backoff_factor, max(c.attempts - 1, 0)))
                                            AS INTEGER) END,
                     coalesce((SELECT max(p.run_at) FROM fenceq__jobs AS p
                                WHERE p.queue = c.queue AND p.status = 'pending'
                                  AND p.priority = c.priority AND p.blocked_by IS NULL) + 1, 0))
            ELSE c.now + CASE WHEN c.backoff_base <= 0 THEN 0
                              WHEN ln(c.backoff_base) + max(c.attempts - 1, 0) * ln(c.backoff_factor)
                                   >= ln(c.backoff_max) THEN c.backoff_max
                              ELSE CAST(round(c.backoff_base * power(c.backoff_factor, max(c.attempts - 1, 0)))
                                        AS INTEGER) END END,
       CASE WHEN c.outcome = 'failed' AND c.dead_letter THEN lower(hex(randomblob(16))) END,
       c.generation, c.owner_id, c.lease_expires_at, c.now
  FROM (SELECT j.seq, j.queue, j.priority, j.attempts, j.generation, j.owner_id, j.lease_expires_at,
               q.backoff_base, q.backoff_factor, q.backoff_max, q.dead_letter, q.requeue_priority, clock.now,
               CASE WHEN j.cancel_requested THEN 'cancelled'
                    WHEN j.attempts < j.max_attempts THEN 'requeued'
                    ELSE 'failed' END AS outcome
          FROM clock
          JOIN fenceq__jobs AS j ON j.status = 'claimed' AND j.lease_expires_at <= clock.now
          JOIN fenceq__queues AS q ON q.queue = j.queue
         -- A live dispatch: its work may run elsewhere; adopt_dispatch takes it over.
         WHERE NOT EXISTS (SELECT 1 FROM fenceq__dispatches AS d
                            WHERE d.job_id = j.job_id AND d.generation = j.generation)
         ORDER BY j.lease_expires_at, j.seq
         LIMIT CASE WHEN typeof(:max_rows) = 'integer' THEN :max_rows
                    ELSE 1000 END) AS c
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT '22008', 'fenceq: a retry time is after year 9999'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND EXISTS (SELECT 1 FROM temp.fenceq_reap AS r
                WHERE r.outcome = 'requeued' AND r.run_at > 253402300799999999);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'reaped', r.generation, r.owner_id,
       json_object('lease_expires_at',
                   strftime('%Y-%m-%dT%H:%M:%S', r.lease_expires_at / 1000000 - (r.lease_expires_at % 1000000 < 0),
                            'unixepoch')
                   || printf('.%06dZ', (r.lease_expires_at % 1000000 + 1000000) % 1000000)),
       r.now
  FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs SET status = 'cancelled', pid = NULL, finished_at = r.now
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'cancelled' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'cancelled', r.generation, r.owner_id,
       '{"reason":"reaped"}',
       r.now
  FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND r.outcome = 'cancelled' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET status = 'pending', run_at = r.run_at, last_error = 'lease_expired',
       scheduled = r.run_at > r.now,  -- in back-off, or behind later jobs: waits apart (version 5)
       owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
       budget_expires_at = NULL, pid = NULL
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'requeued' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET status = 'failed', last_error = 'lease_expired', finished_at = r.now, dlq_id = r.dlq_id
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'failed' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__dead_letters (dlq_id, job_id, queue, task, error, attempts, failed_at)
SELECT r.dlq_id, j.job_id, j.queue, j.task, j.last_error, j.attempts, r.now
  FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
 WHERE r.dlq_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, CASE WHEN r.outcome = 'requeued' THEN 'retried' ELSE 'failed' END, r.generation, r.owner_id,
       CASE WHEN r.outcome = 'requeued'
            THEN json_object('error', substr('lease_expired', 1, 2000), 'retry_at',
                             strftime('%Y-%m-%dT%H:%M:%S', j.run_at / 1000000 - (j.run_at % 1000000 < 0),
                                      'unixepoch')
                             || printf('.%06dZ', (j.run_at % 1000000 + 1000000) % 1000000))
            ELSE json_object('error', substr('lease_expired', 1, 2000)) END,
       r.now
  FROM (SELECT * FROM temp.fenceq_reap WHERE outcome IN ('requeued', 'failed')) AS r
       JOIN fenceq__jobs AS j ON j.seq = r.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'dead_lettered', r.generation, r.owner_id,
       json_object('dlq_id', r.dlq_id),
       r.now
  FROM (SELECT * FROM temp.fenceq_reap WHERE outcome IN ('requeued', 'failed')) AS r
       JOIN fenceq__jobs AS j ON j.seq = r.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND r.dlq_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Claims that failed or were cancelled take their dependents with them
-- before the overdue pending jobs are judged, as PostgreSQL's reap does: a
-- dependent cancelled so is not also expired.
CREATE TEMP TABLE IF NOT EXISTS fenceq_dependents (job_id TEXT PRIMARY KEY, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_dependents;
INSERT INTO temp.fenceq_dependents (job_id, now)
SELECT j.job_id, (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
  FROM fenceq__jobs AS j
 WHERE j.status IN ('pending', 'claimed')
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND j.job_id IN (
       WITH RECURSIVE down(job_id, depth) AS (
           SELECT d.job_id, 1
             FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
            WHERE f.status IN ('failed', 'cancelled', 'expired')
              AND d.depends_on IN (
                  SELECT j.job_id FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
                   WHERE r.outcome IN ('failed', 'cancelled'))
           UNION
           SELECT d.job_id, w.depth + 1
             FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
            WHERE w.depth <= 17)
       SELECT w.job_id FROM down AS w);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'cancelled', CASE WHEN j.status = 'claimed' THEN j.generation END,
                                       CASE WHEN j.status = 'claimed' THEN j.owner_id END,
       '{"reason":"dependency_failed"}',
       x.now
  FROM temp.fenceq_dependents AS x JOIN fenceq__jobs AS j ON j.job_id = x.job_id
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.status IN ('pending', 'claimed');
UPDATE fenceq__jobs
   SET status = 'cancelled', last_error = 'dependency_failed', lease_expires_at = NULL, pid = NULL,
       finished_at = x.now
  FROM temp.fenceq_dependents AS x
 WHERE fenceq__jobs.job_id = x.job_id;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_reap (seq, outcome, now)
SELECT j.seq, 'expired', clock.now
  FROM clock JOIN fenceq__jobs AS j ON j.status = 'pending' AND j.expires_at <= clock.now
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY j.expires_at, j.seq
 LIMIT max(CASE WHEN typeof(:max_rows) = 'integer' THEN :max_rows
                ELSE 1000 END - (SELECT count(*) FROM temp.fenceq_reap), 0);
UPDATE fenceq__jobs SET status = 'expired', finished_at = r.now
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'expired' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'expired', NULL, NULL,
       '{}',
       r.now
  FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND r.outcome = 'expired' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Jobs that expired take their dependents with them.
CREATE TEMP TABLE IF NOT EXISTS fenceq_dependents (job_id TEXT PRIMARY KEY, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_dependents;
INSERT INTO temp.fenceq_dependents (job_id, now)
SELECT j.job_id, (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
  FROM fenceq__jobs AS j
 WHERE j.status IN ('pending', 'claimed')
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND j.job_id IN (
       WITH RECURSIVE down(job_id, depth) AS (
           SELECT d.job_id, 1
             FROM fenceq__dependencies AS d JOIN fenceq__jobs AS f ON f.job_id = d.depends_on
            WHERE f.status IN ('failed', 'cancelled', 'expired')
              AND d.depends_on IN (
                  SELECT j.job_id FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
                   WHERE r.outcome = 'expired')
           UNION
           SELECT d.job_id, w.depth + 1
             FROM down AS w JOIN fenceq__dependencies AS d ON d.depends_on = w.job_id
            WHERE w.depth <= 17)
       SELECT w.job_id FROM down AS w);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'cancelled', CASE WHEN j.status = 'claimed' THEN j.generation END,
                                       CASE WHEN j.status = 'claimed' THEN j.owner_id END,
       '{"reason":"dependency_failed"}',
       x.now
  FROM temp.fenceq_dependents AS x JOIN fenceq__jobs AS j ON j.job_id = x.job_id
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND j.status IN ('pending', 'claimed');
UPDATE fenceq__jobs
   SET status = 'cancelled', last_error = 'dependency_failed', lease_expires_at = NULL, pid = NULL,
       finished_at = x.now
  FROM temp.fenceq_dependents AS x
 WHERE fenceq__jobs.job_id = x.job_id;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT count(*) FROM temp.fenceq_reap WHERE outcome = 'requeued') END AS requeued,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT count(*) FROM temp.fenceq_reap WHERE outcome = 'failed') END AS failed,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT count(*) FROM temp.fenceq_reap WHERE outcome = 'cancelled') END AS cancelled,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT count(*) FROM temp.fenceq_reap WHERE outcome = 'expired') END AS expired
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
