-- fenceq for SQLite: finalize_dispatch -- record the external system's id of a reserved dispatch.
-- Generated from templates/finalize_dispatch.sql by scripts/gen-sqlite: edit the template.
--
-- True when the claim's live dispatch was reserved under reservation_ref:
-- it is now running as execution_ref. True again, with nothing written,
-- when it is running under that ref with exactly this execution_ref (a
-- retried call). False for a stale, expired or terminal fence, without a
-- live dispatch, under another reservation ref, or when it is running with
-- another execution ref (use replace_dispatch_ref). A requested cancel does
-- not refuse: the external call was made. QF106 for a malformed fence,
-- then QF102 for a bad ref (1 to 1,024 characters). Event dispatch_finalized
-- when written.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :reservation_ref TEXT;
-- :execution_ref TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
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
SELECT substr(c.error, 1, 5), substr(c.error, 7)
  FROM (SELECT CASE
               WHEN NOT (typeof(:reservation_ref) = 'text' AND length(:reservation_ref) BETWEEN 1 AND 1024
                         AND instr(CAST(:reservation_ref AS BLOB), x'00') = 0)
                    THEN 'QF102 fenceq: reservation_ref must be 1 to 1024 characters'
               WHEN NOT (typeof(:execution_ref) = 'text' AND length(:execution_ref) BETWEEN 1 AND 1024
                         AND instr(CAST(:execution_ref AS BLOB), x'00') = 0)
                    THEN 'QF102 fenceq: execution_ref must be 1 to 1024 characters'
               END AS error) AS c
 WHERE c.error IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
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
CREATE TEMP TABLE IF NOT EXISTS fenceq_dispatch (
    backend TEXT NOT NULL, state TEXT NOT NULL, reservation_ref TEXT NOT NULL, execution_ref TEXT);
DELETE FROM temp.fenceq_dispatch;
INSERT INTO temp.fenceq_dispatch (backend, state, reservation_ref, execution_ref)
SELECT d.backend, d.state, d.reservation_ref, d.execution_ref
  FROM temp.fenceq_fence AS f
  JOIN fenceq__dispatches AS d ON d.job_id = :job_id AND d.generation = :generation
 WHERE f.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__dispatches
   SET state = 'running', execution_ref = :execution_ref, finalized_at = f.now
  FROM temp.fenceq_fence AS f JOIN temp.fenceq_dispatch AS d
 WHERE fenceq__dispatches.job_id = :job_id AND d.state = 'reserved' AND d.reservation_ref = :reservation_ref
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__events (job_id, queue, event, generation, owner_id, detail, at)
SELECT j.job_id, j.queue, 'dispatch_finalized', :generation, :owner_id,
       json_object('backend', d.backend, 'execution_ref', :execution_ref, 'reservation_ref', :reservation_ref),
       f.now
  FROM temp.fenceq_fence AS f JOIN temp.fenceq_dispatch AS d JOIN fenceq__jobs AS j ON j.seq = f.seq
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE q.history
   AND d.state = 'reserved' AND d.reservation_ref = :reservation_ref
       AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL
            THEN (SELECT EXISTS (SELECT 1 FROM temp.fenceq_dispatch AS d
                                  WHERE d.reservation_ref = :reservation_ref
                                    AND (d.state = 'reserved' OR d.execution_ref = :execution_ref))
                    FROM temp.fenceq_fence AS f) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
