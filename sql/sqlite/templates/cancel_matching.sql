-- fenceq for SQLite: cancel_matching -- cancel the matching jobs of a queue.
--
-- The jobs of :queue whose task is :task (when given) and whose payload
-- contains :payload_contains (as PostgreSQL's jsonb @>, when given), each
-- as cancel would: pending -> 'cancelled'; with include_claimed, claimed ->
-- cancel requested, or cancelled at once with force, which kills the
-- fence. A claimed job whose cancel is already requested does not change
-- without force and is not counted. Oldest (first submitted) first, at
-- most max_rows (1 to 100,000); the answer is how many jobs changed. Bad
-- input changes nothing: QF102 for a bad queue or task name, QF100 for a
-- payload_contains that is not a JSON object or array, for a non-boolean
-- flag or for force without include_claimed, QF103 for bad JSON, QF104 for
-- max_rows out of range, QF101 for an undeclared queue.
--
-- Parameters: :queue TEXT; :task TEXT or NULL; :payload_contains canonical
-- JSON TEXT or NULL; :include_claimed, :force INTEGER 0/1 (NULL = 0);
-- :max_rows INTEGER or NULL (10000).
-- Result: one row (sqlstate, message, detail, value INTEGER).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that no fenceq_control notification is sent
-- (workers see the request through claim_state); BEGIN IMMEDIATE holds
-- the whole file, so no job can change between the choice and the write;
-- payload_contains may not hold an object or array inside an array (QF100:
-- PostgreSQL matches those, this file could not match them exactly);
-- numbers in payloads compare as SQLite's 64-bit integers and doubles do;
-- and a NULL flag or max_rows takes its default (PostgreSQL refuses an
-- explicit NULL).
{{error_table}}
{{cancel_scratch}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF102' AS sqlstate, 'fenceq: queue must be 1 to 255 characters' AS message
     WHERE NOT {{identifier(:queue, 255)}}
    UNION ALL SELECT 2, 'QF102', 'fenceq: task must be 1 to 255 characters'
     WHERE NOT (:task IS NULL OR {{identifier(:task, 255)}})
    {{payload_contains_checks(:payload_contains, 3, 4, 5, 6)}}
    {{cancel_flag_checks(7, 8)}}
    UNION ALL SELECT 9, 'QF104', 'fenceq: max_rows must be an integer from 1 to 100000'
     WHERE NOT {{optional_integer(:max_rows, BETWEEN 1 AND 100000)}}
    UNION ALL SELECT 10, 'QF101', 'fenceq: unknown queue'
     WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
) ORDER BY rank LIMIT 1;
-- Containment, as jsonb @> decides it when no array holds a container:
-- every node b of payload_contains has a node a in the payload of the same
-- JSON type (and, for a number or string, the same value) at the same key
-- path, or, for an element of an array, among the elements of the array at
-- the same key path.
WITH {{clock}}
INSERT INTO temp.fenceq_cancel (seq, answer, now)
SELECT m.seq, {{cancel_answer(m, coalesce(:force, 0))}}, clock.now
  FROM clock JOIN fenceq__jobs AS m
 WHERE m.queue = :queue
   AND {{cancel_chooses(m)}}
   AND (:task IS NULL OR m.task = :task)
   AND {{payload_contains(m, :payload_contains)}}
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error)
 ORDER BY m.seq
 LIMIT {{row_limit(:max_rows, 10000)}};
{{cancel_writes}}
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN (SELECT count(*) FROM temp.fenceq_cancel) END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
