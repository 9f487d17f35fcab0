-- fenceq for SQLite: replace_dispatch_ref -- the external system moved the work to another id.
--
-- True when the fence is live, its live dispatch is running and its
-- execution ref was expected_ref (it is now execution_ref), or already is
-- execution_ref (a retried call: nothing written). False otherwise. A
-- requested cancel does not refuse. QF106 for a malformed fence, then
-- QF102 for a bad ref (1 to 255 characters). Event dispatch_replaced when
-- written.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :expected_ref TEXT;
-- :execution_ref TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
{{error_table}}
{{fence_check}}
{{first_failing(
    {{name_check(expected_ref, 1024)}}
    {{name_check(execution_ref, 1024)}})}}
{{fence_decision}}
{{live_dispatch}}
UPDATE fenceq__dispatches
   SET execution_ref = :execution_ref
  FROM temp.fenceq_dispatch AS d
 WHERE fenceq__dispatches.job_id = :job_id AND d.state = 'running' AND d.execution_ref = :expected_ref
   AND d.execution_ref <> :execution_ref AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{dispatch_event(
    dispatch_replaced,
    d.state = 'running' AND d.execution_ref = :expected_ref AND d.execution_ref <> :execution_ref,
    json_object('backend', d.backend, 'execution_ref', :execution_ref, 'expected_ref', :expected_ref))}}
{{fence_answer(
    EXISTS (SELECT 1 FROM temp.fenceq_dispatch AS d
             WHERE d.state = 'running' AND d.execution_ref IN (:expected_ref, :execution_ref)))}}
