-- fenceq for SQLite: finalize_dispatch -- record the external system's id of a reserved dispatch.
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
{{error_table}}
{{fence_check}}
{{first_failing(
    {{name_check(reservation_ref, 1024)}}
    {{name_check(execution_ref, 1024)}})}}
{{fence_decision}}
{{live_dispatch}}
UPDATE fenceq__dispatches
   SET state = 'running', execution_ref = :execution_ref, finalized_at = f.now
  FROM temp.fenceq_fence AS f JOIN temp.fenceq_dispatch AS d
 WHERE fenceq__dispatches.job_id = :job_id AND d.state = 'reserved' AND d.reservation_ref = :reservation_ref
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{dispatch_event(
    dispatch_finalized,
    d.state = 'reserved' AND d.reservation_ref = :reservation_ref,
    json_object('backend', d.backend, 'execution_ref', :execution_ref, 'reservation_ref', :reservation_ref))}}
{{fence_answer(
    EXISTS (SELECT 1 FROM temp.fenceq_dispatch AS d
             WHERE d.reservation_ref = :reservation_ref
               AND (d.state = 'reserved' OR d.execution_ref = :execution_ref)))}}
