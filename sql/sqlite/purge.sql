-- fenceq for SQLite: purge -- delete old terminal jobs.
-- Generated from templates/purge.sql by scripts/gen-sqlite: edit the template.
--
-- Deletes terminal jobs finished before now - older_than, oldest first, at
-- most max_rows, with their checkpoints, claim ledger rows, dependency
-- edges, handled dead letters, dispatch records and events; the ledger row
-- of a claim_jobs call goes once none of the call's jobs is left (until
-- then its nonce stays spent). Jobs with a
-- dead letter that is neither replayed nor discarded are kept. Per queue
-- with a history retention, events older than it go too (at most max_rows
-- of them). Submission identities outlive the purge unless
-- submissions_older_than is given: then identities older than that whose
-- jobs are gone are forgotten too. Returns the number of jobs deleted.
--
-- Parameters: :older_than INTEGER microseconds (>= 0); :max_rows INTEGER
-- or NULL (10000); :submissions_older_than INTEGER microseconds or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that the cutoffs are inclusive
-- (finished_at <= now - older_than, at <= now - retention): the clock counts milliseconds, so a
-- job finished earlier in the same millisecond is not kept. Purges take
-- turns on the write lock, so a call's ledger row always goes with the
-- last of its jobs (PostgreSQL's concurrent purges of two jobs of one
-- call may leave it); the call's nonces are read from the jobs' JSON
-- call_claims.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_purge (job_id TEXT PRIMARY KEY);
DELETE FROM temp.fenceq_purge;
-- The nonces of the claim_jobs calls that claimed a purged job.
CREATE TEMP TABLE IF NOT EXISTS fenceq_purge_call (claim_nonce TEXT PRIMARY KEY);
DELETE FROM temp.fenceq_purge_call;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF105' AS sqlstate,
           'fenceq: older_than is required and must not be negative' AS message
     WHERE :older_than IS NULL OR NOT (:older_than IS NULL
                                       OR (typeof(:older_than) = 'integer' AND :older_than >= 0))
    UNION ALL SELECT 2, 'QF105', 'fenceq: submissions_older_than must not be negative'
     WHERE NOT (:submissions_older_than IS NULL
                OR (typeof(:submissions_older_than) = 'integer' AND :submissions_older_than >= 0))
    UNION ALL SELECT 3, 'QF104', 'fenceq: max_rows must be a positive integer'
     WHERE NOT (:max_rows IS NULL
                OR (typeof(:max_rows) = 'integer' AND :max_rows BETWEEN 1 AND 2147483647))
) ORDER BY rank LIMIT 1;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_purge (job_id)
SELECT j.job_id
  FROM clock JOIN fenceq__jobs AS j ON j.finished_at <= clock.now - :older_than
 WHERE j.status IN ('completed', 'failed', 'cancelled', 'expired')
   AND NOT EXISTS (SELECT 1 FROM fenceq__dead_letters AS d
                    WHERE d.job_id = j.job_id AND d.replayed_at IS NULL AND d.discarded_at IS NULL)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY j.finished_at, j.seq
 LIMIT CASE WHEN typeof(:max_rows) = 'integer' THEN :max_rows
            ELSE 10000 END;
INSERT OR IGNORE INTO temp.fenceq_purge_call (claim_nonce)
SELECT a.value ->> 'claim_nonce'
  FROM temp.fenceq_purge AS p JOIN fenceq__jobs AS j ON j.job_id = p.job_id
  JOIN json_each(j.call_claims) AS a
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__checkpoints
 WHERE job_id IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__claims
 WHERE job_id IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__dead_letters
 WHERE job_id IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__dispatches
 WHERE job_id IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__events
 WHERE job_id IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Retention: each queue's oldest events first, through its (queue, at) index.
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
DELETE FROM fenceq__events
 WHERE seq IN (
       SELECT e.seq
         FROM clock JOIN fenceq__queues AS q
         JOIN fenceq__events AS e ON e.queue = q.queue AND e.at <= clock.now - q.history_retention
        WHERE q.history_retention IS NOT NULL
        LIMIT CASE WHEN typeof(:max_rows) = 'integer' THEN :max_rows
                   ELSE 10000 END)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- A purged job's dependency edges go with it: each is satisfied, or its
-- dependent was cancelled, once the job is terminal.
DELETE FROM fenceq__dependencies
 WHERE depends_on IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__dependencies
 WHERE job_id IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__jobs
 WHERE job_id IN (SELECT job_id FROM temp.fenceq_purge) AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- A call's ledger row, once none of its jobs exists (by primary key, then
-- each of its jobs by job_id).
DELETE FROM fenceq__claims
 WHERE claim_token IN (SELECT p.claim_nonce FROM temp.fenceq_purge_call AS p)
   AND job_id IS NULL
   AND NOT EXISTS (SELECT 1 FROM json_each(fenceq__claims.job_ids) AS m JOIN fenceq__jobs AS j ON j.job_id = m.value)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__submissions
 WHERE :submissions_older_than IS NOT NULL
   AND created_at <= (SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
                     - :submissions_older_than
   AND NOT EXISTS (SELECT 1 FROM fenceq__jobs AS j WHERE j.job_id = fenceq__submissions.job_id)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_purge) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
