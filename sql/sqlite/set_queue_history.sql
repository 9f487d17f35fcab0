-- fenceq for SQLite: set_queue_history -- turn a queue's job history on or off.
-- Generated from templates/set_queue_history.sql by scripts/gen-sqlite: edit the template.
--
-- True when (history, history_retention) changed, false when they were
-- already so. With history on, every transition of the queue's jobs writes
-- one event (job_events) in its own transaction; retention bounds the
-- events purge keeps (NULL: as long as their job). Turning history off
-- keeps the events written. QF102 for a bad queue name, QF100 without
-- enabled, QF105 for a retention that is not positive, QF101 for an
-- unknown queue.
--
-- Parameters: :queue TEXT; :enabled INTEGER 0/1; :retention INTEGER
-- microseconds or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that there are no roles: whoever can open
-- the file may call it (PostgreSQL: fenceq_admin only).
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
CREATE TEMP TABLE IF NOT EXISTS fenceq_queue_flag (changed INTEGER NOT NULL);
DELETE FROM temp.fenceq_queue_flag;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT substr(c.error, 1, 5), substr(c.error, 7)
  FROM (SELECT CASE
               WHEN NOT (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                         AND instr(CAST(:queue AS BLOB), x'00') = 0)
                    THEN 'QF102 fenceq: queue must be 1 to 255 characters'
               WHEN :enabled IS NULL OR NOT (:enabled IS NULL
                                             OR (typeof(:enabled) = 'integer' AND :enabled IN (0, 1)))
                    THEN 'QF100 fenceq: enabled is required and must be a boolean'
               WHEN NOT (:retention IS NULL
                         OR (typeof(:retention) = 'integer' AND :retention > 0))
                    THEN 'QF105 fenceq: retention must be positive'
               WHEN NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
                    THEN 'QF101 fenceq: unknown queue'
               END AS error) AS c
 WHERE c.error IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_queue_flag (changed)
SELECT q.history <> :enabled OR q.history_retention IS NOT :retention
  FROM fenceq__queues AS q
 WHERE q.queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__queues SET history = :enabled, history_retention = :retention
 WHERE queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT changed FROM temp.fenceq_queue_flag) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
