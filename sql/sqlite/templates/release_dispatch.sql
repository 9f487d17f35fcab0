-- fenceq for SQLite: release_dispatch -- drop a reservation whose external call was never made.
--
-- True when the fence is live and its live dispatch is reserved under
-- reservation_ref: the record is deleted, the claim stays live and may
-- reserve again. False otherwise, in particular while the dispatch is
-- running (settle the job instead). A requested cancel does not refuse.
-- QF106 for a malformed fence, then QF102 for a bad ref (1 to 1,024
-- characters). Event dispatch_released when deleted.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :reservation_ref TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
{{error_table}}
{{fence_check}}
{{first_failing(
    {{name_check(reservation_ref, 1024)}})}}
{{fence_decision}}
{{live_dispatch}}
DELETE FROM fenceq__dispatches
 WHERE job_id = :job_id
   AND EXISTS (SELECT 1 FROM temp.fenceq_dispatch AS d
                WHERE d.state = 'reserved' AND d.reservation_ref = :reservation_ref)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{dispatch_event(
    dispatch_released,
    d.state = 'reserved' AND d.reservation_ref = :reservation_ref,
    json_object('backend', d.backend, 'reservation_ref', :reservation_ref))}}
{{fence_answer(
    EXISTS (SELECT 1 FROM temp.fenceq_dispatch AS d
             WHERE d.state = 'reserved' AND d.reservation_ref = :reservation_ref))}}
