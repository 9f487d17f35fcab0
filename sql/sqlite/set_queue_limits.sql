-- fenceq for SQLite: set_queue_limits -- set a queue's concurrency and rate limits.
-- Generated from templates/set_queue_limits.sql by scripts/gen-sqlite: edit the template.
--
-- All four at once; NULL means no such limit, all NULL removes them.
-- max_claimed: at most this many of the queue's jobs claimed at once;
-- max_claimed_per_key: at most this many claimed per concurrency_key (jobs
-- without a key are not counted); rate_limit per rate_period: at most this
-- many successful claims in any window of that length. Claims then take
-- fewer jobs, possibly none, rather than exceed a limit. QF101 for an
-- unknown queue; QF104 for a limit that is not a positive integer; QF100
-- when rate_limit and rate_period are not given together.
--
-- Parameters: :queue TEXT; :max_claimed, :max_claimed_per_key, :rate_limit
-- INTEGER or NULL; :rate_period INTEGER microseconds or NULL.
-- Result: one row (sqlstate, message, detail, value NULL).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that claimers need no lock of their own to
-- count against the limits: BEGIN IMMEDIATE already serialises them.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                AND instr(CAST(:queue AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF104', 'fenceq: a limit must be a positive integer or NULL'
     WHERE NOT ((:max_claimed IS NULL
                 OR (typeof(:max_claimed) = 'integer' AND :max_claimed BETWEEN 1 AND 2147483647))
                AND (:max_claimed_per_key IS NULL
                     OR (typeof(:max_claimed_per_key) = 'integer' AND :max_claimed_per_key BETWEEN 1 AND 2147483647))
                AND (:rate_limit IS NULL
                     OR (typeof(:rate_limit) = 'integer' AND :rate_limit BETWEEN 1 AND 2147483647)))
    UNION ALL SELECT 3, 'QF100', 'fenceq: rate_limit and rate_period go together'
     WHERE (:rate_limit IS NULL) <> (:rate_period IS NULL)
    UNION ALL SELECT 4, 'QF105', 'fenceq: rate_period must be positive'
     WHERE NOT (:rate_period IS NULL
                OR (typeof(:rate_period) = 'integer' AND :rate_period > 0))
    UNION ALL SELECT 5, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
UPDATE fenceq__queues
   SET max_claimed = :max_claimed, max_claimed_per_key = :max_claimed_per_key,
       rate_limit = :rate_limit, rate_period = :rate_period
 WHERE queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
DELETE FROM fenceq__rate_window
 WHERE queue = :queue AND :rate_limit IS NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail, NULL AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
