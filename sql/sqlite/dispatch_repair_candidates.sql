-- fenceq for SQLite: dispatch_repair_candidates -- a page of a backend's lapsed dispatches to reconcile.
-- Generated from templates/dispatch_repair_candidates.sql by scripts/gen-sqlite: edit the template.
--
-- The live dispatches of backend whose claim lapsed (lease_expires_at <=
-- now), reserved or running: never checked first (by when the claim
-- lapsed), then the oldest check, then job id; at most max_rows (1 to
-- 100,000). Each returned row is marked checked now (never moved back), so
-- the next call pages onward; ref is the reservation ref while reserved,
-- the execution ref once running (what adopt_dispatch expects). QF102 for a
-- bad backend (1 to 255 characters), QF104 for max_rows out of range.
--
-- Parameters: :backend TEXT; :max_rows INTEGER or NULL (100).
-- Result: zero or more rows (sqlstate, message, detail, then job_id,
-- queue, task, state, ref, generation, lapsed_at, checked_at: the mark
-- this call set; times as UTC text), or one error row.
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that callers take turns on the write lock
-- instead of skipping each other's rows (SKIP LOCKED): two callers never
-- get the same page at once.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT substr(c.error, 1, 5), substr(c.error, 7)
  FROM (SELECT CASE
               WHEN NOT (typeof(:backend) = 'text' AND length(:backend) BETWEEN 1 AND 255
                         AND instr(CAST(:backend AS BLOB), x'00') = 0)
                    THEN 'QF102 fenceq: backend must be 1 to 255 characters'
               WHEN NOT (:max_rows IS NULL
                         OR (typeof(:max_rows) = 'integer' AND :max_rows BETWEEN 1 AND 100000))
                    THEN 'QF104 fenceq: max_rows must be an integer from 1 to 100000'
               END AS error) AS c
 WHERE c.error IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- The page, in its order (ord is assigned in insertion order), with the
-- clock reading.
CREATE TEMP TABLE IF NOT EXISTS fenceq_candidates (
    ord INTEGER PRIMARY KEY, job_id TEXT NOT NULL, now INTEGER NOT NULL);
DELETE FROM temp.fenceq_candidates;
WITH clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO temp.fenceq_candidates (job_id, now)
SELECT d.job_id, clock.now
  FROM clock
  JOIN fenceq__jobs AS j ON j.status = 'claimed' AND j.lease_expires_at <= clock.now
  JOIN fenceq__dispatches AS d ON d.job_id = j.job_id AND d.generation = j.generation
 WHERE d.backend = :backend AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY d.checked_at IS NOT NULL, coalesce(d.checked_at, j.lease_expires_at), d.job_id
 LIMIT CASE WHEN typeof(:max_rows) = 'integer' THEN :max_rows
            ELSE 100 END;
UPDATE fenceq__dispatches
   SET checked_at = max(coalesce(fenceq__dispatches.checked_at, c.now), c.now)
  FROM temp.fenceq_candidates AS c
 WHERE fenceq__dispatches.job_id = c.job_id;
SELECT sqlstate, message, detail, job_id, queue, task, state, ref, generation, lapsed_at, checked_at
  FROM (
    SELECT 0 AS ord, e.sqlstate, e.message, e.detail, NULL AS job_id, NULL AS queue, NULL AS task,
           NULL AS state, NULL AS ref, NULL AS generation, NULL AS lapsed_at, NULL AS checked_at
      FROM temp.fenceq_error AS e
    UNION ALL
    SELECT c.ord, NULL, NULL, NULL, j.job_id, j.queue, j.task, d.state,
           CASE d.state WHEN 'reserved' THEN d.reservation_ref ELSE d.execution_ref END,
           d.generation,
           strftime('%Y-%m-%dT%H:%M:%S', j.lease_expires_at / 1000000 - (j.lease_expires_at % 1000000 < 0),
                    'unixepoch')
           || printf('.%06dZ', (j.lease_expires_at % 1000000 + 1000000) % 1000000),
           strftime('%Y-%m-%dT%H:%M:%S', d.checked_at / 1000000 - (d.checked_at % 1000000 < 0),
                    'unixepoch')
           || printf('.%06dZ', (d.checked_at % 1000000 + 1000000) % 1000000)
      FROM temp.fenceq_candidates AS c
      JOIN fenceq__jobs AS j ON j.job_id = c.job_id
      JOIN fenceq__dispatches AS d ON d.job_id = c.job_id
     WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error))
 ORDER BY ord;
