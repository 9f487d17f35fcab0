-- fenceq for SQLite: acquire_lock -- take a named lock, or renew it for its live holder.
-- Generated from templates/acquire_lock.sql by scripts/gen-sqlite: edit the template.
--
-- Answers the fencing token when the lock is free, released, lapsed, or
-- already held live by this owner (then renewed to now + ttl, with the same
-- token); NULL, changing nothing, while another owner holds it live. A
-- taken lock gets the previous token + 1 (the first acquire of a name gets
-- 1), also when the same owner takes back a lock that lapsed; QF304 when
-- that would pass 9223372036854775807. A released lock keeps its row and
-- its token, so tokens only rise. QF102 for a bad lock or owner_id; QF100
-- without a ttl, QF105 for one that is not positive or ends after year 9999.
-- Being a writer, it waits for every write transaction in progress, also
-- for those in which check_lock answered (see check_lock.sql).
--
-- Parameters: :lock TEXT (1 to 255 characters), :owner_id TEXT (1 to 255
-- characters), :ttl INTEGER microseconds.
-- Result: one row (sqlstate, message, detail, value INTEGER token or NULL).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_lock_take (
    now INTEGER NOT NULL, answer INTEGER, exhausted INTEGER NOT NULL);
DELETE FROM temp.fenceq_lock_take;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: lock must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:lock) = 'text' AND length(:lock) BETWEEN 1 AND 255
                AND instr(CAST(:lock AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF102', 'fenceq: owner_id must be 1 to 255 characters'
     WHERE NOT (typeof(:owner_id) = 'text' AND length(:owner_id) BETWEEN 1 AND 255
                AND instr(CAST(:owner_id AS BLOB), x'00') = 0)
    UNION ALL SELECT 3, 'QF100', 'fenceq: ttl is required'
     WHERE :ttl IS NULL
    UNION ALL SELECT 3, 'QF105', 'fenceq: ttl must be positive'
     WHERE NOT (:ttl IS NULL
                OR (typeof(:ttl) = 'integer' AND :ttl > 0))
) ORDER BY rank LIMIT 1;
-- The decision: the clock is read here, after BEGIN IMMEDIATE took the
-- write lock. holder is the owner of a live hold (NULL: the lock is free).
INSERT INTO temp.fenceq_lock_take (now, answer, exhausted)
SELECT d.now,
       CASE WHEN d.holder IS NULL AND d.token < 9223372036854775807 THEN d.token + 1
            WHEN d.holder = :owner_id THEN d.token END,
       d.holder IS NULL AND d.token = 9223372036854775807
  FROM (WITH clock(now) AS MATERIALIZED (
                 SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
        SELECT c.now, coalesce(l.token, 0) AS token,
               CASE WHEN l.expires_at > c.now THEN l.owner_id END AS holder
          FROM clock AS c LEFT JOIN fenceq__locks AS l ON l.lock = :lock) AS d
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF105', 'fenceq: ttl reaches beyond years 0001-9999'
  FROM temp.fenceq_lock_take AS d
 WHERE :ttl > 253402300799999999 - d.now AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF304', 'fenceq: the lock''s token is exhausted'
  FROM temp.fenceq_lock_take AS d
 WHERE d.exhausted AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__locks (lock, owner_id, token, expires_at)
SELECT :lock, :owner_id, d.answer, d.now + :ttl
  FROM temp.fenceq_lock_take AS d
 WHERE d.answer IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
    ON CONFLICT (lock) DO UPDATE
   SET owner_id = excluded.owner_id, token = excluded.token, expires_at = excluded.expires_at;
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT d.answer FROM temp.fenceq_lock_take AS d) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
