-- fenceq for SQLite: release -- hand a live claim back to pending.
-- Generated from templates/release.sql by scripts/gen-sqlite: edit the template.
--
-- Graceful shutdown or snooze: the job is pending again at run_at (default
-- now), and the claim does not count as an attempt. False for a stale,
-- expired, terminal or cancel-requested fence, and while the claim has a
-- live dispatch, reserved or running (release_dispatch it first, or settle
-- the job: its work may be in flight elsewhere). Event released.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :run_at UTC TEXT
-- 'YYYY-MM-DDTHH:MM:SS.ffffffZ' or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_jobs notification is sent.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF106', 'fenceq: the fence is malformed'
 WHERE NOT ((typeof(:job_id) = 'text' AND length(:job_id) BETWEEN 1 AND 36
             AND instr(CAST(:job_id AS BLOB), x'00') = 0)
            AND (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                 AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
            AND (typeof(:claim_token) = 'text' AND length(:claim_token) BETWEEN 1 AND 255
                 AND instr(CAST(:claim_token AS BLOB), x'00') = 0)
            AND typeof(:generation) = 'integer' AND :generation >= 1);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF105', 'fenceq: run_at must be UTC text within years 0001-9999'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT (:run_at IS NULL
            OR (typeof(:run_at) = 'text' AND length(:run_at) = 27
                AND :run_at GLOB ('[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'
                                || 'T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                                || '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
                AND substr(:run_at, 1, 4) <> '0000'
                AND strftime('%Y-%m-%dT%H:%M:%S', unixepoch(substr(:run_at, 1, 19)), 'unixepoch')
                    = substr(:run_at, 1, 19)));
CREATE TEMP TABLE IF NOT EXISTS fenceq_fence (
    seq INTEGER, now INTEGER NOT NULL, live INTEGER NOT NULL, cancel_requested INTEGER);
DELETE FROM temp.fenceq_fence;
-- The decision: the clock is read here, after BEGIN IMMEDIATE took the
-- write lock, and the same reading is used for the write below.
INSERT INTO temp.fenceq_fence (seq, now, live, cancel_requested)
SELECT j.seq, c.now,
       coalesce(j.status = 'claimed' AND j.owner_id = :owner_id AND j.generation = :generation
                AND j.claim_token = :claim_token AND j.lease_expires_at
                    > c.now, 0),
       j.cancel_requested
  FROM (SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000 AS now) AS c
  LEFT JOIN fenceq__jobs AS j ON j.job_id = :job_id
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Whether the fence may release: live, no cancel requested, no live dispatch.
CREATE TEMP TABLE IF NOT EXISTS fenceq_release (released INTEGER NOT NULL);
DELETE FROM temp.fenceq_release;
INSERT INTO temp.fenceq_release (released)
SELECT f.live AND NOT f.cancel_requested
       AND NOT EXISTS (SELECT 1 FROM fenceq__dispatches AS d
                        WHERE d.job_id = :job_id AND d.generation = :generation)
  FROM temp.fenceq_fence AS f;
UPDATE fenceq__jobs
   SET status = 'pending', attempts = attempts - 1,
       run_at = coalesce((unixepoch(substr(:run_at, 1, 19)) * 1000000
                          + CAST(substr(:run_at, 21, 6) AS INTEGER)), f.now),
       -- Released for later: waits apart (version 5).
       scheduled = coalesce((unixepoch(substr(:run_at, 1, 19)) * 1000000
                             + CAST(substr(:run_at, 21, 6) AS INTEGER)), f.now) > f.now,
       owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
       budget_expires_at = NULL, pid = NULL
  FROM temp.fenceq_fence AS f JOIN temp.fenceq_release AS r
 WHERE fenceq__jobs.seq = f.seq AND r.released
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'released', :generation, :owner_id,
       json_object('run_at', strftime('%Y-%m-%dT%H:%M:%S', j.run_at / 1000000 - (j.run_at % 1000000 < 0),
                                      'unixepoch')
                             || printf('.%06dZ', (j.run_at % 1000000 + 1000000) % 1000000)),
       f.now
  FROM temp.fenceq_fence AS f JOIN temp.fenceq_release AS r JOIN fenceq__jobs AS j ON j.seq = f.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND r.released AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT (SELECT r.released FROM temp.fenceq_release AS r)
                    FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
