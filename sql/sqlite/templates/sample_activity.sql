-- fenceq for SQLite: sample_activity -- write each queue's closed minutes to the activity series.
--
-- For each queue, every closed minute after its last row in fenceq__activity
-- (the first call: only the last closed minute; a minute closes 10 seconds
-- after it ends), at most max_minutes (1 to 11,520) of them, oldest first
-- (the rest wait for the next call); never a minute older than keep. Per
-- minute: the jobs submitted, the claims made
-- (retried: those that were not a job's first), the jobs completed, failed,
-- cancelled and expired, and histograms of the wait (final claim - run_at)
-- and run (finished_at - final claim) of the jobs completed or failed. The
-- depth (pending, due, running) is the live count, written only on the row
-- of the last closed minute; minutes caught up later have none. Then rows
-- older than keep are deleted. Answers how many rows it wrote. QF104 for
-- max_minutes out of range, QF105 for a keep shorter than a minute.
--
-- It reads one set of jobs per call: each sampled queue's pending and
-- claimed jobs (through their partial indexes) and the jobs that finished
-- since its first minute (a range of fenceq__jobs_finished_idx), with their
-- claims: the per-token ones (fenceq__claims_job_idx) and those of
-- claim_jobs calls (the jobs' call_claims). A job purged before its minute
-- was sampled is not counted.
--
-- Parameters: :max_minutes INTEGER or NULL (60); :keep INTEGER
-- microseconds or NULL (192 hours).
-- Result: one row (sqlstate, message, detail, value INTEGER).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that samplers take turns on the write lock (a
-- second one finds the minutes written and writes none), a NULL bound
-- takes its default, and the claims of claim_jobs calls are read from the
-- JSON array call_claims.
{{error_table}}
{{first_failing(
    WHEN NOT {{optional_integer(:max_minutes, BETWEEN 1 AND 11520)}}
         THEN 'QF104 fenceq: max_minutes must be an integer from 1 to 11520'
    WHEN NOT {{optional_integer(:keep, > 0)}}
         THEN 'QF105 fenceq: keep must be positive'
    WHEN :keep > 62135596800000000
                 + {{now}}
         THEN 'QF105 fenceq: keep reaches beyond years 0001-9999'
    WHEN :keep < 60000000
         THEN 'QF105 fenceq: keep must be at least a minute')}}
-- The call: its clock reading, the last closed minute, the oldest minute
-- kept (whole minutes of keep before the end of the closed ones), and how
-- many rows it wrote.
CREATE TEMP TABLE IF NOT EXISTS fenceq_sample_call (
    now INTEGER NOT NULL, last_closed INTEGER NOT NULL, oldest_kept INTEGER NOT NULL, written INTEGER);
DELETE FROM temp.fenceq_sample_call;
WITH {{clock}}
INSERT INTO temp.fenceq_sample_call (now, last_closed, oldest_kept)
SELECT c.now, c.stop - 60000000, c.stop - coalesce(:keep, 691200000000) / 60000000 * 60000000
  FROM (SELECT clock.now,
               {{activity_end(clock.now)}} AS stop
          FROM clock) AS c
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Each queue's minutes to write: first to last.
CREATE TEMP TABLE IF NOT EXISTS fenceq_sample_queue (
    queue TEXT PRIMARY KEY, first INTEGER NOT NULL, last INTEGER NOT NULL);
DELETE FROM temp.fenceq_sample_queue;
INSERT INTO temp.fenceq_sample_queue (queue, first, last)
SELECT s.queue, s.first, min(s.first + (coalesce(:max_minutes, 60) - 1) * 60000000, c.last_closed)
  FROM temp.fenceq_sample_call AS c
  JOIN (SELECT q.queue,
               max(coalesce((SELECT max(a.minute) FROM fenceq__activity AS a WHERE a.queue = q.queue) + 60000000,
                            c.last_closed),
                   c.oldest_kept) AS first
          FROM temp.fenceq_sample_call AS c JOIN fenceq__queues AS q) AS s
 WHERE s.first <= c.last_closed;
CREATE TEMP TABLE IF NOT EXISTS fenceq_sample_minute (
    queue TEXT NOT NULL, minute INTEGER NOT NULL, PRIMARY KEY (queue, minute));
DELETE FROM temp.fenceq_sample_minute;
WITH RECURSIVE minutes(queue, minute, last) AS (
    SELECT s.queue, s.first, s.last FROM temp.fenceq_sample_queue AS s
    UNION ALL
    SELECT m.queue, m.minute + 60000000, m.last FROM minutes AS m WHERE m.minute < m.last)
INSERT INTO temp.fenceq_sample_minute (queue, minute)
SELECT m.queue, m.minute FROM minutes AS m;
-- The one set of jobs read: every job that did anything in a queue's
-- minutes is live or finished since its first minute.
CREATE TEMP TABLE IF NOT EXISTS fenceq_sample_job (
    seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL, queue TEXT NOT NULL, status TEXT NOT NULL,
    generation INTEGER NOT NULL, run_at INTEGER NOT NULL, created_at INTEGER NOT NULL, finished_at INTEGER,
    call_claims TEXT);
DELETE FROM temp.fenceq_sample_job;
INSERT INTO temp.fenceq_sample_job (seq, job_id, queue, status, generation, run_at, created_at, finished_at,
                                    call_claims)
SELECT j.seq, j.job_id, j.queue, j.status, j.generation, j.run_at, j.created_at, j.finished_at, j.call_claims
  FROM temp.fenceq_sample_queue AS s
 CROSS JOIN fenceq__jobs AS j INDEXED BY fenceq__jobs_pending_idx
 WHERE j.queue = s.queue AND j.status = 'pending'
UNION ALL
SELECT j.seq, j.job_id, j.queue, j.status, j.generation, j.run_at, j.created_at, j.finished_at, j.call_claims
  FROM temp.fenceq_sample_queue AS s
 CROSS JOIN fenceq__jobs AS j INDEXED BY fenceq__jobs_claimed_idx
 WHERE j.queue = s.queue AND j.status = 'claimed'
UNION ALL
SELECT j.seq, j.job_id, j.queue, j.status, j.generation, j.run_at, j.created_at, j.finished_at, j.call_claims
  FROM fenceq__jobs AS j INDEXED BY fenceq__jobs_finished_idx
  JOIN temp.fenceq_sample_queue AS s ON s.queue = j.queue AND j.finished_at >= s.first
 WHERE j.finished_at IS NOT NULL AND j.finished_at >= (SELECT min(f.first) FROM temp.fenceq_sample_queue AS f);
-- Every claim of the set's jobs: per-token ones from the ledger, those of
-- claim_jobs calls from call_claims.
CREATE TEMP TABLE IF NOT EXISTS fenceq_sample_claim (
    seq INTEGER NOT NULL, generation INTEGER NOT NULL, claimed_at INTEGER NOT NULL);
DELETE FROM temp.fenceq_sample_claim;
INSERT INTO temp.fenceq_sample_claim (seq, generation, claimed_at)
SELECT j.seq, c.generation, c.claimed_at
  FROM temp.fenceq_sample_job AS j JOIN fenceq__claims AS c ON c.job_id = j.job_id
UNION ALL
SELECT j.seq, a.value ->> 'generation', a.value ->> 'claimed_at'
  FROM temp.fenceq_sample_job AS j JOIN json_each(j.call_claims) AS a;
-- What happened, per queue and minute: one row per event of the set.
CREATE TEMP TABLE IF NOT EXISTS fenceq_sample_count (
    queue TEXT NOT NULL, minute INTEGER NOT NULL, submitted INTEGER NOT NULL, claimed INTEGER NOT NULL,
    retried INTEGER NOT NULL, completed INTEGER NOT NULL, failed INTEGER NOT NULL, cancelled INTEGER NOT NULL,
    expired INTEGER NOT NULL, PRIMARY KEY (queue, minute));
DELETE FROM temp.fenceq_sample_count;
INSERT INTO temp.fenceq_sample_count (queue, minute, submitted, claimed, retried, completed, failed, cancelled,
                                      expired)
SELECT e.queue, e.minute, sum(e.submitted), sum(e.claimed), sum(e.retried), sum(e.completed), sum(e.failed),
       sum(e.cancelled), sum(e.expired)
  FROM (SELECT j.queue, {{floor_to(j.created_at, 60000000)}} AS minute,
               1 AS submitted, 0 AS claimed, 0 AS retried, 0 AS completed, 0 AS failed, 0 AS cancelled,
               0 AS expired
          FROM temp.fenceq_sample_job AS j
        UNION ALL
        SELECT j.queue,
               {{floor_to(c.claimed_at, 60000000)}},
               0, 1, c.generation > 1, 0, 0, 0, 0
          FROM temp.fenceq_sample_job AS j JOIN temp.fenceq_sample_claim AS c ON c.seq = j.seq
        UNION ALL
        SELECT j.queue,
               {{floor_to(j.finished_at, 60000000)}},
               0, 0, 0, j.status = 'completed', j.status = 'failed', j.status = 'cancelled', j.status = 'expired'
          FROM temp.fenceq_sample_job AS j
         WHERE j.finished_at IS NOT NULL) AS e
  JOIN temp.fenceq_sample_minute AS m ON m.queue = e.queue AND m.minute = e.minute
 GROUP BY e.queue, e.minute;
-- The histograms: the jobs completed or failed in a minute, by the final
-- claim (the one of the job's generation).
CREATE TEMP TABLE IF NOT EXISTS fenceq_sample_hist (
    queue TEXT NOT NULL, minute INTEGER NOT NULL, kind TEXT NOT NULL, k INTEGER NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (queue, minute, kind, k));
DELETE FROM temp.fenceq_sample_hist;
INSERT INTO temp.fenceq_sample_hist (queue, minute, kind, k, n)
SELECT d.queue, d.minute, d.kind, d.k, count(*)
  FROM (SELECT j.queue,
               {{floor_to(j.finished_at, 60000000)}} AS minute,
               'wait' AS kind,
               {{duration_bucket(c.claimed_at - j.run_at)}} AS k
          FROM temp.fenceq_sample_job AS j
          JOIN temp.fenceq_sample_claim AS c ON c.seq = j.seq AND c.generation = j.generation
         WHERE j.status IN ('completed', 'failed')
        UNION ALL
        SELECT j.queue, {{floor_to(j.finished_at, 60000000)}}, 'run',
               {{duration_bucket(j.finished_at - c.claimed_at)}}
          FROM temp.fenceq_sample_job AS j
          JOIN temp.fenceq_sample_claim AS c ON c.seq = j.seq AND c.generation = j.generation
         WHERE j.status IN ('completed', 'failed')) AS d
  JOIN temp.fenceq_sample_minute AS m ON m.queue = d.queue AND m.minute = d.minute
 GROUP BY d.queue, d.minute, d.kind, d.k;
-- The rows, each written once: a minute another sampler wrote is left as it is.
INSERT INTO fenceq__activity (queue, minute, submitted, claimed, retried, completed, failed, cancelled, expired,
                              pending, due, running, wait_hist, run_hist)
SELECT m.queue, m.minute, coalesce(n.submitted, 0), coalesce(n.claimed, 0), coalesce(n.retried, 0),
       coalesce(n.completed, 0), coalesce(n.failed, 0), coalesce(n.cancelled, 0), coalesce(n.expired, 0),
       CASE WHEN m.minute = c.last_closed
            THEN (SELECT count(*) FROM fenceq__jobs AS j INDEXED BY fenceq__jobs_pending_idx
                   WHERE j.queue = m.queue AND j.status = 'pending') END,
       CASE WHEN m.minute = c.last_closed
            THEN (SELECT count(*) FROM fenceq__jobs AS j INDEXED BY fenceq__jobs_pending_idx
                   WHERE j.queue = m.queue AND j.status = 'pending' AND j.run_at <= c.now) END,
       CASE WHEN m.minute = c.last_closed
            THEN (SELECT count(*) FROM fenceq__jobs AS j INDEXED BY fenceq__jobs_claimed_idx
                   WHERE j.queue = m.queue AND j.status = 'claimed') END,
       {{histogram(m, 'wait')}},
       {{histogram(m, 'run')}}
  FROM temp.fenceq_sample_call AS c
  JOIN temp.fenceq_sample_minute AS m
  LEFT JOIN temp.fenceq_sample_count AS n ON n.queue = m.queue AND n.minute = m.minute
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
    ON CONFLICT DO NOTHING;
UPDATE temp.fenceq_sample_call SET written = changes();
-- Retention, per queue through the primary key.
DELETE FROM fenceq__activity
 WHERE queue IN (SELECT q.queue FROM fenceq__queues AS q)
   AND minute < (SELECT c.oldest_kept FROM temp.fenceq_sample_call AS c)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT c.written FROM temp.fenceq_sample_call AS c) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
