-- fenceq for SQLite: release_lock -- end a live hold of a named lock at once.
-- Generated from templates/release_lock.sql by scripts/gen-sqlite: edit the template.
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
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: lock must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:lock) = 'text' AND length(:lock) BETWEEN 1 AND 255
                AND instr(CAST(:lock AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF102', 'fenceq: owner_id must be 1 to 255 characters'
     WHERE NOT (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
    UNION ALL SELECT 3, 'QF104', 'fenceq: token must be a positive integer'
     WHERE NOT (typeof(:token) = 'integer' AND :token >= 1)
) ORDER BY rank LIMIT 1;
CREATE TEMP TABLE IF NOT EXISTS fenceq_lock_hold (now INTEGER NOT NULL, live INTEGER NOT NULL);
DELETE FROM temp.fenceq_lock_hold;
INSERT INTO temp.fenceq_lock_hold (now, live)
SELECT c.now, coalesce(l.owner_id = :owner_id AND l.token = :token AND l.expires_at > c.now, 0)
  FROM (SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000 AS now) AS c
  LEFT JOIN fenceq__locks AS l ON l.lock = :lock
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__locks SET owner_id = NULL, expires_at = NULL
  FROM temp.fenceq_lock_hold AS h
 WHERE fenceq__locks.lock = :lock AND h.live AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT h.live FROM temp.fenceq_lock_hold AS h) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
