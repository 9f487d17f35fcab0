-- fenceq for SQLite: pause_queue -- stop claims from a queue.
-- Generated from templates/pause_queue.sql by scripts/gen-sqlite: edit the template.
--
-- The queue keeps accepting work. True when the flag changed; QF101 for an
-- unknown queue.
--
-- Parameters: :queue TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_queue_flag (changed INTEGER NOT NULL);
DELETE FROM temp.fenceq_queue_flag;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                AND instr(CAST(:queue AS BLOB), x'00') = 0)
    UNION ALL SELECT 2, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
INSERT INTO temp.fenceq_queue_flag (changed)
SELECT NOT q.paused FROM fenceq__queues AS q
 WHERE q.queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__queues SET paused = 1
 WHERE queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT changed FROM temp.fenceq_queue_flag) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
