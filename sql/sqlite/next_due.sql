-- fenceq for SQLite: next_due -- when the next job of the queues falls due.
-- Generated from templates/next_due.sql by scripts/gen-sqlite: edit the template.
--
-- The earliest run_at of a pending, unexpired job in the named, unpaused
-- queues: in the past when something is due now, NULL when there is none
-- (a run_at past year 9999, a job that waits for something else, never
-- counts). An empty queue array raises QF100, an undeclared queue QF101.
-- Both sets of each queue are read (version 5, schema.sql): the jobs due
-- later at the head of fenceq__jobs_later_idx, which is ordered by due
-- time; the ready jobs through the claim index, which orders them by
-- priority first: the first entry of each priority's stretch is read, from
-- the highest priority down, and after 32 levels the rest of the ready
-- jobs in one range scan.
--
-- Parameters: :queues JSON array of TEXT.
-- Result: one row (sqlstate, message, detail, value TEXT UTC timestamp or
-- NULL).
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
WITH RECURSIVE
     clock(now) AS MATERIALIZED (
         SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000),
     doc(doc) AS MATERIALIZED (
        SELECT CASE WHEN json_valid(:queues)
                    THEN CASE WHEN json_type(:queues) = 'array'
                              THEN :queues END END),
     e(error) AS (SELECT CASE
        WHEN NOT coalesce(typeof(:queues) = 'text' AND json_array_length(d.doc) BETWEEN 1 AND 10000, 0)
             THEN 'QF100 fenceq: queues must be a non-empty array of at most 10000 elements'
        WHEN NOT instr(replace(:queues, '\\', ''), '\u0000') = 0
             OR EXISTS (SELECT 1 FROM json_each(d.doc) AS a
                         WHERE NOT (a.type = 'text' AND (typeof(a.value) = 'text' AND length(a.value) BETWEEN 1 AND 255
                                                         AND instr(CAST(a.value AS BLOB), x'00') = 0)))
             THEN 'QF102 fenceq: queues must hold strings of 1 to 255 characters'
        WHEN EXISTS (SELECT 1 FROM json_each(d.doc) AS a
                      WHERE NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = a.value))
             THEN 'QF101 fenceq: unknown queue'
        END AS error FROM doc AS d),
     active(queue) AS MATERIALIZED (
        SELECT q.queue
          FROM fenceq__queues AS q
         WHERE q.queue IN (SELECT a.value FROM doc AS d, json_each(d.doc) AS a) AND NOT q.paused
           AND (SELECT e.error IS NULL FROM e)),
     levels(queue, priority, depth) AS (
        SELECT a.queue, (SELECT h.priority FROM fenceq__jobs AS h
                          WHERE h.queue = a.queue AND h.status = 'pending' AND h.scheduled = 0
                          ORDER BY h.priority DESC LIMIT 1), 1
          FROM active AS a
        UNION ALL
        SELECT l.queue, (SELECT h.priority FROM fenceq__jobs AS h
                          WHERE h.queue = l.queue AND h.status = 'pending' AND h.scheduled = 0
                            AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1), l.depth + 1
          FROM levels AS l
         WHERE l.priority IS NOT NULL AND l.depth < 32),
     due(run_at) AS (
        SELECT (SELECT h.run_at FROM fenceq__jobs AS h
                 WHERE h.queue = l.queue AND h.status = 'pending' AND h.scheduled = 0 AND h.priority = l.priority
                   AND h.run_at <= 253402300799999999 AND (h.expires_at IS NULL OR h.expires_at > clock.now)
                 ORDER BY h.run_at LIMIT 1)
          FROM levels AS l JOIN clock
         WHERE l.priority IS NOT NULL
        UNION ALL
        -- Below the 32nd level, the rest of the ready jobs in one range scan.
        SELECT (SELECT min(h.run_at) FROM fenceq__jobs AS h
                 WHERE h.queue = l.queue AND h.status = 'pending' AND h.scheduled = 0
                   AND h.priority < l.priority
                   AND h.run_at <= 253402300799999999 AND (h.expires_at IS NULL OR h.expires_at > clock.now))
          FROM levels AS l JOIN clock
         WHERE l.depth = 32 AND l.priority IS NOT NULL
        UNION ALL
        -- The jobs due later: the head of the queue's stretch, by due time.
        SELECT (SELECT h.run_at FROM fenceq__jobs AS h
                 WHERE h.queue = a.queue AND h.status = 'pending' AND h.scheduled
                   AND h.run_at <= 253402300799999999 AND (h.expires_at IS NULL OR h.expires_at > clock.now)
                 ORDER BY h.run_at LIMIT 1)
          FROM active AS a JOIN clock)
SELECT substr(e.error, 1, 5) AS sqlstate, substr(e.error, 7) AS message, NULL AS detail,
       CASE WHEN e.error IS NULL
            THEN (SELECT strftime('%Y-%m-%dT%H:%M:%S', min(d.run_at) / 1000000 - (min(d.run_at) % 1000000 < 0),
                                  'unixepoch')
                         || printf('.%06dZ', (min(d.run_at) % 1000000 + 1000000) % 1000000) FROM due AS d) END AS value
  FROM e;
