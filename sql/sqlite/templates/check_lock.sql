-- fenceq for SQLite: check_lock -- whether a fencing token is the live holder's.
--
-- True while :token is the token of a live hold of :lock; false for an
-- unknown lock, a released or lapsed hold, or a stale token. Changes
-- nothing. QF102 for a bad lock, QF104 for a token below 1.
--
-- To fence your own writes (to your tables in this database file), run it
-- on your connection as the first statement of the write transaction that
-- makes them, after BEGIN IMMEDIATE, and commit them only when it answers
-- true. That transaction holds the file's write lock from BEGIN IMMEDIATE
-- to its end, so no acquire_lock (a writer too) can run in between: no
-- owner takes the lock, and no larger token exists, before your writes
-- commit or roll back. The Python client runs it this way with
-- fenceq.locks.check_lock_in_transaction(connection, lock, token). Through
-- the client's own check_lock, or in a deferred transaction, its answer is
-- only a snapshot.
--
-- Parameters: :lock TEXT (1 to 255 characters), :token INTEGER (>= 1).
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: first in the BEGIN IMMEDIATE whose writes it fences, or in a deferred BEGIN.
--
-- Differs from PostgreSQL in that it locks no row itself: the caller's
-- write transaction holds the whole file, which also keeps renew_lock and
-- release_lock waiting (PostgreSQL's check_lock holds only acquire_lock
-- back), and a check in a read-only transaction holds nothing back.
WITH {{clock}}
SELECT e.sqlstate, e.message, NULL AS detail,
       CASE WHEN e.sqlstate IS NULL
            THEN coalesce((SELECT l.token = :token AND l.expires_at > c.now
                             FROM fenceq__locks AS l, clock AS c WHERE l.lock = :lock), 0) END AS value
  FROM (SELECT 1)
  LEFT JOIN (SELECT c.sqlstate, c.message FROM (
                 {{lock_name_check}}
                 {{lock_token_check(2)}}
             ) AS c ORDER BY c.rank LIMIT 1) AS e;
