-- fenceq for SQLite: renew_lock -- extend a live hold of a named lock to now + ttl.
--
-- True while this owner holds the lock live with this token; false,
-- changing nothing, once the hold lapsed (also when nobody took the lock
-- since: take it again with acquire_lock for a new token), after a
-- release, or for another owner or token. QF102 for a bad lock or
-- owner_id, QF104 for a token below 1; QF100 without a ttl, QF105 for one
-- that is not positive or ends after year 9999.
--
-- Parameters: :lock TEXT (1 to 255 characters), :owner_id TEXT (1 to 255
-- characters), :token INTEGER (>= 1), :ttl INTEGER microseconds.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that it waits for the transactions in which
-- check_lock answered (every writer waits for the one before it), where
-- PostgreSQL's renew_lock does not.
{{error_table}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{lock_name_check}}
    {{owner_id_check(2)}}
    {{lock_token_check(3)}}
    {{ttl_checks(4)}}
) ORDER BY rank LIMIT 1;
{{lock_hold_decision}}
{{ttl_bound_check(temp.fenceq_lock_hold)}}
UPDATE fenceq__locks SET expires_at = h.now + :ttl
  FROM temp.fenceq_lock_hold AS h
 WHERE fenceq__locks.lock = :lock AND h.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{lock_hold_answer}}
