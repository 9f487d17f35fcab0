-- fenceq for SQLite: release_lock -- end a live hold of a named lock at once.
--
-- True when this owner held the lock live with this token: the lock is
-- free, and keeps its row and token, so that the next acquire answers a
-- larger one. False, changing nothing, for a lapsed hold, a second
-- release, or another owner or token. QF102 for a bad lock or owner_id,
-- QF104 for a token below 1.
--
-- Parameters: :lock TEXT (1 to 255 characters), :owner_id TEXT (1 to 255
-- characters), :token INTEGER (>= 1).
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that it waits for the transactions in which
-- check_lock answered (every writer waits for the one before it), where
-- PostgreSQL's release_lock does not.
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{lock_name_check}}
    {{owner_id_check(2)}}
    {{lock_token_check(3)}}
) ORDER BY rank LIMIT 1;
{{lock_hold_decision}}
UPDATE fenceq__locks SET owner_id = NULL, expires_at = NULL
  FROM temp.fenceq_lock_hold AS h
 WHERE fenceq__locks.lock = :lock AND h.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{lock_hold_answer}}
