-- fenceq migration 0007: version 6 -> 7, for PostgreSQL. Frozen at release.
-- Generated from the parts by scripts/gen-pg-step.
--
-- Why: see 0007_fenceq_v7.py. The operator's view over time (issue 27): a
-- per-queue minute series that a sampler fills off the hot path (parts 1e and
-- 8c: _activity, sample_activity, activity), a bounded search of the jobs
-- (part 8d: search_jobs and its row type) and three bulk actions that record
-- who made each change (part 8e: retry_jobs, cancel_jobs, replay_dead_letters,
-- and the index of unhandled dead letters they read). No function of the hot
-- path is replaced: verify_schema and version are; part 9 (ownership,
-- privileges, the admission check) runs again.

SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

-- fenceq for PostgreSQL, part 1e (version 7): what the operator's view over
-- time keeps (docs/design-v7.md, docs/guarantees.md §21). The functions that
-- write and read it are parts 8c (084_activity.sql), 8d (086_search.sql)
-- and 8e (088_bulk.sql).
--
-- Idempotent like part 1: every object is created only when missing. Nothing
-- here alters _jobs or any table the hot path writes but _dead_letters,
-- which gains one partial index (a final failure maintains it).

-- Activity: one row per queue and closed minute, written once by
-- sample_activity from the jobs and the claim ledger, off the hot path. No
-- job id is kept, so purge leaves it alone; sample_activity deletes the rows
-- older than its retention. Counts of what happened in the minute; the depth
-- (pending, due, running) as sampled just after it, NULL on minutes written
-- later by a catch-up; waits and run times as histograms of quarter powers
-- of two (bucket k counts durations d with 2^(k/4) <= d in ms < 2^((k+1)/4),
-- bucket 0 everything below 2^(1/4) ms, bucket 127 everything from
-- 2^(127/4) ms), trimmed after the last non-zero bucket.
CREATE TABLE IF NOT EXISTS fenceq._activity (
    queue     text COLLATE "C" NOT NULL,
    minute    timestamptz NOT NULL,
    submitted integer NOT NULL,
    claimed   integer NOT NULL,
    retried   integer NOT NULL,
    completed integer NOT NULL,
    failed    integer NOT NULL,
    cancelled integer NOT NULL,
    expired   integer NOT NULL,
    pending   integer,
    due       integer,
    running   integer,
    wait_hist integer[] NOT NULL,
    run_hist  integer[] NOT NULL,
    CONSTRAINT _activity_pkey PRIMARY KEY (queue, minute)
);

-- replay_dead_letters reads a queue's unhandled letters, oldest first,
-- without reading the handled ones, which are never deleted.
CREATE INDEX IF NOT EXISTS _dead_letters_unhandled_idx
    ON fenceq._dead_letters (queue, failed_at)
    WHERE replayed_at IS NULL AND discarded_at IS NULL;

-- What search_jobs returns: fenceq.jobs' columns, then seq (the submission
-- order it pages by). A type of its own because the function's parameters
-- take the names of some of these columns. Columns are only ever appended.
DO $$
BEGIN
    IF to_regtype('fenceq.job_search_row') IS NULL THEN
        CREATE TYPE fenceq.job_search_row AS (
            job_id            text,
            queue             text,
            task              text,
            payload           jsonb,
            priority          integer,
            status            text,
            attempts          integer,
            max_attempts      integer,
            run_at            timestamptz,
            expires_at        timestamptz,
            owner_id          text,
            generation        bigint,
            lease_expires_at  timestamptz,
            budget_expires_at timestamptz,
            cancel_requested  boolean,
            pid               integer,
            result            jsonb,
            last_error        text,
            submission_id     text,
            fingerprint       text,
            active_key        text,
            dlq_id            text,
            created_at        timestamptz,
            finished_at       timestamptz,
            concurrency_key   text,
            blocked_by        integer,
            progress          jsonb,
            progress_at       timestamptz,
            seq               bigint
        );
    END IF;
END
$$;
COMMENT ON TYPE fenceq.job_search_row IS
    'One job search_jobs found: the columns of fenceq.jobs, then seq (submission order).';

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
-- queue's last minute written (_claims_job_idx). Every job that did anything
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
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation
              FROM windows AS w JOIN fenceq._jobs AS j ON j.queue = w.queue AND j.status = 'pending'
            UNION ALL
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation
              FROM windows AS w JOIN fenceq._jobs AS j ON j.queue = w.queue AND j.status = 'claimed'),
        depth AS (
            SELECT l.queue, count(*) FILTER (WHERE l.status = 'pending') AS pending,
                   count(*) FILTER (WHERE l.status = 'pending' AND l.run_at <= v_now) AS due,
                   count(*) FILTER (WHERE l.status = 'claimed') AS running
              FROM live AS l
             GROUP BY l.queue),
        finished AS MATERIALIZED (  -- one range of the index, whatever the number of queues
            SELECT j.job_id, j.queue, j.status, j.created_at, j.run_at, j.finished_at, j.generation
              FROM fenceq._jobs AS j
             WHERE j.finished_at >= v_from AND j.queue = ANY (v_queues)),
        jobs AS MATERIALIZED (  -- with their queue's window; one created since its end did nothing in it
            SELECT s.job_id, s.queue, s.status, s.created_at, s.run_at, s.finished_at, s.generation, w.m0, w.m1
              FROM (SELECT * FROM live UNION ALL SELECT * FROM finished) AS s
              JOIN windows AS w ON w.queue = s.queue
             WHERE s.created_at < w.m1),
        claims AS (  -- every claim of those jobs: one probe of the ledger per claimed job
            SELECT j.queue, j.status, j.run_at, j.finished_at, j.generation AS final, j.m0, j.m1,
                   c.generation, c.claimed_at
              FROM jobs AS j JOIN fenceq._claims AS c ON c.job_id = j.job_id
             WHERE j.generation > 0),
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

-- fenceq for PostgreSQL, part 8d (version 7): bounded search of the jobs
-- (docs/design-v7.md §3, docs/guarantees.md §21). Read-only: it writes
-- nothing and locks no row.

-- search_jobs: jobs matching every filter given, newest (highest seq)
-- first, at most max_rows (1 to 1,000), only those with seq below
-- before_seq when given (the next page: the last row's seq). Bounded both
-- ways: the candidates come from one index range, chosen by the filters,
-- and at most max_scan (1 to 1,000,000) of them are read, whatever the
-- other filters then keep; when the range holds more, the rest are not
-- seen (narrow it: a longer prefix, an earlier until). The ranges:
--   * submission_prefix (1 to 255 characters): the retained submission ids
--     that start with it (the primary key of _submissions, in id order),
--     then their jobs by id;
--   * status 'pending' or 'claimed': those jobs, of the queue or of every
--     queue (their partial indexes, in the index's order);
--   * otherwise a terminal status, since, until or error_contains: the jobs
--     that finished in [since, until) (_jobs_finished_idx), the most
--     recently finished first.
-- With none of these: QF100, never a read of all history. since and until
-- bound when a job finished: with status 'pending' or 'claimed', QF100.
-- payload_contains is jsonb containment (@>) as cancel_matching uses it,
-- with its checks; error_contains (1 to 1,000 characters) a case-
-- insensitive substring of last_error, taken literally. QF101 for an
-- unknown queue. No row: nothing matched in what was read.
-- Locking: none; it reads under the statement's snapshot and writes nothing.
CREATE OR REPLACE FUNCTION fenceq.search_jobs(
    queue text DEFAULT NULL, status text DEFAULT NULL, task text DEFAULT NULL,
    payload_contains jsonb DEFAULT NULL, error_contains text DEFAULT NULL, submission_prefix text DEFAULT NULL,
    since timestamptz DEFAULT NULL, until timestamptz DEFAULT NULL, before_seq bigint DEFAULT NULL,
    max_rows integer DEFAULT 50, max_scan integer DEFAULT 10000)
RETURNS SETOF fenceq.job_search_row
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_range text;
    v_prefix_end text;
    v_needle text := lower(search_jobs.error_contains);
BEGIN
    PERFORM fenceq._check_name(search_jobs.queue, 'queue', nullable => true);
    IF search_jobs.status NOT IN ('pending', 'claimed', 'completed', 'failed', 'cancelled', 'expired') THEN
        PERFORM fenceq._raise('QF100', 'status must be a job status');
    END IF;
    PERFORM fenceq._check_name(search_jobs.task, 'task', nullable => true);
    IF jsonb_typeof(search_jobs.payload_contains) NOT IN ('object', 'array') THEN
        PERFORM fenceq._raise('QF100', 'payload_contains must be a JSON object or array');
    END IF;
    PERFORM fenceq._check_json(search_jobs.payload_contains, 'payload_contains');
    PERFORM fenceq._check_name(search_jobs.error_contains, 'error_contains', max_length => 1000,
                               nullable => true, code => 'QF100');
    PERFORM fenceq._check_name(search_jobs.submission_prefix, 'submission_prefix', nullable => true);
    PERFORM fenceq._check_time(search_jobs.since, 'since');
    PERFORM fenceq._check_time(search_jobs.until, 'until');
    IF search_jobs.max_rows IS NULL OR search_jobs.max_rows NOT BETWEEN 1 AND 1000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be an integer from 1 to 1000');
    END IF;
    IF search_jobs.max_scan IS NULL OR search_jobs.max_scan NOT BETWEEN 1 AND 1000000 THEN
        PERFORM fenceq._raise('QF104', 'max_scan must be an integer from 1 to 1000000');
    END IF;
    IF search_jobs.status IN ('pending', 'claimed')
       AND (search_jobs.since IS NOT NULL OR search_jobs.until IS NOT NULL) THEN
        PERFORM fenceq._raise('QF100', 'since and until bound when a job finished: not with a live status');
    END IF;
    v_range := CASE WHEN search_jobs.submission_prefix IS NOT NULL THEN 'prefix'
                    WHEN search_jobs.status IN ('pending', 'claimed') THEN search_jobs.status
                    WHEN search_jobs.status IS NOT NULL OR search_jobs.since IS NOT NULL
                         OR search_jobs.until IS NOT NULL OR search_jobs.error_contains IS NOT NULL THEN 'finished'
               END;
    IF v_range IS NULL THEN
        PERFORM fenceq._raise('QF100', 'search needs a submission prefix, a status or a time window');
    END IF;
    IF search_jobs.queue IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = search_jobs.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    -- Submission ids are compared byte by byte (COLLATE "C": code point
    -- order) and hold at most 255 characters, so those that start with the
    -- prefix are exactly those from it up to the prefix followed by 256 -
    -- length(prefix) of the greatest code point: a range of the primary key
    -- whatever the plan, where LIKE would need its pattern known when planned.
    v_prefix_end := search_jobs.submission_prefix
                    || repeat(chr(1114111), 256 - length(search_jobs.submission_prefix));
    RETURN QUERY
    SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.status, j.attempts, j.max_attempts,
           coalesce(j.blocked_run_at, j.run_at), j.expires_at, j.owner_id, j.generation, j.lease_expires_at,
           j.budget_expires_at, j.cancel_requested, j.pid, j.result, j.last_error, j.submission_id,
           j.fingerprint, j.active_key, j.dlq_id, j.created_at, j.finished_at, j.concurrency_key,
           coalesce(j.blocked_by, 0), j.progress, j.progress_at, j.seq
      FROM (
        -- One of these reads rows; the others are cut off by their first,
        -- constant condition before they read any.
        (SELECT c.* FROM (SELECT s.job_id FROM fenceq._submissions AS s
                           WHERE v_range = 'prefix'
                             AND s.submission_id >= search_jobs.submission_prefix
                             AND s.submission_id < v_prefix_end
                           ORDER BY s.submission_id
                           LIMIT search_jobs.max_scan) AS s
           JOIN fenceq._jobs AS c ON c.job_id = s.job_id)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'pending' AND search_jobs.queue IS NOT NULL
            AND c.queue = search_jobs.queue AND c.status = 'pending'
          ORDER BY c.queue, c.scheduled, c.priority DESC, c.run_at, c.seq
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'pending' AND search_jobs.queue IS NULL AND c.status = 'pending'
          ORDER BY c.queue, c.scheduled, c.priority DESC, c.run_at, c.seq
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'claimed' AND search_jobs.queue IS NOT NULL
            AND c.queue = search_jobs.queue AND c.status = 'claimed'
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'claimed' AND search_jobs.queue IS NULL AND c.status = 'claimed'
          ORDER BY c.queue
          LIMIT search_jobs.max_scan)
        UNION ALL
        (SELECT c.* FROM fenceq._jobs AS c
          WHERE v_range = 'finished'
            AND c.finished_at >= coalesce(search_jobs.since, '-infinity')
            AND c.finished_at < coalesce(search_jobs.until, 'infinity')
          ORDER BY c.finished_at DESC
          LIMIT search_jobs.max_scan)) AS j
     WHERE (search_jobs.queue IS NULL OR j.queue = search_jobs.queue)
       AND (search_jobs.status IS NULL OR j.status = search_jobs.status)
       AND (search_jobs.task IS NULL OR j.task = search_jobs.task)
       AND (search_jobs.payload_contains IS NULL OR j.payload @> search_jobs.payload_contains)
       AND (v_needle IS NULL OR strpos(lower(j.last_error), v_needle) > 0)
       AND (search_jobs.since IS NULL OR j.finished_at >= search_jobs.since)
       AND (search_jobs.until IS NULL OR j.finished_at < search_jobs.until)
       AND (search_jobs.before_seq IS NULL OR j.seq < search_jobs.before_seq)
     ORDER BY j.seq DESC
     LIMIT search_jobs.max_rows;
END
$$;
COMMENT ON FUNCTION fenceq.search_jobs(text, text, text, jsonb, text, text, timestamptz, timestamptz, bigint, integer, integer) IS
    'Jobs matching every filter, newest (seq) first, at most max_rows, below before_seq: read from one bounded index range (a submission prefix, the pending or claimed jobs, or the jobs finished in [since, until)), at most max_scan rows of it. QF100 without a prefix, status or time window. Workers and admins.';

-- fenceq for PostgreSQL, part 8e (version 7): bulk actions (docs/design-v7.md
-- §4, docs/guarantees.md §21). What it holds: retry_jobs, cancel_jobs and
-- replay_dead_letters, for admins: each one call that answers how many
-- jobs it changed, at most max_rows (1 to 100,000), refusing a call with
-- neither job ids nor a filter (QF100), and recording each change as an
-- event whatever the queue's history setting, with who made it and how it
-- chose the jobs: detail {"by": session_user, "action": the function's
-- name, "filter": the selection as given (job_ids: their number)}.
--
-- Each chooses its jobs without locks, then locks them in one order and
-- judges them again on the locked rows, as cancel_matching does: a job
-- that stopped matching meanwhile is left alone and not counted. A job id
-- of another queue, or of no job, is ignored. Given both job ids and a
-- filter, a job must match both.

-- _action_detail: the detail every bulk action adds to its events.
CREATE OR REPLACE FUNCTION fenceq._action_detail(action text, filter jsonb)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object('by', session_user::text, 'action', _action_detail.action,
                              'filter', jsonb_strip_nulls(_action_detail.filter));
END
$$;
COMMENT ON FUNCTION fenceq._action_detail(text, jsonb) IS
    'Private. A bulk action''s event detail: who (session_user), which action, and its filter without the NULLs.';

-- _record_action: the event of a bulk action on one job it changed just
-- now through the function one call would use. Where the job's queue keeps
-- history, that function wrote the transition's event (of this name, after
-- after_seq): it gains the action's detail, so the change is one event.
-- Elsewhere the event is written now, with the generation and owner the
-- job's row holds (none for a job no claim holds), as _record_events would.
-- The caller holds the job's row lock.
CREATE OR REPLACE FUNCTION fenceq._record_action(job_id text, after_seq bigint, event text, detail jsonb)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    UPDATE fenceq._events AS e SET detail = e.detail || _record_action.detail
     WHERE e.job_id = _record_action.job_id AND e.seq > coalesce(_record_action.after_seq, 0)
       AND e.event = _record_action.event;
    IF NOT FOUND THEN
        INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
        SELECT j.job_id, j.queue, clock_timestamp(), _record_action.event,
               CASE WHEN j.owner_id IS NOT NULL THEN j.generation END, j.owner_id, _record_action.detail
          FROM fenceq._jobs AS j
         WHERE j.job_id = _record_action.job_id;
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._record_action(text, bigint, text, jsonb) IS
    'Private. Record a bulk action''s change of one job as one event: the transition''s own event gains the detail, or the event is written.';

-- _check_bulk: the checks the three bulk actions share: queue (declared,
-- QF101), job_ids (when given: 1 to 10,000 ids), task, payload_contains as
-- cancel_matching checks it, error_contains (1 to 1,000 characters, QF100),
-- max_rows (1 to 100,000, QF104), and a selection: job ids or a filter
-- (QF100). Every input is checked before the queue is looked up.
CREATE OR REPLACE FUNCTION fenceq._check_bulk(
    queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    PERFORM fenceq._check_name(_check_bulk.queue, 'queue');
    IF _check_bulk.job_ids IS NOT NULL THEN
        PERFORM fenceq._check_names(_check_bulk.job_ids, 'job_ids');
    END IF;
    PERFORM fenceq._check_name(_check_bulk.task, 'task', nullable => true);
    IF jsonb_typeof(_check_bulk.payload_contains) NOT IN ('object', 'array') THEN
        PERFORM fenceq._raise('QF100', 'payload_contains must be a JSON object or array');
    END IF;
    PERFORM fenceq._check_json(_check_bulk.payload_contains, 'payload_contains');
    PERFORM fenceq._check_name(_check_bulk.error_contains, 'error_contains', max_length => 1000,
                               nullable => true, code => 'QF100');
    IF _check_bulk.max_rows IS NULL OR _check_bulk.max_rows NOT BETWEEN 1 AND 100000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be an integer from 1 to 100000');
    END IF;
    IF _check_bulk.job_ids IS NULL AND _check_bulk.task IS NULL AND _check_bulk.payload_contains IS NULL
       AND _check_bulk.error_contains IS NULL THEN
        PERFORM fenceq._raise('QF100', 'a bulk action needs job_ids or a filter');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = _check_bulk.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_bulk(text, text[], text, jsonb, text, integer) IS
    'Private. The input checks of the bulk actions; QF100 for a call with neither job ids nor a filter.';

-- retry_jobs: make due now the pending jobs of a queue that wait for a
-- retry (attempts > 0, run_at still ahead, not waiting on dependencies)
-- and match the selection: job_ids, task, payload_contains (@>),
-- error_contains (a case-insensitive substring of last_error, 1 to 1,000
-- characters). Soonest due first, at most max_rows. Answers how many
-- changed; each gets a 'retry_forced' event. Sends fenceq_jobs when the
-- queue notifies and a job changed. Admins only.
-- Locking: the chosen jobs' rows in job id order, then the clock: a job
-- that fell due or changed meanwhile is left alone and not counted.
-- Without job ids it reads the queue's jobs due later (_jobs_later_idx).
-- Again: a job it made due waits no more, so a second call changes none
-- of them; more than max_rows match: call it until it answers 0.
CREATE OR REPLACE FUNCTION fenceq.retry_jobs(
    queue text, job_ids text[] DEFAULT NULL, task text DEFAULT NULL, payload_contains jsonb DEFAULT NULL,
    error_contains text DEFAULT NULL, max_rows integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_needle text := lower(retry_jobs.error_contains);
    v_ids text[];
    v_now timestamptz;
    v_changed integer;
BEGIN
    PERFORM fenceq._check_bulk(retry_jobs.queue, retry_jobs.job_ids, retry_jobs.task, retry_jobs.payload_contains,
                               retry_jobs.error_contains, retry_jobs.max_rows);
    v_now := clock_timestamp();
    SELECT coalesce(array_agg(l.job_id), '{}') INTO v_ids FROM (
        SELECT j.job_id FROM fenceq._jobs AS j
         WHERE j.job_id IN (
                SELECT m.job_id FROM (
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE retry_jobs.job_ids IS NOT NULL AND c.job_id = ANY (retry_jobs.job_ids)
                    UNION ALL
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE retry_jobs.job_ids IS NULL AND c.queue = retry_jobs.queue
                       AND c.status = 'pending' AND c.scheduled AND c.run_at > v_now) AS m
                 WHERE m.queue = retry_jobs.queue AND m.status = 'pending' AND m.attempts > 0
                   AND m.blocked_by IS NULL AND m.run_at > v_now
                   AND (retry_jobs.task IS NULL OR m.task = retry_jobs.task)
                   AND (retry_jobs.payload_contains IS NULL OR m.payload @> retry_jobs.payload_contains)
                   AND (v_needle IS NULL OR strpos(lower(m.last_error), v_needle) > 0)
                 ORDER BY m.run_at, m.job_id
                 LIMIT retry_jobs.max_rows)
         ORDER BY j.job_id
           FOR UPDATE) AS l;
    v_now := clock_timestamp();
    WITH retried AS (
        UPDATE fenceq._jobs AS j
           SET run_at = v_now, scheduled = false  -- due now: ready (part 1c)
         WHERE j.job_id = ANY (v_ids)
           AND j.status = 'pending' AND j.attempts > 0 AND j.blocked_by IS NULL AND j.run_at > v_now
        RETURNING j.job_id, j.queue)
    INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
    SELECT r.job_id, r.queue, clock_timestamp(), 'retry_forced', NULL, NULL,
           fenceq._action_detail('retry_jobs', jsonb_build_object(
               'job_ids', cardinality(retry_jobs.job_ids), 'task', retry_jobs.task,
               'payload_contains', retry_jobs.payload_contains, 'error_contains', retry_jobs.error_contains))
      FROM retried AS r
     ORDER BY r.job_id;
    GET DIAGNOSTICS v_changed = ROW_COUNT;
    IF v_changed > 0 THEN
        PERFORM fenceq._notify_jobs(retry_jobs.queue);
    END IF;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION fenceq.retry_jobs(text, text[], text, jsonb, text, integer) IS
    'Make due now up to max_rows pending jobs of a queue waiting for a retry (attempts > 0, run_at ahead, not blocked) that match job_ids, task, payload_contains and error_contains; each gets a retry_forced event. Returns how many changed. QF100 without job ids or a filter. Admins only.';

-- cancel_jobs: cancel_matching's rule for a selection: the queue's pending
-- jobs (with include_claimed, also its claimed ones: a cancel request, or
-- with force a cancel at once, which kills the fence; a claimed job whose
-- cancel is already requested changes only with force) that match job_ids,
-- task and payload_contains (@>), each as cancel would, oldest (first
-- submitted) first, at most max_rows. Answers how many changed, not
-- counting dependents cancelled with them (§16); a fenceq_control
-- notification for each claimed one. Each change is one event as cancel
-- writes it ('cancelled' with its reason, or 'cancel_requested') with the
-- action's detail. force without include_claimed: QF100. Admins only.
-- (cancel_matching stays as it is.)
-- Locking: the chosen jobs' rows in job id order (cancel_matching's), judged
-- again once locked; it waits for a row another call holds.
-- Again: a cancelled job, or a claimed one whose cancel is requested
-- (without force), no longer matches; call it until it answers 0.
CREATE OR REPLACE FUNCTION fenceq.cancel_jobs(
    queue text, job_ids text[] DEFAULT NULL, task text DEFAULT NULL, payload_contains jsonb DEFAULT NULL,
    include_claimed boolean DEFAULT false, force boolean DEFAULT false, max_rows integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_detail jsonb;
    v_ids text[];
    v_id text;
    v_job fenceq._jobs;
    v_after bigint;
    v_changed integer := 0;
BEGIN
    PERFORM fenceq._check_bulk(cancel_jobs.queue, cancel_jobs.job_ids, cancel_jobs.task,
                               cancel_jobs.payload_contains, NULL, cancel_jobs.max_rows);
    IF cancel_jobs.include_claimed IS NULL OR cancel_jobs.force IS NULL THEN
        PERFORM fenceq._raise('QF100', 'include_claimed and force are required');
    END IF;
    IF cancel_jobs.force AND NOT cancel_jobs.include_claimed THEN
        PERFORM fenceq._raise('QF100', 'force applies to claimed jobs: it needs include_claimed');
    END IF;
    v_detail := fenceq._action_detail('cancel_jobs', jsonb_build_object(
        'job_ids', cardinality(cancel_jobs.job_ids), 'task', cancel_jobs.task,
        'payload_contains', cancel_jobs.payload_contains, 'include_claimed', cancel_jobs.include_claimed,
        'force', cancel_jobs.force));
    SELECT coalesce(array_agg(l.job_id ORDER BY l.job_id), '{}') INTO v_ids FROM (
        SELECT j.job_id FROM fenceq._jobs AS j
         WHERE j.job_id IN (
                SELECT m.job_id FROM (
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE cancel_jobs.job_ids IS NOT NULL AND c.job_id = ANY (cancel_jobs.job_ids)
                    UNION ALL
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE cancel_jobs.job_ids IS NULL AND c.queue = cancel_jobs.queue AND c.status = 'pending'
                    UNION ALL
                    SELECT c.* FROM fenceq._jobs AS c
                     WHERE cancel_jobs.job_ids IS NULL AND cancel_jobs.include_claimed
                       AND c.queue = cancel_jobs.queue AND c.status = 'claimed') AS m
                 WHERE m.queue = cancel_jobs.queue
                   AND (m.status = 'pending'
                        OR (cancel_jobs.include_claimed AND m.status = 'claimed'
                            AND (cancel_jobs.force OR NOT m.cancel_requested)))
                   AND (cancel_jobs.task IS NULL OR m.task = cancel_jobs.task)
                   AND (cancel_jobs.payload_contains IS NULL OR m.payload @> cancel_jobs.payload_contains)
                 ORDER BY m.seq
                 LIMIT cancel_jobs.max_rows)
           -- Judged again on the row as it is once locked.
           AND (j.status = 'pending'
                OR (cancel_jobs.include_claimed AND j.status = 'claimed'
                    AND (cancel_jobs.force OR NOT j.cancel_requested)))
         ORDER BY j.job_id
           FOR UPDATE) AS l;
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = v_id;
        -- A job of the selection that depends on one cancelled just before
        -- was cancelled with it: nothing is left to do.
        CONTINUE WHEN v_job.status NOT IN ('pending', 'claimed');
        v_after := (SELECT max(e.seq) FROM fenceq._events AS e WHERE e.job_id = v_id);
        PERFORM fenceq._record_action(v_id, v_after, fenceq._cancel_locked(v_job, cancel_jobs.force),
            CASE WHEN v_job.status = 'pending' THEN jsonb_build_object('reason', 'cancel')
                 WHEN cancel_jobs.force THEN jsonb_build_object('reason', 'force')
                 ELSE '{}' END || v_detail);
        IF v_job.status = 'claimed' THEN
            PERFORM pg_notify('fenceq_control', v_id);
        END IF;
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION fenceq.cancel_jobs(text, text[], text, jsonb, boolean, boolean, integer) IS
    'Cancel, as cancel would, up to max_rows pending (with include_claimed, also claimed) jobs of a queue matching job_ids, task and payload_contains, oldest first; each change is one event with who and which filter. Returns how many changed. QF100 without job ids or a filter. Admins only.';

-- replay_dead_letters: replay, as replay_dead_letter would, the unhandled
-- dead letters of the queue's failed jobs that match job_ids, task,
-- payload_contains (@>) and error_contains (a case-insensitive substring
-- of last_error), oldest letter first, at most max_rows. A job whose
-- active key another active job holds now (one replayed just before, say)
-- is skipped, where replay_dead_letter would raise QF202. Answers how many
-- jobs were replayed; each gets one 'replayed' event with the action's
-- detail. Admins only.
-- Locking: the letters' rows in letter id order, then the advisory locks of
-- their jobs' active keys (all at once, in _lock_identities' order), then
-- each job's row: replay_dead_letter's order. Without job ids it reads the
-- queue's unhandled letters (_dead_letters_unhandled_idx).
-- Again: a replayed letter is handled, so a second call replays it no more;
-- call it until it answers 0.
CREATE OR REPLACE FUNCTION fenceq.replay_dead_letters(
    queue text, job_ids text[] DEFAULT NULL, task text DEFAULT NULL, payload_contains jsonb DEFAULT NULL,
    error_contains text DEFAULT NULL, max_rows integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_needle text := lower(replay_dead_letters.error_contains);
    v_detail jsonb;
    v_letters text[];
    v_letter fenceq._dead_letters;
    v_job fenceq._jobs;
    v_after bigint;
    v_changed integer := 0;
BEGIN
    PERFORM fenceq._check_bulk(replay_dead_letters.queue, replay_dead_letters.job_ids, replay_dead_letters.task,
                               replay_dead_letters.payload_contains, replay_dead_letters.error_contains,
                               replay_dead_letters.max_rows);
    v_detail := fenceq._action_detail('replay_dead_letters', jsonb_build_object(
        'job_ids', cardinality(replay_dead_letters.job_ids), 'task', replay_dead_letters.task,
        'payload_contains', replay_dead_letters.payload_contains,
        'error_contains', replay_dead_letters.error_contains));
    SELECT coalesce(array_agg(l.dlq_id), '{}') INTO v_letters FROM (
        SELECT d.dlq_id FROM fenceq._dead_letters AS d
         WHERE d.dlq_id IN (
                SELECT m.dlq_id FROM (
                    SELECT c.dlq_id, c.job_id, c.failed_at FROM fenceq._dead_letters AS c
                     WHERE replay_dead_letters.job_ids IS NOT NULL AND c.job_id = ANY (replay_dead_letters.job_ids)
                       AND c.replayed_at IS NULL AND c.discarded_at IS NULL
                    UNION ALL
                    SELECT c.dlq_id, c.job_id, c.failed_at FROM fenceq._dead_letters AS c
                     WHERE replay_dead_letters.job_ids IS NULL AND c.queue = replay_dead_letters.queue
                       AND c.replayed_at IS NULL AND c.discarded_at IS NULL) AS m
                  JOIN fenceq._jobs AS j ON j.job_id = m.job_id
                 WHERE j.queue = replay_dead_letters.queue AND j.status = 'failed'
                   AND (replay_dead_letters.task IS NULL OR j.task = replay_dead_letters.task)
                   AND (replay_dead_letters.payload_contains IS NULL
                        OR j.payload @> replay_dead_letters.payload_contains)
                   AND (v_needle IS NULL OR strpos(lower(j.last_error), v_needle) > 0)
                 ORDER BY m.failed_at, m.dlq_id
                 LIMIT replay_dead_letters.max_rows)
           AND d.replayed_at IS NULL AND d.discarded_at IS NULL
         ORDER BY d.dlq_id
           FOR UPDATE) AS l;
    PERFORM fenceq._lock_identities(ARRAY(
        SELECT k.key FROM fenceq._dead_letters AS d
          JOIN fenceq._jobs AS j ON j.job_id = d.job_id
         CROSS JOIN LATERAL unnest(fenceq._identity_keys(j.queue, j.active_key, NULL, NULL)) AS k(key)
         WHERE d.dlq_id = ANY (v_letters) AND j.active_key IS NOT NULL));
    FOR v_letter IN
        SELECT d.* FROM fenceq._dead_letters AS d WHERE d.dlq_id = ANY (v_letters) ORDER BY d.failed_at, d.dlq_id
    LOOP
        SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id FOR UPDATE;
        CONTINUE WHEN v_job.status IS DISTINCT FROM 'failed';
        CONTINUE WHEN v_job.active_key IS NOT NULL
            AND EXISTS (SELECT 1 FROM fenceq._jobs AS a
                         WHERE a.queue = v_job.queue AND a.active_key = v_job.active_key
                           AND a.status IN ('pending', 'claimed'));
        v_after := (SELECT max(e.seq) FROM fenceq._events AS e WHERE e.job_id = v_job.job_id);
        IF fenceq.replay_dead_letter(v_letter.dlq_id) IS NOT NULL THEN
            PERFORM fenceq._record_action(v_job.job_id, v_after, 'replayed',
                                          jsonb_build_object('dlq_id', v_letter.dlq_id) || v_detail);
            v_changed := v_changed + 1;
        END IF;
    END LOOP;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION fenceq.replay_dead_letters(text, text[], text, jsonb, text, integer) IS
    'Replay, as replay_dead_letter would, up to max_rows unhandled dead letters of a queue''s failed jobs matching job_ids, task, payload_contains and error_contains, oldest first, skipping a job whose active key is held; each replay is one event with who and which filter. Returns how many jobs were replayed. QF100 without job ids or a filter. Admins only.';

-- The functions this version changed, as the parts have them.

-- verify_schema: one row per check (check_name, ok, detail). Read-only.
-- The details name schema objects, never data.
CREATE OR REPLACE FUNCTION fenceq.verify_schema()
RETURNS TABLE(check_name text, ok boolean, detail text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_bad text;
BEGIN
    check_name := 'server_encoding';
    ok := current_setting('server_encoding') = 'UTF8';
    detail := CASE WHEN ok THEN 'UTF8' ELSE 'server_encoding must be UTF8' END;
    RETURN NEXT;

    -- Every column this version reads or writes, with its exact type.
    WITH expected(tbl, col, typ, not_null) AS (VALUES
        ('_queues', 'queue', 'text', true), ('_queues', 'lease', 'interval', true),
        ('_queues', 'max_attempts', 'integer', true), ('_queues', 'backoff_base', 'interval', true),
        ('_queues', 'backoff_factor', 'double precision', true), ('_queues', 'backoff_max', 'interval', true),
        ('_queues', 'dead_letter', 'boolean', true), ('_queues', 'paused', 'boolean', true),
        ('_queues', 'notify', 'boolean', true), ('_queues', 'created_at', 'timestamp with time zone', true),
        ('_queues', 'max_claimed', 'integer', false), ('_queues', 'max_claimed_per_key', 'integer', false),
        ('_queues', 'rate_limit', 'integer', false), ('_queues', 'rate_period', 'interval', false),
        ('_jobs', 'concurrency_key', 'text', false),
        ('_jobs', 'blocked_by', 'integer', false),
        ('_jobs', 'blocked_run_at', 'timestamp with time zone', false),
        ('_dependencies', 'depends_on', 'text', true), ('_dependencies', 'job_id', 'text', true),
        ('_dependencies', 'satisfied', 'boolean', true),
        ('_rate_window', 'queue', 'text', true), ('_rate_window', 'claimed_at', 'timestamp with time zone', true),
        ('_queues', 'notify_done', 'boolean', true), ('_jobs', 'progress', 'jsonb', false),
        ('_jobs', 'progress_at', 'timestamp with time zone', false),
        ('_jobs', 'seq', 'bigint', true), ('_jobs', 'job_id', 'text', true),
        ('_jobs', 'queue', 'text', true), ('_jobs', 'task', 'text', true),
        ('_jobs', 'payload', 'jsonb', false), ('_jobs', 'priority', 'integer', true),
        ('_jobs', 'status', 'text', true), ('_jobs', 'attempts', 'integer', true),
        ('_jobs', 'max_attempts', 'integer', true), ('_jobs', 'run_at', 'timestamp with time zone', true),
        ('_jobs', 'expires_at', 'timestamp with time zone', false), ('_jobs', 'owner_id', 'text', false),
        ('_jobs', 'generation', 'bigint', true), ('_jobs', 'claim_token', 'text', false),
        ('_jobs', 'lease', 'interval', false), ('_jobs', 'lease_expires_at', 'timestamp with time zone', false),
        ('_jobs', 'budget_expires_at', 'timestamp with time zone', false),
        ('_jobs', 'cancel_requested', 'boolean', true), ('_jobs', 'pid', 'integer', false),
        ('_jobs', 'result', 'jsonb', false), ('_jobs', 'last_error', 'text', false),
        ('_jobs', 'submission_id', 'text', false), ('_jobs', 'fingerprint', 'text', false),
        ('_jobs', 'active_key', 'text', false), ('_jobs', 'dlq_id', 'text', false),
        ('_jobs', 'created_at', 'timestamp with time zone', true),
        ('_jobs', 'finished_at', 'timestamp with time zone', false),
        ('_submissions', 'submission_id', 'text', true), ('_submissions', 'fingerprint', 'text', true),
        ('_submissions', 'job_id', 'text', true), ('_submissions', 'queue', 'text', true),
        ('_submissions', 'created_at', 'timestamp with time zone', true),
        ('_claims', 'claim_token', 'text', true), ('_claims', 'job_id', 'text', true),
        ('_claims', 'generation', 'bigint', true), ('_claims', 'owner_id', 'text', true),
        ('_claims', 'claimed_at', 'timestamp with time zone', true),
        ('_checkpoints', 'job_id', 'text', true), ('_checkpoints', 'step', 'text', true),
        ('_checkpoints', 'value', 'jsonb', true), ('_checkpoints', 'generation', 'bigint', true),
        ('_checkpoints', 'recorded_at', 'timestamp with time zone', true),
        ('_dead_letters', 'dlq_id', 'text', true), ('_dead_letters', 'job_id', 'text', true),
        ('_dead_letters', 'queue', 'text', true), ('_dead_letters', 'task', 'text', true),
        ('_dead_letters', 'error', 'text', false), ('_dead_letters', 'attempts', 'integer', true),
        ('_dead_letters', 'failed_at', 'timestamp with time zone', true),
        ('_dead_letters', 'replayed_at', 'timestamp with time zone', false),
        ('_dead_letters', 'discarded_at', 'timestamp with time zone', false),
        ('_locks', 'lock', 'text', true), ('_locks', 'owner_id', 'text', false),
        ('_locks', 'token', 'bigint', true), ('_locks', 'expires_at', 'timestamp with time zone', false),
        ('_schedules', 'schedule', 'text', true), ('_schedules', 'queue', 'text', true),
        ('_schedules', 'task', 'text', true), ('_schedules', 'cron', 'text', true),
        ('_schedules', 'time_zone', 'text', true), ('_schedules', 'payload', 'jsonb', false),
        ('_schedules', 'priority', 'integer', false), ('_schedules', 'max_attempts', 'integer', false),
        ('_schedules', 'active_key', 'text', false), ('_schedules', 'paused', 'boolean', true),
        ('_schedules', 'cron_minutes', 'integer[]', true), ('_schedules', 'cron_hours', 'integer[]', true),
        ('_schedules', 'cron_days', 'integer[]', true), ('_schedules', 'cron_months', 'integer[]', true),
        ('_schedules', 'cron_weekdays', 'integer[]', true), ('_schedules', 'cron_days_and', 'boolean', true),
        ('_schedules', 'next_run_at', 'timestamp with time zone', false),
        ('_schedules', 'last_run_at', 'timestamp with time zone', false),
        ('_schedules', 'last_job_id', 'text', false),
        ('_queues', 'requeue_priority', 'text', true), ('_queues', 'history', 'boolean', true),
        ('_queues', 'history_retention', 'interval', false),
        ('_dispatches', 'job_id', 'text', true), ('_dispatches', 'backend', 'text', true),
        ('_dispatches', 'generation', 'bigint', true), ('_dispatches', 'state', 'text', true),
        ('_dispatches', 'reservation_ref', 'text', true), ('_dispatches', 'execution_ref', 'text', false),
        ('_dispatches', 'reserved_at', 'timestamp with time zone', true),
        ('_dispatches', 'finalized_at', 'timestamp with time zone', false),
        ('_dispatches', 'checked_at', 'timestamp with time zone', false),
        ('_events', 'job_id', 'text', true), ('_events', 'seq', 'bigint', true),
        ('_events', 'queue', 'text', true), ('_events', 'at', 'timestamp with time zone', true),
        ('_events', 'event', 'text', true), ('_events', 'generation', 'bigint', false),
        ('_events', 'owner_id', 'text', false), ('_events', 'detail', 'jsonb', true),
        ('_activity', 'queue', 'text', true), ('_activity', 'minute', 'timestamp with time zone', true),
        ('_activity', 'submitted', 'integer', true), ('_activity', 'claimed', 'integer', true),
        ('_activity', 'retried', 'integer', true), ('_activity', 'completed', 'integer', true),
        ('_activity', 'failed', 'integer', true), ('_activity', 'cancelled', 'integer', true),
        ('_activity', 'expired', 'integer', true), ('_activity', 'pending', 'integer', false),
        ('_activity', 'due', 'integer', false), ('_activity', 'running', 'integer', false),
        ('_activity', 'wait_hist', 'integer[]', true), ('_activity', 'run_hist', 'integer[]', true))
    SELECT string_agg(e.tbl || '.' || e.col, ', ' ORDER BY e.tbl, e.col) INTO v_bad
      FROM expected AS e
      LEFT JOIN pg_attribute AS a
        ON a.attrelid = to_regclass('fenceq.' || e.tbl) AND a.attname = e.col
       AND a.attnum > 0 AND NOT a.attisdropped
     WHERE a.attname IS NULL
        OR format_type(a.atttypid, a.atttypmod) <> e.typ
        OR a.attnotnull <> e.not_null;
    check_name := 'column_types'; ok := v_bad IS NULL;
    detail := coalesce('wrong or missing: ' || v_bad, 'all columns as expected');
    RETURN NEXT;

    -- Every text column is compared exactly: its collation must be
    -- deterministic (a nondeterministic ICU collation would fold case).
    SELECT string_agg(c.relname || '.' || a.attname, ', ' ORDER BY c.relname, a.attname) INTO v_bad
      FROM pg_attribute AS a
      JOIN pg_class AS c ON c.oid = a.attrelid
      JOIN pg_namespace AS n ON n.oid = c.relnamespace
      JOIN pg_collation AS co ON co.oid = a.attcollation
     WHERE n.nspname = 'fenceq' AND c.relkind = 'r' AND c.relname LIKE '\_%'
       AND a.attnum > 0 AND NOT a.attisdropped AND NOT co.collisdeterministic;
    check_name := 'deterministic_collations'; ok := v_bad IS NULL;
    detail := coalesce('nondeterministic: ' || v_bad, 'all text columns deterministic');
    RETURN NEXT;

    -- Identity is arbitrated by exact, full, single-column unique indexes.
    FOR check_name, v_bad IN VALUES ('claim_token_unique', '_claims.claim_token'),
                                    ('submission_id_unique', '_submissions.submission_id'),
                                    ('job_id_unique', '_jobs.job_id'),
                                    ('dispatch_job_unique', '_dispatches.job_id')
    LOOP
        SELECT count(*) = 1 INTO ok
          FROM pg_index AS i
          JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
          JOIN pg_collation AS co ON co.oid = i.indcollation[0]
         WHERE i.indrelid = to_regclass('fenceq.' || split_part(v_bad, '.', 1))
           AND a.attname = split_part(v_bad, '.', 2)
           AND i.indisunique AND i.indisvalid AND i.indnatts = 1 AND i.indnkeyatts = 1
           AND i.indpred IS NULL AND i.indexprs IS NULL AND co.collisdeterministic;
        detail := CASE WHEN ok THEN 'exact unique index on ' || v_bad
                       ELSE 'needs exactly one full single-column unique index on ' || v_bad END;
        RETURN NEXT;
    END LOOP;

    -- At most one active job per (queue, active_key) is arbitrated by this
    -- exact partial unique index (submit relies on it in ON CONFLICT).
    SELECT count(*) = 1 INTO ok
      FROM pg_index AS i
     WHERE i.indrelid = to_regclass('fenceq._jobs') AND i.indisunique AND i.indisvalid
       AND i.indnatts = 2 AND i.indexprs IS NULL
       AND (SELECT array_agg(a.attname::text ORDER BY k.ord)
              FROM unnest(i.indkey::smallint[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
           = ARRAY['queue', 'active_key']
       AND pg_get_expr(i.indpred, i.indrelid)
           = '((active_key IS NOT NULL) AND (status = ANY (ARRAY[''pending''::text, ''claimed''::text])))';
    check_name := 'active_key_unique';
    detail := CASE WHEN ok THEN 'partial unique index on _jobs (queue, active_key) for active jobs'
                   ELSE 'needs the partial unique index on _jobs (queue, active_key) WHERE active' END;
    RETURN NEXT;

    -- One activity row per queue and minute: sample_activity's ON CONFLICT
    -- DO NOTHING writes each minute once only against this exact index.
    SELECT count(*) = 1 INTO ok
      FROM pg_index AS i
     WHERE i.indrelid = to_regclass('fenceq._activity') AND i.indisunique AND i.indisvalid
       AND i.indnatts = 2 AND i.indexprs IS NULL AND i.indpred IS NULL
       AND (SELECT array_agg(a.attname::text ORDER BY k.ord)
              FROM unnest(i.indkey::smallint[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
           = ARRAY['queue', 'minute'];
    check_name := 'activity_minute_unique';
    detail := CASE WHEN ok THEN 'unique index on _activity (queue, minute)'
                   ELSE 'needs exactly one unique index on _activity (queue, minute)' END;
    RETURN NEXT;

    -- The public shapes callers read: the claim type, search_jobs' row type
    -- and the views, with their columns in contract order (they are only
    -- ever appended to).
    WITH expected(obj, cols) AS (VALUES
        ('claim', ARRAY['job_id', 'queue', 'task', 'payload', 'priority', 'attempt', 'max_attempts',
                        'owner_id', 'generation', 'claim_token', 'lease_expires_at', 'budget_expires_at',
                        'cancel_requested', 'submission_id', 'checkpoints']),
        ('jobs', ARRAY['job_id', 'queue', 'task', 'payload', 'priority', 'status', 'attempts',
                       'max_attempts', 'run_at', 'expires_at', 'owner_id', 'generation',
                       'lease_expires_at', 'budget_expires_at', 'cancel_requested', 'pid', 'result',
                       'last_error', 'submission_id', 'fingerprint', 'active_key', 'dlq_id',
                       'created_at', 'finished_at', 'concurrency_key', 'blocked_by', 'progress', 'progress_at']),
        ('dependencies', ARRAY['job_id', 'depends_on', 'satisfied']),
        ('submissions', ARRAY['submission_id', 'job_id', 'queue', 'created_at']),
        ('checkpoints', ARRAY['job_id', 'step', 'value', 'generation', 'recorded_at']),
        ('attempts', ARRAY['job_id', 'generation', 'owner_id', 'claimed_at']),
        ('queue_stats', ARRAY['queue', 'pending', 'due', 'claimed', 'cancel_requested',
                              'oldest_due_age', 'paused', 'notify', 'max_claimed',
                              'max_claimed_per_key', 'busiest_key_claimed', 'rate_limit', 'rate_period',
                              'rate_used', 'blocked']),
        ('dead_letters', ARRAY['dlq_id', 'job_id', 'queue', 'task', 'error', 'attempts',
                               'failed_at', 'replayed_at', 'discarded_at']),
        ('locks', ARRAY['lock', 'owner_id', 'token', 'expires_at']),
        ('schedules', ARRAY['schedule', 'queue', 'task', 'cron', 'time_zone', 'payload', 'priority',
                            'max_attempts', 'active_key', 'paused', 'next_run_at', 'last_run_at',
                            'last_job_id']),
        ('dispatches', ARRAY['job_id', 'queue', 'backend', 'state', 'reservation_ref', 'execution_ref',
                             'owner_id', 'generation', 'lease_expires_at', 'checked_at']),
        ('job_events', ARRAY['job_id', 'seq', 'at', 'event', 'generation', 'owner_id', 'detail']),
        ('job_search_row', ARRAY['job_id', 'queue', 'task', 'payload', 'priority', 'status', 'attempts',
                                 'max_attempts', 'run_at', 'expires_at', 'owner_id', 'generation',
                                 'lease_expires_at', 'budget_expires_at', 'cancel_requested', 'pid', 'result',
                                 'last_error', 'submission_id', 'fingerprint', 'active_key', 'dlq_id',
                                 'created_at', 'finished_at', 'concurrency_key', 'blocked_by', 'progress',
                                 'progress_at', 'seq']))
    SELECT string_agg(e.obj, ', ' ORDER BY e.obj) INTO v_bad
      FROM expected AS e
     WHERE e.cols IS DISTINCT FROM (
            SELECT (array_agg(a.attname::text ORDER BY a.attnum))[1:cardinality(e.cols)]
              FROM pg_class AS c
              JOIN pg_namespace AS n ON n.oid = c.relnamespace
              JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             WHERE n.nspname = 'fenceq' AND c.relname = e.obj AND c.relkind IN ('v', 'c'));
    check_name := 'public_shapes'; ok := v_bad IS NULL;
    detail := coalesce('missing or reordered columns: ' || v_bad, 'the types and views as expected');
    RETURN NEXT;

    -- No default may manufacture identity or an invalid state.
    WITH expected(tbl, col, def) AS (VALUES
        ('_jobs', 'job_id', NULL), ('_jobs', 'owner_id', NULL), ('_jobs', 'claim_token', NULL),
        ('_jobs', 'submission_id', NULL), ('_jobs', 'fingerprint', NULL), ('_jobs', 'active_key', NULL),
        ('_jobs', 'dlq_id', NULL), ('_jobs', 'lease_expires_at', NULL), ('_jobs', 'pid', NULL),
        ('_jobs', 'generation', '0'), ('_jobs', 'attempts', '0'),
        ('_jobs', 'status', '''pending''::text'), ('_jobs', 'cancel_requested', 'false'),
        ('_submissions', 'submission_id', NULL), ('_submissions', 'fingerprint', NULL),
        ('_submissions', 'job_id', NULL), ('_claims', 'claim_token', NULL),
        ('_claims', 'job_id', NULL), ('_claims', 'owner_id', NULL), ('_claims', 'generation', NULL),
        ('_dead_letters', 'dlq_id', NULL), ('_queues', 'paused', 'false'), ('_queues', 'notify', 'true'),
        ('_locks', 'lock', NULL), ('_locks', 'owner_id', NULL), ('_locks', 'token', NULL),
        ('_queues', 'notify_done', 'false'), ('_jobs', 'progress', NULL), ('_jobs', 'progress_at', NULL),
        ('_queues', 'requeue_priority', '''keep''::text'), ('_queues', 'history', 'false'),
        ('_dispatches', 'job_id', NULL), ('_dispatches', 'generation', NULL), ('_dispatches', 'state', NULL),
        ('_dispatches', 'reservation_ref', NULL), ('_dispatches', 'execution_ref', NULL))
    SELECT string_agg(e.tbl || '.' || e.col, ', ' ORDER BY e.tbl, e.col) INTO v_bad
      FROM expected AS e
      LEFT JOIN pg_attrdef AS d
        ON d.adrelid = to_regclass('fenceq.' || e.tbl)
       AND d.adnum = (SELECT a.attnum FROM pg_attribute AS a
                       WHERE a.attrelid = to_regclass('fenceq.' || e.tbl) AND a.attname = e.col)
     WHERE pg_get_expr(d.adbin, d.adrelid) IS DISTINCT FROM e.def;
    check_name := 'defaults'; ok := v_bad IS NULL;
    detail := coalesce('unexpected default: ' || v_bad, 'no default manufactures identity or state');
    RETURN NEXT;

    -- Nothing may rewrite what the functions store behind their back.
    SELECT string_agg(c.relname || '.' || t.tgname, ', ') INTO v_bad
      FROM pg_trigger AS t
      JOIN pg_class AS c ON c.oid = t.tgrelid
      JOIN pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname = 'fenceq' AND NOT t.tgisinternal;
    check_name := 'no_triggers'; ok := v_bad IS NULL;
    detail := coalesce('unexpected triggers: ' || v_bad, 'no triggers on fenceq tables');
    RETURN NEXT;

    -- The one exception: the private helpers the planner inlines into their
    -- caller's statement (see _is_plain_duration), by name. Each must be a
    -- SQL function with a SQL-standard body (bound at creation, so its
    -- dependencies are recorded), no SET clause, nothing it depends on
    -- outside pg_catalog and fenceq, and no role but its owner may run it.
    SELECT string_agg(p.proname, ', ' ORDER BY p.proname) INTO v_bad
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
     WHERE n.nspname = 'fenceq' AND NOT p.prosecdef
       AND NOT (p.proname || '(' || oidvectortypes(p.proargtypes) || ')' IN (
                    '_is_plain_duration(interval)', '_is_plain_fence(text, text, bigint, text)',
                    '_is_plain_json(jsonb)', '_is_plain_json_int(jsonb, integer)',
                    '_is_plain_time(timestamp with time zone)', '_new_job_id()',
                    '_fingerprint_of(text, text, text, text, text, integer, timestamp with time zone, '
                    'timestamp with time zone, integer, text, boolean, text, text[])')
                AND p.prolang = (SELECT l.oid FROM pg_language AS l WHERE l.lanname = 'sql')
                AND p.prosqlbody IS NOT NULL AND p.proconfig IS NULL
                AND NOT EXISTS (
                    SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
                     WHERE a.grantee <> p.proowner)
                AND NOT EXISTS (
                    SELECT 1 FROM pg_depend AS d
                      LEFT JOIN pg_proc AS dp ON d.refclassid = 'pg_proc'::regclass AND dp.oid = d.refobjid
                      LEFT JOIN pg_operator AS dop ON d.refclassid = 'pg_operator'::regclass AND dop.oid = d.refobjid
                      LEFT JOIN pg_type AS dt ON d.refclassid = 'pg_type'::regclass AND dt.oid = d.refobjid
                     WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                       AND coalesce(dp.pronamespace, dop.oprnamespace, dt.typnamespace)
                           NOT IN ('pg_catalog'::regnamespace, n.oid)));
    check_name := 'security_definer'; ok := v_bad IS NULL;
    detail := coalesce('not SECURITY DEFINER: ' || v_bad,
                       'every function is SECURITY DEFINER but the inlined private helpers');
    RETURN NEXT;

    -- Planner settings the functions pin for their own plans (see part 5)
    -- are allowed beside the search_path, and nothing else.
    SELECT string_agg(p.proname, ', ' ORDER BY p.proname) INTO v_bad
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
     WHERE n.nspname = 'fenceq' AND p.prosecdef
       AND ARRAY(SELECT c.setting FROM unnest(p.proconfig) AS c(setting)
                  WHERE c.setting NOT IN ('plan_cache_mode=force_generic_plan', 'enable_seqscan=off'))
           IS DISTINCT FROM ARRAY['search_path=pg_catalog, fenceq, pg_temp'];
    check_name := 'pinned_search_path'; ok := v_bad IS NULL;
    detail := coalesce('search_path not pinned: ' || v_bad, 'every function pins search_path');
    RETURN NEXT;

    SELECT string_agg(DISTINCT p.proname, ', ') INTO v_bad
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
     CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS acl
     WHERE n.nspname = 'fenceq' AND acl.grantee = 0 AND acl.privilege_type = 'EXECUTE';
    check_name := 'no_public_execute'; ok := v_bad IS NULL;
    detail := coalesce('PUBLIC may execute: ' || v_bad, 'PUBLIC has no EXECUTE');
    RETURN NEXT;

    SELECT string_agg(DISTINCT o.name, ', ') INTO v_bad FROM (
        SELECT p.proname AS name, p.proowner AS owner
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'fenceq'
        UNION ALL
        SELECT c.relname, c.relowner
          FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'fenceq' AND c.relkind IN ('r', 'v')) AS o
      JOIN pg_roles AS r ON r.oid = o.owner
     WHERE r.rolsuper;
    check_name := 'owner_not_superuser'; ok := v_bad IS NULL;
    detail := coalesce('owned by a superuser: ' || v_bad, 'no fenceq object is owned by a superuser');
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION fenceq.verify_schema() IS
    'Admission check of the deployed schema: encoding, column types, deterministic collations, exact unique identity indexes, the active-key and activity indexes, the public types and views, safe defaults, no triggers, SECURITY DEFINER with pinned search_path, no PUBLIC EXECUTE, no superuser owner. One row per check.';

-- version: the installed schema version.
CREATE OR REPLACE FUNCTION fenceq.version()
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN '7';
END
$$;
COMMENT ON FUNCTION fenceq.version() IS 'The installed fenceq schema version.';

-- fenceq for PostgreSQL, part 9: ownership and privileges.
--
-- Everything is owned by the NOLOGIN, non-superuser role fenceq_owner when the
-- installer may create it, so SECURITY DEFINER functions run with no more
-- than the queue's own rights. Otherwise the installing role stays owner (the
-- functions then run with its rights; docs/dba.md says what that means).
-- PUBLIC gets nothing: grants to the fenceq_* roles are added separately,
-- without touching any function body.
DO $$
DECLARE
    v_can_create boolean;
    v_object record;
BEGIN
    SELECT r.rolsuper OR r.rolcreaterole INTO v_can_create
      FROM pg_roles AS r WHERE r.rolname = current_user;
    IF NOT EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = 'fenceq_owner') THEN
        IF NOT v_can_create THEN
            RAISE NOTICE 'fenceq: may not create role fenceq_owner; objects stay owned by %', current_user;
            RETURN;
        END IF;
        BEGIN
            CREATE ROLE fenceq_owner NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
        EXCEPTION WHEN duplicate_object THEN
            NULL;  -- created concurrently by an install in another database
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = 'fenceq_owner'
                AND (r.rolcanlogin OR r.rolsuper)) THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: role fenceq_owner exists and can log in or is a superuser; refusing to use it';
    END IF;
    IF NOT pg_has_role(current_user, 'fenceq_owner', 'MEMBER') THEN
        IF NOT v_can_create THEN
            RAISE NOTICE 'fenceq: not a member of fenceq_owner; objects stay owned by %', current_user;
            RETURN;
        END IF;
        EXECUTE format('GRANT fenceq_owner TO %I', current_user);
    END IF;
    EXECUTE 'ALTER SCHEMA fenceq OWNER TO fenceq_owner';
    -- Only what another role owns: ALTER TABLE ... OWNER takes an ACCESS
    -- EXCLUSIVE lock even when the owner stays the same, and an upgrade
    -- must not stop the queue for nothing.
    FOR v_object IN
        SELECT format('ALTER %s %s OWNER TO fenceq_owner',
                      CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, c.oid::regclass) AS stmt
          FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'fenceq' AND c.relkind IN ('r', 'v')
           AND c.relowner <> 'fenceq_owner'::regrole
        UNION ALL
        SELECT format('ALTER FUNCTION %s OWNER TO fenceq_owner', p.oid::regprocedure)
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'fenceq' AND p.proowner <> 'fenceq_owner'::regrole
        UNION ALL
        SELECT format('ALTER TYPE %s OWNER TO fenceq_owner', t.oid::regtype)
          FROM pg_type AS t JOIN pg_class AS c ON c.oid = t.typrelid
         WHERE t.typnamespace = 'fenceq'::regnamespace AND c.relkind = 'c'
           AND t.typowner <> 'fenceq_owner'::regrole
    LOOP
        EXECUTE v_object.stmt;
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA fenceq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA fenceq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA fenceq FROM PUBLIC;

-- Group roles (docs/guarantees.md §10), NOLOGIN; applications log in as their own
-- roles and are granted one of these. Roles are cluster-wide: membership
-- grants the same rights in every database of the cluster where fenceq is
-- installed. An existing role of these names that can log in is refused.
--   fenceq_producer: submit, submit_batch, get_job, version
--   fenceq_worker:   the producer's rights, every fenced worker function,
--                    reap, tick, next_due, and the views
--                    (and the named locks, docs/guarantees.md §15; the
--                    external dispatch calls and get_job_events, §19-§20;
--                    sample_activity, activity and search_jobs, §21)
--   fenceq_admin:    everything (queue settings, cancel, purge, dead
--                    letters, the bulk actions, verify_schema) and the views
-- Private tables and _helpers are granted to nobody: everything goes
-- through the SECURITY DEFINER functions.
DO $$
DECLARE
    v_can_create boolean;
    v_role text;
    v_function text;
    v_grants constant jsonb := jsonb_build_object(
        'fenceq_producer', jsonb_build_array('submit', 'submit_batch', 'get_job', 'version'),
        'fenceq_worker', jsonb_build_array('submit', 'submit_batch', 'get_job', 'version',
            'claim_next', 'claim_batch', 'recover_claim', 'heartbeat', 'heartbeat_batch', 'complete',
            'complete_batch', 'fail', 'release', 'checkpoint', 'set_pid', 'claim_state',
            'acknowledge_cancel', 'reap',
            'tick', 'next_due', 'extend', 'acquire_lock', 'renew_lock', 'release_lock', 'check_lock',
            'progress', 'reserve_dispatch', 'finalize_dispatch', 'release_dispatch', 'replace_dispatch_ref',
            'adopt_dispatch', 'dispatch_repair_candidates', 'get_job_events',
            'sample_activity', 'activity', 'search_jobs'));
BEGIN
    SELECT r.rolsuper OR r.rolcreaterole INTO v_can_create FROM pg_roles AS r WHERE r.rolname = current_user;
    FOREACH v_role IN ARRAY ARRAY['fenceq_producer', 'fenceq_worker', 'fenceq_admin'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = v_role AND (r.rolcanlogin OR r.rolsuper)) THEN
            RAISE EXCEPTION USING ERRCODE = 'QF901',
                MESSAGE = format('fenceq: role %s exists and can log in or is a superuser; refusing to use it', v_role);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_roles AS r WHERE r.rolname = v_role) THEN
            IF NOT v_can_create THEN
                RAISE NOTICE 'fenceq: may not create role %; grant its rights by hand (docs/dba.md)', v_role;
                CONTINUE;
            END IF;
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object THEN
                NULL;  -- created concurrently by an install in another database
            END;
        END IF;
        EXECUTE format('GRANT USAGE ON SCHEMA fenceq TO %I', v_role);
        IF v_role = 'fenceq_admin' THEN
            FOR v_function IN
                SELECT p.oid::regprocedure::text FROM pg_proc AS p
                  JOIN pg_namespace AS n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'fenceq' AND p.proname NOT LIKE '\_%'
            LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_function, v_role);
            END LOOP;
        ELSE
            FOR v_function IN
                SELECT p.oid::regprocedure::text FROM pg_proc AS p
                  JOIN pg_namespace AS n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'fenceq'
                   AND p.proname IN (SELECT jsonb_array_elements_text(v_grants -> v_role))
            LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_function, v_role);
            END LOOP;
        END IF;
        IF v_role <> 'fenceq_producer' THEN  -- every view: they show no claim token
            FOR v_function IN
                SELECT c.oid::regclass::text FROM pg_class AS c
                  JOIN pg_namespace AS n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'fenceq' AND c.relkind = 'v'
            LOOP
                EXECUTE format('GRANT SELECT ON %s TO %I', v_function, v_role);
            END LOOP;
        END IF;
    END LOOP;
END
$$;

-- Admission: an install or migration refuses to finish on a schema that
-- fails any verify_schema check (docs/guarantees.md §3).
DO $$
DECLARE
    v_failed text;
BEGIN
    SELECT string_agg(v.check_name, ', ') INTO v_failed FROM fenceq.verify_schema() AS v WHERE NOT v.ok;
    IF v_failed IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: the schema fails verify_schema checks: ' || v_failed;
    END IF;
END
$$;

-- The installer's own search_path again (see part 1), for whatever its
-- transaction runs next (the migration bookkeeping, for one).
SELECT set_config('search_path', current_setting('fenceq.installer_search_path'), true);
