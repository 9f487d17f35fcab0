-- fenceq for SQLite: release -- hand a live claim back to pending.
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
{{error_table}}
{{fence_check}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF105', 'fenceq: run_at must be UTC text within years 0001-9999'
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
   AND NOT {{optional_utc_text(:run_at)}};
{{fence_decision}}
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
       run_at = coalesce({{utc_text_micros(:run_at)}}, f.now),
       -- Released for later: waits apart (version 5).
       scheduled = coalesce({{utc_text_micros(:run_at)}}, f.now) > f.now,
       {{cleared_claim}}
  FROM temp.fenceq_fence AS f JOIN temp.fenceq_release AS r
 WHERE fenceq__jobs.seq = f.seq AND r.released
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{history_event(
    temp.fenceq_fence AS f JOIN temp.fenceq_release AS r JOIN fenceq__jobs AS j ON j.seq = f.seq,
    r.released AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'released', {{by(:generation, :owner_id)}},
    json_object('run_at', {{micros_utc_text(j.run_at)}}),
    f.now)}}
{{fence_answer(
    (SELECT r.released FROM temp.fenceq_release AS r))}}
