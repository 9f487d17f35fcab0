-- fenceq for SQLite: activity -- a queue's (or all queues') activity over time, in buckets.
-- Generated from templates/activity.sql by scripts/gen-sqlite: edit the template.
--
-- The rows of fenceq__activity of the last since (at most 192 hours), in
-- buckets of bucket: without one, 1 minute for since up to 2 hours, 15
-- minutes up to 48 hours, 1 hour beyond. There are ceil(since / bucket)
-- buckets, oldest first, the last ending where the closed minutes end (a
-- minute closes 10 seconds after it ends), every one of them (zeros where
-- nothing was sampled). Per bucket: the sums of the counts; the depth of
-- each queue's last sample in the bucket (a row with a depth), summed, NULL
-- when none has one; the 50th and 95th percentiles of wait and run from the
-- bucket's histograms merged (elementwise sums): the histogram bucket that
-- holds the ceil(p * n)-th of the n durations, read as its geometric
-- middle, NULL when no job completed or failed in it. Without queue, all
-- queues. QF102 for a bad queue name, QF105 for a since or bucket that is
-- not positive, QF104 for since beyond 192 hours, a bucket that is not a
-- whole number of minutes or more than 10,080 buckets, QF101 for an
-- undeclared queue.
--
-- Parameters: :queue TEXT or NULL (all); :since INTEGER microseconds or
-- NULL (1 hour); :bucket INTEGER microseconds or NULL (by since).
-- Result: zero or more rows (sqlstate, message, detail, then bucket_start
-- (UTC text), submitted, claimed, retried, completed, failed, cancelled,
-- expired, pending, due, running, wait_p50, wait_p95, run_p50, run_p95
-- (INTEGER microseconds)), or one error row.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
--
-- Differs from PostgreSQL in that a NULL since takes its default.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT substr(c.error, 1, 5), substr(c.error, 7)
  FROM (SELECT CASE
               WHEN NOT (:queue IS NULL OR (typeof(:queue) = 'text' AND length(:queue) BETWEEN 1 AND 255
                                            AND instr(CAST(:queue AS BLOB), x'00') = 0))
                    THEN 'QF102 fenceq: queue must be 1 to 255 characters'
               WHEN NOT (:since IS NULL
                         OR (typeof(:since) = 'integer' AND :since > 0))
                    THEN 'QF105 fenceq: since must be positive'
               WHEN :since > 62135596800000000
                             + (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000
                    THEN 'QF105 fenceq: since reaches beyond years 0001-9999'
               WHEN :since > 691200000000
                    THEN 'QF104 fenceq: since may reach back at most 192 hours'
               WHEN NOT (:bucket IS NULL
                         OR (typeof(:bucket) = 'integer' AND :bucket > 0))
                    THEN 'QF105 fenceq: bucket must be positive'
               WHEN :bucket % 60000000 <> 0
                    THEN 'QF104 fenceq: bucket must be a whole number of minutes'
               WHEN (coalesce(:since, 3600000000) + :bucket - 1) / :bucket > 10080
                    THEN 'QF104 fenceq: since may hold at most 10080 buckets'
               WHEN :queue IS NOT NULL AND NOT EXISTS (SELECT 1 FROM fenceq__queues AS q WHERE q.queue = :queue)
                    THEN 'QF101 fenceq: unknown queue'
               END AS error) AS c
 WHERE c.error IS NOT NULL AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
WITH RECURSIVE
    clock(now) AS MATERIALIZED (
        SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000),
    -- The buckets' width and where they start and end: ceil(since / width) of them.
    span(start, stop, width) AS MATERIALIZED (
        SELECT c.stop - (c.since + c.width - 1) / c.width * c.width, c.stop, c.width
          FROM (SELECT coalesce(:since, 3600000000) AS since,
                       ((clock.now - 10000000) - (((clock.now - 10000000) % 60000000) + 60000000) % 60000000) AS stop,
                       coalesce(:bucket, CASE WHEN coalesce(:since, 3600000000) <= 7200000000 THEN 60000000
                                              WHEN :since <= 172800000000 THEN 900000000
                                              ELSE 3600000000 END) AS width
                  FROM clock) AS c
         WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error)),
    buckets(bucket_start) AS (
        SELECT s.start FROM span AS s
        UNION ALL
        SELECT b.bucket_start + s.width FROM buckets AS b JOIN span AS s WHERE b.bucket_start + s.width < s.stop),
    -- Each queue's range of minutes, through the primary key (CROSS JOIN
    -- keeps that order: queues outside, never a scan of the series).
    samples AS MATERIALIZED (
        SELECT s.start + (a.minute - s.start) / s.width * s.width AS bucket_start, a.*
          FROM span AS s
         CROSS JOIN fenceq__queues AS q
         CROSS JOIN fenceq__activity AS a
         WHERE (:queue IS NULL OR q.queue = :queue)
           AND a.queue = q.queue AND a.minute >= s.start AND a.minute < s.stop),
    sums AS (
        SELECT s.bucket_start, sum(s.submitted) AS submitted, sum(s.claimed) AS claimed, sum(s.retried) AS retried,
               sum(s.completed) AS completed, sum(s.failed) AS failed, sum(s.cancelled) AS cancelled,
               sum(s.expired) AS expired
          FROM samples AS s GROUP BY s.bucket_start),
    last_sampled AS (
        SELECT s.bucket_start, s.pending, s.due, s.running,
               row_number() OVER (PARTITION BY s.queue, s.bucket_start ORDER BY s.minute DESC) AS latest
          FROM samples AS s WHERE s.pending IS NOT NULL),
    depth AS (
        SELECT l.bucket_start, sum(l.pending) AS pending, sum(l.due) AS due, sum(l.running) AS running
          FROM last_sampled AS l WHERE l.latest = 1 GROUP BY l.bucket_start),
    -- The histograms merged: per bucket and histogram bucket k, the sum of the counts.
    merged(kind, bucket_start, k, n) AS (
        SELECT 'wait', s.bucket_start, h.key, sum(h.value)
          FROM samples AS s JOIN json_each(s.wait_hist) AS h GROUP BY s.bucket_start, h.key
        UNION ALL
        SELECT 'run', s.bucket_start, h.key, sum(h.value)
          FROM samples AS s JOIN json_each(s.run_hist) AS h GROUP BY s.bucket_start, h.key),
    cumulative AS (
        SELECT m.kind, m.bucket_start, m.k,
               sum(m.n) OVER (PARTITION BY m.kind, m.bucket_start ORDER BY m.k) AS upto,
               sum(m.n) OVER (PARTITION BY m.kind, m.bucket_start) AS total
          FROM merged AS m),
    -- The p-th percentile: the first histogram bucket where the count so
    -- far reaches ceil(p * total).
    percentiles AS (
        SELECT c.kind, c.bucket_start,
               min(CASE WHEN c.upto >= ceil(c.total * 0.5) THEN c.k END) AS p50,
               min(CASE WHEN c.upto >= ceil(c.total * 0.95) THEN c.k END) AS p95
          FROM cumulative AS c WHERE c.total > 0 GROUP BY c.kind, c.bucket_start)
SELECT e.sqlstate, e.message, e.detail, NULL AS bucket_start, NULL AS submitted, NULL AS claimed,
       NULL AS retried, NULL AS completed, NULL AS failed, NULL AS cancelled, NULL AS expired, NULL AS pending,
       NULL AS due, NULL AS running, NULL AS wait_p50, NULL AS wait_p95, NULL AS run_p50, NULL AS run_p95
  FROM temp.fenceq_error AS e
UNION ALL
SELECT NULL, NULL, NULL, strftime('%Y-%m-%dT%H:%M:%S', b.bucket_start / 1000000 - (b.bucket_start % 1000000 < 0),
                                  'unixepoch')
                         || printf('.%06dZ', (b.bucket_start % 1000000 + 1000000) % 1000000),
       coalesce(s.submitted, 0), coalesce(s.claimed, 0), coalesce(s.retried, 0), coalesce(s.completed, 0),
       coalesce(s.failed, 0), coalesce(s.cancelled, 0), coalesce(s.expired, 0), d.pending, d.due, d.running,
       CAST(round(power(2, (w.p50 + 0.5) / 4) * 1000) AS INTEGER),
       CAST(round(power(2, (w.p95 + 0.5) / 4) * 1000) AS INTEGER),
       CAST(round(power(2, (r.p50 + 0.5) / 4) * 1000) AS INTEGER),
       CAST(round(power(2, (r.p95 + 0.5) / 4) * 1000) AS INTEGER)
  FROM buckets AS b
  LEFT JOIN sums AS s ON s.bucket_start = b.bucket_start
  LEFT JOIN depth AS d ON d.bucket_start = b.bucket_start
  LEFT JOIN percentiles AS w ON w.kind = 'wait' AND w.bucket_start = b.bucket_start
  LEFT JOIN percentiles AS r ON r.kind = 'run' AND r.bucket_start = b.bucket_start
 ORDER BY 4;
