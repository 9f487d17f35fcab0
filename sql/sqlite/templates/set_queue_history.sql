-- fenceq for SQLite: set_queue_history -- turn a queue's job history on or off.
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
{{error_table}}
CREATE TEMP TABLE IF NOT EXISTS fenceq_queue_flag (changed INTEGER NOT NULL);
DELETE FROM temp.fenceq_queue_flag;
{{first_failing(
    {{name_check(queue, 255)}}
    WHEN :enabled IS NULL OR NOT {{optional_integer(:enabled, IN (0, 1))}}
         THEN 'QF100 fenceq: enabled is required and must be a boolean'
    WHEN NOT {{optional_integer(:retention, > 0)}}
         THEN 'QF105 fenceq: retention must be positive'
    WHEN NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
         THEN 'QF101 fenceq: unknown queue')}}
INSERT INTO temp.fenceq_queue_flag (changed)
SELECT q.history <> :enabled OR q.history_retention IS NOT :retention
  FROM fenceq__queues AS q
 WHERE q.queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__queues SET history = :enabled, history_retention = :retention
 WHERE queue = :queue AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT changed FROM temp.fenceq_queue_flag) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
