-- fenceq for PostgreSQL, part 8c (version 7): activity over time, per queue
-- and minute (docs/design-v7.md §1-§2, docs/guarantees.md §21). What it
-- holds: the sampler (sample_activity), the reader (activity) and their
-- histogram helpers. Who writes _activity: only sample_activity, which
-- workers call beside reap and a cron or an operator may call. Nothing on
-- the hot path writes here: submit, claim and settle are unchanged.

-- _activity_end: where the closed minutes end at this clock reading (the
-- start of the first minute not yet closed). A minute closes 10 seconds
-- after it ends: a transition is stamped with the clock of its statement
-- and committed a moment later, and the sampler must not read a minute
-- before such a transaction commits (it writes each minute once). UTC
-- minutes, whatever the session's time zone.
CREATE OR REPLACE FUNCTION fenceq._activity_end(now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN date_trunc('minute', _activity_end.now - interval '10 seconds', 'UTC');
END
$$;
COMMENT ON FUNCTION fenceq._activity_end(timestamptz) IS
    'Private. The end of the last closed minute at this clock reading (a minute closes 10 seconds after it ends).';

-- _histogram_bounds: the lower bounds of histogram buckets 1 to 127 in
-- milliseconds, 2^(k/4): bucket k of a duration d is width_bucket(max(d in
-- ms, 1), these bounds), which is floor(4 * log2(max(ms, 1))) capped at 127,
-- exactly so where a duration lies on a bound (a power of two of a
-- millisecond is exact in double precision, where log2 may land a bucket
-- low). Immutable: a statement that calls it computes it once.
CREATE OR REPLACE FUNCTION fenceq._histogram_bounds()
RETURNS double precision[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN ARRAY(SELECT power(2::double precision, k / 4.0::double precision) FROM generate_series(1, 127) AS k);
END
$$;
COMMENT ON FUNCTION fenceq._histogram_bounds() IS
    'Private. The lower bounds in milliseconds of histogram buckets 1 to 127: 2^(k/4).';

-- _histogram: a histogram from the buckets of its durations (NULLs
-- skipped): element k + 1 counts bucket k. Trimmed after the last non-zero
-- bucket; '{}' when there is none.
CREATE OR REPLACE FUNCTION fenceq._histogram(buckets integer[])
RETURNS integer[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_top integer := -1;
    v_hist integer[];
    v_bucket integer;
BEGIN
    FOREACH v_bucket IN ARRAY coalesce(_histogram.buckets, '{}'::integer[]) LOOP
        v_top := greatest(v_top, v_bucket);
    END LOOP;
    IF v_top < 0 THEN
        RETURN '{}'::integer[];
    END IF;
    v_hist := array_fill(0, ARRAY[v_top + 1]);
    FOREACH v_bucket IN ARRAY _histogram.buckets LOOP
        CONTINUE WHEN v_bucket IS NULL;
        v_hist[v_bucket + 1] := v_hist[v_bucket + 1] + 1;
    END LOOP;
    RETURN v_hist;
END
$$;
COMMENT ON FUNCTION fenceq._histogram(integer[]) IS
    'Private. The trimmed histogram of these bucket numbers (element k + 1 counts bucket k); NULLs skipped.';

-- _histogram_percentile: the duration below which this fraction of a
-- merged histogram lies, the histogram given as its non-zero buckets
-- (ascending) and their counts: the bucket holding the
-- ceil(fraction * total)-th duration, read as its geometric middle,
-- 2^((k + 0.5) / 4) ms. NULL for an empty histogram.
CREATE OR REPLACE FUNCTION fenceq._histogram_percentile(buckets integer[], counts bigint[], fraction double precision)
RETURNS interval
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_rank numeric;
    v_seen numeric := 0;
BEGIN
    v_rank := ceil((SELECT sum(c.n) FROM unnest(_histogram_percentile.counts) AS c(n)) * _histogram_percentile.fraction);
    IF v_rank IS NULL OR v_rank < 1 THEN
        RETURN NULL;
    END IF;
    FOR i IN 1 .. cardinality(_histogram_percentile.counts) LOOP
        v_seen := v_seen + _histogram_percentile.counts[i];
        IF v_seen >= v_rank THEN
            RETURN make_interval(secs => power(2::double precision,
                                               (_histogram_percentile.buckets[i] + 0.5)::double precision / 4) / 1000);
        END IF;
    END LOOP;
    RETURN NULL;  -- not reached: the last bucket holds the last duration
END
$$;
COMMENT ON FUNCTION fenceq._histogram_percentile(integer[], bigint[], double precision) IS
    'Private. A percentile of a histogram given by its non-zero buckets and their counts, as the geometric middle of the bucket that holds it; NULL when empty.';

-- sample_activity: write the closed minutes (_activity_end) of every queue
-- that have no row yet: for each queue, from the minute after its last row
-- (on the first call, the last closed minute only), oldest first, at most
-- max_minutes (1 to 11,520) of them and none older than keep; the rest wait
-- for the next call. Then delete the rows older than keep (a positive
-- interval of at least a minute). Answers the number of rows written.
--
-- One read of the jobs for all queues: the live jobs (pending and claimed,
-- through their partial indexes, as queue_stats reads them) and the jobs
-- that finished since the oldest minute written (one range of
-- _jobs_finished_idx), with the claims of those created before their
-- queue's last minute written (_claims_job_idx, and the claims by
-- claim_jobs calls the job rows keep in call_claims). Every job that did anything
-- in those minutes is among them unless purged meanwhile. Per minute:
-- submitted (created_at in it), claimed (ledger rows with claimed_at in
-- it), retried (of those, claims after the job's first: generation > 1),
-- completed, failed, cancelled, expired (finished_at in it), and for the
-- jobs completed or failed in it, the wait (their final claim's claimed_at
-- - run_at) and run time (finished_at - that claimed_at). The depth
-- columns are the live counts at this call, on the last closed minute's
-- row when this call writes it. A catch-up reads every job finished since
-- its oldest minute, whatever max_minutes: after a long pause one call with
-- a large max_minutes costs less than many small ones.
--
-- Locking: no row lock. Concurrent samplers: one proceeds, the others answer
-- 0 at once (a transaction-scoped advisory lock taken with try); every row
-- is inserted ON CONFLICT DO NOTHING against the primary key (queue, minute),
-- so a minute is written once whoever writes it. Idempotent: a second call
-- in the same minute writes nothing.
CREATE OR REPLACE FUNCTION fenceq.sample_activity(max_minutes integer DEFAULT 60, keep interval DEFAULT '192 hours')
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_end timestamptz;
    v_oldest timestamptz;
    v_queues text[];
    v_starts timestamptz[];
    v_stops timestamptz[];
    v_from timestamptz;
    v_written integer := 0;
BEGIN
    IF sample_activity.max_minutes IS NULL OR sample_activity.max_minutes NOT BETWEEN 1 AND 11520 THEN
        PERFORM fenceq._raise('QF104', 'max_minutes must be an integer from 1 to 11520');
    END IF;
    PERFORM fenceq._check_interval(sample_activity.keep, 'keep', nullable => false, backwards => true);
    IF sample_activity.keep < interval '1 minute' THEN
        PERFORM fenceq._raise('QF105', 'keep must be at least a minute');
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended('fenceq.sample_activity', 0)) THEN
        RETURN 0;  -- another sampler is at it now
    END IF;
    v_now := clock_timestamp();
    v_end := fenceq._activity_end(v_now);
    -- The oldest minute kept: whole minutes of keep before the end.
    v_oldest := v_end - make_interval(mins => floor(extract(epoch FROM sample_activity.keep) / 60)::integer);
    SELECT array_agg(w.queue ORDER BY w.queue), array_agg(w.m0 ORDER BY w.queue),
           array_agg(least(w.m0 + make_interval(mins => sample_activity.max_minutes), v_end) ORDER BY w.queue),
           min(w.m0)
      INTO v_queues, v_starts, v_stops, v_from
      FROM (SELECT q.queue,
                   greatest(coalesce(l.last + interval '1 minute', v_end - interval '1 minute'), v_oldest) AS m0
              FROM fenceq._queues AS q
             CROSS JOIN LATERAL (SELECT max(a.minute) AS last FROM fenceq._activity AS a
                                  WHERE a.queue = q.queue) AS l) AS w
     WHERE w.m0 < v_end;
    IF v_from IS NOT NULL THEN
        INSERT INTO fenceq._activity AS a (queue, minute, submitted, claimed, retried, completed, failed,
                                           cancelled, expired, pending, due, running, wait_hist, run_hist)
        WITH windows AS (
            SELECT w.queue, w.m0, w.m1 FROM unnest(v_queues, v_starts, v_stops) AS w(queue, m0, m1)),
        live AS MATERIALIZED (
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation,
                   j.call_claims
              FROM windows AS w JOIN fenceq._jobs AS j ON j.queue = w.queue AND j.status = 'pending'
            UNION ALL
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation,
                   j.call_claims
              FROM windows AS w JOIN fenceq._jobs AS j ON j.queue = w.queue AND j.status = 'claimed'),
        depth AS (
            SELECT l.queue, count(*) FILTER (WHERE l.status = 'pending') AS pending,
                   count(*) FILTER (WHERE l.status = 'pending' AND l.run_at <= v_now) AS due,
                   count(*) FILTER (WHERE l.status = 'claimed') AS running
              FROM live AS l
             GROUP BY l.queue),
        finished AS MATERIALIZED (  -- one range of the index, whatever the number of queues
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation,
                   j.call_claims
              FROM fenceq._jobs AS j
             WHERE j.finished_at >= v_from AND j.queue = ANY (v_queues)),
        jobs AS MATERIALIZED (  -- with their queue's window; one created since its end did nothing in it
            SELECT s.job_id, s.queue, s.status, s.created_at, s.run_at, s.finished_at, s.generation,
                   s.call_claims, w.m0, w.m1
              FROM (SELECT * FROM live UNION ALL SELECT * FROM finished) AS s
              JOIN windows AS w ON w.queue = s.queue
             WHERE s.created_at < w.m1),
        claims AS (  -- every claim of those jobs: one probe of the ledger per claimed job, and
                     -- the claims by claim_jobs calls that the job rows keep
            SELECT j.queue, j.status, j.run_at, j.finished_at, j.generation AS final, j.m0, j.m1,
                   c.generation, c.claimed_at
              FROM jobs AS j JOIN fenceq._claims AS c ON c.job_id = j.job_id
             WHERE j.generation > 0
            UNION ALL
            SELECT j.queue, j.status, j.run_at, j.finished_at, j.generation, j.m0, j.m1,
                   k.generation, k.claimed_at
              FROM jobs AS j CROSS JOIN LATERAL unnest(j.call_claims) AS k),
        facts AS (
            -- What happened, when: each minute of the windows itself (so
            -- that each has its row), a submission, a claim, an end (a
            -- completion or failure with the buckets of its wait and run
            -- time, from its final claim: purge deletes a job's claims with
            -- it, never before).
            SELECT w.queue, m.minute AS at, 'minute' AS what, false AS again,
                   NULL::integer AS wait, NULL::integer AS run
              FROM windows AS w
             CROSS JOIN LATERAL generate_series(w.m0, w.m1 - interval '1 minute', interval '1 minute') AS m(minute)
            UNION ALL
            SELECT j.queue, j.created_at, 'submitted', false, NULL, NULL
              FROM jobs AS j
             WHERE j.created_at >= j.m0
            UNION ALL
            SELECT c.queue, c.claimed_at, 'claimed', c.generation > 1, NULL, NULL
              FROM claims AS c
             WHERE c.claimed_at >= c.m0 AND c.claimed_at < c.m1
            UNION ALL
            SELECT c.queue, c.finished_at, c.status, false,
                   width_bucket(greatest(extract(epoch FROM c.claimed_at - c.run_at) * 1000, 1)::double precision,
                                fenceq._histogram_bounds()),
                   width_bucket(greatest(extract(epoch FROM c.finished_at - c.claimed_at) * 1000, 1)::double precision,
                                fenceq._histogram_bounds())
              FROM claims AS c
             WHERE c.generation = c.final AND c.status IN ('completed', 'failed')
               AND c.finished_at >= c.m0 AND c.finished_at < c.m1
            UNION ALL
            SELECT j.queue, j.finished_at, j.status, false, NULL, NULL
              FROM jobs AS j
             WHERE j.status IN ('cancelled', 'expired') AND j.finished_at >= j.m0 AND j.finished_at < j.m1),
        per_minute AS (
            SELECT f.queue, date_trunc('minute', f.at, 'UTC') AS minute,
                   count(*) FILTER (WHERE f.what = 'submitted') AS submitted,
                   count(*) FILTER (WHERE f.what = 'claimed') AS claimed,
                   count(*) FILTER (WHERE f.what = 'claimed' AND f.again) AS retried,
                   count(*) FILTER (WHERE f.what = 'completed') AS completed,
                   count(*) FILTER (WHERE f.what = 'failed') AS failed,
                   count(*) FILTER (WHERE f.what = 'cancelled') AS cancelled,
                   count(*) FILTER (WHERE f.what = 'expired') AS expired,
                   fenceq._histogram(array_agg(f.wait) FILTER (WHERE f.wait IS NOT NULL)) AS wait_hist,
                   fenceq._histogram(array_agg(f.run) FILTER (WHERE f.run IS NOT NULL)) AS run_hist
              FROM facts AS f
             GROUP BY 1, 2)
        SELECT p.queue, p.minute, p.submitted, p.claimed, p.retried, p.completed, p.failed, p.cancelled, p.expired,
               CASE WHEN p.minute = v_end - interval '1 minute' THEN coalesce(d.pending, 0) END,
               CASE WHEN p.minute = v_end - interval '1 minute' THEN coalesce(d.due, 0) END,
               CASE WHEN p.minute = v_end - interval '1 minute' THEN coalesce(d.running, 0) END,
               p.wait_hist, p.run_hist
          FROM per_minute AS p
          LEFT JOIN depth AS d ON d.queue = p.queue
         ORDER BY p.queue, p.minute
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_written = ROW_COUNT;
    END IF;
    DELETE FROM fenceq._activity AS a
     USING fenceq._queues AS q
     WHERE a.queue = q.queue AND a.minute < v_oldest;
    RETURN v_written;
END
$$;
COMMENT ON FUNCTION fenceq.sample_activity(integer, interval) IS
    'Write every queue''s closed minutes that have no activity row yet (oldest first, at most max_minutes per queue, none older than keep), then delete rows older than keep. Returns rows written; 0 at once while another sampler runs. Workers and admins.';

-- activity: the activity of one queue (or of every queue, summed, with the
-- histograms merged) over the last `since` (at most 192 hours), in buckets
-- of `bucket` (a whole number of minutes; by default 1 minute up to 2 hours,
-- 15 minutes up to 48 hours, 1 hour beyond), oldest first. The buckets end
-- where the closed minutes end (_activity_end) and there are ceil(since /
-- bucket) of them, at most 10,080 (QF104); each appears, with zeros where
-- no row was written. Counts are sums; the depth is each queue's last
-- sample in the bucket, summed over queues (NULL when none); the
-- percentiles are read from the merged histograms (NULL when empty).
-- QF101 for an unknown queue.
-- Locking: none; it reads _activity under the statement's snapshot and
-- writes nothing.
CREATE OR REPLACE FUNCTION fenceq.activity(queue text DEFAULT NULL, since interval DEFAULT '1 hour',
                                           bucket interval DEFAULT NULL)
RETURNS TABLE(bucket_start timestamptz, submitted bigint, claimed bigint, retried bigint, completed bigint,
              failed bigint, cancelled bigint, expired bigint, pending bigint, due bigint, running bigint,
              wait_p50 interval, wait_p95 interval, run_p50 interval, run_p95 interval)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_bucket interval;
    v_count integer;
    v_start timestamptz;
    v_end timestamptz;
BEGIN
    PERFORM fenceq._check_name(activity.queue, 'queue', nullable => true);
    PERFORM fenceq._check_interval(activity.since, 'since', nullable => false, backwards => true);
    IF activity.since > interval '192 hours' THEN
        PERFORM fenceq._raise('QF104', 'since may reach back at most 192 hours');
    END IF;
    PERFORM fenceq._check_interval(activity.bucket, 'bucket', backwards => true);
    v_bucket := coalesce(activity.bucket, CASE WHEN activity.since <= interval '2 hours' THEN interval '1 minute'
                                               WHEN activity.since <= interval '48 hours' THEN interval '15 minutes'
                                               ELSE interval '1 hour' END);
    IF extract(epoch FROM v_bucket) % 60 <> 0 THEN
        PERFORM fenceq._raise('QF104', 'bucket must be a whole number of minutes');
    END IF;
    IF ceil(extract(epoch FROM activity.since) / extract(epoch FROM v_bucket)) > 10080 THEN
        PERFORM fenceq._raise('QF104', 'since may hold at most 10080 buckets');
    END IF;
    v_count := ceil(extract(epoch FROM activity.since) / extract(epoch FROM v_bucket));
    IF activity.queue IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = activity.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    v_end := fenceq._activity_end(clock_timestamp());
    v_start := v_end - v_count * v_bucket;
    RETURN QUERY
    WITH samples AS MATERIALIZED (
        SELECT a.queue, a.minute, a.submitted, a.claimed, a.retried, a.completed, a.failed, a.cancelled,
               a.expired, a.pending, a.due, a.running, a.wait_hist, a.run_hist,
               floor(extract(epoch FROM a.minute - v_start) / extract(epoch FROM v_bucket))::integer AS b
          FROM fenceq._queues AS q
          JOIN fenceq._activity AS a ON a.queue = q.queue AND a.minute >= v_start AND a.minute < v_end
         WHERE activity.queue IS NULL OR q.queue = activity.queue),
    sums AS (
        SELECT s.b, sum(s.submitted) AS submitted, sum(s.claimed) AS claimed, sum(s.retried) AS retried,
               sum(s.completed) AS completed, sum(s.failed) AS failed, sum(s.cancelled) AS cancelled,
               sum(s.expired) AS expired
          FROM samples AS s
         GROUP BY s.b),
    depth AS (
        SELECT l.b, sum(l.pending) AS pending, sum(l.due) AS due, sum(l.running) AS running
          FROM (SELECT DISTINCT ON (s.b, s.queue) s.b, s.pending, s.due, s.running
                  FROM samples AS s
                 WHERE s.pending IS NOT NULL
                 ORDER BY s.b, s.queue, s.minute DESC) AS l
         GROUP BY l.b),
    merged AS (  -- the non-zero buckets only: most of a stored histogram is zeros
        SELECT h.b, h.kind, array_agg(h.k ORDER BY h.k) AS buckets, array_agg(h.n ORDER BY h.k) AS counts
          FROM (SELECT s.b, 'wait' AS kind, e.k::integer - 1 AS k, sum(e.n)::bigint AS n
                  FROM samples AS s CROSS JOIN LATERAL unnest(s.wait_hist) WITH ORDINALITY AS e(n, k)
                 WHERE e.n > 0
                 GROUP BY 1, 2, 3
                UNION ALL
                SELECT s.b, 'run', e.k::integer - 1, sum(e.n)::bigint
                  FROM samples AS s CROSS JOIN LATERAL unnest(s.run_hist) WITH ORDINALITY AS e(n, k)
                 WHERE e.n > 0
                 GROUP BY 1, 2, 3) AS h
         GROUP BY h.b, h.kind)
    SELECT v_start + g.b * v_bucket, coalesce(t.submitted, 0)::bigint, coalesce(t.claimed, 0)::bigint,
           coalesce(t.retried, 0)::bigint, coalesce(t.completed, 0)::bigint, coalesce(t.failed, 0)::bigint,
           coalesce(t.cancelled, 0)::bigint, coalesce(t.expired, 0)::bigint,
           d.pending::bigint, d.due::bigint, d.running::bigint,
           fenceq._histogram_percentile(w.buckets, w.counts, 0.5),
           fenceq._histogram_percentile(w.buckets, w.counts, 0.95),
           fenceq._histogram_percentile(r.buckets, r.counts, 0.5),
           fenceq._histogram_percentile(r.buckets, r.counts, 0.95)
      FROM generate_series(0, v_count - 1) AS g(b)
      LEFT JOIN sums AS t ON t.b = g.b
      LEFT JOIN depth AS d ON d.b = g.b
      LEFT JOIN merged AS w ON w.b = g.b AND w.kind = 'wait'
      LEFT JOIN merged AS r ON r.b = g.b AND r.kind = 'run'
     ORDER BY g.b;
END
$$;
COMMENT ON FUNCTION fenceq.activity(text, interval, interval) IS
    'A queue''s (or, for NULL, every queue''s) activity over the last since (at most 192 hours) in buckets, oldest first: counts, the depth last sampled in each bucket, wait and run time p50/p95 from the merged histograms. QF101 unknown queue, QF104 bad range. Workers and admins.';
