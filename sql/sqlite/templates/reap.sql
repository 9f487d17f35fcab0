-- fenceq for SQLite: reap -- settle expired claims and overdue pending jobs.
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
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF104', 'fenceq: max_rows must be a positive integer'
 WHERE NOT {{optional_integer(:max_rows, BETWEEN 1 AND 2147483647)}};
-- The chosen jobs: their outcome, the requeue's run_at, the dead letter,
-- the claim that lapsed (generation, owner, lease end) and the clock.
CREATE TEMP TABLE IF NOT EXISTS fenceq_reap (
    seq INTEGER PRIMARY KEY, outcome TEXT NOT NULL, run_at INTEGER, dlq_id TEXT, generation INTEGER,
    owner_id TEXT, lease_expires_at INTEGER, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_reap;
WITH {{clock}}
INSERT INTO temp.fenceq_reap (seq, outcome, run_at, dlq_id, generation, owner_id, lease_expires_at, now)
SELECT c.seq, c.outcome,
       CASE WHEN c.outcome <> 'requeued' THEN NULL
            WHEN c.requeue_priority = 'first'
            THEN min(c.now, coalesce((SELECT min(p.run_at) FROM fenceq__jobs AS p
                                       WHERE p.queue = c.queue AND p.status = 'pending'
                                         AND p.priority = c.priority) - 1, c.now))
            WHEN c.requeue_priority = 'last'
            THEN max(c.now + {{backoff(c)}},
                     coalesce((SELECT max(p.run_at) FROM fenceq__jobs AS p
                                WHERE p.queue = c.queue AND p.status = 'pending'
                                  AND p.priority = c.priority AND p.blocked_by IS NULL) + 1, 0))
            ELSE c.now + {{backoff(c)}} END,
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
         LIMIT {{row_limit(:max_rows, 1000)}}) AS c
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT '22008', 'fenceq: a retry time is after year 9999'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND EXISTS (SELECT 1 FROM temp.fenceq_reap AS r
                WHERE r.outcome = 'requeued' AND r.run_at > 253402300799999999);
{{history_event(
    temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq,
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'reaped', {{by(r.generation, r.owner_id)}},
    json_object('lease_expires_at',
                {{micros_utc_text(r.lease_expires_at)}}),
    r.now)}}
UPDATE fenceq__jobs SET status = 'cancelled', pid = NULL, finished_at = r.now
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'cancelled' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{history_event(
    temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq,
    r.outcome = 'cancelled' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'cancelled', {{by(r.generation, r.owner_id)}},
    '{"reason":"reaped"}',
    r.now)}}
UPDATE fenceq__jobs
   SET status = 'pending', run_at = r.run_at, last_error = 'lease_expired',
       scheduled = r.run_at > r.now,  -- in back-off, or behind later jobs: waits apart (version 5)
       {{cleared_claim}}
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'requeued' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__jobs
   SET status = 'failed', last_error = 'lease_expired', finished_at = r.now, dlq_id = r.dlq_id
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'failed' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{dead_letters_from(temp.fenceq_reap)}}
{{failed_events(
    (SELECT * FROM temp.fenceq_reap WHERE outcome IN ('requeued', 'failed')),
    r.outcome = 'requeued', 'lease_expired', {{by(r.generation, r.owner_id)}})}}
-- Claims that failed or were cancelled take their dependents with them
-- before the overdue pending jobs are judged, as PostgreSQL's reap does: a
-- dependent cancelled so is not also expired.
{{cancel_dependents(
    SELECT j.job_id FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
     WHERE r.outcome IN ('failed', 'cancelled'),
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
WITH {{clock}}
INSERT INTO temp.fenceq_reap (seq, outcome, now)
SELECT j.seq, 'expired', clock.now
  FROM clock JOIN fenceq__jobs AS j ON j.status = 'pending' AND j.expires_at <= clock.now
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY j.expires_at, j.seq
 LIMIT max({{row_limit(:max_rows, 1000)}} - (SELECT count(*) FROM temp.fenceq_reap), 0);
UPDATE fenceq__jobs SET status = 'expired', finished_at = r.now
  FROM temp.fenceq_reap AS r
 WHERE fenceq__jobs.seq = r.seq AND r.outcome = 'expired' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{history_event(
    temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq,
    r.outcome = 'expired' AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'expired', {{by(NULL, NULL)}}, '{}',
    r.now)}}
-- Jobs that expired take their dependents with them.
{{cancel_dependents(
    SELECT j.job_id FROM temp.fenceq_reap AS r JOIN fenceq__jobs AS j ON j.seq = r.seq
     WHERE r.outcome = 'expired',
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error))}}
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
