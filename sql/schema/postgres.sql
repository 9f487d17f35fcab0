SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

CREATE SCHEMA fenceq;

ALTER SCHEMA fenceq OWNER TO fenceq_owner;

COMMENT ON SCHEMA fenceq IS 'fenceq: a fenced, owned work queue. Call the functions; the _tables are private.';

CREATE SCHEMA fenceq_migrations;

ALTER SCHEMA fenceq_migrations OWNER TO postgres;

CREATE TYPE fenceq._call_claim AS (
	generation bigint,
	owner_id text,
	claimed_at timestamp with time zone,
	claim_nonce text
);

ALTER TYPE fenceq._call_claim OWNER TO fenceq_owner;

CREATE TYPE fenceq.claim AS (
	job_id text,
	queue text,
	task text,
	payload jsonb,
	priority integer,
	attempt integer,
	max_attempts integer,
	owner_id text,
	generation bigint,
	claim_token text,
	lease_expires_at timestamp with time zone,
	budget_expires_at timestamp with time zone,
	cancel_requested boolean,
	submission_id text,
	checkpoints jsonb
);

ALTER TYPE fenceq.claim OWNER TO fenceq_owner;

COMMENT ON TYPE fenceq.claim IS 'One successful claim: the job and its fence (job_id, owner_id, generation, claim_token).';

CREATE TYPE fenceq.job_search_row AS (
	job_id text,
	queue text,
	task text,
	payload jsonb,
	priority integer,
	status text,
	attempts integer,
	max_attempts integer,
	run_at timestamp with time zone,
	expires_at timestamp with time zone,
	owner_id text,
	generation bigint,
	lease_expires_at timestamp with time zone,
	budget_expires_at timestamp with time zone,
	cancel_requested boolean,
	pid integer,
	result jsonb,
	last_error text,
	submission_id text,
	fingerprint text,
	active_key text,
	dlq_id text,
	created_at timestamp with time zone,
	finished_at timestamp with time zone,
	concurrency_key text,
	blocked_by integer,
	progress jsonb,
	progress_at timestamp with time zone,
	seq bigint
);

ALTER TYPE fenceq.job_search_row OWNER TO fenceq_owner;

COMMENT ON TYPE fenceq.job_search_row IS 'One job search_jobs found: the columns of fenceq.jobs, then seq (submission order).';

CREATE FUNCTION fenceq._action_detail(action text, filter jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN jsonb_build_object('by', session_user::text, 'action', _action_detail.action,
                              'filter', jsonb_strip_nulls(_action_detail.filter));
END
$$;

ALTER FUNCTION fenceq._action_detail(action text, filter jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._action_detail(action text, filter jsonb) IS 'Private. A bulk action''s event detail: who (session_user), which action, and its filter without the NULLs.';

CREATE FUNCTION fenceq._activity_end(now timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN date_trunc('minute', _activity_end.now - interval '10 seconds', 'UTC');
END
$$;

ALTER FUNCTION fenceq._activity_end(now timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._activity_end(now timestamp with time zone) IS 'Private. The end of the last closed minute at this clock reading (a minute closes 10 seconds after it ends).';

CREATE FUNCTION fenceq._backoff(attempt integer, base interval, factor double precision, max interval) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_base double precision := extract(epoch FROM _backoff.base);
    v_max  double precision := extract(epoch FROM _backoff.max);
    v_exponent integer := greatest(_backoff.attempt - 1, 0);
BEGIN
    IF v_base <= 0 THEN
        RETURN interval '0';
    END IF;
    IF ln(v_base) + v_exponent * ln(_backoff.factor) >= ln(v_max) THEN
        RETURN _backoff.max;
    END IF;
    RETURN make_interval(secs => v_base * power(_backoff.factor, v_exponent));
END
$$;

ALTER FUNCTION fenceq._backoff(attempt integer, base interval, factor double precision, max interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._backoff(attempt integer, base interval, factor double precision, max interval) IS 'Private. Retry delay for an attempt: LEAST(base * factor^(attempt-1), max), overflow-free.';

SET default_table_access_method = heap;

CREATE TABLE fenceq._jobs (
    seq bigint NOT NULL,
    job_id text NOT NULL COLLATE pg_catalog."C",
    queue text NOT NULL COLLATE pg_catalog."C",
    task text NOT NULL COLLATE pg_catalog."C",
    payload jsonb,
    priority integer NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL COLLATE pg_catalog."C",
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    run_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    owner_id text COLLATE pg_catalog."C",
    generation bigint DEFAULT 0 NOT NULL,
    claim_token text COLLATE pg_catalog."C",
    lease interval,
    lease_expires_at timestamp with time zone,
    budget_expires_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    pid integer,
    result jsonb,
    last_error text,
    submission_id text COLLATE pg_catalog."C",
    fingerprint text COLLATE pg_catalog."C",
    active_key text COLLATE pg_catalog."C",
    dlq_id text COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    concurrency_key text COLLATE pg_catalog."C",
    blocked_by integer,
    blocked_run_at timestamp with time zone,
    progress jsonb,
    progress_at timestamp with time zone,
    scheduled boolean DEFAULT false NOT NULL,
    call_claims fenceq._call_claim[],
    CONSTRAINT _jobs_attempts_check CHECK (((attempts >= 0) AND (max_attempts > 0))),
    CONSTRAINT _jobs_generation_check CHECK ((generation >= 0)),
    CONSTRAINT _jobs_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'claimed'::text, 'completed'::text, 'failed'::text, 'cancelled'::text, 'expired'::text])))
)
WITH (fillfactor='80');

ALTER TABLE fenceq._jobs OWNER TO fenceq_owner;

CREATE FUNCTION fenceq._cancel_locked(job fenceq._jobs, force boolean) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
BEGIN
    IF (_cancel_locked.job).status = 'pending' OR ((_cancel_locked.job).status = 'claimed' AND _cancel_locked.force) THEN
        UPDATE fenceq._jobs AS j SET status = 'cancelled', finished_at = clock_timestamp()
         WHERE j.job_id = (_cancel_locked.job).job_id;
        PERFORM fenceq._record_event((_cancel_locked.job).job_id, (_cancel_locked.job).queue, 'cancelled',
            (_cancel_locked.job).generation, (_cancel_locked.job).owner_id,
            jsonb_build_object('reason', CASE WHEN (_cancel_locked.job).status = 'claimed'
                                              THEN 'force' ELSE 'cancel' END));
        PERFORM fenceq._settle_dependents(ARRAY[(_cancel_locked.job).job_id], false);
        PERFORM fenceq._notify_done(ARRAY[(_cancel_locked.job).job_id]);
        RETURN 'cancelled';
    END IF;
    IF (_cancel_locked.job).status = 'claimed' THEN
        UPDATE fenceq._jobs AS j SET cancel_requested = true WHERE j.job_id = (_cancel_locked.job).job_id;
        IF NOT (_cancel_locked.job).cancel_requested THEN  -- a repeated request is no transition
            PERFORM fenceq._record_event((_cancel_locked.job).job_id, (_cancel_locked.job).queue,
                'cancel_requested', (_cancel_locked.job).generation, (_cancel_locked.job).owner_id);
        END IF;
        RETURN 'cancel_requested';
    END IF;
    RETURN NULL;
END
$$;

ALTER FUNCTION fenceq._cancel_locked(job fenceq._jobs, force boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._cancel_locked(job fenceq._jobs, force boolean) IS 'Private. Cancel a locked job as cancel does (pending or forced -> cancelled, claimed -> cancel_requested); NULL for a terminal job, left unchanged.';

CREATE FUNCTION fenceq._canonical_json(value jsonb) RETURNS text
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    CASE jsonb_typeof(_canonical_json.value)
        WHEN 'object' THEN
            RETURN '{' || coalesce((
                SELECT string_agg(to_json(e.key)::text || ':' ||
                           CASE WHEN jsonb_typeof(e.value) IN ('object', 'array')
                                THEN fenceq._canonical_json(e.value) ELSE e.value::text END,
                       ',' ORDER BY e.key COLLATE "C")
                  FROM jsonb_each(_canonical_json.value) AS e), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(CASE WHEN jsonb_typeof(a.value) IN ('object', 'array')
                                       THEN fenceq._canonical_json(a.value) ELSE a.value::text END,
                       ',' ORDER BY a.ordinality)
                  FROM jsonb_array_elements(_canonical_json.value) WITH ORDINALITY AS a), '') || ']';
        ELSE
            RETURN coalesce(_canonical_json.value::text, 'null');
    END CASE;
END
$$;

ALTER FUNCTION fenceq._canonical_json(value jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._canonical_json(value jsonb) IS 'Private. Canonical JSON text (sorted keys by code point, compact separators) used for fingerprints and size limits.';

CREATE FUNCTION fenceq._check_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_count integer := coalesce(cardinality(_check_batch.job_ids), -1);
BEGIN
    IF v_count < 0 OR v_count > 10000
       OR coalesce(cardinality(_check_batch.owner_ids), -1) <> v_count
       OR coalesce(cardinality(_check_batch.generations), -1) <> v_count
       OR coalesce(cardinality(_check_batch.claim_tokens), -1) <> v_count THEN
        PERFORM fenceq._raise('QF100', 'fence arrays must be non-NULL, of equal length, with at most 10000 elements');
    END IF;
    IF v_count > 0 AND (array_ndims(_check_batch.job_ids) <> 1 OR array_ndims(_check_batch.owner_ids) <> 1
        OR array_ndims(_check_batch.generations) <> 1 OR array_ndims(_check_batch.claim_tokens) <> 1 OR EXISTS (
        SELECT 1 FROM unnest(_check_batch.job_ids, _check_batch.owner_ids,
                             _check_batch.generations, _check_batch.claim_tokens) AS f(j, o, g, t)
         WHERE f.j IS NULL OR length(f.j) NOT BETWEEN 1 AND 36
            OR f.o IS NULL OR length(f.o) NOT BETWEEN 1 AND 255
            OR f.t IS NULL OR length(f.t) NOT BETWEEN 1 AND 255
            OR f.g IS NULL OR f.g < 1)) THEN
        PERFORM fenceq._raise('QF106', 'a fence is malformed');
    END IF;
    RETURN v_count;
END
$$;

ALTER FUNCTION fenceq._check_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[]) IS 'Private. Validate the fence arrays of a batch call; returns their length.';

CREATE FUNCTION fenceq._check_batch_graph(requests jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_cyclic bigint;
    v_from bigint[];
    v_to bigint[];
    v_left bigint[];
    v_round integer;
BEGIN
    PERFORM set_config('fenceq.batch_job_ids', coalesce((
        SELECT jsonb_agg(r.value ->> 'job_id') FROM jsonb_array_elements(_check_batch_graph.requests) AS r
         WHERE jsonb_typeof(r.value) = 'object' AND jsonb_typeof(r.value -> 'job_id') = 'string'), '[]')::text,
        true);
    -- Peel off, round by round, the elements with no dependency left inside
    -- the batch. Chains are at most 16 deep, so 17 rounds peel every element
    -- of a sound batch; what is left lies on a cycle, behind one, or too deep.
    SELECT array_agg(n.i), array_agg(t.i) INTO v_from, v_to
      FROM jsonb_array_elements(_check_batch_graph.requests) WITH ORDINALITY AS n(value, i)
     CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.value -> 'depends_on') = 'array'
                                                       THEN n.value -> 'depends_on' ELSE '[]' END) AS d(id)
      JOIN jsonb_array_elements(_check_batch_graph.requests) WITH ORDINALITY AS t(value, i)
        ON jsonb_typeof(t.value) = 'object' AND t.value ->> 'job_id' = d.id AND t.i <> n.i
     WHERE jsonb_typeof(n.value) = 'object';
    IF v_from IS NULL THEN
        RETURN;
    END IF;
    v_left := ARRAY(SELECT DISTINCT x FROM unnest(v_from) AS x);
    FOR v_round IN 1 .. 17 LOOP
        v_left := ARRAY(SELECT DISTINCT e.f FROM unnest(v_from, v_to) AS e(f, t) WHERE e.t = ANY (v_left));
        EXIT WHEN cardinality(v_left) = 0;
    END LOOP;
    v_cyclic := (SELECT min(x) - 1 FROM unnest(v_left) AS x);
    IF v_cyclic IS NOT NULL THEN
        PERFORM set_config('fenceq.batch_index', v_cyclic::text, true);
        PERFORM fenceq._raise('QF100', 'the batch''s dependencies form a cycle or a chain deeper than 16');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_batch_graph(requests jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_batch_graph(requests jsonb) IS 'Private. Publish a batch''s explicit job ids for its dependencies and refuse a cycle among its elements (QF100).';

CREATE FUNCTION fenceq._check_bulk(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
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

ALTER FUNCTION fenceq._check_bulk(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_bulk(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) IS 'Private. The input checks of the bulk actions; QF100 for a call with neither job ids nor a filter.';

CREATE FUNCTION fenceq._check_dependencies(depends_on text[], job_id text) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_ids text[];
BEGIN
    IF cardinality(_check_dependencies.depends_on) = 0 THEN
        RETURN NULL;
    END IF;
    IF array_ndims(_check_dependencies.depends_on) <> 1 THEN
        PERFORM fenceq._raise('QF100', 'depends_on must be a one-dimensional array');
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(_check_dependencies.depends_on) AS d(id)
                WHERE NOT coalesce(length(d.id) BETWEEN 1 AND 36, false)) THEN
        PERFORM fenceq._raise('QF102', 'depends_on must hold job ids of 1 to 36 characters');
    END IF;
    v_ids := ARRAY(SELECT DISTINCT d.id COLLATE "C" FROM unnest(_check_dependencies.depends_on) AS d(id)
                    ORDER BY 1);
    IF cardinality(v_ids) > 100 THEN
        PERFORM fenceq._raise('QF100', 'a job may depend on at most 100 jobs');
    END IF;
    IF _check_dependencies.job_id = ANY (v_ids) THEN
        PERFORM fenceq._raise('QF100', 'a job cannot depend on itself');
    END IF;
    RETURN v_ids;
END
$$;

ALTER FUNCTION fenceq._check_dependencies(depends_on text[], job_id text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_dependencies(depends_on text[], job_id text) IS 'Private. A submit''s depends_on validated and canonical (distinct, sorted); QF100/QF102 otherwise.';

CREATE FUNCTION fenceq._check_fence(job_id text, owner_id text, generation bigint, claim_token text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _check_fence.job_id IS NULL OR length(_check_fence.job_id) NOT BETWEEN 1 AND 36
       OR _check_fence.owner_id IS NULL OR length(_check_fence.owner_id) NOT BETWEEN 1 AND 255
       OR _check_fence.claim_token IS NULL OR length(_check_fence.claim_token) NOT BETWEEN 1 AND 255
       OR _check_fence.generation IS NULL OR _check_fence.generation < 1
    THEN
        PERFORM fenceq._raise('QF106', 'the fence is malformed');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_fence(job_id text, owner_id text, generation bigint, claim_token text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_fence(job_id text, owner_id text, generation bigint, claim_token text) IS 'Private. Refuse (QF106) a fence with an empty or over-long part or a generation below 1.';

CREATE FUNCTION fenceq._check_interval(value interval, what text, allow_zero boolean DEFAULT false, nullable boolean DEFAULT true, backwards boolean DEFAULT false) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_limit interval;
BEGIN
    IF _check_interval.value IS NULL THEN
        IF NOT _check_interval.nullable THEN
            PERFORM fenceq._raise('QF100', _check_interval.what || ' is required');
        END IF;
        RETURN;
    END IF;
    IF date_part('year', _check_interval.value) <> 0
       OR date_part('month', _check_interval.value) <> 0
       OR date_part('day', _check_interval.value) <> 0 THEN
        PERFORM fenceq._raise('QF105', _check_interval.what || ' must not have month or day parts');
    END IF;
    IF _check_interval.value < interval '0'
       OR (_check_interval.value = interval '0' AND NOT _check_interval.allow_zero) THEN
        PERFORM fenceq._raise('QF105', _check_interval.what
            || CASE WHEN _check_interval.allow_zero THEN ' must not be negative' ELSE ' must be positive' END);
    END IF;
    v_limit := CASE WHEN _check_interval.backwards
                    THEN clock_timestamp() - timestamptz '0001-01-01 00:00:00+00'
                    ELSE timestamptz '9999-12-31 23:59:59.999999+00' - clock_timestamp() END;
    IF _check_interval.value > v_limit THEN
        PERFORM fenceq._raise('QF105', _check_interval.what || ' reaches beyond years 0001-9999');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_interval(value interval, what text, allow_zero boolean, nullable boolean, backwards boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_interval(value interval, what text, allow_zero boolean, nullable boolean, backwards boolean) IS 'Private. Refuse (QF105) a negative or zero interval, one with month or day parts, or one reaching past years 0001-9999; QF100 when a required one is missing.';

CREATE FUNCTION fenceq._check_json(value jsonb, what text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $_$
BEGIN
    IF jsonb_path_exists(_check_json.value,
                         'strict $.**{128} ? (@.type() == "object" || @.type() == "array")') THEN
        PERFORM fenceq._raise('QF103', _check_json.what || ' is nested more than 128 levels deep');
    END IF;
    IF _check_json.value IS NOT NULL
       AND octet_length(_check_json.value::text) > 1048576
       AND octet_length(fenceq._canonical_json(_check_json.value)) > 1048576 THEN
        PERFORM fenceq._raise('QF103', _check_json.what || ' exceeds 1 MiB in canonical form');
    END IF;
END
$_$;

ALTER FUNCTION fenceq._check_json(value jsonb, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_json(value jsonb, what text) IS 'Private. Refuse (QF103) JSON nested more than 128 levels deep or larger than 1 MiB in canonical form.';

CREATE FUNCTION fenceq._check_lock_token(token bigint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _check_lock_token.token IS NULL OR _check_lock_token.token < 1 THEN
        PERFORM fenceq._raise('QF104', 'token must be a positive integer');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_lock_token(token bigint) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_lock_token(token bigint) IS 'Private. Refuse (QF104) a NULL fencing token or one below 1.';

CREATE FUNCTION fenceq._check_name(value text, what text, max_length integer DEFAULT 255, nullable boolean DEFAULT false, code text DEFAULT 'QF102'::text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _check_name.value IS NULL THEN
        IF NOT _check_name.nullable THEN
            PERFORM fenceq._raise(_check_name.code, _check_name.what || ' is required');
        END IF;
    ELSIF length(_check_name.value) NOT BETWEEN 1 AND _check_name.max_length THEN
        PERFORM fenceq._raise(_check_name.code, format('%s must be 1 to %s characters',
            _check_name.what, _check_name.max_length));
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_name(value text, what text, max_length integer, nullable boolean, code text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_name(value text, what text, max_length integer, nullable boolean, code text) IS 'Private. Refuse (QF102 by default) a NULL, empty or over-long id or name.';

CREATE FUNCTION fenceq._check_names(names text[], what text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _check_names.names IS NULL OR cardinality(_check_names.names) = 0 THEN
        PERFORM fenceq._raise('QF100', _check_names.what || ' must be a non-empty array');
    END IF;
    IF cardinality(_check_names.names) > 10000 THEN
        PERFORM fenceq._raise('QF100', _check_names.what || ' may hold at most 10000 elements');
    END IF;
    IF array_ndims(_check_names.names) <> 1 OR EXISTS (
        SELECT 1 FROM unnest(_check_names.names) AS v(name)
        WHERE v.name IS NULL OR length(v.name) NOT BETWEEN 1 AND 255)
    THEN
        PERFORM fenceq._raise('QF102', _check_names.what || ' must hold strings of 1 to 255 characters');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_names(names text[], what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_names(names text[], what text) IS 'Private. Refuse a NULL, empty or oversized array (QF100) or a bad element (QF102).';

CREATE FUNCTION fenceq._check_queue_settings(lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    PERFORM fenceq._check_interval(_check_queue_settings.lease, 'lease', nullable => false);
    PERFORM fenceq._check_interval(_check_queue_settings.backoff_base, 'backoff_base',
                                   allow_zero => true, nullable => false);
    PERFORM fenceq._check_interval(_check_queue_settings.backoff_max, 'backoff_max',
                                   allow_zero => true, nullable => false);
    IF _check_queue_settings.max_attempts IS NULL OR _check_queue_settings.max_attempts < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_attempts must be a positive integer');
    END IF;
    IF _check_queue_settings.backoff_factor IS NULL
       OR _check_queue_settings.backoff_factor = 'NaN'::double precision
       OR _check_queue_settings.backoff_factor = 'Infinity'::double precision
       OR _check_queue_settings.backoff_factor < 1 THEN
        PERFORM fenceq._raise('QF104', 'backoff_factor must be finite and at least 1');
    END IF;
    IF _check_queue_settings.backoff_max < _check_queue_settings.backoff_base THEN
        PERFORM fenceq._raise('QF105', 'backoff_max must not be less than backoff_base');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_queue_settings(lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_queue_settings(lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval) IS 'Private. Refuse queue settings that break the docs/guarantees.md §2 rules (QF104, QF105).';

CREATE FUNCTION fenceq._check_ref(value text, what text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    PERFORM fenceq._check_name(_check_ref.value, _check_ref.what, max_length => 1024);
END
$$;

ALTER FUNCTION fenceq._check_ref(value text, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_ref(value text, what text) IS 'Private. Refuse (QF102) a NULL, empty or over-long (1,024 characters) dispatch reference.';

CREATE FUNCTION fenceq._check_requeue_priority(value text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _check_requeue_priority.value NOT IN ('keep', 'first', 'last') THEN
        PERFORM fenceq._raise('QF100', 'requeue_priority must be keep, first or last');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_requeue_priority(value text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_requeue_priority(value text) IS 'Private. Refuse (QF100) a requeue_priority other than keep, first or last.';

CREATE FUNCTION fenceq._check_time(value timestamp with time zone, what text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _check_time.value IS NOT NULL AND (
        _check_time.value < timestamptz '0001-01-01 00:00:00+00'
        OR _check_time.value >= timestamptz '10000-01-01 00:00:00+00') THEN
        PERFORM fenceq._raise('QF105', _check_time.what || ' must be within years 0001-9999 UTC');
    END IF;
END
$$;

ALTER FUNCTION fenceq._check_time(value timestamp with time zone, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._check_time(value timestamp with time zone, what text) IS 'Private. Refuse (QF105) an infinite timestamp or one outside years 0001-9999 UTC.';

CREATE FUNCTION fenceq._checkpoints_of(job_id text) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN coalesce((SELECT jsonb_object_agg(c.step, c.value)
                       FROM fenceq._checkpoints AS c WHERE c.job_id = _checkpoints_of.job_id), '{}'::jsonb);
END
$$;

ALTER FUNCTION fenceq._checkpoints_of(job_id text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._checkpoints_of(job_id text) IS 'Private. A job''s checkpoints as a jsonb object step -> value ({} when none).';

CREATE FUNCTION fenceq._claim_picked(picked text[], owner_id text, claim_tokens text[], claim_nonce text, lease interval, budget interval) RETURNS SETOF fenceq.claim
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();  -- read after the picked rows are locked
    v_claims fenceq.claim[];
    v_recorded integer;
    v_changed boolean;
    v_logged text[];  -- the claimed jobs whose queues keep events (part 8b)
BEGIN
    WITH picked AS (
        SELECT p.job_id, p.ordinal,
               coalesce(_claim_picked.claim_nonce, _claim_picked.claim_tokens[p.ordinal]) AS token
          FROM unnest(_claim_picked.picked) WITH ORDINALITY AS p(job_id, ordinal)),
    claimed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'claimed',
               attempts = j.attempts + 1,
               generation = j.generation + 1,
               owner_id = _claim_picked.owner_id,
               claim_token = p.token,
               lease = coalesce(_claim_picked.lease, q.lease),
               lease_expires_at = least(v_now + coalesce(_claim_picked.lease, q.lease),
                                        v_now + _claim_picked.budget),
               budget_expires_at = v_now + _claim_picked.budget,
               cancel_requested = false,
               pid = NULL,
               call_claims = CASE WHEN _claim_picked.claim_nonce IS NULL THEN j.call_claims
                                  ELSE j.call_claims || ROW(j.generation + 1, _claim_picked.owner_id, v_now,
                                                            _claim_picked.claim_nonce)::fenceq._call_claim END
          FROM picked AS p, fenceq._queues AS q
         WHERE j.job_id = p.job_id AND q.queue = j.queue
        RETURNING j.*, p.ordinal, p.token AS sent_token, q.rate_limit IS NOT NULL AS rated, q.history AS logged),
    rated AS (
        INSERT INTO fenceq._rate_window (queue, claimed_at)
        SELECT c.queue, v_now FROM claimed AS c WHERE c.rated),
    recorded AS (
        INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at, job_ids)
        SELECT c.sent_token, c.job_id, c.generation, _claim_picked.owner_id, v_now, NULL
          FROM claimed AS c WHERE _claim_picked.claim_nonce IS NULL
        UNION ALL
        SELECT _claim_picked.claim_nonce, NULL, NULL, _claim_picked.owner_id, v_now,
               array_agg(c.job_id ORDER BY c.ordinal)
          FROM claimed AS c HAVING _claim_picked.claim_nonce IS NOT NULL
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING cardinality(c.job_ids) AS jobs)
    SELECT array_agg(ROW(c.job_id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts,
                         c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                         c.cancel_requested, c.submission_id,
                         -- Checkpoints need a live fence: a first claim has none to read.
                         CASE WHEN c.generation = 1 THEN '{}'::jsonb
                              ELSE fenceq._checkpoints_of(c.job_id) END)::fenceq.claim ORDER BY c.ordinal),
           (SELECT sum(coalesce(r.jobs, 1)) FROM recorded AS r),
           bool_or(c.owner_id IS DISTINCT FROM _claim_picked.owner_id OR c.claim_token IS DISTINCT FROM c.sent_token),
           array_agg(c.job_id ORDER BY c.ordinal) FILTER (WHERE c.logged)
      INTO v_claims, v_recorded, v_changed, v_logged
      FROM claimed AS c;
    IF v_changed OR cardinality(v_claims) IS DISTINCT FROM cardinality(_claim_picked.picked) THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    IF v_recorded IS DISTINCT FROM cardinality(v_claims) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    IF v_logged IS NOT NULL THEN
        PERFORM fenceq._record_events(v_logged, 'claimed');
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_claims);
END
$$;

ALTER FUNCTION fenceq._claim_picked(picked text[], owner_id text, claim_tokens text[], claim_nonce text, lease interval, budget interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._claim_picked(picked text[], owner_id text, claim_tokens text[], claim_nonce text, lease interval, budget interval) IS 'Private. Claim the jobs _pick locked, in its order: token i for job i with a ledger row each, or one nonce for all with one ledger row for the call.';

CREATE FUNCTION fenceq._cron_field(field text, what text, low integer, high integer, names text[] DEFAULT '{}'::text[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $_$
DECLARE
    v_item text;
    v_parts text[];
    v_first integer;
    v_last integer;
    v_step integer;
    v_values integer[] := '{}';
BEGIN
    FOREACH v_item IN ARRAY string_to_array(_cron_field.field, ',') LOOP
        v_parts := regexp_match(v_item,
            '^(?:(\*)|([0-9]{1,2}|[A-Za-z]{3})(?:-([0-9]{1,2}|[A-Za-z]{3}))?)(?:/([0-9]{1,2}))?$');
        -- A step needs a range (A/S alone is not classic cron).
        IF v_parts IS NULL OR (v_parts[2] IS NOT NULL AND v_parts[3] IS NULL AND v_parts[4] IS NOT NULL) THEN
            PERFORM fenceq._raise('QF100', format('cron expression does not parse (%s field)', _cron_field.what));
        END IF;
        IF v_parts[1] IS NOT NULL THEN
            v_first := _cron_field.low;
            v_last := _cron_field.high;
        ELSE
            v_first := fenceq._cron_value(v_parts[2], _cron_field.what, _cron_field.low, _cron_field.high,
                                          _cron_field.names);
            v_last := CASE WHEN v_parts[3] IS NULL THEN v_first
                           ELSE fenceq._cron_value(v_parts[3], _cron_field.what, _cron_field.low,
                                                   _cron_field.high, _cron_field.names) END;
        END IF;
        v_step := coalesce(v_parts[4]::integer, 1);
        IF v_first > v_last OR v_step < 1 THEN
            PERFORM fenceq._raise('QF100', format('cron expression is out of range (%s field)', _cron_field.what));
        END IF;
        v_values := v_values || ARRAY(SELECT generate_series(v_first, v_last, v_step));
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT v.value FROM unnest(v_values) AS v(value) ORDER BY v.value);
END
$_$;

ALTER FUNCTION fenceq._cron_field(field text, what text, low integer, high integer, names text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._cron_field(field text, what text, low integer, high integer, names text[]) IS 'Private. The values a cron field allows, ascending; QF100 naming the field when it does not parse or is out of range.';

CREATE FUNCTION fenceq._cron_instant(local timestamp without time zone, time_zone text) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_utc timestamptz := _cron_instant.local AT TIME ZONE 'UTC';
    -- '24 hours', never '1 day': a day of timestamptz arithmetic follows the session's zone.
    v_day_before timestamptz := v_utc - interval '24 hours';
    v_day_after timestamptz := v_utc + interval '24 hours';
    v_before interval := (v_day_before AT TIME ZONE _cron_instant.time_zone) - (v_day_before AT TIME ZONE 'UTC');
    v_after interval := (v_day_after AT TIME ZONE _cron_instant.time_zone) - (v_day_after AT TIME ZONE 'UTC');
    v_early timestamptz := v_utc - greatest(v_before, v_after);
    v_late timestamptz := v_utc - least(v_before, v_after);
    v_middle timestamptz;
BEGIN
    IF (v_early AT TIME ZONE _cron_instant.time_zone) = _cron_instant.local THEN
        RETURN v_early;
    END IF;
    IF (v_late AT TIME ZONE _cron_instant.time_zone) = _cron_instant.local THEN
        RETURN v_late;
    END IF;
    -- In a gap: the wall clock jumps past local between v_early and v_late.
    WHILE v_late - v_early > interval '1 second' LOOP
        v_middle := v_early + make_interval(secs => floor(extract(epoch FROM v_late - v_early) / 2));
        IF (v_middle AT TIME ZONE _cron_instant.time_zone) >= _cron_instant.local THEN
            v_late := v_middle;
        ELSE
            v_early := v_middle;
        END IF;
    END LOOP;
    RETURN v_late;
END
$$;

ALTER FUNCTION fenceq._cron_instant(local timestamp without time zone, time_zone text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._cron_instant(local timestamp without time zone, time_zone text) IS 'Private. The first instant at which the local clock of a time zone reads a wall time or later: its first instance, or the end of the daylight-saving gap it falls in.';

CREATE FUNCTION fenceq._cron_parse(cron text, OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT months integer[], OUT weekdays integer[], OUT days_and boolean) RETURNS record
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_text text;
    v_fields text[];
BEGIN
    IF _cron_parse.cron IS NULL OR length(_cron_parse.cron) NOT BETWEEN 1 AND 255 THEN
        PERFORM fenceq._raise('QF100', 'cron expression must be a string of 1 to 255 characters');
    END IF;
    IF octet_length(_cron_parse.cron) <> length(_cron_parse.cron) THEN
        PERFORM fenceq._raise('QF100', 'cron expression does not parse');
    END IF;
    v_text := btrim(_cron_parse.cron, E' \t');
    IF left(v_text, 1) = '@' THEN
        v_text := CASE lower(v_text COLLATE "C")
                      WHEN '@hourly' THEN '0 * * * *' WHEN '@daily' THEN '0 0 * * *'
                      WHEN '@weekly' THEN '0 0 * * 0' WHEN '@monthly' THEN '0 0 1 * *'
                      WHEN '@yearly' THEN '0 0 1 1 *' END;
        IF v_text IS NULL THEN
            PERFORM fenceq._raise('QF100', 'cron expression names an unknown macro');
        END IF;
    END IF;
    v_fields := regexp_split_to_array(v_text, E'[ \t]+');
    IF cardinality(v_fields) <> 5 THEN
        PERFORM fenceq._raise('QF100', 'cron expression must have five fields');
    END IF;
    minutes := fenceq._cron_field(v_fields[1], 'minute', 0, 59);
    hours := fenceq._cron_field(v_fields[2], 'hour', 0, 23);
    days := fenceq._cron_field(v_fields[3], 'day of month', 1, 31);
    months := fenceq._cron_field(v_fields[4], 'month', 1, 12,
        '{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}');
    weekdays := ARRAY(SELECT DISTINCT w.value % 7
                        FROM unnest(fenceq._cron_field(v_fields[5], 'day of week', 0, 7,
                                                       '{SUN,MON,TUE,WED,THU,FRI,SAT}')) AS w(value)
                       ORDER BY 1);
    days_and := left(v_fields[3], 1) = '*' OR left(v_fields[5], 1) = '*';
    -- With a day of month required, some allowed month must have that day
    -- (February has a 29th in leap years); any weekday comes round.
    IF days_and AND NOT EXISTS (
        SELECT 1 FROM unnest(months) AS m(month), unnest(days) AS d(day)
         WHERE d.day <= ('{31,29,31,30,31,30,31,31,30,31,30,31}'::integer[])[m.month]) THEN
        PERFORM fenceq._raise('QF100', 'cron expression can never fire');
    END IF;
END
$$;

ALTER FUNCTION fenceq._cron_parse(cron text, OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT months integer[], OUT weekdays integer[], OUT days_and boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._cron_parse(cron text, OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT months integer[], OUT weekdays integer[], OUT days_and boolean) IS 'Private. A cron expression as the allowed values of its fields and whether day of month and day of week must both match; QF100 when it does not parse or can never fire.';

CREATE TABLE fenceq._schedules (
    schedule text NOT NULL COLLATE pg_catalog."C",
    queue text NOT NULL COLLATE pg_catalog."C",
    task text NOT NULL COLLATE pg_catalog."C",
    cron text NOT NULL COLLATE pg_catalog."C",
    time_zone text NOT NULL COLLATE pg_catalog."C",
    payload jsonb,
    priority integer,
    max_attempts integer,
    active_key text COLLATE pg_catalog."C",
    paused boolean NOT NULL,
    cron_minutes integer[] NOT NULL,
    cron_hours integer[] NOT NULL,
    cron_days integer[] NOT NULL,
    cron_months integer[] NOT NULL,
    cron_weekdays integer[] NOT NULL,
    cron_days_and boolean NOT NULL,
    next_run_at timestamp with time zone,
    last_run_at timestamp with time zone,
    last_job_id text COLLATE pg_catalog."C"
);

ALTER TABLE fenceq._schedules OWNER TO fenceq_owner;

CREATE FUNCTION fenceq._cron_step(schedule fenceq._schedules, instant timestamp with time zone, forward boolean) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_zone text := _cron_step.schedule.time_zone;
    v_local timestamp := _cron_step.instant AT TIME ZONE v_zone;
    v_day_before timestamptz := _cron_step.instant - interval '24 hours';
    v_direction integer := CASE WHEN _cron_step.forward THEN 1 ELSE -1 END;
    v_start timestamp;
    v_start_day date;
    v_start_hour integer;
    v_start_minute integer;
    v_limit date;
    v_day date;
    v_hours integer[];
    v_minutes integer[];
    v_hour integer;
    v_minute integer;
    v_at timestamptz;
BEGIN
    IF _cron_step.forward THEN
        v_start := date_trunc('minute', v_local) + interval '1 minute';
        v_hours := _cron_step.schedule.cron_hours;
        v_minutes := _cron_step.schedule.cron_minutes;
    ELSE
        v_start := date_trunc('minute', v_local + greatest(
            ((v_day_before AT TIME ZONE v_zone) - (v_day_before AT TIME ZONE 'UTC'))
            - (v_local - (_cron_step.instant AT TIME ZONE 'UTC')), interval '0'));
        v_hours := ARRAY(SELECT h.value FROM unnest(_cron_step.schedule.cron_hours) WITH ORDINALITY AS h(value, i)
                          ORDER BY h.i DESC);
        v_minutes := ARRAY(SELECT m.value FROM unnest(_cron_step.schedule.cron_minutes) WITH ORDINALITY AS m(value, i)
                            ORDER BY m.i DESC);
    END IF;
    v_start_day := v_start::date;
    v_start_hour := extract(hour FROM v_start)::integer;
    v_start_minute := extract(minute FROM v_start)::integer;
    v_limit := CASE WHEN _cron_step.forward THEN least(v_start_day + 10227, date '9999-12-30')
                    ELSE greatest(v_start_day - 10227, date '0001-01-03') END;
    v_day := v_start_day;
    WHILE CASE WHEN _cron_step.forward THEN v_day <= v_limit ELSE v_day >= v_limit END LOOP
        IF NOT extract(month FROM v_day)::integer = ANY (_cron_step.schedule.cron_months) THEN
            -- On to the first day of the next month, or the last of the previous.
            IF make_date(extract(year FROM v_day)::integer, extract(month FROM v_day)::integer, 1)
               = (CASE WHEN _cron_step.forward THEN date '9999-12-01' ELSE date '0001-01-01' END) THEN
                RETURN NULL;
            END IF;
            v_day := CASE WHEN _cron_step.forward
                          THEN make_date(extract(year FROM v_day)::integer + extract(month FROM v_day)::integer / 12,
                                         extract(month FROM v_day)::integer % 12 + 1, 1)
                          ELSE make_date(extract(year FROM v_day)::integer, extract(month FROM v_day)::integer, 1) - 1
                     END;
            CONTINUE;
        END IF;
        -- (Parenthesised: IF would take the first THEN as its own.)
        IF (CASE WHEN _cron_step.schedule.cron_days_and
                 THEN extract(day FROM v_day)::integer = ANY (_cron_step.schedule.cron_days)
                      AND extract(dow FROM v_day)::integer = ANY (_cron_step.schedule.cron_weekdays)
                 ELSE extract(day FROM v_day)::integer = ANY (_cron_step.schedule.cron_days)
                      OR extract(dow FROM v_day)::integer = ANY (_cron_step.schedule.cron_weekdays) END) THEN
            FOREACH v_hour IN ARRAY v_hours LOOP
                CONTINUE WHEN v_day = v_start_day AND (v_hour - v_start_hour) * v_direction < 0;
                FOREACH v_minute IN ARRAY v_minutes LOOP
                    CONTINUE WHEN v_day = v_start_day AND v_hour = v_start_hour
                                  AND (v_minute - v_start_minute) * v_direction < 0;
                    v_at := fenceq._cron_instant(v_day + make_time(v_hour, v_minute, 0), v_zone);
                    IF (CASE WHEN _cron_step.forward THEN v_at > _cron_step.instant
                             ELSE v_at <= _cron_step.instant END) THEN
                        RETURN v_at;
                    END IF;
                END LOOP;
            END LOOP;
        END IF;
        v_day := v_day + v_direction;
    END LOOP;
    RETURN NULL;
END
$$;

ALTER FUNCTION fenceq._cron_step(schedule fenceq._schedules, instant timestamp with time zone, forward boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._cron_step(schedule fenceq._schedules, instant timestamp with time zone, forward boolean) IS 'Private. A schedule''s first occurrence after an instant (forward) or last at or before it; NULL when none lies within 28 years.';

CREATE FUNCTION fenceq._cron_value(token text, what text, low integer, high integer, names text[]) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $_$
DECLARE
    v_value integer;
BEGIN
    IF _cron_value.token ~ '^[0-9]+$' THEN
        v_value := _cron_value.token::integer;
    ELSE
        -- COLLATE "C": ASCII case mapping only, whatever the database's locale.
        v_value := _cron_value.low + array_position(_cron_value.names, upper(_cron_value.token COLLATE "C")) - 1;
        IF v_value IS NULL THEN
            PERFORM fenceq._raise('QF100', format('cron expression does not parse (%s field)', _cron_value.what));
        END IF;
    END IF;
    IF v_value NOT BETWEEN _cron_value.low AND _cron_value.high THEN
        PERFORM fenceq._raise('QF100', format('cron expression is out of range (%s field)', _cron_value.what));
    END IF;
    RETURN v_value;
END
$_$;

ALTER FUNCTION fenceq._cron_value(token text, what text, low integer, high integer, names text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._cron_value(token text, what text, low integer, high integer, names text[]) IS 'Private. A cron field''s number or name as its value within the field''s range; QF100 otherwise.';

CREATE FUNCTION fenceq._dead_letter(job fenceq._jobs, error text, now timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_dlq_id text := replace(gen_random_uuid()::text, '-', '');
BEGIN
    INSERT INTO fenceq._dead_letters (dlq_id, job_id, queue, task, error, attempts, failed_at)
    VALUES (v_dlq_id, (_dead_letter.job).job_id, (_dead_letter.job).queue, (_dead_letter.job).task,
            _dead_letter.error, (_dead_letter.job).attempts, _dead_letter.now);
    RETURN v_dlq_id;
END
$$;

ALTER FUNCTION fenceq._dead_letter(job fenceq._jobs, error text, now timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._dead_letter(job fenceq._jobs, error text, now timestamp with time zone) IS 'Private. Insert a dead letter for a failed job; returns its 32-hex id.';

CREATE FUNCTION fenceq._fingerprint(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN fenceq._fingerprint_of(_fingerprint.queue, _fingerprint.task,
        fenceq._canonical_json(_fingerprint.payload), _fingerprint.submission_id, _fingerprint.job_id,
        _fingerprint.priority, _fingerprint.run_at, _fingerprint.expires_at, _fingerprint.max_attempts,
        _fingerprint.active_key, _fingerprint.force, _fingerprint.concurrency_key, _fingerprint.depends_on);
END
$$;

ALTER FUNCTION fenceq._fingerprint(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._fingerprint(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) IS 'Private. The versioned submission fingerprint (fq1:sha256 of the canonical request document).';

CREATE FUNCTION fenceq._fingerprint_of(queue text, task text, canonical_payload text, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN ('fq1:'::text || encode(sha256(convert_to((((((((((((((((((((((((('{"active_key":'::text || COALESCE((to_json(active_key))::text, 'null'::text)) || CASE WHEN (concurrency_key IS NULL) THEN ''::text ELSE (',"concurrency_key":'::text || (to_json(concurrency_key))::text) END) || CASE WHEN (depends_on IS NULL) THEN ''::text ELSE (',"depends_on":'::text || (to_json(depends_on))::text) END) || ',"expires_at":'::text) || CASE WHEN (expires_at IS NULL) THEN 'null'::text ELSE (to_json(to_char((expires_at AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'::text)))::text END) || ',"force":'::text) || CASE WHEN COALESCE(force, false) THEN 'true'::text ELSE 'false'::text END) || ',"job_id":'::text) || COALESCE((to_json(job_id))::text, 'null'::text)) || ',"max_attempts":'::text) || COALESCE((max_attempts)::text, 'null'::text)) || ',"payload":'::text) || canonical_payload) || ',"priority":'::text) || COALESCE((priority)::text, 'null'::text)) || ',"queue":'::text) || (to_json(queue))::text) || ',"run_at":'::text) || CASE WHEN (run_at IS NULL) THEN 'null'::text ELSE (to_json(to_char((run_at AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'::text)))::text END) || ',"submission_id":'::text) || (to_json(submission_id))::text) || ',"task":'::text) || (to_json(task))::text) || ',"v":1}'::text), 'UTF8'::name)), 'hex'::text));

ALTER FUNCTION fenceq._fingerprint_of(queue text, task text, canonical_payload text, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._fingerprint_of(queue text, task text, canonical_payload text, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) IS 'Private, inlined. The fingerprint of a request whose payload is given in canonical JSON text.';

CREATE FUNCTION fenceq._histogram(buckets integer[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
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

ALTER FUNCTION fenceq._histogram(buckets integer[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._histogram(buckets integer[]) IS 'Private. The trimmed histogram of these bucket numbers (element k + 1 counts bucket k); NULLs skipped.';

CREATE FUNCTION fenceq._histogram_bounds() RETURNS double precision[]
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN ARRAY(SELECT power(2::double precision, k / 4.0::double precision) FROM generate_series(1, 127) AS k);
END
$$;

ALTER FUNCTION fenceq._histogram_bounds() OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._histogram_bounds() IS 'Private. The lower bounds in milliseconds of histogram buckets 1 to 127: 2^(k/4).';

CREATE FUNCTION fenceq._histogram_percentile(buckets integer[], counts bigint[], fraction double precision) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
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

ALTER FUNCTION fenceq._histogram_percentile(buckets integer[], counts bigint[], fraction double precision) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._histogram_percentile(buckets integer[], counts bigint[], fraction double precision) IS 'Private. A percentile of a histogram given by its non-zero buckets and their counts, as the geometric middle of the bucket that holds it; NULL when empty.';

CREATE FUNCTION fenceq._hold_lock(lock text, owner_id text, token bigint) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
DECLARE
    v_lock fenceq._locks;
    v_now timestamptz;
BEGIN
    SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = _hold_lock.lock FOR NO KEY UPDATE;
    v_now := clock_timestamp();  -- read after the row lock is held
    IF v_lock.owner_id = _hold_lock.owner_id AND v_lock.token = _hold_lock.token AND v_lock.expires_at > v_now THEN
        RETURN v_now;
    END IF;
    RETURN NULL;
END
$$;

ALTER FUNCTION fenceq._hold_lock(lock text, owner_id text, token bigint) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._hold_lock(lock text, owner_id text, token bigint) IS 'Private. Lock a named lock''s row, then judge the hold on a clock read after the lock: that reading when this owner holds it live with this token, else NULL.';

CREATE FUNCTION fenceq._holds_fence(status text, owner_id text, generation bigint, claim_token text, lease_expires_at timestamp with time zone, fence_owner_id text, fence_generation bigint, fence_claim_token text, at timestamp with time zone) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((status = 'claimed'::text) AND (owner_id = fence_owner_id) AND (generation = fence_generation) AND (claim_token = fence_claim_token) AND (lease_expires_at > at));

ALTER FUNCTION fenceq._holds_fence(status text, owner_id text, generation bigint, claim_token text, lease_expires_at timestamp with time zone, fence_owner_id text, fence_generation bigint, fence_claim_token text, at timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._holds_fence(status text, owner_id text, generation bigint, claim_token text, lease_expires_at timestamp with time zone, fence_owner_id text, fence_generation bigint, fence_claim_token text, at timestamp with time zone) IS 'Private, inlined. The fence rule: true when the job (status, owner, generation, token, lease end) is claimed by exactly this fence and its lease ends after at.';

CREATE FUNCTION fenceq._identity_keys(queue text, active_key text, job_id text, submission_id text) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN ARRAY['fenceq.key:' || _identity_keys.queue || E'\x1f' || _identity_keys.active_key,
                 'fenceq.job:' || _identity_keys.job_id,
                 'fenceq.submission:' || _identity_keys.submission_id];
END
$$;

ALTER FUNCTION fenceq._identity_keys(queue text, active_key text, job_id text, submission_id text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._identity_keys(queue text, active_key text, job_id text, submission_id text) IS 'Private. The advisory lock keys of a submission: its active key, explicit job id and submission id.';

CREATE FUNCTION fenceq._is_plain_duration(value interval) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((value IS NULL) OR ((value > '00:00:00'::interval) AND (value < '1000000:00:00'::interval) AND (date_part('year'::text, value) = (0)::double precision) AND (date_part('month'::text, value) = (0)::double precision) AND (date_part('day'::text, value) = (0)::double precision)));

ALTER FUNCTION fenceq._is_plain_duration(value interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._is_plain_duration(value interval) IS 'Private, inlined. True for NULL or a positive duration without month or day parts under a million hours.';

CREATE FUNCTION fenceq._is_plain_fence(job_id text, owner_id text, generation bigint, claim_token text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (((length(job_id) >= 1) AND (length(job_id) <= 36)) AND ((length(owner_id) >= 1) AND (length(owner_id) <= 255)) AND ((length(claim_token) >= 1) AND (length(claim_token) <= 255)) AND (generation >= 1));

ALTER FUNCTION fenceq._is_plain_fence(job_id text, owner_id text, generation bigint, claim_token text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._is_plain_fence(job_id text, owner_id text, generation bigint, claim_token text) IS 'Private, inlined. True for a well-formed fence; NULL when a part is NULL.';

CREATE FUNCTION fenceq._is_plain_json(value jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((value IS NULL) OR ((NOT jsonb_path_exists(value, 'strict $.**{128}?(@.type() == "object" || @.type() == "array")'::jsonpath)) AND (octet_length((value)::text) <= 1048576)));

ALTER FUNCTION fenceq._is_plain_json(value jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._is_plain_json(value jsonb) IS 'Private, inlined. True for NULL or JSON under the depth and size bounds by a cheap measure.';

CREATE FUNCTION fenceq._is_plain_json_int(value jsonb, min integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE jsonb_typeof(value) WHEN 'number'::text THEN (((((value #>> '{}'::text[]))::numeric >= (min)::numeric) AND (((value #>> '{}'::text[]))::numeric <= (2147483647)::numeric)) AND (((value #>> '{}'::text[]))::numeric = trunc(((value #>> '{}'::text[]))::numeric))) ELSE COALESCE((jsonb_typeof(value) = 'null'::text), true) END;

ALTER FUNCTION fenceq._is_plain_json_int(value jsonb, min integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._is_plain_json_int(value jsonb, min integer) IS 'Private, inlined. True for an absent or null field or a JSON integer from min to 2^31-1.';

CREATE FUNCTION fenceq._is_plain_time(value timestamp with time zone) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((value IS NULL) OR ((value >= '0001-01-01 00:00:00+00'::timestamp with time zone) AND (value < '10000-01-01 00:00:00+00'::timestamp with time zone)));

ALTER FUNCTION fenceq._is_plain_time(value timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._is_plain_time(value timestamp with time zone) IS 'Private, inlined. True for NULL or a timestamp within years 0001-9999 UTC.';

CREATE FUNCTION fenceq._json_bool(value jsonb, what text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _json_bool.value IS NULL OR jsonb_typeof(_json_bool.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_bool.value) <> 'boolean' THEN
        PERFORM fenceq._raise('QF100', _json_bool.what || ' must be a boolean');
    END IF;
    RETURN (_json_bool.value #>> '{}')::boolean;
END
$$;

ALTER FUNCTION fenceq._json_bool(value jsonb, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._json_bool(value jsonb, what text) IS 'Private. A JSON boolean field (NULL for null); QF100 for another type.';

CREATE FUNCTION fenceq._json_int(value jsonb, what text) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_number numeric;
BEGIN
    IF _json_int.value IS NULL OR jsonb_typeof(_json_int.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_int.value) <> 'number' THEN
        PERFORM fenceq._raise('QF104', _json_int.what || ' must be an integer');
    END IF;
    v_number := (_json_int.value #>> '{}')::numeric;
    IF v_number <> trunc(v_number) OR v_number NOT BETWEEN -2147483648 AND 2147483647 THEN
        PERFORM fenceq._raise('QF104', _json_int.what || ' must be a 32-bit integer');
    END IF;
    RETURN v_number::integer;
END
$$;

ALTER FUNCTION fenceq._json_int(value jsonb, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._json_int(value jsonb, what text) IS 'Private. A JSON integer field within 32 bits (NULL for null); QF104 otherwise.';

CREATE FUNCTION fenceq._json_text(value jsonb, what text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _json_text.value IS NULL OR jsonb_typeof(_json_text.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_text.value) <> 'string' THEN
        PERFORM fenceq._raise('QF102', _json_text.what || ' must be a string');
    END IF;
    RETURN _json_text.value #>> '{}';
END
$$;

ALTER FUNCTION fenceq._json_text(value jsonb, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._json_text(value jsonb, what text) IS 'Private. A JSON string field as text (NULL for null); QF102 for another type.';

CREATE FUNCTION fenceq._json_text_array(value jsonb, what text) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF _json_text_array.value IS NULL OR jsonb_typeof(_json_text_array.value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(_json_text_array.value) <> 'array' THEN
        PERFORM fenceq._raise('QF100', _json_text_array.what || ' must be a JSON array');
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(_json_text_array.value) AS e
                WHERE jsonb_typeof(e.value) <> 'string') THEN
        PERFORM fenceq._raise('QF102', _json_text_array.what || ' must hold strings');
    END IF;
    RETURN ARRAY(SELECT jsonb_array_elements_text(_json_text_array.value));
END
$$;

ALTER FUNCTION fenceq._json_text_array(value jsonb, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._json_text_array(value jsonb, what text) IS 'Private. A JSON array of strings as text[] (NULL for null); QF100/QF102 otherwise.';

CREATE FUNCTION fenceq._json_time(value jsonb, what text) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $_$
DECLARE
    v_parts text[];
    v_year integer;
    v_month integer;
    v_result timestamptz;
BEGIN
    IF _json_time.value IS NULL OR jsonb_typeof(_json_time.value) = 'null' THEN
        RETURN NULL;
    END IF;
    -- ISO 8601 with an explicit offset; each field is range-checked before
    -- the cast so that a bad date is QF105, never a raw 22008.
    IF jsonb_typeof(_json_time.value) = 'string' THEN
        v_parts := regexp_match(_json_time.value #>> '{}',
            '^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,6})?)?(?:Z|z|[+-](\d{2})(?::?(\d{2}))?)$');
    END IF;
    IF v_parts IS NULL THEN
        PERFORM fenceq._raise('QF105', _json_time.what || ' must be an ISO 8601 timestamp with an offset');
    END IF;
    v_year := v_parts[1]::integer;
    v_month := v_parts[2]::integer;
    IF v_year < 1 OR v_month NOT BETWEEN 1 AND 12
       OR v_parts[3]::integer NOT BETWEEN 1 AND extract(day FROM
            make_date(v_year, v_month, 1) + interval '1 month' - interval '1 day')
       OR v_parts[4]::integer > 23 OR v_parts[5]::integer > 59
       OR coalesce(v_parts[6]::integer, 0) > 59
       OR coalesce(v_parts[7]::integer, 0) > 15 OR coalesce(v_parts[8]::integer, 0) > 59 THEN
        PERFORM fenceq._raise('QF105', _json_time.what || ' is not a valid timestamp');
    END IF;
    v_result := (_json_time.value #>> '{}')::timestamptz;
    PERFORM fenceq._check_time(v_result, _json_time.what);
    RETURN v_result;
END
$_$;

ALTER FUNCTION fenceq._json_time(value jsonb, what text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._json_time(value jsonb, what text) IS 'Private. A JSON timestamp string with an explicit offset (NULL for null); QF105 otherwise.';

CREATE TABLE fenceq._dispatches (
    job_id text NOT NULL COLLATE pg_catalog."C",
    backend text NOT NULL COLLATE pg_catalog."C",
    generation bigint NOT NULL,
    state text NOT NULL COLLATE pg_catalog."C",
    reservation_ref text NOT NULL COLLATE pg_catalog."C",
    execution_ref text COLLATE pg_catalog."C",
    reserved_at timestamp with time zone NOT NULL,
    finalized_at timestamp with time zone,
    checked_at timestamp with time zone,
    CONSTRAINT _dispatches_state_check CHECK ((((state = 'reserved'::text) AND (execution_ref IS NULL)) OR ((state = 'running'::text) AND (execution_ref IS NOT NULL))))
);

ALTER TABLE fenceq._dispatches OWNER TO fenceq_owner;

CREATE FUNCTION fenceq._live_dispatch(job fenceq._jobs) RETURNS fenceq._dispatches
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_dispatch fenceq._dispatches;
BEGIN
    -- PL/pgSQL, so its plan is kept: release calls it on every release.
    SELECT d.* INTO v_dispatch FROM fenceq._dispatches AS d
     WHERE d.job_id = (_live_dispatch.job).job_id AND d.generation = (_live_dispatch.job).generation
       AND (_live_dispatch.job).status = 'claimed';
    RETURN v_dispatch;
END
$$;

ALTER FUNCTION fenceq._live_dispatch(job fenceq._jobs) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._live_dispatch(job fenceq._jobs) IS 'Private. The live dispatch (claimed at the same generation) of a locked job row, or NULLs.';

CREATE FUNCTION fenceq._lock_dependencies(depends_on text[]) RETURNS TABLE(blocked_by integer, failed boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_found text[];
    v_statuses text[];
    v_batch text[];
    v_missing integer;
    v_depth integer;
BEGIN
    SELECT array_agg(j.job_id), array_agg(j.status) INTO v_found, v_statuses FROM (
        SELECT j.job_id, j.status FROM fenceq._jobs AS j
         WHERE j.job_id = ANY (_lock_dependencies.depends_on)
         ORDER BY j.job_id
           FOR SHARE) AS j;
    v_batch := ARRAY(SELECT jsonb_array_elements_text(
        coalesce(nullif(current_setting('fenceq.batch_job_ids', true), ''), '[]')::jsonb));
    SELECT count(*) INTO v_missing FROM unnest(_lock_dependencies.depends_on) AS d(id)
     WHERE d.id <> ALL (coalesce(v_found, '{}'));
    IF EXISTS (SELECT 1 FROM unnest(_lock_dependencies.depends_on) AS d(id)
                WHERE d.id <> ALL (coalesce(v_found, '{}')) AND d.id <> ALL (v_batch)) THEN
        PERFORM fenceq._raise('QF100', 'a dependency names no job');
    END IF;
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (_lock_dependencies.depends_on)
                GROUP BY d.depends_on HAVING count(*) >= 1000) THEN
        PERFORM fenceq._raise('QF100', 'a job may have at most 1000 dependents');
    END IF;
    WITH RECURSIVE up(job_id, depth) AS (
        SELECT d.id COLLATE "C", 1 FROM unnest(_lock_dependencies.depends_on) AS d(id)
        UNION
        SELECT e.depends_on, u.depth + 1 FROM up AS u JOIN fenceq._dependencies AS e ON e.job_id = u.job_id
         WHERE u.depth <= 16)
    SELECT max(u.depth) INTO v_depth FROM up AS u;
    IF v_depth > 16 THEN
        PERFORM fenceq._raise('QF100', 'dependency chains may be at most 16 deep');
    END IF;
    blocked_by := v_missing + (SELECT count(*) FROM unnest(v_statuses) AS s(status)
                                WHERE s.status IN ('pending', 'claimed'));
    failed := coalesce('failed' = ANY (v_statuses) OR 'cancelled' = ANY (v_statuses)
                       OR 'expired' = ANY (v_statuses), false);
    RETURN NEXT;
END
$$;

ALTER FUNCTION fenceq._lock_dependencies(depends_on text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._lock_dependencies(depends_on text[]) IS 'Private. Lock a submit''s dependencies FOR SHARE and count the unfinished ones; QF100 for unknown ones or graphs past the bounds.';

CREATE FUNCTION fenceq._lock_identities(keys text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_key bigint;
BEGIN
    FOR v_key IN
        SELECT DISTINCT hashtextextended(k.key, 0)
          FROM unnest(_lock_identities.keys) AS k(key)
         WHERE k.key IS NOT NULL
         ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(v_key);
    END LOOP;
END
$$;

ALTER FUNCTION fenceq._lock_identities(keys text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._lock_identities(keys text[]) IS 'Private. Advisory transaction locks on identity keys, taken in hash order so concurrent submits never deadlock.';

CREATE FUNCTION fenceq._lock_live(job_id text, owner_id text, generation bigint, claim_token text) RETURNS fenceq._jobs
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
DECLARE
    v_job fenceq._jobs;
BEGIN
    PERFORM fenceq._check_fence(_lock_live.job_id, _lock_live.owner_id,
                                _lock_live.generation, _lock_live.claim_token);
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = _lock_live.job_id FOR UPDATE;
    IF fenceq._holds_fence(v_job.status, v_job.owner_id, v_job.generation, v_job.claim_token,
                           v_job.lease_expires_at, _lock_live.owner_id, _lock_live.generation,
                           _lock_live.claim_token, clock_timestamp()) THEN
        RETURN v_job;
    END IF;
    RETURN NULL;
END
$$;

ALTER FUNCTION fenceq._lock_live(job_id text, owner_id text, generation bigint, claim_token text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._lock_live(job_id text, owner_id text, generation bigint, claim_token text) IS 'Private. Lock a job row, then judge the fence on a clock read after the lock: the row when live, else NULLs.';

CREATE FUNCTION fenceq._move_due(queue text, now timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_moved integer;
BEGIN
    UPDATE fenceq._jobs AS j
       SET scheduled = false
      FROM (SELECT l.job_id FROM fenceq._jobs AS l
             WHERE l.queue = _move_due.queue AND l.status = 'pending' AND l.scheduled
               AND l.run_at <= _move_due.now
             ORDER BY l.run_at
             LIMIT 1000
               FOR UPDATE SKIP LOCKED) AS d
     WHERE j.job_id = d.job_id;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    RETURN v_moved;
END
$$;

ALTER FUNCTION fenceq._move_due(queue text, now timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._move_due(queue text, now timestamp with time zone) IS 'Private. Move up to 1,000 of a queue''s jobs that fell due from the later set to the ready set; returns how many.';

CREATE FUNCTION fenceq._new_job_id() RETURNS text
    LANGUAGE sql
    RETURN ((encode(set_bit(set_bit(OVERLAY(uuid_send(gen_random_uuid()) PLACING SUBSTRING(int8send(((EXTRACT(epoch FROM clock_timestamp()) * (1000)::numeric))::bigint) FROM 3) FROM 1 FOR 6), (52)::bigint, 1), (53)::bigint, 1), 'hex'::text))::uuid)::text;

ALTER FUNCTION fenceq._new_job_id() OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._new_job_id() IS 'Private, inlined. A new job id: a time-ordered version 7 UUID as text.';

CREATE FUNCTION fenceq._new_job_ids(n integer) RETURNS text[]
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    RETURN (SELECT COALESCE(array_agg((b.prefix || lpad(to_hex((b.start + g.i)), 12, '0'::text)) ORDER BY g.i), '{}'::text[]) AS "coalesce" FROM (SELECT ((OVERLAY(lpad(to_hex(((EXTRACT(epoch FROM clock_timestamp()) * (1000)::numeric))::bigint), 12, '0'::text) PLACING '-'::text FROM 9 FOR 0) || '-7'::text) || SUBSTRING(r.uuid FROM 16 FOR 9)) AS prefix, ((('x'::text || SUBSTRING(r.uuid FROM 26 FOR 11)))::bit(44))::bigint AS start FROM (SELECT (gen_random_uuid())::text AS uuid) r) b, generate_series(1, _new_job_ids.n) g(i));

ALTER FUNCTION fenceq._new_job_ids(n integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._new_job_ids(n integer) IS 'Private. n new job ids for one batch: version 7 UUIDs as text sharing a clock reading, in batch order.';

CREATE FUNCTION fenceq._notify_done(job_ids text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
BEGIN
    PERFORM pg_notify('fenceq_done', j.job_id)
       FROM fenceq._jobs AS j JOIN fenceq._queues AS q ON q.queue = j.queue
      WHERE j.job_id = ANY (_notify_done.job_ids) AND q.notify_done;
END
$$;

ALTER FUNCTION fenceq._notify_done(job_ids text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._notify_done(job_ids text[]) IS 'Private. Send fenceq_done (payload: the job id) for each of these jobs whose queue has notify_done on.';

CREATE FUNCTION fenceq._notify_jobs(queue text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = _notify_jobs.queue AND q.notify) THEN
        PERFORM pg_notify('fenceq_jobs', _notify_jobs.queue);
    END IF;
END
$$;

ALTER FUNCTION fenceq._notify_jobs(queue text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._notify_jobs(queue text) IS 'Private. Send a fenceq_jobs notification for a queue whose notify flag is on.';

CREATE FUNCTION fenceq._pick(queues text[], wanted integer, OUT picked text[], OUT exhausted boolean) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $_$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_active text[];
    v_known integer;
    v_limited text[];
    v_offered text[] := '{}';
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    IF cardinality(_pick.queues) = 1 THEN
        SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = _pick.queues[1];
        IF NOT FOUND THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        IF NOT v_queue.paused AND num_nonnulls(v_queue.max_claimed, v_queue.max_claimed_per_key,
                                               v_queue.rate_limit) > 0 THEN
            picked := fenceq._pick_limited(v_queue.queue, _pick.wanted);
            exhausted := EXISTS (SELECT 1 FROM fenceq._jobs AS j
                                  WHERE j.job_id = ANY (_pick.picked) AND j.generation = 9223372036854775807);
        ELSIF NOT v_queue.paused THEN
            IF EXISTS (SELECT 1 FROM fenceq._jobs AS l
                        WHERE l.queue = v_queue.queue AND l.status = 'pending' AND l.scheduled
                          AND l.run_at <= v_now) THEN
                PERFORM fenceq._move_due(v_queue.queue, v_now);
            END IF;
            SELECT array_agg(p.job_id ORDER BY p.ordinal), bool_or(p.generation = 9223372036854775807)
              INTO picked, exhausted FROM (
                SELECT j.job_id, j.generation, row_number() OVER () AS ordinal FROM (
                    SELECT j.job_id, j.generation
                      FROM fenceq._jobs AS j
                     WHERE j.queue = v_queue.queue AND j.status = 'pending' AND NOT j.scheduled
                       AND j.run_at <= v_now AND (j.expires_at IS NULL OR j.expires_at > v_now)
                     ORDER BY j.priority DESC, j.run_at, j.seq
                     LIMIT _pick.wanted
                       FOR UPDATE SKIP LOCKED) AS j) AS p;
        END IF;
    ELSE
        SELECT array_agg(q.queue ORDER BY q.queue) FILTER (WHERE NOT q.paused AND NOT q.limited),
               array_agg(q.queue ORDER BY q.queue) FILTER (WHERE NOT q.paused AND q.limited), count(*)
          INTO v_active, v_limited, v_known
          FROM (SELECT q.queue, q.paused,
                       num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) > 0 AS limited
                  FROM fenceq._queues AS q WHERE q.queue = ANY (_pick.queues)) AS q;
        IF v_known <> (SELECT count(DISTINCT n.name) FROM unnest(_pick.queues) AS n(name)) THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        -- Queues with limits offer what their limits allow (locking their
        -- rows in name order, so claimers never deadlock); the merge below
        -- takes the best of those and of the other queues' heads.
        IF v_limited IS NOT NULL THEN
            v_offered := ARRAY(SELECT unnest(fenceq._pick_limited(l.name, _pick.wanted))
                                 FROM unnest(v_limited) AS l(name));
        END IF;
        PERFORM fenceq._move_due(a.name, v_now) FROM unnest(v_active) AS a(name)
          WHERE EXISTS (SELECT 1 FROM fenceq._jobs AS l
                         WHERE l.queue = a.name AND l.status = 'pending' AND l.scheduled AND l.run_at <= v_now);
        IF v_active IS NOT NULL OR cardinality(v_offered) > 0 THEN
            -- EXECUTE plans this statement for its actual values every time: a
            -- generic plan of the per-queue merge can lose the ordered index scan.
            EXECUTE $sql$
                SELECT array_agg(c.job_id ORDER BY c.priority DESC, c.run_at, c.seq),
                       bool_or(c.generation = 9223372036854775807) FROM (
                    SELECT c.job_id, c.generation, c.priority, c.run_at, c.seq
                      FROM unnest($1::text[]) AS a(name)
                     CROSS JOIN LATERAL (
                        SELECT j.job_id, j.generation, j.priority, j.run_at, j.seq
                          FROM fenceq._jobs AS j
                         WHERE j.queue = a.name AND j.status = 'pending' AND NOT j.scheduled
                           AND j.run_at <= $3
                           AND (j.expires_at IS NULL OR j.expires_at > $3)
                         ORDER BY j.priority DESC, j.run_at, j.seq
                         LIMIT $2
                           FOR UPDATE OF j SKIP LOCKED) AS c
                    UNION ALL
                    SELECT j.job_id, j.generation, j.priority, j.run_at, j.seq
                      FROM fenceq._jobs AS j WHERE j.job_id = ANY ($4)
                     ORDER BY priority DESC, run_at, seq
                     LIMIT $2) AS c
            $sql$ INTO picked, exhausted USING coalesce(v_active, '{}'), _pick.wanted, v_now, v_offered;
        END IF;
    END IF;
END
$_$;

ALTER FUNCTION fenceq._pick(queues text[], wanted integer, OUT picked text[], OUT exhausted boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._pick(queues text[], wanted integer, OUT picked text[], OUT exhausted boolean) IS 'Private. Lock and return, in claim order, up to wanted due jobs across queues, and whether one is at the largest generation.';

CREATE FUNCTION fenceq._pick_limited(queue text, wanted integer) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_now timestamptz;
    v_allowed integer := _pick_limited.wanted;
    v_full text[] := '{}';
    v_taken text[] := '{}';
    v_job fenceq._jobs;
BEGIN
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = _pick_limited.queue FOR NO KEY UPDATE;
    v_now := clock_timestamp();
    IF v_queue.max_claimed IS NOT NULL THEN
        v_allowed := least(v_allowed, v_queue.max_claimed - (
            SELECT count(*) FROM fenceq._jobs AS j WHERE j.queue = v_queue.queue AND j.status = 'claimed'));
    END IF;
    IF v_queue.rate_limit IS NOT NULL THEN
        DELETE FROM fenceq._rate_window AS r
         WHERE r.queue = v_queue.queue AND r.claimed_at <= v_now - v_queue.rate_period;
        v_allowed := least(v_allowed, v_queue.rate_limit - (
            SELECT count(*) FROM fenceq._rate_window AS r WHERE r.queue = v_queue.queue));
    END IF;
    IF v_allowed <= 0 THEN
        RETURN NULL;
    END IF;
    PERFORM fenceq._move_due(v_queue.queue, v_now);
    IF v_queue.max_claimed_per_key IS NULL THEN
        RETURN ARRAY(
            SELECT j.job_id FROM fenceq._jobs AS j
             WHERE j.queue = v_queue.queue AND j.status = 'pending' AND NOT j.scheduled AND j.run_at <= v_now
               AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.priority DESC, j.run_at, j.seq
             LIMIT v_allowed
               FOR UPDATE SKIP LOCKED);
    END IF;
    -- Per key: the keys already at their limit, then one pick at a time
    -- (a pick can fill its key).
    v_full := ARRAY(
        SELECT j.concurrency_key FROM fenceq._jobs AS j
         WHERE j.queue = v_queue.queue AND j.status = 'claimed' AND j.concurrency_key IS NOT NULL
         GROUP BY j.concurrency_key HAVING count(*) >= v_queue.max_claimed_per_key);
    WHILE cardinality(v_taken) < v_allowed LOOP
        SELECT * INTO v_job FROM fenceq._jobs AS j
         WHERE j.queue = v_queue.queue AND j.status = 'pending' AND NOT j.scheduled AND j.run_at <= v_now
           AND (j.expires_at IS NULL OR j.expires_at > v_now)
           AND (j.concurrency_key IS NULL OR j.concurrency_key <> ALL (v_full))
           AND j.job_id <> ALL (v_taken)
         ORDER BY j.priority DESC, j.run_at, j.seq
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        v_taken := v_taken || v_job.job_id;
        IF v_job.concurrency_key IS NOT NULL AND (
            SELECT count(*) FROM fenceq._jobs AS j
             WHERE j.queue = v_queue.queue AND j.status = 'claimed'
               AND j.concurrency_key = v_job.concurrency_key)
            + (SELECT count(*) FROM fenceq._jobs AS j
                WHERE j.job_id = ANY (v_taken) AND j.concurrency_key = v_job.concurrency_key)
            >= v_queue.max_claimed_per_key THEN
            v_full := v_full || v_job.concurrency_key;
        END IF;
    END LOOP;
    RETURN nullif(v_taken, '{}');
END
$$;

ALTER FUNCTION fenceq._pick_limited(queue text, wanted integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._pick_limited(queue text, wanted integer) IS 'Private. Lock and return, in claim order, the due jobs of a queue with limits that its limits allow now.';

CREATE FUNCTION fenceq._raise(code text, message text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_index text := current_setting('fenceq.batch_index', true);
BEGIN
    IF v_index IS NULL OR v_index = '' THEN
        RAISE EXCEPTION USING ERRCODE = _raise.code, MESSAGE = 'fenceq: ' || _raise.message;
    END IF;
    RAISE EXCEPTION USING ERRCODE = _raise.code, MESSAGE = 'fenceq: ' || _raise.message,
        DETAIL = 'request index ' || v_index;
END
$$;

ALTER FUNCTION fenceq._raise(code text, message text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._raise(code text, message text) IS 'Private. Raise a fenceq error with the given QF SQLSTATE; adds the submit_batch element index to DETAIL.';

CREATE FUNCTION fenceq._record_action(job_id text, after_seq bigint, event text, detail jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
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

ALTER FUNCTION fenceq._record_action(job_id text, after_seq bigint, event text, detail jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._record_action(job_id text, after_seq bigint, event text, detail jsonb) IS 'Private. Record a bulk action''s change of one job as one event: the transition''s own event gains the detail, or the event is written.';

CREATE FUNCTION fenceq._record_event(job_id text, queue text, event text, generation bigint, owner_id text, detail jsonb DEFAULT '{}'::jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
    SELECT _record_event.job_id, q.queue, clock_timestamp(), _record_event.event,
           CASE WHEN _record_event.owner_id IS NOT NULL THEN _record_event.generation END,
           _record_event.owner_id, coalesce(_record_event.detail, '{}')
      FROM fenceq._queues AS q
     WHERE q.queue = _record_event.queue AND q.history;
END
$$;

ALTER FUNCTION fenceq._record_event(job_id text, queue text, event text, generation bigint, owner_id text, detail jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._record_event(job_id text, queue text, event text, generation bigint, owner_id text, detail jsonb) IS 'Private. Write one history event of a job when its queue has history on; nothing otherwise.';

CREATE FUNCTION fenceq._record_events(job_ids text[], event text, detail jsonb DEFAULT '{}'::jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO fenceq._events (job_id, queue, at, event, generation, owner_id, detail)
    SELECT j.job_id, j.queue, clock_timestamp(), _record_events.event,
           CASE WHEN j.owner_id IS NOT NULL THEN j.generation END, j.owner_id,
           CASE _record_events.event
                WHEN 'claimed' THEN jsonb_build_object('attempt', j.attempts)
                WHEN 'submitted' THEN jsonb_build_object('priority', j.priority, 'run_at', j.run_at)
                ELSE coalesce(_record_events.detail, '{}') END
      FROM unnest(_record_events.job_ids) WITH ORDINALITY AS e(job_id, ordinal)
      JOIN fenceq._jobs AS j ON j.job_id = e.job_id
      JOIN fenceq._queues AS q ON q.queue = j.queue
     WHERE q.history
     ORDER BY e.ordinal;
END
$$;

ALTER FUNCTION fenceq._record_events(job_ids text[], event text, detail jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._record_events(job_ids text[], event text, detail jsonb) IS 'Private. Write the same history event for each of these jobs whose queue has history on, with the generation and owner on its row.';

CREATE FUNCTION fenceq._requeue_at(job fenceq._jobs, now timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_earliest timestamptz;
    v_latest timestamptz;
BEGIN
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = (_requeue_at.job).queue;
    IF v_queue.requeue_priority = 'keep' THEN
        RETURN NULL;
    END IF;
    -- The ends of the queue's pending jobs of this priority: each half of the
    -- claim index (ready, waiting apart) read at both ends. A job waiting on
    -- dependencies (run_at 'infinity') has no due time yet.
    SELECT min(e.earliest), max(e.latest) INTO v_earliest, v_latest
      FROM (VALUES (false), (true)) AS s(scheduled)
     CROSS JOIN LATERAL (
        SELECT min(j.run_at) AS earliest, max(j.run_at) AS latest
          FROM fenceq._jobs AS j
         WHERE j.queue = v_queue.queue AND j.status = 'pending' AND j.scheduled = s.scheduled
           AND j.priority = (_requeue_at.job).priority AND j.run_at < 'infinity') AS e;
    IF v_queue.requeue_priority = 'first' THEN
        RETURN least(_requeue_at.now, v_earliest - interval '1 microsecond');
    END IF;
    RETURN least(greatest(
        _requeue_at.now + fenceq._backoff((_requeue_at.job).attempts, v_queue.backoff_base,
                                          v_queue.backoff_factor, v_queue.backoff_max),
        v_latest + interval '1 microsecond'), timestamptz '9999-12-31 23:59:59.999999+00');
END
$$;

ALTER FUNCTION fenceq._requeue_at(job fenceq._jobs, now timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._requeue_at(job fenceq._jobs, now timestamp with time zone) IS 'Private. When a job reap requeues is due under its queue''s requeue_priority: NULL for keep (the back-off), else ahead of (first) or behind (last) every pending job of its queue and priority.';

CREATE FUNCTION fenceq._retry_or_fail(job fenceq._jobs, error text, retry boolean, retry_at timestamp with time zone, now timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_error text := left(_retry_or_fail.error, 65536);
    v_run_at timestamptz;
    v_dlq_id text;
BEGIN
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = (_retry_or_fail.job).queue;
    IF _retry_or_fail.retry AND (_retry_or_fail.job).attempts < (_retry_or_fail.job).max_attempts THEN
        v_run_at := coalesce(_retry_or_fail.retry_at, least(_retry_or_fail.now + fenceq._backoff(
            (_retry_or_fail.job).attempts, v_queue.backoff_base, v_queue.backoff_factor, v_queue.backoff_max),
            timestamptz '9999-12-31 23:59:59.999999+00'));
        UPDATE fenceq._jobs AS j
           SET status = 'pending', run_at = v_run_at, last_error = v_error,
               owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
               budget_expires_at = NULL, pid = NULL,
               scheduled = v_run_at > _retry_or_fail.now  -- in back-off: waits apart (part 1c)
         WHERE j.job_id = (_retry_or_fail.job).job_id;
        IF v_queue.history THEN
            PERFORM fenceq._record_event((_retry_or_fail.job).job_id, v_queue.queue, 'retried',
                (_retry_or_fail.job).generation, (_retry_or_fail.job).owner_id,
                jsonb_build_object('error', left(v_error, 2000), 'retry_at', v_run_at));
        END IF;
        -- Also for a later run: idle workers re-read next_due on the hint
        -- (the failing worker may be busy, stopping, or a reaper).
        IF v_queue.notify THEN
            PERFORM pg_notify('fenceq_jobs', v_queue.queue);
        END IF;
        RETURN 'pending';
    END IF;
    UPDATE fenceq._jobs AS j
       SET status = 'failed', last_error = v_error, finished_at = _retry_or_fail.now,
           dlq_id = CASE WHEN coalesce(v_queue.dead_letter, true)
                         THEN fenceq._dead_letter(_retry_or_fail.job, v_error, _retry_or_fail.now) END
     WHERE j.job_id = (_retry_or_fail.job).job_id
    RETURNING j.dlq_id INTO v_dlq_id;
    IF v_queue.history THEN
        PERFORM fenceq._record_event((_retry_or_fail.job).job_id, v_queue.queue, 'failed',
            (_retry_or_fail.job).generation, (_retry_or_fail.job).owner_id,
            jsonb_build_object('error', left(v_error, 2000)));
        IF v_dlq_id IS NOT NULL THEN
            PERFORM fenceq._record_event((_retry_or_fail.job).job_id, v_queue.queue, 'dead_lettered',
                (_retry_or_fail.job).generation, (_retry_or_fail.job).owner_id,
                jsonb_build_object('dlq_id', v_dlq_id));
        END IF;
    END IF;
    PERFORM fenceq._settle_dependents(ARRAY[(_retry_or_fail.job).job_id], false);
    IF v_queue.notify_done THEN
        PERFORM fenceq._notify_done(ARRAY[(_retry_or_fail.job).job_id]);
    END IF;
    RETURN 'failed';
END
$$;

ALTER FUNCTION fenceq._retry_or_fail(job fenceq._jobs, error text, retry boolean, retry_at timestamp with time zone, now timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._retry_or_fail(job fenceq._jobs, error text, retry boolean, retry_at timestamp with time zone, now timestamp with time zone) IS 'Private. Requeue a failed attempt with backoff, or fail it for good (with a dead letter when the queue keeps them).';

CREATE FUNCTION fenceq._set_queue_flag(queue text, flag text, value boolean) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_old boolean;
BEGIN
    PERFORM fenceq._check_name(_set_queue_flag.queue, 'queue');
    IF _set_queue_flag.value IS NULL THEN
        PERFORM fenceq._raise('QF100', _set_queue_flag.flag || ' is required');
    END IF;
    SELECT CASE _set_queue_flag.flag WHEN 'paused' THEN q.paused ELSE q.notify END
      INTO v_old
      FROM fenceq._queues AS q WHERE q.queue = _set_queue_flag.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF v_old = _set_queue_flag.value THEN
        RETURN false;
    END IF;
    IF _set_queue_flag.flag = 'paused' THEN
        UPDATE fenceq._queues AS q SET paused = _set_queue_flag.value WHERE q.queue = _set_queue_flag.queue;
        IF NOT _set_queue_flag.value THEN
            PERFORM fenceq._notify_jobs(_set_queue_flag.queue);
        END IF;
    ELSE
        UPDATE fenceq._queues AS q SET notify = _set_queue_flag.value WHERE q.queue = _set_queue_flag.queue;
    END IF;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq._set_queue_flag(queue text, flag text, value boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._set_queue_flag(queue text, flag text, value boolean) IS 'Private. Set a queue''s paused or notify flag; true when it changed.';

CREATE FUNCTION fenceq._settle_dependents(job_ids text[], completed boolean) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_targets text[];
    v_now timestamptz;
    v_queue text;
    v_job text;
    v_freed text[];
    v_wake text[];
    v_cancelled text[];
BEGIN
    IF _settle_dependents.completed THEN
        v_targets := ARRAY(SELECT DISTINCT d.job_id FROM fenceq._dependencies AS d
                            WHERE d.depends_on = ANY (_settle_dependents.job_ids) AND NOT d.satisfied
                            ORDER BY 1);
    ELSE
        WITH RECURSIVE down(job_id, depth) AS (
            SELECT d.job_id, 1 FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (_settle_dependents.job_ids)
            UNION
            SELECT d.job_id, w.depth + 1 FROM down AS w JOIN fenceq._dependencies AS d ON d.depends_on = w.job_id
             WHERE w.depth <= 17)
        SELECT ARRAY(SELECT DISTINCT w.job_id FROM down AS w ORDER BY 1) INTO v_targets;
    END IF;
    IF cardinality(v_targets) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (v_targets) ORDER BY j.job_id FOR UPDATE;
    v_now := clock_timestamp();
    IF _settle_dependents.completed THEN
        WITH satisfied AS (
            UPDATE fenceq._dependencies AS d SET satisfied = true
             WHERE d.depends_on = ANY (_settle_dependents.job_ids) AND NOT d.satisfied
            RETURNING d.job_id),
        counted AS (SELECT s.job_id, count(*)::integer AS n FROM satisfied AS s GROUP BY s.job_id),
        released AS (
            UPDATE fenceq._jobs AS j
               SET blocked_by = nullif(j.blocked_by - c.n, 0),
                   run_at = CASE WHEN j.blocked_by = c.n THEN greatest(j.blocked_run_at, v_now) ELSE j.run_at END,
                   blocked_run_at = CASE WHEN j.blocked_by = c.n THEN NULL ELSE j.blocked_run_at END,
                   -- Freed: ready when due now, else still waiting apart (part 1c).
                   scheduled = j.blocked_by > c.n OR coalesce(j.blocked_run_at > v_now, false)
              FROM counted AS c
             WHERE j.job_id = c.job_id AND j.status = 'pending' AND j.blocked_by IS NOT NULL
            RETURNING j.job_id, j.queue, j.blocked_by IS NULL AS free)
        SELECT array_agg(r.job_id ORDER BY r.job_id) FILTER (WHERE r.free),
           -- Free now, due now or later: idle workers re-read next_due.
           ARRAY(SELECT DISTINCT w.queue FROM released AS w JOIN fenceq._queues AS q ON q.queue = w.queue
                  WHERE w.free AND q.notify)
          INTO v_freed, v_wake
          FROM released AS r;
        PERFORM fenceq._record_events(v_freed, 'unblocked');
        FOREACH v_queue IN ARRAY v_wake LOOP
            PERFORM pg_notify('fenceq_jobs', v_queue);
        END LOOP;
        RETURN;
    END IF;
    FOR v_job IN
        WITH cancelled AS (
            UPDATE fenceq._jobs AS j
               SET status = 'cancelled', last_error = 'dependency_failed', finished_at = v_now,
                   lease_expires_at = NULL, pid = NULL
              FROM (SELECT j.job_id, j.status AS was FROM fenceq._jobs AS j
                     WHERE j.job_id = ANY (v_targets) AND j.status IN ('pending', 'claimed')) AS o
             WHERE j.job_id = o.job_id
            RETURNING j.job_id, o.was)
        SELECT c.job_id FROM cancelled AS c WHERE c.was = 'claimed' ORDER BY c.job_id
    LOOP
        PERFORM pg_notify('fenceq_control', v_job);
    END LOOP;
    -- The jobs cancelled just now: at this reading.
    v_cancelled := ARRAY(SELECT j.job_id FROM fenceq._jobs AS j
                          WHERE j.job_id = ANY (v_targets) AND j.status = 'cancelled' AND j.finished_at = v_now
                          ORDER BY j.job_id);
    PERFORM fenceq._record_events(v_cancelled, 'cancelled', '{"reason": "dependency_failed"}');
    PERFORM fenceq._notify_done(v_cancelled);  -- fenceq_done (part 58)
END
$$;

ALTER FUNCTION fenceq._settle_dependents(job_ids text[], completed boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._settle_dependents(job_ids text[], completed boolean) IS 'Private. Count a completed job off its dependents (releasing those left with none), or cancel every job that transitively depends on a job that did not complete.';

CREATE FUNCTION fenceq._submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
    v_payload jsonb := CASE WHEN jsonb_typeof(_submit.payload) = 'null' THEN NULL ELSE _submit.payload END;
    v_force boolean := coalesce(_submit.force, false);
    v_fingerprint text;
    v_existing fenceq._submissions;
    v_job_id text;
    v_now timestamptz;
    v_run_at timestamptz;
    v_holder text;
    v_round integer := 0;
    v_depends_on text[];
    v_blocked_by integer;
    v_dependency_failed boolean := false;
BEGIN
    -- Fast path for the usual well-formed call (one expression); otherwise
    -- the checks run one by one and name what is wrong.
    IF NOT coalesce(length(_submit.queue) BETWEEN 1 AND 255 AND length(_submit.task) BETWEEN 1 AND 255
                    AND coalesce(length(_submit.submission_id) BETWEEN 1 AND 255, true)
                    AND coalesce(length(_submit.job_id) BETWEEN 1 AND 36, true)
                    AND coalesce(length(_submit.active_key) BETWEEN 1 AND 255, true)
                    AND coalesce(length(_submit.concurrency_key) BETWEEN 1 AND 255, true)
                    AND coalesce(_submit.max_attempts >= 1, true)
                    AND _submit.run_at IS NULL AND _submit.expires_at IS NULL, false) THEN
        PERFORM fenceq._check_name(_submit.queue, 'queue');
        PERFORM fenceq._check_name(_submit.task, 'task');
        PERFORM fenceq._check_name(_submit.submission_id, 'submission_id', nullable => true);
        PERFORM fenceq._check_name(_submit.job_id, 'job_id', max_length => 36, nullable => true);
        PERFORM fenceq._check_name(_submit.active_key, 'active_key', nullable => true);
        PERFORM fenceq._check_name(_submit.concurrency_key, 'concurrency_key', nullable => true);
        IF _submit.max_attempts < 1 THEN
            PERFORM fenceq._raise('QF104', 'max_attempts must be a positive integer');
        END IF;
        PERFORM fenceq._check_time(_submit.run_at, 'run_at');
        PERFORM fenceq._check_time(_submit.expires_at, 'expires_at');
    END IF;
    IF v_payload IS NOT NULL THEN
        PERFORM fenceq._check_json(v_payload, 'payload');
    END IF;
    IF _submit.depends_on IS NOT NULL THEN
        v_depends_on := fenceq._check_dependencies(_submit.depends_on, _submit.job_id);
    END IF;

    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = _submit.queue;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;

    IF coalesce(_submit.submission_id, _submit.job_id, _submit.active_key) IS NOT NULL THEN
        PERFORM fenceq._lock_identities(fenceq._identity_keys(_submit.queue, _submit.active_key,
                                                              _submit.job_id, _submit.submission_id));
    END IF;

    IF _submit.submission_id IS NOT NULL THEN
        v_fingerprint := fenceq._fingerprint(_submit.queue, _submit.task, v_payload,
            _submit.submission_id, _submit.job_id, _submit.priority, _submit.run_at,
            _submit.expires_at, _submit.max_attempts, _submit.active_key, v_force, _submit.concurrency_key,
            v_depends_on);
        SELECT * INTO v_existing FROM fenceq._submissions AS s
         WHERE s.submission_id = _submit.submission_id;
        IF FOUND THEN
            IF v_existing.fingerprint = v_fingerprint THEN
                RETURN v_existing.job_id;
            END IF;
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
    END IF;

    IF _submit.job_id IS NOT NULL AND (
        EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = _submit.job_id)
        OR EXISTS (SELECT 1 FROM fenceq._submissions AS s WHERE s.job_id = _submit.job_id)) THEN
        PERFORM fenceq._raise('QF203', 'the job id is taken');
    END IF;
    v_job_id := coalesce(_submit.job_id, fenceq._new_job_id());
    v_now := clock_timestamp();

    IF _submit.submission_id IS NOT NULL THEN
        INSERT INTO fenceq._submissions AS s (submission_id, fingerprint, job_id, queue, created_at)
        VALUES (_submit.submission_id, v_fingerprint, v_job_id, _submit.queue, v_now)
        ON CONFLICT (submission_id) DO NOTHING;
        IF NOT FOUND THEN
            -- The same identity committed concurrently: replay or conflict.
            SELECT * INTO v_existing FROM fenceq._submissions AS s
             WHERE s.submission_id = _submit.submission_id;
            IF v_existing.fingerprint = v_fingerprint THEN
                RETURN v_existing.job_id;
            END IF;
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
    END IF;

    v_run_at := coalesce(_submit.run_at, v_now);
    IF v_depends_on IS NOT NULL THEN
        SELECT d.blocked_by, d.failed INTO v_blocked_by, v_dependency_failed
          FROM fenceq._lock_dependencies(v_depends_on) AS d;
        -- A job stored cancelled waits for nothing.
        v_blocked_by := CASE WHEN v_dependency_failed THEN 0 ELSE v_blocked_by END;
    END IF;
    LOOP
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, status, max_attempts,
            run_at, expires_at, submission_id, fingerprint, active_key, created_at, concurrency_key,
            blocked_by, blocked_run_at, last_error, finished_at, scheduled)
        VALUES (v_job_id, _submit.queue, _submit.task, v_payload, coalesce(_submit.priority, 0),
            CASE WHEN v_dependency_failed THEN 'cancelled' ELSE 'pending' END,
            coalesce(_submit.max_attempts, v_queue.max_attempts),
            CASE WHEN v_blocked_by > 0 THEN 'infinity' ELSE v_run_at END,
            _submit.expires_at, _submit.submission_id, v_fingerprint,
            CASE WHEN v_dependency_failed THEN NULL ELSE _submit.active_key END, v_now, _submit.concurrency_key,
            nullif(v_blocked_by, 0), CASE WHEN v_blocked_by > 0 THEN v_run_at END,
            CASE WHEN v_dependency_failed THEN 'dependency_failed' END,
            CASE WHEN v_dependency_failed THEN v_now END,
            -- Waits apart (part 1c) while blocked or due later.
            NOT coalesce(v_dependency_failed, false) AND (coalesce(v_blocked_by, 0) > 0 OR v_run_at > v_now))
        ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;

        IF EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = v_job_id) THEN
            PERFORM fenceq._raise('QF203', 'the job id is taken');
        END IF;
        v_round := v_round + 1;
        IF v_round > 100 THEN
            PERFORM fenceq._raise('QF202', 'the active key stayed busy');
        END IF;
        SELECT j.job_id INTO v_holder FROM fenceq._jobs AS j
         WHERE j.queue = _submit.queue AND j.active_key = _submit.active_key
           AND j.status IN ('pending', 'claimed')
         FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- the holder finished meanwhile: try again
        IF NOT v_force THEN
            PERFORM fenceq._raise('QF202', 'the active key is held by another active job');
        END IF;
        UPDATE fenceq._jobs AS j
           SET status = 'cancelled', finished_at = clock_timestamp()
         WHERE j.job_id = v_holder;
        PERFORM fenceq._record_events(ARRAY[v_holder], 'cancelled', '{"reason": "replaced"}');
        PERFORM fenceq._settle_dependents(ARRAY[v_holder], false);
        PERFORM pg_notify('fenceq_control', v_holder);
        PERFORM fenceq._notify_done(ARRAY[v_holder]);
        IF v_holder = ANY (v_depends_on) THEN
            -- Forced over its own dependency, which is cancelled now: the
            -- job is stored cancelled too (§16), not left waiting for ever.
            v_blocked_by := 0;
            v_dependency_failed := true;
        END IF;
    END LOOP;
    IF v_queue.history THEN
        PERFORM fenceq._record_events(ARRAY[v_job_id], 'submitted');
    END IF;

    IF v_depends_on IS NOT NULL THEN
        INSERT INTO fenceq._dependencies AS d (depends_on, job_id, satisfied)
        SELECT e.id, v_job_id, coalesce(j.status = 'completed', false)
          FROM unnest(v_depends_on) AS e(id) LEFT JOIN fenceq._jobs AS j ON j.job_id = e.id;
        -- Stored cancelled: an earlier element of the same submit_batch may
        -- already wait on this job, and is cancelled with it.
        IF v_dependency_failed THEN
            PERFORM fenceq._settle_dependents(ARRAY[v_job_id], false);
        END IF;
    END IF;
    -- Due now or later: an idle worker re-reads next_due on the hint, so a
    -- job due before its next poll starts on time (docs/guarantees.md §13).
    IF coalesce(v_blocked_by, 0) = 0 AND NOT v_dependency_failed AND v_queue.notify THEN
        PERFORM pg_notify('fenceq_jobs', _submit.queue);
    END IF;
    RETURN v_job_id;
END
$$;

ALTER FUNCTION fenceq._submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) IS 'Private. The body of submit, shared with submit_batch.';

CREATE FUNCTION fenceq._try_lock_identities(keys text[]) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
DECLARE
    v_key text;
BEGIN
    FOREACH v_key IN ARRAY _try_lock_identities.keys LOOP
        CONTINUE WHEN v_key IS NULL;
        IF NOT pg_try_advisory_xact_lock(hashtextextended(v_key, 0)) THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq._try_lock_identities(keys text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq._try_lock_identities(keys text[]) IS 'Private. Try the advisory transaction locks of identity keys without waiting; false when one is held elsewhere.';

CREATE FUNCTION fenceq.acknowledge_cancel(job_id text, owner_id text, generation bigint, claim_token text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
BEGIN
    v_job := fenceq._lock_live(acknowledge_cancel.job_id, acknowledge_cancel.owner_id,
                               acknowledge_cancel.generation, acknowledge_cancel.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL OR NOT v_job.cancel_requested THEN
        RETURN false;
    END IF;
    UPDATE fenceq._jobs AS j
       SET status = 'cancelled', lease_expires_at = NULL, pid = NULL, finished_at = v_now
     WHERE j.job_id = acknowledge_cancel.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'cancelled', v_job.generation, v_job.owner_id,
                                 '{"reason": "acknowledged"}');
    PERFORM fenceq._settle_dependents(ARRAY[acknowledge_cancel.job_id], false);
    PERFORM fenceq._notify_done(ARRAY[acknowledge_cancel.job_id]);
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.acknowledge_cancel(job_id text, owner_id text, generation bigint, claim_token text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.acknowledge_cancel(job_id text, owner_id text, generation bigint, claim_token text) IS 'Acknowledge a requested cancellation under the live fence: cancelled, lease and pid cleared, active key freed. False without a live fence or a pending request.';

CREATE FUNCTION fenceq.acquire_lock(lock text, owner_id text, ttl interval) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_lock fenceq._locks;
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(acquire_lock.lock, 'lock');
    PERFORM fenceq._check_name(acquire_lock.owner_id, 'owner_id');
    PERFORM fenceq._check_interval(acquire_lock.ttl, 'ttl', nullable => false);
    SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = acquire_lock.lock FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fenceq._locks AS l (lock, token) VALUES (acquire_lock.lock, 0)
        ON CONFLICT (lock) DO NOTHING;
        SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = acquire_lock.lock FOR UPDATE;
    END IF;
    v_now := clock_timestamp();  -- read after the row lock is held
    IF v_lock.expires_at > v_now THEN
        IF v_lock.owner_id <> acquire_lock.owner_id THEN
            RETURN NULL;
        END IF;
        UPDATE fenceq._locks AS l SET expires_at = v_now + acquire_lock.ttl WHERE l.lock = acquire_lock.lock;
        RETURN v_lock.token;
    END IF;
    IF v_lock.token = 9223372036854775807 THEN
        PERFORM fenceq._raise('QF304', 'the lock''s token is exhausted');
    END IF;
    UPDATE fenceq._locks AS l
       SET owner_id = acquire_lock.owner_id, token = l.token + 1, expires_at = v_now + acquire_lock.ttl
     WHERE l.lock = acquire_lock.lock
    RETURNING l.token INTO v_lock.token;
    RETURN v_lock.token;
END
$$;

ALTER FUNCTION fenceq.acquire_lock(lock text, owner_id text, ttl interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.acquire_lock(lock text, owner_id text, ttl interval) IS 'Take a named lock for ttl: its new fencing token (larger than every earlier one), the same token renewed for its live holder, or NULL while another owner holds it. QF304 when the token is exhausted.';

CREATE FUNCTION fenceq.activity(queue text DEFAULT NULL::text, since interval DEFAULT '01:00:00'::interval, bucket interval DEFAULT NULL::interval) RETURNS TABLE(bucket_start timestamp with time zone, submitted bigint, claimed bigint, retried bigint, completed bigint, failed bigint, cancelled bigint, expired bigint, pending bigint, due bigint, running bigint, wait_p50 interval, wait_p95 interval, run_p50 interval, run_p95 interval)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
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

ALTER FUNCTION fenceq.activity(queue text, since interval, bucket interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.activity(queue text, since interval, bucket interval) IS 'A queue''s (or, for NULL, every queue''s) activity over the last since (at most 192 hours) in buckets, oldest first: counts, the depth last sampled in each bucket, wait and run time p50/p95 from the merged histograms. QF101 unknown queue, QF104 bad range. Workers and admins.';

CREATE FUNCTION fenceq.adopt_dispatch(job_id text, backend text, expected_ref text, owner_id text, claim_token text, lease interval DEFAULT NULL::interval) RETURNS SETOF fenceq.claim
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
    v_now timestamptz;
    v_lease interval;
    v_recorded boolean;
    v_previous_owner text;
    v_recorded_ref text;
BEGIN
    PERFORM fenceq._check_name(adopt_dispatch.job_id, 'job_id');
    PERFORM fenceq._check_name(adopt_dispatch.backend, 'backend');
    PERFORM fenceq._check_ref(adopt_dispatch.expected_ref, 'expected_ref');
    PERFORM fenceq._check_name(adopt_dispatch.owner_id, 'owner_id');
    PERFORM fenceq._check_name(adopt_dispatch.claim_token, 'claim_token');
    PERFORM fenceq._check_interval(adopt_dispatch.lease, 'lease');
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = adopt_dispatch.job_id FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND OR v_job.status <> 'claimed' OR v_job.lease_expires_at > v_now THEN
        RETURN;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    -- The ref the dispatch is known by: its reservation's until finalized.
    v_recorded_ref := coalesce(v_dispatch.execution_ref, v_dispatch.reservation_ref);
    IF v_dispatch.job_id IS NULL OR v_dispatch.backend <> adopt_dispatch.backend
       OR v_recorded_ref <> adopt_dispatch.expected_ref THEN
        RETURN;
    END IF;
    IF v_job.generation = 9223372036854775807 THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    v_previous_owner := v_job.owner_id;
    SELECT coalesce(adopt_dispatch.lease, q.lease) INTO v_lease
      FROM fenceq._queues AS q WHERE q.queue = v_job.queue;
    UPDATE fenceq._jobs AS j
       SET generation = j.generation + 1, owner_id = adopt_dispatch.owner_id,
           claim_token = adopt_dispatch.claim_token, lease = v_lease,
           lease_expires_at = v_now + v_lease, budget_expires_at = NULL, pid = NULL
     WHERE j.job_id = v_job.job_id
    RETURNING j.* INTO v_job;
    IF v_job.owner_id IS DISTINCT FROM adopt_dispatch.owner_id
       OR v_job.claim_token IS DISTINCT FROM adopt_dispatch.claim_token THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at)
    VALUES (adopt_dispatch.claim_token, v_job.job_id, v_job.generation, adopt_dispatch.owner_id, v_now)
    ON CONFLICT (claim_token) DO NOTHING
    RETURNING true INTO v_recorded;
    IF v_recorded IS NULL THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    UPDATE fenceq._dispatches AS d SET generation = v_job.generation WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_adopted', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'ref', adopt_dispatch.expected_ref,
                           'previous_owner_id', v_previous_owner));
    RETURN NEXT ROW(v_job.job_id, v_job.queue, v_job.task, v_job.payload, v_job.priority, v_job.attempts,
                    v_job.max_attempts, v_job.owner_id, v_job.generation, v_job.claim_token,
                    v_job.lease_expires_at, v_job.budget_expires_at, v_job.cancel_requested,
                    v_job.submission_id, fenceq._checkpoints_of(v_job.job_id))::fenceq.claim;
END
$$;

ALTER FUNCTION fenceq.adopt_dispatch(job_id text, backend text, expected_ref text, owner_id text, claim_token text, lease interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.adopt_dispatch(job_id text, backend text, expected_ref text, owner_id text, claim_token text, lease interval) IS 'Take over a job whose dispatching claim lapsed, when its recorded ref is exactly expected_ref: one claim row (generation + 1, the attempt not counted again), else no row. QF301 for a used token.';

CREATE FUNCTION fenceq.alter_queue(queue text, lease interval DEFAULT NULL::interval, max_attempts integer DEFAULT NULL::integer, backoff_base interval DEFAULT NULL::interval, backoff_factor double precision DEFAULT NULL::double precision, backoff_max interval DEFAULT NULL::interval, dead_letter boolean DEFAULT NULL::boolean, requeue_priority text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(alter_queue.queue, 'queue');
    PERFORM fenceq._check_requeue_priority(alter_queue.requeue_priority);
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = alter_queue.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    v_queue.lease := coalesce(alter_queue.lease, v_queue.lease);
    v_queue.max_attempts := coalesce(alter_queue.max_attempts, v_queue.max_attempts);
    v_queue.backoff_base := coalesce(alter_queue.backoff_base, v_queue.backoff_base);
    v_queue.backoff_factor := coalesce(alter_queue.backoff_factor, v_queue.backoff_factor);
    v_queue.backoff_max := coalesce(alter_queue.backoff_max, v_queue.backoff_max);
    v_queue.dead_letter := coalesce(alter_queue.dead_letter, v_queue.dead_letter);
    PERFORM fenceq._check_queue_settings(v_queue.lease, v_queue.max_attempts,
        v_queue.backoff_base, v_queue.backoff_factor, v_queue.backoff_max);
    UPDATE fenceq._queues AS q
       SET lease = v_queue.lease, max_attempts = v_queue.max_attempts,
           backoff_base = v_queue.backoff_base, backoff_factor = v_queue.backoff_factor,
           backoff_max = v_queue.backoff_max, dead_letter = v_queue.dead_letter,
           requeue_priority = coalesce(alter_queue.requeue_priority, q.requeue_priority)
     WHERE q.queue = alter_queue.queue;
END
$$;

ALTER FUNCTION fenceq.alter_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.alter_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) IS 'Change queue settings (NULL = unchanged); the rules apply to the result. QF101 for an unknown queue.';

CREATE FUNCTION fenceq.cancel(job_id text, force boolean DEFAULT false) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_answer text;
BEGIN
    PERFORM fenceq._check_name(cancel.job_id, 'job_id', max_length => 36);
    IF cancel.force IS NULL THEN
        PERFORM fenceq._raise('QF100', 'force is required');
    END IF;
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = cancel.job_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_answer := fenceq._cancel_locked(v_job, cancel.force);
    IF v_answer IS NULL THEN
        RETURN v_job.status;
    END IF;
    PERFORM pg_notify('fenceq_control', cancel.job_id);
    RETURN v_answer;
END
$$;

ALTER FUNCTION fenceq.cancel(job_id text, force boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.cancel(job_id text, force boolean) IS 'Cancel a job: pending -> cancelled; claimed -> cancel_requested (or cancelled with force, killing the fence); terminal -> its status; unknown -> NULL. Notifies fenceq_control.';

CREATE FUNCTION fenceq.cancel_jobs(queue text, job_ids text[] DEFAULT NULL::text[], task text DEFAULT NULL::text, payload_contains jsonb DEFAULT NULL::jsonb, include_claimed boolean DEFAULT false, force boolean DEFAULT false, max_rows integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
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

ALTER FUNCTION fenceq.cancel_jobs(queue text, job_ids text[], task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.cancel_jobs(queue text, job_ids text[], task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) IS 'Cancel, as cancel would, up to max_rows pending (with include_claimed, also claimed) jobs of a queue matching job_ids, task and payload_contains, oldest first; each change is one event with who and which filter. Returns how many changed. QF100 without job ids or a filter. Admins only.';

CREATE FUNCTION fenceq.cancel_matching(queue text, task text DEFAULT NULL::text, payload_contains jsonb DEFAULT NULL::jsonb, include_claimed boolean DEFAULT false, force boolean DEFAULT false, max_rows integer DEFAULT 10000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_changed integer := 0;
BEGIN
    PERFORM fenceq._check_name(cancel_matching.queue, 'queue');
    PERFORM fenceq._check_name(cancel_matching.task, 'task', nullable => true);
    IF jsonb_typeof(cancel_matching.payload_contains) NOT IN ('object', 'array') THEN
        PERFORM fenceq._raise('QF100', 'payload_contains must be a JSON object or array');
    END IF;
    PERFORM fenceq._check_json(cancel_matching.payload_contains, 'payload_contains');
    IF cancel_matching.include_claimed IS NULL OR cancel_matching.force IS NULL THEN
        PERFORM fenceq._raise('QF100', 'include_claimed and force are required');
    END IF;
    IF cancel_matching.force AND NOT cancel_matching.include_claimed THEN
        PERFORM fenceq._raise('QF100', 'force applies to claimed jobs: it needs include_claimed');
    END IF;
    IF cancel_matching.max_rows IS NULL OR cancel_matching.max_rows NOT BETWEEN 1 AND 100000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be an integer from 1 to 100000');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = cancel_matching.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    FOR v_job IN
        SELECT j.* FROM fenceq._jobs AS j
         WHERE j.job_id IN (
                SELECT m.job_id FROM fenceq._jobs AS m
                 WHERE m.queue = cancel_matching.queue
                   AND (m.status = 'pending'
                        OR (cancel_matching.include_claimed AND m.status = 'claimed'
                            AND (cancel_matching.force OR NOT m.cancel_requested)))
                   AND (cancel_matching.task IS NULL OR m.task = cancel_matching.task)
                   AND (cancel_matching.payload_contains IS NULL OR m.payload @> cancel_matching.payload_contains)
                 ORDER BY m.seq
                 LIMIT cancel_matching.max_rows)
           -- Judged again on the row as it is once locked.
           AND (j.status = 'pending'
                OR (cancel_matching.include_claimed AND j.status = 'claimed'
                    AND (cancel_matching.force OR NOT j.cancel_requested)))
         ORDER BY j.job_id
           FOR UPDATE OF j
    LOOP
        PERFORM fenceq._cancel_locked(v_job, cancel_matching.force);
        IF v_job.status = 'claimed' THEN
            PERFORM pg_notify('fenceq_control', v_job.job_id);
        END IF;
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;

ALTER FUNCTION fenceq.cancel_matching(queue text, task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.cancel_matching(queue text, task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) IS 'Cancel, as cancel would, up to max_rows pending (with include_claimed, also claimed) jobs of a queue matching task and payload_contains (@>), oldest first; returns how many changed, notifying fenceq_control for each claimed one. Admins only.';

CREATE FUNCTION fenceq.check_lock(lock text, token bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_lock fenceq._locks;
BEGIN
    PERFORM fenceq._check_name(check_lock.lock, 'lock');
    PERFORM fenceq._check_lock_token(check_lock.token);
    SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = check_lock.lock FOR KEY SHARE;
    -- The clock is read here, after the row lock is held.
    RETURN coalesce(v_lock.token = check_lock.token AND v_lock.expires_at > clock_timestamp(), false);
END
$$;

ALTER FUNCTION fenceq.check_lock(lock text, token bigint) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.check_lock(lock text, token bigint) IS 'True while the token is the live holder''s of a named lock. Holds the lock row until the caller''s transaction ends, so no owner acquires it meanwhile: call it in the transaction that makes the fenced writes.';

CREATE FUNCTION fenceq.checkpoint(job_id text, owner_id text, generation bigint, claim_token text, step text, value jsonb) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
    v_recorded jsonb;
BEGIN
    PERFORM fenceq._check_name(checkpoint.step, 'step');
    IF checkpoint.value IS NULL OR jsonb_typeof(checkpoint.value) = 'null' THEN
        PERFORM fenceq._raise('QF103', 'a checkpoint value may not be null');
    END IF;
    PERFORM fenceq._check_json(checkpoint.value, 'value');
    v_job := fenceq._lock_live(checkpoint.job_id, checkpoint.owner_id,
                               checkpoint.generation, checkpoint.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT c.value INTO v_recorded FROM fenceq._checkpoints AS c
     WHERE c.job_id = checkpoint.job_id AND c.step = checkpoint.step;
    IF v_recorded IS NULL THEN
        IF (SELECT count(*) FROM fenceq._checkpoints AS c WHERE c.job_id = checkpoint.job_id) >= 10000 THEN
            PERFORM fenceq._raise('QF100', 'a job may hold at most 10000 checkpoints');
        END IF;
        -- The row lock on the job serialises writers of its checkpoints.
        INSERT INTO fenceq._checkpoints AS c (job_id, step, value, generation, recorded_at)
        VALUES (checkpoint.job_id, checkpoint.step, checkpoint.value, checkpoint.generation, v_now);
        v_recorded := checkpoint.value;
    END IF;
    UPDATE fenceq._jobs AS j
       SET lease_expires_at = least(v_now + j.lease, j.budget_expires_at)
     WHERE j.job_id = checkpoint.job_id;
    RETURN v_recorded;
END
$$;

ALTER FUNCTION fenceq.checkpoint(job_id text, owner_id text, generation bigint, claim_token text, step text, value jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.checkpoint(job_id text, owner_id text, generation bigint, claim_token text, step text, value jsonb) IS 'Record a step value once per job under a live fence and renew the lease; returns the recorded value (the earlier one if already recorded), or NULL without a live fence.';

CREATE FUNCTION fenceq.claim_batch(queues text[], owner_id text, claim_tokens text[], lease interval DEFAULT NULL::interval, budget interval DEFAULT NULL::interval) RETURNS SETOF fenceq.claim
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_count integer := cardinality(claim_batch.claim_tokens);
    v_picked text[];
    v_exhausted boolean;
BEGIN
    -- Fast paths for the usual well-formed calls: one query-free expression
    -- for a single claim, one expression for a batch numbered from 1.
    -- Otherwise the checks run one by one and name what is wrong.
    IF NOT coalesce(cardinality(claim_batch.queues) = 1 AND length(claim_batch.queues[1]) BETWEEN 1 AND 255
                    AND v_count = 1 AND length(claim_batch.claim_tokens[1]) BETWEEN 1 AND 255
                    AND length(claim_batch.owner_id) BETWEEN 1 AND 255
                    AND claim_batch.lease IS NULL AND claim_batch.budget IS NULL, false) THEN
        IF NOT coalesce(array_ndims(claim_batch.queues) = 1 AND array_lower(claim_batch.queues, 1) = 1
                        AND cardinality(claim_batch.queues) <= 10000
                        AND array_ndims(claim_batch.claim_tokens) = 1 AND array_lower(claim_batch.claim_tokens, 1) = 1
                        AND v_count <= 10000 AND length(claim_batch.owner_id) BETWEEN 1 AND 255
                        AND claim_batch.lease IS NULL AND claim_batch.budget IS NULL
                        AND (SELECT bool_and(coalesce(length(n.name) BETWEEN 1 AND 255, false))
                               FROM unnest(claim_batch.queues) AS n(name))
                        AND (SELECT bool_and(coalesce(length(t.token) BETWEEN 1 AND 255, false))
                               FROM unnest(claim_batch.claim_tokens) AS t(token)), false) THEN
            PERFORM fenceq._check_names(claim_batch.queues, 'queues');
            PERFORM fenceq._check_name(claim_batch.owner_id, 'owner_id');
            PERFORM fenceq._check_names(claim_batch.claim_tokens, 'claim_tokens');
            PERFORM fenceq._check_interval(claim_batch.lease, 'lease');
            PERFORM fenceq._check_interval(claim_batch.budget, 'budget');
            -- Below, element i is [i]: renumber arrays sent with other bounds.
            claim_batch.queues := ARRAY(SELECT unnest(claim_batch.queues));
            claim_batch.claim_tokens := ARRAY(SELECT unnest(claim_batch.claim_tokens));
        END IF;
    END IF;

    IF v_count > 1 AND (SELECT count(DISTINCT t.token) FROM unnest(claim_batch.claim_tokens) AS t(token)) <> v_count THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;

    SELECT p.picked, p.exhausted INTO v_picked, v_exhausted
      FROM fenceq._pick(claim_batch.queues, v_count) AS p;

    -- A used token is refused even when there is nothing to claim. Tokens
    -- spent on picked jobs are checked by the ledger insert below (its
    -- conflict rolls the claim back); only the rest are looked up here.
    IF coalesce(cardinality(v_picked), 0) < v_count AND EXISTS (
        SELECT 1 FROM fenceq._claims AS c
         WHERE c.claim_token = ANY (claim_batch.claim_tokens[coalesce(cardinality(v_picked), 0) + 1 : v_count])) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    IF v_picked IS NULL THEN
        RETURN;
    END IF;
    -- A picked job already at the largest generation cannot be claimed again.
    IF v_exhausted THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    RETURN QUERY SELECT * FROM fenceq._claim_picked(v_picked, claim_batch.owner_id,
        claim_batch.claim_tokens, NULL, claim_batch.lease, claim_batch.budget);
END
$$;

ALTER FUNCTION fenceq.claim_batch(queues text[], owner_id text, claim_tokens text[], lease interval, budget interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.claim_batch(queues text[], owner_id text, claim_tokens text[], lease interval, budget interval) IS 'Claim up to one job per token across queues; QF301 before anything is claimed when a token repeats or was used.';

CREATE FUNCTION fenceq.claim_jobs(queues text[], owner_id text, claim_nonce text, max_jobs integer, lease interval DEFAULT NULL::interval, budget interval DEFAULT NULL::interval) RETURNS SETOF fenceq.claim
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_picked text[];
    v_exhausted boolean;
BEGIN
    -- The usual well-formed call is one query-free expression; otherwise
    -- the checks run one by one and name what is wrong.
    IF NOT coalesce(array_ndims(claim_jobs.queues) = 1 AND array_lower(claim_jobs.queues, 1) = 1
                    AND cardinality(claim_jobs.queues) BETWEEN 1 AND 10000
                    AND length(claim_jobs.owner_id) BETWEEN 1 AND 255
                    AND length(claim_jobs.claim_nonce) BETWEEN 1 AND 255
                    AND claim_jobs.max_jobs BETWEEN 1 AND 10000
                    AND fenceq._is_plain_duration(claim_jobs.lease)
                    AND fenceq._is_plain_duration(claim_jobs.budget)
                    AND (cardinality(claim_jobs.queues) = 1 AND length(claim_jobs.queues[1]) BETWEEN 1 AND 255
                         OR (SELECT bool_and(coalesce(length(n.name) BETWEEN 1 AND 255, false))
                               FROM unnest(claim_jobs.queues) AS n(name))), false) THEN
        PERFORM fenceq._check_names(claim_jobs.queues, 'queues');
        PERFORM fenceq._check_name(claim_jobs.owner_id, 'owner_id');
        PERFORM fenceq._check_name(claim_jobs.claim_nonce, 'claim_nonce');
        IF claim_jobs.max_jobs IS NULL OR claim_jobs.max_jobs NOT BETWEEN 1 AND 10000 THEN
            PERFORM fenceq._raise('QF104', 'max_jobs must be an integer from 1 to 10000');
        END IF;
        PERFORM fenceq._check_interval(claim_jobs.lease, 'lease');
        PERFORM fenceq._check_interval(claim_jobs.budget, 'budget');
        claim_jobs.queues := ARRAY(SELECT unnest(claim_jobs.queues));  -- numbered from 1
    END IF;
    -- A spent nonce is refused even when there is nothing to claim (and
    -- before any job is locked); a concurrent spend is caught by the
    -- ledger's key in _claim_picked.
    IF EXISTS (SELECT 1 FROM fenceq._claims AS c WHERE c.claim_token = claim_jobs.claim_nonce) THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    SELECT p.picked, p.exhausted INTO v_picked, v_exhausted
      FROM fenceq._pick(claim_jobs.queues, claim_jobs.max_jobs) AS p;
    IF v_picked IS NULL THEN
        RETURN;
    END IF;
    IF v_exhausted THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    RETURN QUERY SELECT * FROM fenceq._claim_picked(v_picked, claim_jobs.owner_id, NULL,
        claim_jobs.claim_nonce, claim_jobs.lease, claim_jobs.budget);
END
$$;

ALTER FUNCTION fenceq.claim_jobs(queues text[], owner_id text, claim_nonce text, max_jobs integer, lease interval, budget interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.claim_jobs(queues text[], owner_id text, claim_nonce text, max_jobs integer, lease interval, budget interval) IS 'Claim up to max_jobs jobs across queues under one nonce: each job''s fence carries the nonce, the ledger records it once. QF301 when the nonce was spent; recover_claim with it returns the call''s live claims.';

CREATE FUNCTION fenceq.claim_next(queues text[], owner_id text, claim_token text, lease interval DEFAULT NULL::interval, budget interval DEFAULT NULL::interval) RETURNS SETOF fenceq.claim
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_claim fenceq.claim[];  -- an array: a row variable cannot share an INTO list
    v_old_generation bigint;
    v_recorded boolean;
    v_limited boolean;
    v_history boolean;  -- whether the queue keeps events (part 8b)
BEGIN
    IF NOT coalesce(cardinality(claim_next.queues) = 1 AND array_lower(claim_next.queues, 1) = 1
                    AND length(claim_next.queues[1]) BETWEEN 1 AND 255
                    AND length(claim_next.owner_id) BETWEEN 1 AND 255
                    AND length(claim_next.claim_token) BETWEEN 1 AND 255
                    AND fenceq._is_plain_duration(claim_next.lease)
                    AND fenceq._is_plain_duration(claim_next.budget), false) THEN
        RETURN QUERY SELECT * FROM fenceq.claim_batch(claim_next.queues, claim_next.owner_id,
            ARRAY[claim_next.claim_token], claim_next.lease, claim_next.budget);
        RETURN;
    END IF;

    v_now := clock_timestamp();  -- eligibility; the lease is read after the lock
    IF EXISTS (SELECT 1 FROM fenceq._jobs AS l
                WHERE l.queue = claim_next.queues[1] AND l.status = 'pending' AND l.scheduled
                  AND l.run_at <= v_now) THEN
        PERFORM fenceq._move_due(claim_next.queues[1], v_now);
    END IF;
    WITH queue AS MATERIALIZED (
        -- A queue with limits takes claim_batch's path (the limits' lock).
        SELECT q.lease, q.history FROM fenceq._queues AS q
         WHERE q.queue = claim_next.queues[1] AND NOT q.paused
           AND num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) = 0),
    picked AS MATERIALIZED (
        -- The outer projection runs above the row lock, so its clock reading
        -- is taken once the row is held.
        SELECT p.job_id, p.generation, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.generation
              FROM fenceq._jobs AS j
             WHERE j.queue = claim_next.queues[1] AND j.status = 'pending' AND NOT j.scheduled
               AND j.run_at <= v_now
               AND (j.expires_at IS NULL OR j.expires_at > v_now)
               AND EXISTS (SELECT 1 FROM queue)
             ORDER BY j.priority DESC, j.run_at, j.seq
             LIMIT 1
               FOR UPDATE OF j SKIP LOCKED) AS p),
    claimed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'claimed',
               attempts = j.attempts + 1,
               -- At the largest generation the row keeps it, and the claim
               -- is refused below (QF303) before anything commits.
               generation = CASE WHEN p.generation < 9223372036854775807 THEN p.generation + 1
                                 ELSE p.generation END,
               owner_id = claim_next.owner_id,
               claim_token = claim_next.claim_token,
               lease = coalesce(claim_next.lease, q.lease),
               lease_expires_at = least(p.locked_at + coalesce(claim_next.lease, q.lease),
                                        p.locked_at + claim_next.budget),
               budget_expires_at = p.locked_at + claim_next.budget,
               cancel_requested = false,
               pid = NULL
          FROM picked AS p, queue AS q
         WHERE j.job_id = p.job_id
        RETURNING j.job_id, j.queue, j.task, j.payload, j.priority, j.attempts, j.max_attempts,
                  j.owner_id, j.generation, j.claim_token, j.lease_expires_at, j.budget_expires_at,
                  j.cancel_requested, j.submission_id, p.generation AS old_generation, p.locked_at,
                  q.history),
    recorded AS (
        INSERT INTO fenceq._claims AS c (claim_token, job_id, generation, owner_id, claimed_at)
        SELECT claim_next.claim_token, c.job_id, c.generation, claim_next.owner_id, c.locked_at
          FROM claimed AS c
        ON CONFLICT (claim_token) DO NOTHING
        RETURNING 1)
    SELECT ARRAY[ROW(c.job_id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts,
                     c.owner_id, c.generation, c.claim_token, c.lease_expires_at, c.budget_expires_at,
                     c.cancel_requested, c.submission_id, '{}'::jsonb)::fenceq.claim],
           c.old_generation, EXISTS (SELECT 1 FROM recorded), c.history
      INTO v_claim, v_old_generation, v_recorded, v_history
      FROM claimed AS c;

    IF v_claim IS NULL THEN
        -- Nothing claimed: an undeclared queue and a used token still raise;
        -- a queue with limits is claimed from under them.
        SELECT num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) > 0 INTO v_limited
          FROM fenceq._queues AS q WHERE q.queue = claim_next.queues[1];
        IF NOT FOUND THEN
            PERFORM fenceq._raise('QF101', 'unknown queue');
        END IF;
        IF v_limited THEN
            RETURN QUERY SELECT * FROM fenceq.claim_batch(claim_next.queues, claim_next.owner_id,
                ARRAY[claim_next.claim_token], claim_next.lease, claim_next.budget);
            RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM fenceq._claims AS c WHERE c.claim_token = claim_next.claim_token) THEN
            PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
        END IF;
        RETURN;
    END IF;
    IF v_old_generation = 9223372036854775807 THEN
        PERFORM fenceq._raise('QF303', 'the job''s generation is exhausted');
    END IF;
    -- Storage must keep exactly what was sent: a trigger or coercion that
    -- changed it rolls the whole claim back.
    IF v_claim[1].owner_id IS DISTINCT FROM claim_next.owner_id
       OR v_claim[1].claim_token IS DISTINCT FROM claim_next.claim_token THEN
        PERFORM fenceq._raise('QF302', 'storage changed the claim identity');
    END IF;
    IF NOT v_recorded THEN
        PERFORM fenceq._raise('QF301', 'a claim token was already used; recover the claim instead');
    END IF;
    -- Checkpoints need an earlier claim: a first claim has none to read
    -- (and its statement stays free of the lookup).
    IF v_claim[1].generation > 1 THEN
        v_claim[1].checkpoints := fenceq._checkpoints_of(v_claim[1].job_id);
    END IF;
    IF v_history THEN
        PERFORM fenceq._record_events(ARRAY[v_claim[1].job_id], 'claimed');
    END IF;
    RETURN NEXT v_claim[1];
END
$$;

ALTER FUNCTION fenceq.claim_next(queues text[], owner_id text, claim_token text, lease interval, budget interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.claim_next(queues text[], owner_id text, claim_token text, lease interval, budget interval) IS 'Claim the next eligible job (priority desc, run_at, submission order) across queues: zero or one row with the fence. Needs a fresh claim_token (QF301 if used); QF101 for an undeclared queue.';

CREATE FUNCTION fenceq.claim_state(job_id text, owner_id text, generation bigint, claim_token text) RETURNS TABLE(cancel_requested boolean, pid integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
BEGIN
    PERFORM fenceq._check_fence(claim_state.job_id, claim_state.owner_id, claim_state.generation, claim_state.claim_token);
    SELECT * INTO v_job FROM fenceq._jobs AS j WHERE j.job_id = claim_state.job_id;
    IF fenceq._holds_fence(v_job.status, v_job.owner_id, v_job.generation, v_job.claim_token,
                           v_job.lease_expires_at, claim_state.owner_id, claim_state.generation,
                           claim_state.claim_token, clock_timestamp()) THEN
        RETURN QUERY SELECT v_job.cancel_requested, v_job.pid;
    END IF;
END
$$;

ALTER FUNCTION fenceq.claim_state(job_id text, owner_id text, generation bigint, claim_token text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.claim_state(job_id text, owner_id text, generation bigint, claim_token text) IS 'Snapshot (cancel_requested, pid) of a live claim; no row when the fence is not the live owner.';

CREATE FUNCTION fenceq.complete(job_id text, owner_id text, generation bigint, claim_token text, result jsonb DEFAULT NULL::jsonb) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_notify_done boolean;
    v_history boolean;  -- whether the queue keeps events (part 8b)
BEGIN
    IF NOT fenceq._is_plain_json(complete.result) THEN
        PERFORM fenceq._check_json(complete.result, 'result');
    END IF;
    IF NOT coalesce(fenceq._is_plain_fence(complete.job_id, complete.owner_id,
                                           complete.generation, complete.claim_token), false) THEN
        PERFORM fenceq._check_fence(complete.job_id, complete.owner_id, complete.generation, complete.claim_token);
    END IF;
    WITH locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                   j.cancel_requested
              FROM fenceq._jobs AS j WHERE j.job_id = complete.job_id
               FOR UPDATE) AS l)
    UPDATE fenceq._jobs AS j
       SET status = 'completed', result = complete.result, finished_at = l.locked_at
      FROM locked AS l
     WHERE j.job_id = l.job_id
       AND fenceq._holds_fence(l.status, l.owner_id, l.generation, l.claim_token, l.lease_expires_at,
                               complete.owner_id, complete.generation, complete.claim_token, l.locked_at)
       AND NOT l.cancel_requested
    RETURNING coalesce((SELECT q.notify_done FROM fenceq._queues AS q WHERE q.queue = j.queue), false),
              coalesce((SELECT q.history FROM fenceq._queues AS q WHERE q.queue = j.queue), false)
         INTO v_notify_done, v_history;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Its own statement, so it sees every dependent committed before the
    -- row lock above was granted (a dependent's submit share-locks this row).
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = complete.job_id) THEN
        PERFORM fenceq._settle_dependents(ARRAY[complete.job_id], true);
    END IF;
    IF v_notify_done THEN
        PERFORM fenceq._notify_done(ARRAY[complete.job_id]);
    END IF;
    IF v_history THEN
        PERFORM fenceq._record_events(ARRAY[complete.job_id], 'completed');
    END IF;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.complete(job_id text, owner_id text, generation bigint, claim_token text, result jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.complete(job_id text, owner_id text, generation bigint, claim_token text, result jsonb) IS 'Complete a live claim with an optional JSON result. True once; false when stale, expired, terminal or cancel-requested.';

CREATE FUNCTION fenceq.complete_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], results jsonb[] DEFAULT NULL::jsonb[]) RETURNS boolean[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
    v_now timestamptz;
    v_answers boolean[];
    v_completed text[];
    v_notify_done text[];  -- the completed jobs whose queues notify
    v_logged text[];  -- the completed jobs whose queues keep events (part 8b)
BEGIN
    v_count := fenceq._check_batch(complete_batch.job_ids, complete_batch.owner_ids,
        complete_batch.generations, complete_batch.claim_tokens);
    IF complete_batch.results IS NOT NULL AND (cardinality(complete_batch.results) <> v_count
        OR (v_count > 0 AND array_ndims(complete_batch.results) <> 1)) THEN
        PERFORM fenceq._raise('QF100', 'results must have one element per fence');
    END IF;
    IF v_count = 0 THEN
        RETURN '{}';
    END IF;
    -- One set-wise look at the results (complete's own test, version 8):
    -- only a batch with a result that needs a closer look checks each.
    IF complete_batch.results IS NOT NULL
       AND NOT (SELECT bool_and(fenceq._is_plain_json(r.value)) FROM unnest(complete_batch.results) AS r(value)) THEN
        PERFORM fenceq._check_json(r.value, 'result') FROM unnest(complete_batch.results) AS r(value)
         WHERE r.value IS NOT NULL;
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (complete_batch.job_ids)
     ORDER BY j.job_id FOR UPDATE;
    v_now := clock_timestamp();  -- read after the row locks are held
    -- One call at a time, the first element naming a job's live fence would
    -- complete it and every later one would find it completed: so exactly
    -- the first live element per job wins.
    -- The results are unnested beside the fences (NULL results: NULL each):
    -- subscripting an array of jsonb walks it from its start every time.
    WITH fences AS (
        SELECT f.j, f.o, f.g, f.t, f.r, f.i
          FROM unnest(complete_batch.job_ids, complete_batch.owner_ids,
                      complete_batch.generations, complete_batch.claim_tokens, complete_batch.results)
               WITH ORDINALITY AS f(j, o, g, t, r, i)),
    winners AS (
        SELECT DISTINCT ON (f.j) f.j, f.r, f.i
          FROM fences AS f  -- one primary-key probe per fence, as in heartbeat_batch
         CROSS JOIN LATERAL (SELECT j.* FROM fenceq._jobs AS j WHERE j.job_id = f.j OFFSET 0) AS j
         WHERE fenceq._holds_fence(j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                                   f.o, f.g, f.t, v_now)
           AND NOT j.cancel_requested
         ORDER BY f.j, f.i),
    completed AS (
        UPDATE fenceq._jobs AS j
           SET status = 'completed', finished_at = v_now, result = w.r
          FROM winners AS w
         WHERE j.job_id = w.j
        RETURNING w.i, w.j, j.queue)
    SELECT (SELECT array_agg(a.completed ORDER BY a.i)  -- grouped, as in heartbeat_batch
              FROM (SELECT u.i, bool_or(u.completed) AS completed
                      FROM (SELECT f.i, false AS completed FROM fences AS f
                            UNION ALL
                            SELECT c.i, true FROM completed AS c) AS u
                     GROUP BY u.i) AS a),
           (SELECT array_agg(c.j) FROM completed AS c),
           (SELECT array_agg(c.j) FROM completed AS c
             WHERE EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = c.queue AND q.notify_done)),
           (SELECT array_agg(c.j ORDER BY c.i) FROM completed AS c
             WHERE EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = c.queue AND q.history))
      INTO v_answers, v_completed, v_notify_done, v_logged;
    IF EXISTS (SELECT 1 FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (v_completed)) THEN
        PERFORM fenceq._settle_dependents(v_completed, true);
    END IF;
    IF v_notify_done IS NOT NULL THEN
        PERFORM fenceq._notify_done(v_notify_done);
    END IF;
    IF v_logged IS NOT NULL THEN
        PERFORM fenceq._record_events(v_logged, 'completed');
    END IF;
    RETURN v_answers;
END
$$;

ALTER FUNCTION fenceq.complete_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], results jsonb[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.complete_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], results jsonb[]) IS 'Complete many fences in one transaction; element i answers as complete would for fence i. QF100 for arrays of unequal length.';

CREATE FUNCTION fenceq.create_queue(queue text, lease interval DEFAULT '00:00:30'::interval, max_attempts integer DEFAULT 5, backoff_base interval DEFAULT '00:00:01'::interval, backoff_factor double precision DEFAULT 2, backoff_max interval DEFAULT '01:00:00'::interval, dead_letter boolean DEFAULT true, requeue_priority text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_existing fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(create_queue.queue, 'queue');
    PERFORM fenceq._check_queue_settings(create_queue.lease, create_queue.max_attempts,
        create_queue.backoff_base, create_queue.backoff_factor, create_queue.backoff_max);
    IF create_queue.dead_letter IS NULL THEN
        PERFORM fenceq._raise('QF100', 'dead_letter is required');
    END IF;
    PERFORM fenceq._check_requeue_priority(create_queue.requeue_priority);
    INSERT INTO fenceq._queues AS q (queue, lease, max_attempts, backoff_base, backoff_factor,
                                     backoff_max, dead_letter, created_at, requeue_priority)
    VALUES (create_queue.queue, create_queue.lease, create_queue.max_attempts,
            create_queue.backoff_base, create_queue.backoff_factor, create_queue.backoff_max,
            create_queue.dead_letter, clock_timestamp(), coalesce(create_queue.requeue_priority, 'keep'))
    ON CONFLICT (queue) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT * INTO v_existing FROM fenceq._queues AS q WHERE q.queue = create_queue.queue;
    IF v_existing.lease = create_queue.lease
       AND v_existing.max_attempts = create_queue.max_attempts
       AND v_existing.backoff_base = create_queue.backoff_base
       AND v_existing.backoff_factor = create_queue.backoff_factor
       AND v_existing.backoff_max = create_queue.backoff_max
       AND v_existing.dead_letter = create_queue.dead_letter
       AND v_existing.requeue_priority = coalesce(create_queue.requeue_priority, v_existing.requeue_priority) THEN
        RETURN false;
    END IF;
    PERFORM fenceq._raise('QF100', 'the queue exists with other settings; use alter_queue');
    RETURN NULL;
END
$$;

ALTER FUNCTION fenceq.create_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.create_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) IS 'Declare a queue with its defaults. True when created, false when it already exists with exactly these settings; QF100 when it exists with others.';

CREATE FUNCTION fenceq.discard_dead_letter(dlq_id text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $_$
#variable_conflict use_column
BEGIN
    IF discard_dead_letter.dlq_id IS NULL OR discard_dead_letter.dlq_id !~ '^[0-9a-f]{32}$' THEN
        PERFORM fenceq._raise('QF102', 'dlq_id must be 32 lowercase hex characters');
    END IF;
    UPDATE fenceq._dead_letters AS d SET discarded_at = clock_timestamp()
     WHERE d.dlq_id = discard_dead_letter.dlq_id
       AND d.replayed_at IS NULL AND d.discarded_at IS NULL;
    RETURN FOUND;
END
$_$;

ALTER FUNCTION fenceq.discard_dead_letter(dlq_id text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.discard_dead_letter(dlq_id text) IS 'Mark a dead letter handled without replay. True once; false for an unknown or already handled letter.';

CREATE FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer DEFAULT 100) RETURNS TABLE(job_id text, queue text, task text, state text, ref text, generation bigint, lapsed_at timestamp with time zone, checked_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(dispatch_repair_candidates.backend, 'backend');
    IF dispatch_repair_candidates.max_rows IS NULL OR dispatch_repair_candidates.max_rows NOT BETWEEN 1 AND 100000 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be 1 to 100000');
    END IF;
    v_now := clock_timestamp();
    RETURN QUERY
    WITH picked AS (
        SELECT d.job_id, j.queue, j.task, d.state,
               CASE d.state WHEN 'reserved' THEN d.reservation_ref ELSE d.execution_ref END AS ref,
               d.generation, j.lease_expires_at AS lapsed_at, d.checked_at AS last_checked
          FROM fenceq._dispatches AS d
          JOIN fenceq._jobs AS j ON j.job_id = d.job_id
         WHERE d.backend = dispatch_repair_candidates.backend
           AND j.status = 'claimed' AND j.generation = d.generation AND j.lease_expires_at <= v_now
         ORDER BY d.checked_at IS NOT NULL, CASE WHEN d.checked_at IS NULL THEN j.lease_expires_at END,
                  d.checked_at, d.job_id
         LIMIT dispatch_repair_candidates.max_rows
           FOR UPDATE OF d SKIP LOCKED),
    marked AS (
        UPDATE fenceq._dispatches AS d SET checked_at = greatest(d.checked_at, v_now)
          FROM picked AS p WHERE d.job_id = p.job_id
        RETURNING d.job_id, d.checked_at)
    SELECT p.job_id, p.queue, p.task, p.state, p.ref, p.generation, p.lapsed_at, m.checked_at
      FROM picked AS p JOIN marked AS m ON m.job_id = p.job_id
     ORDER BY p.last_checked IS NOT NULL, CASE WHEN p.last_checked IS NULL THEN p.lapsed_at END,
              p.last_checked, p.job_id;
END
$$;

ALTER FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer) IS 'A bounded, fair page (max_rows) of one backend''s dispatches whose claim lapsed, never-checked first; each returned row is marked checked now.';

CREATE FUNCTION fenceq.drop_schedule(schedule text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(drop_schedule.schedule, 'schedule', max_length => 218);
    DELETE FROM fenceq._schedules AS s WHERE s.schedule = drop_schedule.schedule;
    RETURN FOUND;
END
$$;

ALTER FUNCTION fenceq.drop_schedule(schedule text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.drop_schedule(schedule text) IS 'Delete a schedule (the jobs it submitted stay). True when it existed.';

CREATE FUNCTION fenceq.extend(job_id text, owner_id text, generation bigint, claim_token text, budget interval) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
    v_budget_expires_at timestamptz;
BEGIN
    PERFORM fenceq._check_interval(extend.budget, 'budget', nullable => false);
    v_job := fenceq._lock_live(extend.job_id, extend.owner_id, extend.generation, extend.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    -- greatest() skips a NULL: a claim without a budget gets now + budget.
    v_budget_expires_at := greatest(v_job.budget_expires_at, v_now + extend.budget);
    UPDATE fenceq._jobs AS j
       SET budget_expires_at = v_budget_expires_at,
           lease_expires_at = least(v_now + j.lease, v_budget_expires_at)
     WHERE j.job_id = extend.job_id;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.extend(job_id text, owner_id text, generation bigint, claim_token text, budget interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.extend(job_id text, owner_id text, generation bigint, claim_token text, budget interval) IS 'Grow a live claim''s budget to the later of its current one and now + budget (setting one when it had none), and renew the lease as heartbeat would. True when live; false when stale, expired or terminal.';

CREATE FUNCTION fenceq.fail(job_id text, owner_id text, generation bigint, claim_token text, error text, retry boolean DEFAULT true, retry_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
BEGIN
    IF fail.error IS NULL THEN
        PERFORM fenceq._raise('QF100', 'error is required');
    END IF;
    IF fail.retry IS NULL THEN
        PERFORM fenceq._raise('QF100', 'retry is required');
    END IF;
    PERFORM fenceq._check_time(fail.retry_at, 'retry_at');
    v_job := fenceq._lock_live(fail.job_id, fail.owner_id, fail.generation, fail.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    PERFORM fenceq._retry_or_fail(v_job, fail.error, fail.retry, fail.retry_at, v_now);
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.fail(job_id text, owner_id text, generation bigint, claim_token text, error text, retry boolean, retry_at timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.fail(job_id text, owner_id text, generation bigint, claim_token text, error text, retry boolean, retry_at timestamp with time zone) IS 'Fail a live claim: retried with backoff (or at retry_at) while attempts remain, else failed with a dead letter. True once; false when stale, expired, terminal or cancel-requested.';

CREATE FUNCTION fenceq.finalize_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text, execution_ref text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(finalize_dispatch.job_id, finalize_dispatch.owner_id,
                                finalize_dispatch.generation, finalize_dispatch.claim_token);
    PERFORM fenceq._check_ref(finalize_dispatch.reservation_ref, 'reservation_ref');
    PERFORM fenceq._check_ref(finalize_dispatch.execution_ref, 'execution_ref');
    v_job := fenceq._lock_live(finalize_dispatch.job_id, finalize_dispatch.owner_id,
                               finalize_dispatch.generation, finalize_dispatch.claim_token);
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NULL OR v_dispatch.reservation_ref <> finalize_dispatch.reservation_ref THEN
        RETURN false;
    END IF;
    IF v_dispatch.state = 'running' THEN
        RETURN v_dispatch.execution_ref = finalize_dispatch.execution_ref;
    END IF;
    UPDATE fenceq._dispatches AS d
       SET state = 'running', execution_ref = finalize_dispatch.execution_ref, finalized_at = clock_timestamp()
     WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_finalized', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'reservation_ref', v_dispatch.reservation_ref,
                           'execution_ref', finalize_dispatch.execution_ref));
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.finalize_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text, execution_ref text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.finalize_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text, execution_ref text) IS 'Record the external system''s execution_ref for this live claim''s reservation. True when recorded (or already so: a retry); false for a fence that is not live, no dispatch, or another reservation or execution ref.';

CREATE VIEW fenceq.jobs AS
 SELECT j.job_id,
    j.queue,
    j.task,
    j.payload,
    j.priority,
    j.status,
    j.attempts,
    j.max_attempts,
    COALESCE(j.blocked_run_at, j.run_at) AS run_at,
    j.expires_at,
    j.owner_id,
    j.generation,
    j.lease_expires_at,
    j.budget_expires_at,
    j.cancel_requested,
    j.pid,
    j.result,
    j.last_error,
    j.submission_id,
    j.fingerprint,
    j.active_key,
    j.dlq_id,
    j.created_at,
    j.finished_at,
    j.concurrency_key,
    COALESCE(j.blocked_by, 0) AS blocked_by,
    j.progress,
    j.progress_at
   FROM fenceq._jobs j;

ALTER TABLE fenceq.jobs OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.jobs IS 'Every job, without claim tokens.';

CREATE FUNCTION fenceq.get_job(job_id text) RETURNS SETOF fenceq.jobs
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(get_job.job_id, 'job_id', max_length => 36);
    RETURN QUERY SELECT * FROM fenceq.jobs AS j WHERE j.job_id = get_job.job_id;
END
$$;

ALTER FUNCTION fenceq.get_job(job_id text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.get_job(job_id text) IS 'One job as fenceq.jobs shows it, or no row.';

CREATE TABLE fenceq._events (
    job_id text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    queue text NOT NULL COLLATE pg_catalog."C",
    at timestamp with time zone NOT NULL,
    event text NOT NULL COLLATE pg_catalog."C",
    generation bigint,
    owner_id text COLLATE pg_catalog."C",
    detail jsonb NOT NULL
);

ALTER TABLE fenceq._events OWNER TO fenceq_owner;

CREATE VIEW fenceq.job_events AS
 SELECT e.job_id,
    e.seq,
    e.at,
    e.event,
    e.generation,
    e.owner_id,
    e.detail
   FROM fenceq._events e;

ALTER TABLE fenceq.job_events OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.job_events IS 'The recorded transitions of jobs whose queues have history on: one row each, seq ascending per job. Never a claim token.';

CREATE FUNCTION fenceq.get_job_events(job_id text) RETURNS SETOF fenceq.job_events
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    PERFORM fenceq._check_name(get_job_events.job_id, 'job_id');
    RETURN QUERY
        SELECT e.job_id, e.seq, e.at, e.event, e.generation, e.owner_id, e.detail
          FROM fenceq._events AS e
         WHERE e.job_id = get_job_events.job_id
         ORDER BY e.seq;
END
$$;

ALTER FUNCTION fenceq.get_job_events(job_id text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.get_job_events(job_id text) IS 'One job''s recorded transitions, oldest first; no rows for an unknown job or one whose queue kept no history.';

CREATE FUNCTION fenceq.heartbeat(job_id text, owner_id text, generation bigint, claim_token text, lease interval DEFAULT NULL::interval) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
BEGIN
    IF NOT fenceq._is_plain_duration(heartbeat.lease) THEN
        PERFORM fenceq._check_interval(heartbeat.lease, 'lease');
    END IF;
    IF NOT coalesce(fenceq._is_plain_fence(heartbeat.job_id, heartbeat.owner_id,
                                           heartbeat.generation, heartbeat.claim_token), false) THEN
        PERFORM fenceq._check_fence(heartbeat.job_id, heartbeat.owner_id, heartbeat.generation, heartbeat.claim_token);
    END IF;
    WITH locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at
              FROM fenceq._jobs AS j WHERE j.job_id = heartbeat.job_id
               FOR UPDATE) AS l)
    UPDATE fenceq._jobs AS j
       SET lease_expires_at = least(l.locked_at + coalesce(heartbeat.lease, j.lease), j.budget_expires_at)
      FROM locked AS l
     WHERE j.job_id = l.job_id
       AND fenceq._holds_fence(l.status, l.owner_id, l.generation, l.claim_token, l.lease_expires_at,
                               heartbeat.owner_id, heartbeat.generation, heartbeat.claim_token, l.locked_at);
    RETURN FOUND;
END
$$;

ALTER FUNCTION fenceq.heartbeat(job_id text, owner_id text, generation bigint, claim_token text, lease interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.heartbeat(job_id text, owner_id text, generation bigint, claim_token text, lease interval) IS 'Renew a live claim to LEAST(now + lease, budget). True while live; false when stale, expired or past its budget.';

CREATE FUNCTION fenceq.heartbeat_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], lease interval DEFAULT NULL::interval) RETURNS boolean[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
    v_now timestamptz;
    v_answers boolean[];
BEGIN
    v_count := fenceq._check_batch(heartbeat_batch.job_ids, heartbeat_batch.owner_ids,
                                   heartbeat_batch.generations, heartbeat_batch.claim_tokens);
    IF heartbeat_batch.lease IS NOT NULL THEN
        PERFORM fenceq._check_interval(heartbeat_batch.lease, 'lease');
    END IF;
    IF v_count = 0 THEN
        RETURN '{}';
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (heartbeat_batch.job_ids)
     ORDER BY j.job_id FOR UPDATE;
    v_now := clock_timestamp();  -- read after the row locks are held
    -- A heartbeat changes no fence, so every element naming the live fence
    -- answers true, as it would one call at a time.
    WITH fences AS (
        SELECT f.j, f.o, f.g, f.t, f.i
          FROM unnest(heartbeat_batch.job_ids, heartbeat_batch.owner_ids,
                      heartbeat_batch.generations, heartbeat_batch.claim_tokens)
               WITH ORDINALITY AS f(j, o, g, t, i)),
    live AS (
        -- One primary-key probe per fence (the lateral subquery is kept
        -- apart by OFFSET 0): joined freely, the planner may hash every
        -- claimed job instead, however many are in flight.
        SELECT f.i, f.j FROM fences AS f
         CROSS JOIN LATERAL (SELECT j.* FROM fenceq._jobs AS j WHERE j.job_id = f.j OFFSET 0) AS j
         WHERE fenceq._holds_fence(j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                                   f.o, f.g, f.t, v_now)),
    renewed AS (  -- runs whether or not it is read, as every data-modifying WITH does
        UPDATE fenceq._jobs AS j
           SET lease_expires_at = least(v_now + coalesce(heartbeat_batch.lease, j.lease), j.budget_expires_at)
         WHERE j.job_id IN (SELECT l.j FROM live AS l))
    -- Each fence's answer by grouping, not by a probe of live per fence
    -- (a scan of the CTE each: quadratic in the batch).
    SELECT array_agg(a.live ORDER BY a.i)
      INTO v_answers
      FROM (SELECT u.i, bool_or(u.live) AS live
              FROM (SELECT f.i, false AS live FROM fences AS f
                    UNION ALL
                    SELECT l.i, true FROM live AS l) AS u
             GROUP BY u.i) AS a;
    RETURN v_answers;
END
$$;

ALTER FUNCTION fenceq.heartbeat_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], lease interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.heartbeat_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], lease interval) IS 'Heartbeat many fences in one transaction; element i answers as heartbeat would for fence i. QF100 for arrays of unequal length.';

CREATE FUNCTION fenceq.next_due(queues text[]) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_active text[];
    v_known integer;
    v_queue text;
    v_now timestamptz;
    v_queue_due timestamptz;
    v_floor integer;
    v_due timestamptz;
BEGIN
    PERFORM fenceq._check_names(next_due.queues, 'queues');
    SELECT array_agg(q.queue) FILTER (WHERE NOT q.paused), count(*)
      INTO v_active, v_known
      FROM fenceq._queues AS q WHERE q.queue = ANY (next_due.queues);
    IF v_known <> (SELECT count(DISTINCT n.name) FROM unnest(next_due.queues) AS n(name)) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    v_now := clock_timestamp();
    FOREACH v_queue IN ARRAY coalesce(v_active, '{}') LOOP
        -- The priority levels from the highest down, one probe each, and
        -- the earliest due job of each level.
        WITH RECURSIVE levels(priority, depth) AS (
            (SELECT j.priority, 1 FROM fenceq._jobs AS j
              WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled
              ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM fenceq._jobs AS j
                     WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority < l.priority
                     ORDER BY j.priority DESC LIMIT 1), l.depth + 1
              FROM levels AS l
             WHERE l.priority IS NOT NULL AND l.depth < 32)
        SELECT min(d.run_at), min(l.priority) FILTER (WHERE l.depth = 32)
          INTO v_queue_due, v_floor
          FROM levels AS l
          LEFT JOIN LATERAL (
            SELECT j.run_at FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority = l.priority
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.run_at LIMIT 1) AS d ON true
         WHERE l.priority IS NOT NULL;
        IF v_floor IS NOT NULL THEN
            -- Levels below the 32nd: the rest of the queue in one range scan.
            SELECT least(v_queue_due, min(j.run_at)) INTO v_queue_due
              FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND NOT j.scheduled AND j.priority < v_floor
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now);
        END IF;
        -- The head of the jobs due later (a run_at of 'infinity' never counts).
        v_queue_due := least(v_queue_due, (
            SELECT j.run_at FROM fenceq._jobs AS j
             WHERE j.queue = v_queue AND j.status = 'pending' AND j.scheduled
               AND j.run_at < 'infinity' AND (j.expires_at IS NULL OR j.expires_at > v_now)
             ORDER BY j.run_at LIMIT 1));
        v_due := least(v_due, v_queue_due);  -- least() skips NULLs
    END LOOP;
    RETURN v_due;
END
$$;

ALTER FUNCTION fenceq.next_due(queues text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.next_due(queues text[]) IS 'The earliest run_at of a pending, unexpired job in the named, unpaused queues (in the past when one is due now); NULL when there is none. QF100 for an empty array, QF101 for an undeclared queue.';

CREATE FUNCTION fenceq.pause_queue(queue text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN fenceq._set_queue_flag(pause_queue.queue, 'paused', true);
END
$$;

ALTER FUNCTION fenceq.pause_queue(queue text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.pause_queue(queue text) IS 'Pause claims from a queue (submissions still accepted). True when the flag changed; QF101 for an unknown queue.';

CREATE FUNCTION fenceq.progress(job_id text, owner_id text, generation bigint, claim_token text, progress jsonb) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
BEGIN
    -- jsonb's text is never shorter than the canonical form: a cheap first
    -- test of the size.
    IF NOT coalesce(fenceq._is_plain_json(progress.progress)
                    AND octet_length(progress.progress::text) <= 65536, true) THEN
        PERFORM fenceq._check_json(progress.progress, 'progress');
        IF octet_length(fenceq._canonical_json(progress.progress)) > 65536 THEN
            PERFORM fenceq._raise('QF103', 'progress exceeds 64 KiB in canonical form');
        END IF;
    END IF;
    IF NOT coalesce(fenceq._is_plain_fence(progress.job_id, progress.owner_id,
                                           progress.generation, progress.claim_token), false) THEN
        PERFORM fenceq._check_fence(progress.job_id, progress.owner_id, progress.generation, progress.claim_token);
    END IF;
    WITH locked AS MATERIALIZED (
        SELECT l.*, clock_timestamp() AS locked_at FROM (
            SELECT j.job_id, j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at
              FROM fenceq._jobs AS j WHERE j.job_id = progress.job_id
               FOR UPDATE) AS l)
    UPDATE fenceq._jobs AS j
       SET progress = nullif(progress.progress, 'null'::jsonb), progress_at = l.locked_at,
           lease_expires_at = least(l.locked_at + j.lease, j.budget_expires_at)
      FROM locked AS l
     WHERE j.job_id = l.job_id
       AND fenceq._holds_fence(l.status, l.owner_id, l.generation, l.claim_token, l.lease_expires_at,
                               progress.owner_id, progress.generation, progress.claim_token, l.locked_at);
    RETURN FOUND;
END
$$;

ALTER FUNCTION fenceq.progress(job_id text, owner_id text, generation bigint, claim_token text, progress jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.progress(job_id text, owner_id text, generation bigint, claim_token text, progress jsonb) IS 'Record a progress report (JSON, at most 64 KiB canonical) on a live claim and renew its lease as heartbeat does. True while live; false when stale, expired, terminal or past its budget.';

CREATE FUNCTION fenceq.purge(older_than interval, max_rows integer DEFAULT 10000, submissions_older_than interval DEFAULT NULL::interval) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_ids text[];
    v_nonces text[];
    v_cutoff timestamptz;
BEGIN
    PERFORM fenceq._check_interval(purge.older_than, 'older_than', allow_zero => true,
                                   nullable => false, backwards => true);
    PERFORM fenceq._check_interval(purge.submissions_older_than, 'submissions_older_than',
                                   allow_zero => true, backwards => true);
    IF purge.max_rows IS NULL OR purge.max_rows < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be a positive integer');
    END IF;
    -- A variable, not clock_timestamp() inline, so the index can serve it.
    v_cutoff := clock_timestamp() - purge.older_than;
    SELECT coalesce(array_agg(t.job_id), '{}') INTO v_ids FROM (
        SELECT j.job_id FROM fenceq._jobs AS j
         WHERE j.finished_at < v_cutoff
           AND j.status IN ('completed', 'failed', 'cancelled', 'expired')
           AND NOT EXISTS (SELECT 1 FROM fenceq._dead_letters AS d
                            WHERE d.job_id = j.job_id
                              AND d.replayed_at IS NULL AND d.discarded_at IS NULL)
         ORDER BY j.finished_at
         LIMIT purge.max_rows
           FOR UPDATE SKIP LOCKED) AS t;
    -- The nonces of the claim_jobs calls that claimed them: each call's
    -- ledger row goes with the last of its jobs, below.
    SELECT coalesce(array_agg(DISTINCT k.claim_nonce), '{}') INTO v_nonces
      FROM fenceq._jobs AS j CROSS JOIN LATERAL unnest(j.call_claims) AS k
     WHERE j.job_id = ANY (v_ids);
    DELETE FROM fenceq._checkpoints AS c WHERE c.job_id = ANY (v_ids);
    DELETE FROM fenceq._claims AS c WHERE c.job_id = ANY (v_ids);
    -- A terminal job's edges are settled (satisfied, or the dependent
    -- cancelled): they go with it, either end.
    DELETE FROM fenceq._dependencies AS d WHERE d.depends_on = ANY (v_ids);
    DELETE FROM fenceq._dependencies AS d WHERE d.job_id = ANY (v_ids);
    DELETE FROM fenceq._events AS e WHERE e.job_id = ANY (v_ids);
    DELETE FROM fenceq._dispatches AS d WHERE d.job_id = ANY (v_ids);
    DELETE FROM fenceq._jobs AS j WHERE j.job_id = ANY (v_ids);
    -- A purge of another job of the same call, concurrent with this one,
    -- can leave a call's row behind: its nonce then stays spent, the safe
    -- side of "a nonce claims at most once".
    DELETE FROM fenceq._claims AS c
     WHERE c.claim_token = ANY (v_nonces) AND c.job_ids IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = ANY (c.job_ids));
    -- Each queue's retention (part 8b) bounds its events on their own:
    -- at most max_rows of them, oldest first per queue.
    DELETE FROM fenceq._events AS e
     WHERE (e.job_id, e.seq) IN (
        SELECT o.job_id, o.seq
          FROM fenceq._queues AS q
         CROSS JOIN LATERAL (
            SELECT x.job_id, x.seq FROM fenceq._events AS x
             WHERE x.queue = q.queue AND x.at < clock_timestamp() - q.history_retention
             ORDER BY x.at
             LIMIT purge.max_rows) AS o
         WHERE q.history_retention IS NOT NULL
         LIMIT purge.max_rows);
    IF purge.submissions_older_than IS NOT NULL THEN
        v_cutoff := clock_timestamp() - purge.submissions_older_than;
        DELETE FROM fenceq._submissions AS s
         WHERE s.submission_id IN (
            SELECT o.submission_id FROM fenceq._submissions AS o
             WHERE o.created_at < v_cutoff
               AND NOT EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.job_id = o.job_id)
             LIMIT purge.max_rows);
    END IF;
    RETURN cardinality(v_ids);
END
$$;

ALTER FUNCTION fenceq.purge(older_than interval, max_rows integer, submissions_older_than interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.purge(older_than interval, max_rows integer, submissions_older_than interval) IS 'Delete terminal jobs finished before now - older_than (oldest first, at most max_rows) with their checkpoints, ledger rows and dependency edges, keeping those with an unhandled dead letter. Submission identities are kept unless submissions_older_than is given. Returns jobs deleted.';

CREATE FUNCTION fenceq.reap(max_rows integer DEFAULT 1000) RETURNS TABLE(requeued integer, failed integer, cancelled integer, expired integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
    v_left integer := reap.max_rows;
    v_cutoff timestamptz;
    v_expired text[];
BEGIN
    IF reap.max_rows IS NULL OR reap.max_rows < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be a positive integer');
    END IF;
    requeued := 0; failed := 0; cancelled := 0; expired := 0;
    -- A variable, not clock_timestamp() inline: a volatile call cannot be an
    -- index condition. Each row is re-judged on a fresh reading after its lock.
    v_cutoff := clock_timestamp();
    FOR v_job IN
        SELECT j.* FROM fenceq._jobs AS j
         WHERE j.status = 'claimed' AND j.lease_expires_at <= v_cutoff
           AND NOT EXISTS (SELECT 1 FROM fenceq._dispatches AS d
                            WHERE d.job_id = j.job_id AND d.generation = j.generation)
         ORDER BY j.lease_expires_at
         LIMIT v_left
           FOR UPDATE SKIP LOCKED
    LOOP
        v_now := clock_timestamp();
        CONTINUE WHEN v_job.status <> 'claimed' OR v_job.lease_expires_at > v_now;
        -- A reservation may have committed after the scan's snapshot, before
        -- the row lock was granted (reserve_dispatch locks the row without
        -- changing it, so the lock wait re-reads nothing): ask again.
        CONTINUE WHEN EXISTS (SELECT 1 FROM fenceq._dispatches AS d
                               WHERE d.job_id = v_job.job_id AND d.generation = v_job.generation);
        v_left := v_left - 1;
        PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'reaped', v_job.generation, v_job.owner_id,
                                     jsonb_build_object('lease_expires_at', v_job.lease_expires_at));
        IF v_job.cancel_requested THEN
            UPDATE fenceq._jobs AS j SET status = 'cancelled', pid = NULL, finished_at = v_now
             WHERE j.job_id = v_job.job_id;
            PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'cancelled', v_job.generation,
                                         v_job.owner_id, '{"reason": "reaped"}');
            PERFORM fenceq._settle_dependents(ARRAY[v_job.job_id], false);
            PERFORM fenceq._notify_done(ARRAY[v_job.job_id]);
            cancelled := cancelled + 1;
        ELSIF fenceq._retry_or_fail(v_job, 'lease_expired', true, fenceq._requeue_at(v_job, v_now),
                                    v_now) = 'pending' THEN
            requeued := requeued + 1;
        ELSE
            failed := failed + 1;
        END IF;
    END LOOP;
    IF v_left > 0 THEN
        v_cutoff := clock_timestamp();
        WITH overdue AS (
            SELECT j.job_id FROM fenceq._jobs AS j
             WHERE j.status = 'pending' AND j.expires_at <= v_cutoff
             ORDER BY j.expires_at
             LIMIT v_left
               FOR UPDATE SKIP LOCKED),
        done AS (
            UPDATE fenceq._jobs AS j SET status = 'expired', finished_at = clock_timestamp()
              FROM overdue WHERE j.job_id = overdue.job_id
            RETURNING j.job_id)
        SELECT array_agg(d.job_id) INTO v_expired FROM done AS d;
        expired := coalesce(cardinality(v_expired), 0);
        PERFORM fenceq._record_events(v_expired, 'expired');
        PERFORM fenceq._settle_dependents(v_expired, false);
        PERFORM fenceq._notify_done(v_expired);
    END IF;
    RETURN NEXT;
END
$$;

ALTER FUNCTION fenceq.reap(max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.reap(max_rows integer) IS 'Settle expired claims (cancelled, requeued with backoff, or failed + dead letter) and expire overdue pending jobs; at most max_rows, oldest first. Always one row of counts.';

CREATE FUNCTION fenceq.recover_claim(owner_id text, claim_token text) RETURNS SETOF fenceq.claim
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job_ids text[];
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(recover_claim.owner_id, 'owner_id');
    PERFORM fenceq._check_name(recover_claim.claim_token, 'claim_token');
    SELECT coalesce(c.job_ids, ARRAY[c.job_id]) INTO v_job_ids
      FROM fenceq._claims AS c WHERE c.claim_token = recover_claim.claim_token;
    v_now := clock_timestamp();
    RETURN QUERY
        SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.attempts, j.max_attempts, j.owner_id,
               j.generation, j.claim_token, j.lease_expires_at, j.budget_expires_at, j.cancel_requested,
               j.submission_id, fenceq._checkpoints_of(j.job_id)
          FROM unnest(v_job_ids) WITH ORDINALITY AS k(job_id, ordinal)
          JOIN fenceq._jobs AS j ON j.job_id = k.job_id
         WHERE fenceq._holds_fence(j.status, j.owner_id, j.generation, j.claim_token, j.lease_expires_at,
                                   recover_claim.owner_id, j.generation, recover_claim.claim_token, v_now)
         ORDER BY k.ordinal;
END
$$;

ALTER FUNCTION fenceq.recover_claim(owner_id text, claim_token text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.recover_claim(owner_id text, claim_token text) IS 'The live claims made by this exact owner with this claim token (zero or one row) or claim_jobs nonce (every job of the call still claimed under it). Does not claim again and does not renew the lease.';

CREATE FUNCTION fenceq.release(job_id text, owner_id text, generation bigint, claim_token text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_now timestamptz;
    v_run_at timestamptz;
BEGIN
    PERFORM fenceq._check_time(release.run_at, 'run_at');
    v_job := fenceq._lock_live(release.job_id, release.owner_id,
                               release.generation, release.claim_token);
    v_now := clock_timestamp();
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    -- Work handed to an external system may exist: never requeue it (a
    -- reservation is dropped by release_dispatch first; part 8a).
    IF (fenceq._live_dispatch(v_job)).job_id IS NOT NULL THEN
        RETURN false;
    END IF;
    v_run_at := coalesce(release.run_at, v_now);
    UPDATE fenceq._jobs AS j
       SET status = 'pending', attempts = j.attempts - 1, run_at = v_run_at,
           owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
           budget_expires_at = NULL, pid = NULL,
           scheduled = v_run_at > v_now  -- released for later: waits apart (part 1c)
     WHERE j.job_id = release.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'released', v_job.generation, v_job.owner_id,
                                 jsonb_build_object('run_at', v_run_at));
    PERFORM fenceq._notify_jobs(v_job.queue);  -- due now or later: idle workers re-read next_due
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.release(job_id text, owner_id text, generation bigint, claim_token text, run_at timestamp with time zone) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.release(job_id text, owner_id text, generation bigint, claim_token text, run_at timestamp with time zone) IS 'Hand a live claim back to pending (at run_at, default now) without spending an attempt. False when stale, expired, terminal or cancel-requested.';

CREATE FUNCTION fenceq.release_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(release_dispatch.job_id, release_dispatch.owner_id,
                                release_dispatch.generation, release_dispatch.claim_token);
    PERFORM fenceq._check_ref(release_dispatch.reservation_ref, 'reservation_ref');
    v_job := fenceq._lock_live(release_dispatch.job_id, release_dispatch.owner_id,
                               release_dispatch.generation, release_dispatch.claim_token);
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NULL OR v_dispatch.state <> 'reserved'
       OR v_dispatch.reservation_ref <> release_dispatch.reservation_ref THEN
        RETURN false;
    END IF;
    DELETE FROM fenceq._dispatches AS d WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_released', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'reservation_ref', v_dispatch.reservation_ref));
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.release_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.release_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text) IS 'Drop this live claim''s dispatch reservation because the external call was never made; the claim stays live. False for a fence that is not live, another ref, or a running dispatch.';

CREATE FUNCTION fenceq.release_lock(lock text, owner_id text, token bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(release_lock.lock, 'lock');
    PERFORM fenceq._check_name(release_lock.owner_id, 'owner_id');
    PERFORM fenceq._check_lock_token(release_lock.token);
    IF fenceq._hold_lock(release_lock.lock, release_lock.owner_id, release_lock.token) IS NULL THEN
        RETURN false;
    END IF;
    UPDATE fenceq._locks AS l SET owner_id = NULL, expires_at = NULL WHERE l.lock = release_lock.lock;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.release_lock(lock text, owner_id text, token bigint) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.release_lock(lock text, owner_id text, token bigint) IS 'Release a live hold of a named lock; the lock keeps its token, so the next acquire answers a larger one. True when released; false when lapsed, released already or taken over.';

CREATE FUNCTION fenceq.renew_lock(lock text, owner_id text, token bigint, ttl interval) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(renew_lock.lock, 'lock');
    PERFORM fenceq._check_name(renew_lock.owner_id, 'owner_id');
    PERFORM fenceq._check_lock_token(renew_lock.token);
    PERFORM fenceq._check_interval(renew_lock.ttl, 'ttl', nullable => false);
    v_now := fenceq._hold_lock(renew_lock.lock, renew_lock.owner_id, renew_lock.token);
    IF v_now IS NULL THEN
        RETURN false;
    END IF;
    UPDATE fenceq._locks AS l SET expires_at = v_now + renew_lock.ttl WHERE l.lock = renew_lock.lock;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.renew_lock(lock text, owner_id text, token bigint, ttl interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.renew_lock(lock text, owner_id text, token bigint, ttl interval) IS 'Extend a live hold of a named lock to now + ttl. True while this owner holds it live with this token; false once lapsed, released or taken over.';

CREATE FUNCTION fenceq.replace_dispatch_ref(job_id text, owner_id text, generation bigint, claim_token text, expected_ref text, execution_ref text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(replace_dispatch_ref.job_id, replace_dispatch_ref.owner_id,
                                replace_dispatch_ref.generation, replace_dispatch_ref.claim_token);
    PERFORM fenceq._check_ref(replace_dispatch_ref.expected_ref, 'expected_ref');
    PERFORM fenceq._check_ref(replace_dispatch_ref.execution_ref, 'execution_ref');
    v_job := fenceq._lock_live(replace_dispatch_ref.job_id, replace_dispatch_ref.owner_id,
                               replace_dispatch_ref.generation, replace_dispatch_ref.claim_token);
    IF v_job.job_id IS NULL THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NULL OR v_dispatch.state <> 'running' THEN
        RETURN false;
    END IF;
    IF v_dispatch.execution_ref = replace_dispatch_ref.execution_ref THEN
        RETURN true;
    END IF;
    IF v_dispatch.execution_ref <> replace_dispatch_ref.expected_ref THEN
        RETURN false;
    END IF;
    UPDATE fenceq._dispatches AS d SET execution_ref = replace_dispatch_ref.execution_ref
     WHERE d.job_id = v_job.job_id;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_replaced', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', v_dispatch.backend, 'expected_ref', replace_dispatch_ref.expected_ref,
                           'execution_ref', replace_dispatch_ref.execution_ref));
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.replace_dispatch_ref(job_id text, owner_id text, generation bigint, claim_token text, expected_ref text, execution_ref text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.replace_dispatch_ref(job_id text, owner_id text, generation bigint, claim_token text, expected_ref text, execution_ref text) IS 'Move this live claim''s running dispatch from expected_ref to execution_ref. True when moved (or already there: a retry); false otherwise.';

CREATE FUNCTION fenceq.replay_dead_letter(dlq_id text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $_$
#variable_conflict use_column
DECLARE
    v_letter fenceq._dead_letters;
    v_active_key text;
    v_now timestamptz;
BEGIN
    IF replay_dead_letter.dlq_id IS NULL OR replay_dead_letter.dlq_id !~ '^[0-9a-f]{32}$' THEN
        PERFORM fenceq._raise('QF102', 'dlq_id must be 32 lowercase hex characters');
    END IF;
    SELECT * INTO v_letter FROM fenceq._dead_letters AS d
     WHERE d.dlq_id = replay_dead_letter.dlq_id FOR UPDATE;
    IF NOT FOUND OR v_letter.replayed_at IS NOT NULL OR v_letter.discarded_at IS NOT NULL THEN
        RETURN NULL;
    END IF;
    -- The replayed job becomes active again: its active key must be free.
    SELECT j.active_key INTO v_active_key FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id;
    IF v_active_key IS NOT NULL THEN
        PERFORM fenceq._lock_identities(fenceq._identity_keys(v_letter.queue, v_active_key, NULL, NULL));
        IF EXISTS (SELECT 1 FROM fenceq._jobs AS j
                    WHERE j.queue = v_letter.queue AND j.active_key = v_active_key
                      AND j.status IN ('pending', 'claimed')) THEN
            PERFORM fenceq._raise('QF202', 'the active key is held by another active job');
        END IF;
    END IF;
    PERFORM 1 FROM fenceq._jobs AS j WHERE j.job_id = v_letter.job_id FOR UPDATE;
    v_now := clock_timestamp();
    UPDATE fenceq._jobs AS j
       SET status = 'pending', attempts = 0, run_at = v_now, finished_at = NULL,
           owner_id = NULL, claim_token = NULL, lease = NULL, lease_expires_at = NULL,
           budget_expires_at = NULL, pid = NULL, cancel_requested = false, result = NULL,
           scheduled = false  -- due now: ready (part 1c)
     WHERE j.job_id = v_letter.job_id AND j.status = 'failed';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE fenceq._dead_letters AS d SET replayed_at = v_now WHERE d.dlq_id = replay_dead_letter.dlq_id;
    PERFORM fenceq._record_events(ARRAY[v_letter.job_id], 'replayed',
                                  jsonb_build_object('dlq_id', replay_dead_letter.dlq_id));
    PERFORM fenceq._notify_jobs(v_letter.queue);
    RETURN v_letter.job_id;
END
$_$;

ALTER FUNCTION fenceq.replay_dead_letter(dlq_id text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.replay_dead_letter(dlq_id text) IS 'Return a dead-lettered job to pending with a fresh attempt budget; returns the job id, or NULL for an unknown or already handled letter; QF202 when its active key is now held by another active job.';

CREATE FUNCTION fenceq.replay_dead_letters(queue text, job_ids text[] DEFAULT NULL::text[], task text DEFAULT NULL::text, payload_contains jsonb DEFAULT NULL::jsonb, error_contains text DEFAULT NULL::text, max_rows integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
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

ALTER FUNCTION fenceq.replay_dead_letters(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.replay_dead_letters(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) IS 'Replay, as replay_dead_letter would, up to max_rows unhandled dead letters of a queue''s failed jobs matching job_ids, task, payload_contains and error_contains, oldest first, skipping a job whose active key is held; each replay is one event with who and which filter. Returns how many jobs were replayed. QF100 without job ids or a filter. Admins only.';

CREATE FUNCTION fenceq.reserve_dispatch(job_id text, owner_id text, generation bigint, claim_token text, backend text, reservation_ref text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
    v_dispatch fenceq._dispatches;
BEGIN
    -- A malformed fence is refused before anything else (QF106).
    PERFORM fenceq._check_fence(reserve_dispatch.job_id, reserve_dispatch.owner_id,
                                reserve_dispatch.generation, reserve_dispatch.claim_token);
    PERFORM fenceq._check_name(reserve_dispatch.backend, 'backend');
    PERFORM fenceq._check_ref(reserve_dispatch.reservation_ref, 'reservation_ref');
    v_job := fenceq._lock_live(reserve_dispatch.job_id, reserve_dispatch.owner_id,
                               reserve_dispatch.generation, reserve_dispatch.claim_token);
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    v_dispatch := fenceq._live_dispatch(v_job);
    IF v_dispatch.job_id IS NOT NULL THEN
        IF v_dispatch.backend = reserve_dispatch.backend
           AND v_dispatch.reservation_ref = reserve_dispatch.reservation_ref THEN
            RETURN true;
        END IF;
        PERFORM fenceq._raise('QF305', 'this claim already holds a dispatch under another backend or reference');
    END IF;
    -- A row left by an earlier claim of the job is not live: replace it.
    INSERT INTO fenceq._dispatches AS d (job_id, backend, generation, state, reservation_ref, reserved_at)
    VALUES (v_job.job_id, reserve_dispatch.backend, v_job.generation, 'reserved',
            reserve_dispatch.reservation_ref, clock_timestamp())
    ON CONFLICT (job_id) DO UPDATE
       SET backend = excluded.backend, generation = excluded.generation, state = 'reserved',
           reservation_ref = excluded.reservation_ref, execution_ref = NULL,
           reserved_at = excluded.reserved_at, finalized_at = NULL, checked_at = NULL;
    PERFORM fenceq._record_event(v_job.job_id, v_job.queue, 'dispatch_reserved', v_job.generation, v_job.owner_id,
        jsonb_build_object('backend', reserve_dispatch.backend, 'reservation_ref', reserve_dispatch.reservation_ref));
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.reserve_dispatch(job_id text, owner_id text, generation bigint, claim_token text, backend text, reservation_ref text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.reserve_dispatch(job_id text, owner_id text, generation bigint, claim_token text, backend text, reservation_ref text) IS 'Record that this live claim is about to start work in an external system under reservation_ref. True when reserved (or already so: a retry); false for a fence that is not live or a cancel-requested job; QF305 when the claim holds another dispatch.';

CREATE FUNCTION fenceq.resume_queue(queue text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN fenceq._set_queue_flag(resume_queue.queue, 'paused', false);
END
$$;

ALTER FUNCTION fenceq.resume_queue(queue text) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.resume_queue(queue text) IS 'Resume claims from a paused queue (notifying fenceq_jobs when the queue notifies). True when the flag changed; QF101 for an unknown queue.';

CREATE FUNCTION fenceq.retry_jobs(queue text, job_ids text[] DEFAULT NULL::text[], task text DEFAULT NULL::text, payload_contains jsonb DEFAULT NULL::jsonb, error_contains text DEFAULT NULL::text, max_rows integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
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

ALTER FUNCTION fenceq.retry_jobs(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.retry_jobs(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) IS 'Make due now up to max_rows pending jobs of a queue waiting for a retry (attempts > 0, run_at ahead, not blocked) that match job_ids, task, payload_contains and error_contains; each gets a retry_forced event. Returns how many changed. QF100 without job ids or a filter. Admins only.';

CREATE FUNCTION fenceq.sample_activity(max_minutes integer DEFAULT 60, keep interval DEFAULT '192:00:00'::interval) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
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

ALTER FUNCTION fenceq.sample_activity(max_minutes integer, keep interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.sample_activity(max_minutes integer, keep interval) IS 'Write every queue''s closed minutes that have no activity row yet (oldest first, at most max_minutes per queue, none older than keep), then delete rows older than keep. Returns rows written; 0 at once while another sampler runs. Workers and admins.';

CREATE FUNCTION fenceq.search_jobs(queue text DEFAULT NULL::text, status text DEFAULT NULL::text, task text DEFAULT NULL::text, payload_contains jsonb DEFAULT NULL::jsonb, error_contains text DEFAULT NULL::text, submission_prefix text DEFAULT NULL::text, since timestamp with time zone DEFAULT NULL::timestamp with time zone, until timestamp with time zone DEFAULT NULL::timestamp with time zone, before_seq bigint DEFAULT NULL::bigint, max_rows integer DEFAULT 50, max_scan integer DEFAULT 10000) RETURNS SETOF fenceq.job_search_row
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
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

ALTER FUNCTION fenceq.search_jobs(queue text, status text, task text, payload_contains jsonb, error_contains text, submission_prefix text, since timestamp with time zone, until timestamp with time zone, before_seq bigint, max_rows integer, max_scan integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.search_jobs(queue text, status text, task text, payload_contains jsonb, error_contains text, submission_prefix text, since timestamp with time zone, until timestamp with time zone, before_seq bigint, max_rows integer, max_scan integer) IS 'Jobs matching every filter, newest (seq) first, at most max_rows, below before_seq: read from one bounded index range (a submission prefix, the pending or claimed jobs, or the jobs finished in [since, until)), at most max_scan rows of it. QF100 without a prefix, status or time window. Workers and admins.';

CREATE FUNCTION fenceq.set_pid(job_id text, owner_id text, generation bigint, claim_token text, pid integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_job fenceq._jobs;
BEGIN
    IF set_pid.pid IS NULL OR set_pid.pid < 1 THEN
        PERFORM fenceq._raise('QF104', 'pid must be a positive integer');
    END IF;
    v_job := fenceq._lock_live(set_pid.job_id, set_pid.owner_id,
                               set_pid.generation, set_pid.claim_token);
    IF v_job.job_id IS NULL OR v_job.cancel_requested THEN
        RETURN false;
    END IF;
    UPDATE fenceq._jobs AS j SET pid = set_pid.pid WHERE j.job_id = set_pid.job_id;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.set_pid(job_id text, owner_id text, generation bigint, claim_token text, pid integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.set_pid(job_id text, owner_id text, generation bigint, claim_token text, pid integer) IS 'Record the process id of a live, not cancel-requested claim. True when recorded; false otherwise.';

CREATE FUNCTION fenceq.set_queue_history(queue text, enabled boolean, retention interval DEFAULT NULL::interval) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(set_queue_history.queue, 'queue');
    IF set_queue_history.enabled IS NULL THEN
        PERFORM fenceq._raise('QF100', 'enabled is required');
    END IF;
    PERFORM fenceq._check_interval(set_queue_history.retention, 'retention');
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = set_queue_history.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF v_queue.history = set_queue_history.enabled
       AND v_queue.history_retention IS NOT DISTINCT FROM set_queue_history.retention THEN
        RETURN false;
    END IF;
    UPDATE fenceq._queues AS q
       SET history = set_queue_history.enabled, history_retention = set_queue_history.retention
     WHERE q.queue = set_queue_history.queue;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.set_queue_history(queue text, enabled boolean, retention interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.set_queue_history(queue text, enabled boolean, retention interval) IS 'Turn a queue''s job history on or off (events already written are kept), with an optional retention applied by purge. True when the setting changed; QF101 for an unknown queue. Admins only.';

CREATE FUNCTION fenceq.set_queue_limits(queue text, max_claimed integer DEFAULT NULL::integer, max_claimed_per_key integer DEFAULT NULL::integer, rate_limit integer DEFAULT NULL::integer, rate_period interval DEFAULT NULL::interval) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(set_queue_limits.queue, 'queue');
    IF set_queue_limits.max_claimed < 1 OR set_queue_limits.max_claimed_per_key < 1
       OR set_queue_limits.rate_limit < 1 THEN
        PERFORM fenceq._raise('QF104', 'a limit must be a positive integer or NULL');
    END IF;
    IF (set_queue_limits.rate_limit IS NULL) <> (set_queue_limits.rate_period IS NULL) THEN
        PERFORM fenceq._raise('QF100', 'rate_limit and rate_period go together');
    END IF;
    PERFORM fenceq._check_interval(set_queue_limits.rate_period, 'rate_period', backwards => true);
    UPDATE fenceq._queues AS q
       SET max_claimed = set_queue_limits.max_claimed,
           max_claimed_per_key = set_queue_limits.max_claimed_per_key,
           rate_limit = set_queue_limits.rate_limit,
           rate_period = set_queue_limits.rate_period
     WHERE q.queue = set_queue_limits.queue;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF set_queue_limits.rate_limit IS NULL THEN
        DELETE FROM fenceq._rate_window AS r WHERE r.queue = set_queue_limits.queue;
    END IF;
END
$$;

ALTER FUNCTION fenceq.set_queue_limits(queue text, max_claimed integer, max_claimed_per_key integer, rate_limit integer, rate_period interval) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.set_queue_limits(queue text, max_claimed integer, max_claimed_per_key integer, rate_limit integer, rate_period interval) IS 'Set a queue''s limits (NULL = none): max_claimed, max_claimed_per_key, rate_limit per rate_period. Claims take fewer jobs rather than exceed one.';

CREATE FUNCTION fenceq.set_queue_notify(queue text, notify boolean) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN fenceq._set_queue_flag(set_queue_notify.queue, 'notify', set_queue_notify.notify);
END
$$;

ALTER FUNCTION fenceq.set_queue_notify(queue text, notify boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.set_queue_notify(queue text, notify boolean) IS 'Turn fenceq_jobs notifications for a queue on or off. True when the flag changed; QF101 for an unknown queue.';

CREATE FUNCTION fenceq.set_queue_notify_done(queue text, notify boolean) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(set_queue_notify_done.queue, 'queue');
    IF set_queue_notify_done.notify IS NULL THEN
        PERFORM fenceq._raise('QF100', 'notify is required');
    END IF;
    UPDATE fenceq._queues AS q SET notify_done = set_queue_notify_done.notify
     WHERE q.queue = set_queue_notify_done.queue AND q.notify_done <> set_queue_notify_done.notify;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = set_queue_notify_done.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    RETURN false;
END
$$;

ALTER FUNCTION fenceq.set_queue_notify_done(queue text, notify boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.set_queue_notify_done(queue text, notify boolean) IS 'Turn fenceq_done notifications (one per job reaching a terminal state, payload the job id) for a queue on or off. True when the flag changed; QF101 for an unknown queue.';

CREATE FUNCTION fenceq.set_schedule(schedule text, queue text, task text, cron text, payload jsonb DEFAULT NULL::jsonb, time_zone text DEFAULT 'UTC'::text, priority integer DEFAULT NULL::integer, max_attempts integer DEFAULT NULL::integer, active_key text DEFAULT NULL::text, paused boolean DEFAULT false) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_new fenceq._schedules;
    v_old fenceq._schedules;
    v_cron record;
BEGIN
    PERFORM fenceq._check_name(set_schedule.schedule, 'schedule', max_length => 218);
    PERFORM fenceq._check_name(set_schedule.queue, 'queue');
    PERFORM fenceq._check_name(set_schedule.task, 'task');
    PERFORM fenceq._check_name(set_schedule.active_key, 'active_key', nullable => true);
    IF set_schedule.max_attempts < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_attempts must be a positive integer');
    END IF;
    IF set_schedule.paused IS NULL THEN
        PERFORM fenceq._raise('QF100', 'paused is required');
    END IF;
    v_new.payload := CASE WHEN jsonb_typeof(set_schedule.payload) = 'null' THEN NULL ELSE set_schedule.payload END;
    IF v_new.payload IS NOT NULL THEN
        PERFORM fenceq._check_json(v_new.payload, 'payload');
    END IF;
    SELECT * INTO v_cron FROM fenceq._cron_parse(set_schedule.cron);
    -- pg_timezone_names reads every zone file (about 0.1 s): a zone some
    -- schedule has already is known.
    IF set_schedule.time_zone IS NULL
       OR NOT EXISTS (SELECT 1 FROM fenceq._schedules AS s WHERE s.time_zone = set_schedule.time_zone)
          AND NOT EXISTS (SELECT 1 FROM pg_timezone_names AS z WHERE z.name = set_schedule.time_zone) THEN
        PERFORM fenceq._raise('QF100', 'time_zone must name a known IANA time zone');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = set_schedule.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;

    v_new.schedule := set_schedule.schedule;
    v_new.queue := set_schedule.queue;
    v_new.task := set_schedule.task;
    v_new.cron := set_schedule.cron;
    v_new.time_zone := set_schedule.time_zone;
    v_new.priority := set_schedule.priority;
    v_new.max_attempts := set_schedule.max_attempts;
    v_new.active_key := set_schedule.active_key;
    v_new.paused := set_schedule.paused;
    v_new.cron_minutes := v_cron.minutes;
    v_new.cron_hours := v_cron.hours;
    v_new.cron_days := v_cron.days;
    v_new.cron_months := v_cron.months;
    v_new.cron_weekdays := v_cron.weekdays;
    v_new.cron_days_and := v_cron.days_and;
    LOOP
        IF NOT v_new.paused THEN
            v_new.next_run_at := fenceq._cron_step(v_new, clock_timestamp(), true);
        END IF;
        INSERT INTO fenceq._schedules AS s SELECT v_new.* ON CONFLICT (schedule) DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
        SELECT * INTO v_old FROM fenceq._schedules AS s WHERE s.schedule = set_schedule.schedule FOR UPDATE;
        EXIT WHEN FOUND;  -- else it was dropped meanwhile: insert again
    END LOOP;
    IF (v_old.queue, v_old.task, v_old.cron, v_old.time_zone, fenceq._canonical_json(v_old.payload),
        v_old.priority, v_old.max_attempts, v_old.active_key, v_old.paused)
       IS NOT DISTINCT FROM
       (v_new.queue, v_new.task, v_new.cron, v_new.time_zone, fenceq._canonical_json(v_new.payload),
        v_new.priority, v_new.max_attempts, v_new.active_key, v_new.paused) THEN
        RETURN false;
    END IF;
    v_new.next_run_at := CASE WHEN v_new.paused THEN NULL ELSE fenceq._cron_step(v_new, clock_timestamp(), true) END;
    UPDATE fenceq._schedules AS s
       SET queue = v_new.queue, task = v_new.task, cron = v_new.cron, time_zone = v_new.time_zone,
           payload = v_new.payload, priority = v_new.priority, max_attempts = v_new.max_attempts,
           active_key = v_new.active_key, paused = v_new.paused, cron_minutes = v_new.cron_minutes,
           cron_hours = v_new.cron_hours, cron_days = v_new.cron_days, cron_months = v_new.cron_months,
           cron_weekdays = v_new.cron_weekdays, cron_days_and = v_new.cron_days_and,
           next_run_at = v_new.next_run_at
     WHERE s.schedule = set_schedule.schedule;
    RETURN true;
END
$$;

ALTER FUNCTION fenceq.set_schedule(schedule text, queue text, task text, cron text, payload jsonb, time_zone text, priority integer, max_attempts integer, active_key text, paused boolean) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.set_schedule(schedule text, queue text, task text, cron text, payload jsonb, time_zone text, priority integer, max_attempts integer, active_key text, paused boolean) IS 'Create a schedule or replace its definition (the next occurrence is recomputed from now). True when anything changed, false when identical. QF101 unknown queue; QF100 a cron expression that does not parse or can never fire, or an unknown time zone.';

CREATE FUNCTION fenceq.submit(queue text, task text, payload jsonb DEFAULT NULL::jsonb, submission_id text DEFAULT NULL::text, job_id text DEFAULT NULL::text, priority integer DEFAULT NULL::integer, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, active_key text DEFAULT NULL::text, force boolean DEFAULT false, concurrency_key text DEFAULT NULL::text, depends_on text[] DEFAULT NULL::text[]) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    v_payload jsonb := CASE WHEN jsonb_typeof(submit.payload) = 'null' THEN NULL ELSE submit.payload END;
    v_fingerprint text;
    v_job_id text;
    v_notify boolean;
    v_reserved boolean;
    v_history boolean;  -- whether the queue keeps events (part 8b)
    v_existing fenceq._submissions;
BEGIN
    IF NOT coalesce(submit.job_id IS NULL AND submit.active_key IS NULL AND NOT submit.force
                    AND submit.depends_on IS NULL
                    AND length(submit.queue) BETWEEN 1 AND 255 AND length(submit.task) BETWEEN 1 AND 255
                    AND coalesce(length(submit.submission_id) BETWEEN 1 AND 255, true)
                    AND coalesce(length(submit.concurrency_key) BETWEEN 1 AND 255, true)
                    AND coalesce(submit.max_attempts >= 1, true)
                    AND fenceq._is_plain_time(submit.run_at) AND fenceq._is_plain_time(submit.expires_at)
                    AND fenceq._is_plain_json(v_payload), false) THEN
        RETURN fenceq._submit(submit.queue, submit.task, submit.payload, submit.submission_id,
            submit.job_id, submit.priority, submit.run_at, submit.expires_at,
            submit.max_attempts, submit.active_key, submit.force, submit.concurrency_key, submit.depends_on);
    END IF;
    IF submit.submission_id IS NOT NULL THEN
        v_fingerprint := fenceq._fingerprint_of(submit.queue, submit.task, fenceq._canonical_json(v_payload),
            submit.submission_id, NULL, submit.priority, submit.run_at,
            submit.expires_at, submit.max_attempts, NULL, false, submit.concurrency_key, NULL);
    END IF;

    WITH queue AS MATERIALIZED (
        SELECT q.queue, q.max_attempts, q.notify, q.history, clock_timestamp() AS now,
               fenceq._new_job_id() AS job_id
          FROM fenceq._queues AS q WHERE q.queue = submit.queue),
    reserved AS (  -- a submission identity, when there is one, before its job
        INSERT INTO fenceq._submissions AS s (submission_id, fingerprint, job_id, queue, created_at)
        SELECT submit.submission_id, v_fingerprint, q.job_id, q.queue, q.now
          FROM queue AS q WHERE submit.submission_id IS NOT NULL
        ON CONFLICT (submission_id) DO NOTHING
        RETURNING s.job_id),
    inserted AS (
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, max_attempts,
            run_at, expires_at, submission_id, fingerprint, created_at, concurrency_key, scheduled)
        SELECT q.job_id, q.queue, submit.task, v_payload, coalesce(submit.priority, 0),
               coalesce(submit.max_attempts, q.max_attempts), coalesce(submit.run_at, q.now),
               submit.expires_at, submit.submission_id, v_fingerprint, q.now, submit.concurrency_key,
               coalesce(submit.run_at > q.now, false)  -- due later: waits apart (part 1c)
          FROM queue AS q
         WHERE submit.submission_id IS NULL OR EXISTS (SELECT 1 FROM reserved)
        ON CONFLICT DO NOTHING
        RETURNING j.job_id)
    SELECT i.job_id, q.notify, EXISTS (SELECT 1 FROM reserved), q.history
      INTO v_job_id, v_notify, v_reserved, v_history
      FROM queue AS q LEFT JOIN inserted AS i ON true;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF v_job_id IS NULL AND v_reserved THEN
        -- The identity was reserved but the generated job id is taken (a
        -- UUID collision): refuse whole, so the reservation goes too.
        PERFORM fenceq._raise('QF203', 'the job id is taken');
    END IF;
    IF v_job_id IS NULL THEN
        SELECT * INTO v_existing FROM fenceq._submissions AS s WHERE s.submission_id = submit.submission_id;
        IF v_existing.fingerprint = v_fingerprint THEN
            RETURN v_existing.job_id;  -- an exact replay
        END IF;
        IF v_existing.submission_id IS NOT NULL THEN
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
        PERFORM fenceq._raise('QF203', 'the job id is taken');  -- a generated id collided
    END IF;
    IF v_history THEN
        PERFORM fenceq._record_events(ARRAY[v_job_id], 'submitted');
    END IF;
    IF v_notify THEN
        PERFORM pg_notify('fenceq_jobs', submit.queue);
    END IF;
    RETURN v_job_id;
END
$$;

ALTER FUNCTION fenceq.submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) IS 'Enqueue a job; returns its id. With submission_id an exact replay returns the original id (QF201 if the request changed). QF202 busy active key unless force; QF203 taken job id.';

CREATE FUNCTION fenceq.submit_batch(queue text, requests jsonb) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $_$
#variable_conflict use_column
DECLARE
    v_ids text[] := '{}';
    v_request jsonb;
    v_index bigint;
    v_queue fenceq._queues;
    v_now timestamptz;
    v_tasks text[];
    v_payloads jsonb[];
    v_submission_ids text[];
    v_priorities integer[];
    v_max_attempts integer[];
    v_fingerprints text[];
    v_new_ids text[];
    v_fresh bigint[];
    v_inserted bigint;
    v_conflict bigint;
BEGIN
    PERFORM fenceq._check_name(submit_batch.queue, 'queue');
    IF submit_batch.requests IS NULL OR jsonb_typeof(submit_batch.requests) <> 'array' THEN
        PERFORM fenceq._raise('QF100', 'requests must be a JSON array');
    END IF;
    IF jsonb_array_length(submit_batch.requests) > 10000 THEN
        PERFORM fenceq._raise('QF100', 'requests may hold at most 10000 elements');
    END IF;
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = submit_batch.queue;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;

    -- Fast path: every element is a plain request ({"task": ..., "payload":
    -- ...} and nothing else) that is valid as it stands. Such requests have
    -- no identity to lock, replay or conflict on, so one INSERT stores them
    -- all, in input order, exactly as _submit would one by one.
    IF (SELECT coalesce(bool_and(coalesce(  -- an unknown (NULL) answer is a no
                jsonb_typeof(r.value) = 'object'
                AND (r.value - 'task' - 'payload') = '{}'::jsonb
                AND jsonb_typeof(r.value -> 'task') = 'string'
                AND length(r.value ->> 'task') BETWEEN 1 AND 255
                AND coalesce(octet_length((r.value -> 'payload')::text) <= 1048576, true)
                AND NOT jsonb_path_exists(r.value -> 'payload',
                    'strict $.**{128} ? (@.type() == "object" || @.type() == "array")'), false)), true)
          FROM jsonb_array_elements(submit_batch.requests) AS r) THEN
        v_now := clock_timestamp();
        v_ids := fenceq._new_job_ids(jsonb_array_length(submit_batch.requests));
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, max_attempts,
                                       run_at, created_at)
        SELECT v_ids[r.ordinality], submit_batch.queue, r.value ->> 'task',
               CASE WHEN jsonb_typeof(r.value -> 'payload') = 'null' THEN NULL ELSE r.value -> 'payload' END,
               0, v_queue.max_attempts, v_now, v_now
          FROM jsonb_array_elements(submit_batch.requests) WITH ORDINALITY AS r
         ORDER BY r.ordinality;  -- seq follows input order
        IF v_queue.history THEN
            PERFORM fenceq._record_events(v_ids, 'submitted');
        END IF;
        IF cardinality(v_ids) > 0 AND v_queue.notify THEN
            PERFORM pg_notify('fenceq_jobs', submit_batch.queue);
        END IF;
        RETURN v_ids;
    END IF;

    -- Owned path: requests with a submission id, priority or max_attempts
    -- besides task and payload, every value valid as it stands.
    IF (SELECT coalesce(bool_and(coalesce(
                jsonb_typeof(r.value) = 'object'
                AND (r.value - 'task' - 'payload' - 'submission_id' - 'priority' - 'max_attempts') = '{}'::jsonb
                AND jsonb_typeof(r.value -> 'task') = 'string'
                AND length(r.value ->> 'task') BETWEEN 1 AND 255
                AND CASE jsonb_typeof(r.value -> 'submission_id')
                        WHEN 'string' THEN length(r.value ->> 'submission_id') BETWEEN 1 AND 255
                        ELSE coalesce(jsonb_typeof(r.value -> 'submission_id') = 'null', true) END
                AND fenceq._is_plain_json_int(r.value -> 'priority', -2147483648)
                AND fenceq._is_plain_json_int(r.value -> 'max_attempts', 1)
                AND fenceq._is_plain_json(r.value -> 'payload'), false)), true)
          FROM jsonb_array_elements(submit_batch.requests) AS r) THEN
        v_new_ids := fenceq._new_job_ids(jsonb_array_length(submit_batch.requests));
        SELECT array_agg(e.task ORDER BY e.i), array_agg(e.payload ORDER BY e.i),
               array_agg(e.submission_id ORDER BY e.i), array_agg(e.priority ORDER BY e.i),
               array_agg(e.max_attempts ORDER BY e.i), array_agg(e.new_id ORDER BY e.i),
               -- The fingerprint of each request as submit computes it, a
               -- flat object payload canonicalised here rather than by a
               -- call per element (nested containers still recurse).
               array_agg(CASE WHEN e.submission_id IS NOT NULL THEN fenceq._fingerprint_of(
                   submit_batch.queue, e.task,
                   CASE jsonb_typeof(e.payload)
                       WHEN 'object' THEN '{' || coalesce((
                           SELECT string_agg(to_json(m.key)::text || ':' ||
                                      CASE WHEN jsonb_typeof(m.value) IN ('object', 'array')
                                           THEN fenceq._canonical_json(m.value) ELSE m.value::text END,
                                  ',' ORDER BY m.key COLLATE "C")
                             FROM jsonb_each(e.payload) AS m), '') || '}'
                       WHEN 'array' THEN fenceq._canonical_json(e.payload)
                       ELSE coalesce(e.payload::text, 'null') END,
                   e.submission_id, NULL, e.priority, NULL, NULL, e.max_attempts, NULL, false, NULL, NULL) END ORDER BY e.i)
          INTO v_tasks, v_payloads, v_submission_ids, v_priorities, v_max_attempts, v_new_ids, v_fingerprints
          FROM (SELECT r.ordinality AS i, r.value ->> 'task' AS task,
                       CASE WHEN jsonb_typeof(r.value -> 'payload') = 'null' THEN NULL
                            ELSE r.value -> 'payload' END AS payload,
                       r.value ->> 'submission_id' AS submission_id,
                       (r.value ->> 'priority')::numeric::integer AS priority,
                       (r.value ->> 'max_attempts')::numeric::integer AS max_attempts,
                       v_new_ids[r.ordinality] AS new_id
                  FROM jsonb_array_elements(submit_batch.requests) WITH ORDINALITY AS r) AS e;
        IF v_tasks IS NULL THEN
            RETURN '{}';
        END IF;
        -- The same global order as every other path takes its identities in.
        PERFORM fenceq._lock_identities(ARRAY(
            SELECT 'fenceq.submission:' || i.id FROM unnest(v_submission_ids) AS i(id) WHERE i.id IS NOT NULL));
        v_now := clock_timestamp();
        -- Reserve each new identity for its first request in the batch. An
        -- identity retained already (or committed meanwhile by a submit that
        -- holds no lock) is left as it is and answered from below.
        INSERT INTO fenceq._submissions AS s (submission_id, fingerprint, job_id, queue, created_at)
        SELECT DISTINCT ON (u.submission_id) u.submission_id, u.fingerprint, u.new_id, submit_batch.queue, v_now
          FROM unnest(v_submission_ids, v_fingerprints, v_new_ids) WITH ORDINALITY AS u(submission_id, fingerprint,
                                                                                         new_id, i)
         WHERE u.submission_id IS NOT NULL
         ORDER BY u.submission_id, u.i
        ON CONFLICT (submission_id) DO NOTHING;
        -- Each request's answer: its own new job when it has no identity or
        -- reserved it just now (the row holds this request's new id), else
        -- the retained job, or the first request whose content differs.
        SELECT array_agg(coalesce(s.job_id, u.new_id) ORDER BY u.i),
               array_agg(u.i) FILTER (WHERE s.job_id IS NULL OR s.job_id = u.new_id),
               min(u.i) FILTER (WHERE s.fingerprint IS DISTINCT FROM u.fingerprint)
          INTO v_ids, v_fresh, v_conflict
          FROM unnest(v_submission_ids, v_fingerprints, v_new_ids) WITH ORDINALITY AS u(submission_id, fingerprint,
                                                                                         new_id, i)
          LEFT JOIN fenceq._submissions AS s ON s.submission_id = u.submission_id;
        IF v_conflict IS NOT NULL THEN
            PERFORM set_config('fenceq.batch_index', (v_conflict - 1)::text, true);
            PERFORM fenceq._raise('QF201', 'the submission id is retained for a different request');
        END IF;
        INSERT INTO fenceq._jobs AS j (job_id, queue, task, payload, priority, max_attempts,
                                       run_at, submission_id, fingerprint, created_at)
        SELECT v_new_ids[f.i], submit_batch.queue, v_tasks[f.i], v_payloads[f.i], coalesce(v_priorities[f.i], 0),
               coalesce(v_max_attempts[f.i], v_queue.max_attempts), v_now, v_submission_ids[f.i],
               v_fingerprints[f.i], v_now
          FROM unnest(v_fresh) AS f(i)
         ORDER BY f.i  -- seq follows input order
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
        IF v_inserted <> coalesce(cardinality(v_fresh), 0) THEN
            PERFORM fenceq._raise('QF203', 'the job id is taken');  -- a generated id collided
        END IF;
        IF v_queue.history THEN
            PERFORM fenceq._record_events(ARRAY(SELECT v_new_ids[f.i] FROM unnest(v_fresh) AS f(i) ORDER BY f.i),
                                          'submitted');
        END IF;
        IF cardinality(v_fresh) > 0 AND v_queue.notify THEN
            PERFORM pg_notify('fenceq_jobs', submit_batch.queue);
        END IF;
        RETURN v_ids;
    END IF;

    -- Dependencies between elements: the batch's explicit job ids may be
    -- named before their element runs (any order); a cycle is refused here.
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(submit_batch.requests) AS r
                WHERE jsonb_typeof(r.value) = 'object' AND r.value ? 'depends_on') THEN
        PERFORM fenceq._check_batch_graph(submit_batch.requests);
    END IF;
    -- Lock every identity of the batch up front, in the one global order.
    PERFORM fenceq._lock_identities(ARRAY(
        SELECT k.key
          FROM jsonb_array_elements(submit_batch.requests) AS r,
               unnest(fenceq._identity_keys(submit_batch.queue, r.value ->> 'active_key',
                                            r.value ->> 'job_id', r.value ->> 'submission_id')) AS k(key)
         WHERE jsonb_typeof(r.value) = 'object'));
    FOR v_request, v_index IN
        SELECT r.value, r.ordinality - 1
          FROM jsonb_array_elements(submit_batch.requests) WITH ORDINALITY AS r
    LOOP
        PERFORM set_config('fenceq.batch_index', v_index::text, true);
        IF jsonb_typeof(v_request) <> 'object' THEN
            PERFORM fenceq._raise('QF100', 'each request must be a JSON object');
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_object_keys(v_request) AS k(key)
                    WHERE k.key NOT IN ('task', 'payload', 'submission_id', 'job_id', 'priority',
                        'run_at', 'expires_at', 'max_attempts', 'active_key', 'force',
                        'concurrency_key', 'depends_on')) THEN
            PERFORM fenceq._raise('QF100', 'a request has an unknown key');
        END IF;
        v_ids := v_ids || fenceq._submit(
            submit_batch.queue,
            fenceq._json_text(v_request -> 'task', 'task'),
            v_request -> 'payload',
            fenceq._json_text(v_request -> 'submission_id', 'submission_id'),
            fenceq._json_text(v_request -> 'job_id', 'job_id'),
            fenceq._json_int(v_request -> 'priority', 'priority'),
            fenceq._json_time(v_request -> 'run_at', 'run_at'),
            fenceq._json_time(v_request -> 'expires_at', 'expires_at'),
            fenceq._json_int(v_request -> 'max_attempts', 'max_attempts'),
            fenceq._json_text(v_request -> 'active_key', 'active_key'),
            fenceq._json_bool(v_request -> 'force', 'force'),
            fenceq._json_text(v_request -> 'concurrency_key', 'concurrency_key'),
            fenceq._json_text_array(v_request -> 'depends_on', 'depends_on'));
    END LOOP;
    PERFORM set_config('fenceq.batch_index', '', true);
    PERFORM set_config('fenceq.batch_job_ids', '', true);
    RETURN v_ids;
END
$_$;

ALTER FUNCTION fenceq.submit_batch(queue text, requests jsonb) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.submit_batch(queue text, requests jsonb) IS 'Submit a JSON array of requests (keys: submit''s parameters but queue) all or nothing; returns job ids in input order. Errors carry the element index in DETAIL.';

CREATE FUNCTION fenceq.tick(max_rows integer DEFAULT 100) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    v_schedule fenceq._schedules;
    v_cutoff timestamptz;
    v_now timestamptz;
    v_occurrence timestamptz;
    v_submission_id text;
    v_job_id text;
    v_submitted integer := 0;
BEGIN
    IF tick.max_rows IS NULL OR tick.max_rows < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be a positive integer');
    END IF;
    -- A variable, not clock_timestamp() inline, so the index can serve it.
    v_cutoff := clock_timestamp();
    FOR v_schedule IN
        SELECT s.* FROM fenceq._schedules AS s
         WHERE s.next_run_at <= v_cutoff
         ORDER BY s.next_run_at
         LIMIT tick.max_rows
           FOR UPDATE SKIP LOCKED
    LOOP
        v_now := clock_timestamp();
        v_job_id := NULL;
        -- The latest occurrence due; none when the last one due lies before
        -- next_run_at (the zone's rules changed since it was computed).
        v_occurrence := fenceq._cron_step(v_schedule, v_now, false);
        IF v_occurrence >= v_schedule.next_run_at THEN
            v_submission_id := 'fenceq:schedule:' || v_schedule.schedule || ':'
                || to_char(v_occurrence AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"');
            CONTINUE WHEN NOT fenceq._try_lock_identities(fenceq._identity_keys(
                v_schedule.queue, v_schedule.active_key, NULL, v_submission_id));
            SELECT s.job_id INTO v_job_id FROM fenceq._submissions AS s WHERE s.submission_id = v_submission_id;
            IF NOT FOUND AND (v_schedule.active_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM fenceq._jobs AS j
                 WHERE j.queue = v_schedule.queue AND j.active_key = v_schedule.active_key
                   AND j.status IN ('pending', 'claimed'))) THEN
                v_job_id := fenceq.submit(queue => v_schedule.queue, task => v_schedule.task,
                    payload => v_schedule.payload, submission_id => v_submission_id,
                    priority => v_schedule.priority, run_at => v_occurrence,
                    max_attempts => v_schedule.max_attempts, active_key => v_schedule.active_key);
                v_submitted := v_submitted + 1;
            END IF;
        END IF;
        UPDATE fenceq._schedules AS s
           SET next_run_at = fenceq._cron_step(v_schedule, v_now, true),
               last_run_at = CASE WHEN v_job_id IS NULL THEN s.last_run_at ELSE v_occurrence END,
               last_job_id = coalesce(v_job_id, s.last_job_id)
         WHERE s.schedule = v_schedule.schedule;
    END LOOP;
    RETURN v_submitted;
END
$$;

ALTER FUNCTION fenceq.tick(max_rows integer) OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.tick(max_rows integer) IS 'Submit one job for the latest due occurrence of each due schedule (at most max_rows schedules; missed occurrences are skipped, a busy active key skips the occurrence), then move each to its first occurrence after now. Returns the jobs submitted. Concurrent ticks never wait on each other or make two jobs for one occurrence.';

CREATE FUNCTION fenceq.verify_schema() RETURNS TABLE(check_name text, ok boolean, detail text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
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
        ('_claims', 'claim_token', 'text', true), ('_claims', 'job_id', 'text', false),
        ('_claims', 'generation', 'bigint', false), ('_claims', 'owner_id', 'text', true),
        ('_claims', 'claimed_at', 'timestamp with time zone', true), ('_claims', 'job_ids', 'text[]', false),
        ('_jobs', 'call_claims', '_call_claim[]', false),
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
                    '_holds_fence(text, text, bigint, text, timestamp with time zone, text, bigint, text, '
                    'timestamp with time zone)',
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

ALTER FUNCTION fenceq.verify_schema() OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.verify_schema() IS 'Admission check of the deployed schema: encoding, column types, deterministic collations, exact unique identity indexes, the active-key and activity indexes, the public types and views, safe defaults, no triggers, SECURITY DEFINER with pinned search_path, no PUBLIC EXECUTE, no superuser owner. One row per check.';

CREATE FUNCTION fenceq.version() RETURNS text
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'fenceq', 'pg_temp'
    AS $$
BEGIN
    RETURN '9';
END
$$;

ALTER FUNCTION fenceq.version() OWNER TO fenceq_owner;

COMMENT ON FUNCTION fenceq.version() IS 'The installed fenceq schema version.';

CREATE TABLE fenceq._activity (
    queue text NOT NULL COLLATE pg_catalog."C",
    minute timestamp with time zone NOT NULL,
    submitted integer NOT NULL,
    claimed integer NOT NULL,
    retried integer NOT NULL,
    completed integer NOT NULL,
    failed integer NOT NULL,
    cancelled integer NOT NULL,
    expired integer NOT NULL,
    pending integer,
    due integer,
    running integer,
    wait_hist integer[] NOT NULL,
    run_hist integer[] NOT NULL
);

ALTER TABLE fenceq._activity OWNER TO fenceq_owner;

CREATE TABLE fenceq._checkpoints (
    job_id text NOT NULL COLLATE pg_catalog."C",
    step text NOT NULL COLLATE pg_catalog."C",
    value jsonb NOT NULL,
    generation bigint NOT NULL,
    recorded_at timestamp with time zone NOT NULL
);

ALTER TABLE fenceq._checkpoints OWNER TO fenceq_owner;

CREATE TABLE fenceq._claims (
    claim_token text NOT NULL COLLATE pg_catalog."C",
    job_id text COLLATE pg_catalog."C",
    generation bigint,
    owner_id text NOT NULL COLLATE pg_catalog."C",
    claimed_at timestamp with time zone NOT NULL,
    job_ids text[] COLLATE pg_catalog."C"
);

ALTER TABLE fenceq._claims OWNER TO fenceq_owner;

CREATE TABLE fenceq._dead_letters (
    dlq_id text NOT NULL COLLATE pg_catalog."C",
    job_id text NOT NULL COLLATE pg_catalog."C",
    queue text NOT NULL COLLATE pg_catalog."C",
    task text NOT NULL COLLATE pg_catalog."C",
    error text,
    attempts integer NOT NULL,
    failed_at timestamp with time zone NOT NULL,
    replayed_at timestamp with time zone,
    discarded_at timestamp with time zone
);

ALTER TABLE fenceq._dead_letters OWNER TO fenceq_owner;

CREATE TABLE fenceq._dependencies (
    depends_on text NOT NULL COLLATE pg_catalog."C",
    job_id text NOT NULL COLLATE pg_catalog."C",
    satisfied boolean DEFAULT false NOT NULL
);

ALTER TABLE fenceq._dependencies OWNER TO fenceq_owner;

ALTER TABLE fenceq._events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME fenceq._events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE fenceq._jobs ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME fenceq._jobs_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE fenceq._locks (
    lock text NOT NULL COLLATE pg_catalog."C",
    owner_id text COLLATE pg_catalog."C",
    token bigint NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT _locks_holder_check CHECK (((owner_id IS NULL) = (expires_at IS NULL))),
    CONSTRAINT _locks_token_check CHECK ((token >= 0))
);

ALTER TABLE fenceq._locks OWNER TO fenceq_owner;

CREATE TABLE fenceq._queues (
    queue text NOT NULL COLLATE pg_catalog."C",
    lease interval NOT NULL,
    max_attempts integer NOT NULL,
    backoff_base interval NOT NULL,
    backoff_factor double precision NOT NULL,
    backoff_max interval NOT NULL,
    dead_letter boolean NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    notify boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone NOT NULL,
    max_claimed integer,
    max_claimed_per_key integer,
    rate_limit integer,
    rate_period interval,
    notify_done boolean DEFAULT false NOT NULL,
    requeue_priority text DEFAULT 'keep'::text NOT NULL COLLATE pg_catalog."C",
    history boolean DEFAULT false NOT NULL,
    history_retention interval,
    CONSTRAINT _queues_requeue_priority_check CHECK ((requeue_priority = ANY (ARRAY['keep'::text, 'first'::text, 'last'::text])))
);

ALTER TABLE fenceq._queues OWNER TO fenceq_owner;

CREATE TABLE fenceq._rate_window (
    queue text NOT NULL COLLATE pg_catalog."C",
    claimed_at timestamp with time zone NOT NULL
);

ALTER TABLE fenceq._rate_window OWNER TO fenceq_owner;

CREATE TABLE fenceq._submissions (
    submission_id text NOT NULL COLLATE pg_catalog."C",
    fingerprint text NOT NULL COLLATE pg_catalog."C",
    job_id text NOT NULL COLLATE pg_catalog."C",
    queue text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL
);

ALTER TABLE fenceq._submissions OWNER TO fenceq_owner;

CREATE VIEW fenceq.attempts AS
 SELECT c.job_id,
    c.generation,
    c.owner_id,
    c.claimed_at
   FROM fenceq._claims c
  WHERE (c.job_id IS NOT NULL)
UNION ALL
 SELECT j.job_id,
    k.generation,
    k.owner_id,
    k.claimed_at
   FROM (fenceq._jobs j
     CROSS JOIN LATERAL unnest(j.call_claims) k(generation, owner_id, claimed_at, claim_nonce));

ALTER TABLE fenceq.attempts OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.attempts IS 'One row per successful claim (from the claim ledger and the job rows), without claim tokens or nonces.';

CREATE VIEW fenceq.checkpoints AS
 SELECT c.job_id,
    c.step,
    c.value,
    c.generation,
    c.recorded_at
   FROM fenceq._checkpoints c;

ALTER TABLE fenceq.checkpoints OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.checkpoints IS 'Recorded checkpoints: one value per (job, step), with the generation that wrote it.';

CREATE VIEW fenceq.dead_letters AS
 SELECT d.dlq_id,
    d.job_id,
    d.queue,
    d.task,
    d.error,
    d.attempts,
    d.failed_at,
    d.replayed_at,
    d.discarded_at
   FROM fenceq._dead_letters d;

ALTER TABLE fenceq.dead_letters OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.dead_letters IS 'Dead letters; a replayed or discarded letter stays listed.';

CREATE VIEW fenceq.dependencies AS
 SELECT d.job_id,
    d.depends_on,
    d.satisfied
   FROM fenceq._dependencies d;

ALTER TABLE fenceq.dependencies OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.dependencies IS 'One row per dependency: job_id waits for depends_on; satisfied once it completed.';

CREATE VIEW fenceq.dispatches AS
 SELECT j.job_id,
    j.queue,
    d.backend,
    d.state,
    d.reservation_ref,
    d.execution_ref,
    j.owner_id,
    j.generation,
    j.lease_expires_at,
    d.checked_at
   FROM (fenceq._dispatches d
     JOIN fenceq._jobs j ON ((j.job_id = d.job_id)))
  WHERE ((j.status = 'claimed'::text) AND (j.generation = d.generation));

ALTER TABLE fenceq.dispatches OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.dispatches IS 'One row per job whose dispatch to an external system is live (reserved or running, the job claimed at that generation).';

CREATE VIEW fenceq.locks AS
 SELECT l.lock,
    l.owner_id,
    l.token,
    l.expires_at
   FROM fenceq._locks l;

ALTER TABLE fenceq.locks OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.locks IS 'Every named lock ever acquired: its holder and expiry (NULL once released; a past expiry has lapsed) and its last fencing token.';

CREATE VIEW fenceq.queue_stats AS
 SELECT q.queue,
    COALESCE(p.pending, (0)::bigint) AS pending,
    COALESCE(p.due, (0)::bigint) AS due,
    COALESCE(c.claimed, (0)::bigint) AS claimed,
    COALESCE(c.cancel_requested, (0)::bigint) AS cancel_requested,
    (clock_timestamp() - p.oldest_due) AS oldest_due_age,
    q.paused,
    q.notify,
    q.max_claimed,
    q.max_claimed_per_key,
    COALESCE(k.busiest_key, (0)::bigint) AS busiest_key_claimed,
    q.rate_limit,
    q.rate_period,
    COALESCE(r.used, (0)::bigint) AS rate_used,
    COALESCE(p.blocked, (0)::bigint) AS blocked
   FROM ((((fenceq._queues q
     LEFT JOIN LATERAL ( SELECT count(*) AS pending,
            count(*) FILTER (WHERE (j.run_at <= clock_timestamp())) AS due,
            min(j.run_at) FILTER (WHERE (j.run_at <= clock_timestamp())) AS oldest_due,
            count(*) FILTER (WHERE (j.blocked_by IS NOT NULL)) AS blocked
           FROM fenceq._jobs j
          WHERE ((j.queue = q.queue) AND (j.status = 'pending'::text))) p ON (true))
     LEFT JOIN LATERAL ( SELECT count(*) AS claimed,
            count(*) FILTER (WHERE j.cancel_requested) AS cancel_requested
           FROM fenceq._jobs j
          WHERE ((j.queue = q.queue) AND (j.status = 'claimed'::text))) c ON (true))
     LEFT JOIN LATERAL ( SELECT max(k_1.claimed) AS busiest_key
           FROM ( SELECT count(*) AS claimed
                   FROM fenceq._jobs j
                  WHERE ((j.queue = q.queue) AND (j.status = 'claimed'::text) AND (j.concurrency_key IS NOT NULL) AND (q.max_claimed_per_key IS NOT NULL))
                  GROUP BY j.concurrency_key) k_1) k ON (true))
     LEFT JOIN LATERAL ( SELECT count(*) AS used
           FROM fenceq._rate_window w
          WHERE ((w.queue = q.queue) AND (w.claimed_at > (clock_timestamp() - q.rate_period)))) r ON (true));

ALTER TABLE fenceq.queue_stats OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.queue_stats IS 'Per queue: pending, due-now pending, claimed and cancel-requested counts, the age of the oldest due job, the paused and notify flags, and the limits with their usage (busiest key''s claimed count, claims in the current rate window).';

CREATE VIEW fenceq.schedules AS
 SELECT s.schedule,
    s.queue,
    s.task,
    s.cron,
    s.time_zone,
    s.payload,
    s.priority,
    s.max_attempts,
    s.active_key,
    s.paused,
    s.next_run_at,
    s.last_run_at,
    s.last_job_id
   FROM fenceq._schedules s;

ALTER TABLE fenceq.schedules OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.schedules IS 'Every schedule: its definition, the next occurrence tick submits (NULL while paused) and the last occurrence submitted with its job.';

CREATE VIEW fenceq.submissions AS
 SELECT s.submission_id,
    s.job_id,
    s.queue,
    s.created_at
   FROM fenceq._submissions s;

ALTER TABLE fenceq.submissions OWNER TO fenceq_owner;

COMMENT ON VIEW fenceq.submissions IS 'Retained submission identities: submission_id -> job_id (they outlive purged jobs).';

CREATE TABLE fenceq_migrations._yoyo_log (
    id character varying(36) NOT NULL,
    migration_hash character varying(64),
    migration_id character varying(255),
    operation character varying(10),
    username character varying(255),
    hostname character varying(255),
    comment character varying(255),
    created_at_utc timestamp without time zone
);

ALTER TABLE fenceq_migrations._yoyo_log OWNER TO postgres;

CREATE TABLE fenceq_migrations._yoyo_migration (
    migration_hash character varying(64) NOT NULL,
    migration_id character varying(255),
    applied_at_utc timestamp without time zone
);

ALTER TABLE fenceq_migrations._yoyo_migration OWNER TO postgres;

CREATE TABLE fenceq_migrations._yoyo_version (
    version integer NOT NULL,
    installed_at_utc timestamp without time zone
);

ALTER TABLE fenceq_migrations._yoyo_version OWNER TO postgres;

CREATE TABLE fenceq_migrations.yoyo_lock (
    locked integer DEFAULT 1 NOT NULL,
    ctime timestamp without time zone,
    pid integer NOT NULL
);

ALTER TABLE fenceq_migrations.yoyo_lock OWNER TO postgres;

ALTER TABLE ONLY fenceq._activity
    ADD CONSTRAINT _activity_pkey PRIMARY KEY (queue, minute);

ALTER TABLE ONLY fenceq._checkpoints
    ADD CONSTRAINT _checkpoints_pkey PRIMARY KEY (job_id, step);

ALTER TABLE ONLY fenceq._claims
    ADD CONSTRAINT _claims_pkey PRIMARY KEY (claim_token);

ALTER TABLE ONLY fenceq._dead_letters
    ADD CONSTRAINT _dead_letters_pkey PRIMARY KEY (dlq_id);

ALTER TABLE ONLY fenceq._dependencies
    ADD CONSTRAINT _dependencies_pkey PRIMARY KEY (depends_on, job_id);

ALTER TABLE ONLY fenceq._dispatches
    ADD CONSTRAINT _dispatches_pkey PRIMARY KEY (job_id);

ALTER TABLE ONLY fenceq._events
    ADD CONSTRAINT _events_pkey PRIMARY KEY (job_id, seq);

ALTER TABLE ONLY fenceq._jobs
    ADD CONSTRAINT _jobs_pkey PRIMARY KEY (job_id);

ALTER TABLE ONLY fenceq._locks
    ADD CONSTRAINT _locks_pkey PRIMARY KEY (lock);

ALTER TABLE ONLY fenceq._queues
    ADD CONSTRAINT _queues_pkey PRIMARY KEY (queue);

ALTER TABLE ONLY fenceq._schedules
    ADD CONSTRAINT _schedules_pkey PRIMARY KEY (schedule);

ALTER TABLE ONLY fenceq._submissions
    ADD CONSTRAINT _submissions_pkey PRIMARY KEY (submission_id);

ALTER TABLE ONLY fenceq_migrations._yoyo_log
    ADD CONSTRAINT _yoyo_log_pkey PRIMARY KEY (id);

ALTER TABLE ONLY fenceq_migrations._yoyo_migration
    ADD CONSTRAINT _yoyo_migration_pkey PRIMARY KEY (migration_hash);

ALTER TABLE ONLY fenceq_migrations._yoyo_version
    ADD CONSTRAINT _yoyo_version_pkey PRIMARY KEY (version);

ALTER TABLE ONLY fenceq_migrations.yoyo_lock
    ADD CONSTRAINT yoyo_lock_pkey PRIMARY KEY (locked);

CREATE INDEX _claims_job_idx ON fenceq._claims USING btree (job_id, generation);

CREATE INDEX _dead_letters_job_idx ON fenceq._dead_letters USING btree (job_id);

CREATE INDEX _dead_letters_unhandled_idx ON fenceq._dead_letters USING btree (queue, failed_at) WHERE ((replayed_at IS NULL) AND (discarded_at IS NULL));

CREATE INDEX _dependencies_job_idx ON fenceq._dependencies USING btree (job_id);

CREATE INDEX _dispatches_backend_idx ON fenceq._dispatches USING btree (backend);

CREATE INDEX _events_queue_at_idx ON fenceq._events USING btree (queue, at);

CREATE UNIQUE INDEX _jobs_active_key_idx ON fenceq._jobs USING btree (queue, active_key) WHERE ((active_key IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'claimed'::text])));

CREATE INDEX _jobs_claimed_idx ON fenceq._jobs USING btree (queue) WHERE (status = 'claimed'::text);

CREATE INDEX _jobs_expires_idx ON fenceq._jobs USING btree (expires_at) WHERE ((status = 'pending'::text) AND (expires_at IS NOT NULL));

CREATE INDEX _jobs_finished_idx ON fenceq._jobs USING btree (finished_at) WHERE (finished_at IS NOT NULL);

CREATE INDEX _jobs_later_idx ON fenceq._jobs USING btree (queue, run_at) WHERE ((status = 'pending'::text) AND scheduled);

CREATE INDEX _jobs_pending_idx ON fenceq._jobs USING btree (queue, scheduled, priority DESC, run_at, seq) WHERE (status = 'pending'::text);

CREATE INDEX _rate_window_queue_idx ON fenceq._rate_window USING btree (queue, claimed_at);

CREATE INDEX _schedules_due_idx ON fenceq._schedules USING btree (next_run_at) WHERE (next_run_at IS NOT NULL);

CREATE INDEX _submissions_job_idx ON fenceq._submissions USING btree (job_id);

GRANT USAGE ON SCHEMA fenceq TO fenceq_producer;
GRANT USAGE ON SCHEMA fenceq TO fenceq_worker;
GRANT USAGE ON SCHEMA fenceq TO fenceq_admin;

REVOKE ALL ON TYPE fenceq._call_claim FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._action_detail(action text, filter jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._activity_end(now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._backoff(attempt integer, base interval, factor double precision, max interval) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._cancel_locked(job fenceq._jobs, force boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._canonical_json(value jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_batch_graph(requests jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_bulk(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_dependencies(depends_on text[], job_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_fence(job_id text, owner_id text, generation bigint, claim_token text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_interval(value interval, what text, allow_zero boolean, nullable boolean, backwards boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_json(value jsonb, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_lock_token(token bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_name(value text, what text, max_length integer, nullable boolean, code text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_names(names text[], what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_queue_settings(lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_ref(value text, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_requeue_priority(value text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._check_time(value timestamp with time zone, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._checkpoints_of(job_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._claim_picked(picked text[], owner_id text, claim_tokens text[], claim_nonce text, lease interval, budget interval) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._cron_field(field text, what text, low integer, high integer, names text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._cron_instant(local timestamp without time zone, time_zone text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._cron_parse(cron text, OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT months integer[], OUT weekdays integer[], OUT days_and boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._cron_step(schedule fenceq._schedules, instant timestamp with time zone, forward boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._cron_value(token text, what text, low integer, high integer, names text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._dead_letter(job fenceq._jobs, error text, now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._fingerprint(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._fingerprint_of(queue text, task text, canonical_payload text, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._histogram(buckets integer[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._histogram_bounds() FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._histogram_percentile(buckets integer[], counts bigint[], fraction double precision) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._hold_lock(lock text, owner_id text, token bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._holds_fence(status text, owner_id text, generation bigint, claim_token text, lease_expires_at timestamp with time zone, fence_owner_id text, fence_generation bigint, fence_claim_token text, at timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._identity_keys(queue text, active_key text, job_id text, submission_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._is_plain_duration(value interval) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._is_plain_fence(job_id text, owner_id text, generation bigint, claim_token text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._is_plain_json(value jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._is_plain_json_int(value jsonb, min integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._is_plain_time(value timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._json_bool(value jsonb, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._json_int(value jsonb, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._json_text(value jsonb, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._json_text_array(value jsonb, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._json_time(value jsonb, what text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._live_dispatch(job fenceq._jobs) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._lock_dependencies(depends_on text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._lock_identities(keys text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._lock_live(job_id text, owner_id text, generation bigint, claim_token text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._move_due(queue text, now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._new_job_id() FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._new_job_ids(n integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._notify_done(job_ids text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._notify_jobs(queue text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._pick(queues text[], wanted integer, OUT picked text[], OUT exhausted boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._pick_limited(queue text, wanted integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._raise(code text, message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._record_action(job_id text, after_seq bigint, event text, detail jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._record_event(job_id text, queue text, event text, generation bigint, owner_id text, detail jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._record_events(job_ids text[], event text, detail jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._requeue_at(job fenceq._jobs, now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._retry_or_fail(job fenceq._jobs, error text, retry boolean, retry_at timestamp with time zone, now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._set_queue_flag(queue text, flag text, value boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._settle_dependents(job_ids text[], completed boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq._try_lock_identities(keys text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fenceq.acknowledge_cancel(job_id text, owner_id text, generation bigint, claim_token text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.acknowledge_cancel(job_id text, owner_id text, generation bigint, claim_token text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.acknowledge_cancel(job_id text, owner_id text, generation bigint, claim_token text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.acquire_lock(lock text, owner_id text, ttl interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.acquire_lock(lock text, owner_id text, ttl interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.acquire_lock(lock text, owner_id text, ttl interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.activity(queue text, since interval, bucket interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.activity(queue text, since interval, bucket interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.activity(queue text, since interval, bucket interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.adopt_dispatch(job_id text, backend text, expected_ref text, owner_id text, claim_token text, lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.adopt_dispatch(job_id text, backend text, expected_ref text, owner_id text, claim_token text, lease interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.adopt_dispatch(job_id text, backend text, expected_ref text, owner_id text, claim_token text, lease interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.alter_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.alter_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.cancel(job_id text, force boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.cancel(job_id text, force boolean) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.cancel_jobs(queue text, job_ids text[], task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.cancel_jobs(queue text, job_ids text[], task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.cancel_matching(queue text, task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.cancel_matching(queue text, task text, payload_contains jsonb, include_claimed boolean, force boolean, max_rows integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.check_lock(lock text, token bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.check_lock(lock text, token bigint) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.check_lock(lock text, token bigint) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.checkpoint(job_id text, owner_id text, generation bigint, claim_token text, step text, value jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.checkpoint(job_id text, owner_id text, generation bigint, claim_token text, step text, value jsonb) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.checkpoint(job_id text, owner_id text, generation bigint, claim_token text, step text, value jsonb) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.claim_batch(queues text[], owner_id text, claim_tokens text[], lease interval, budget interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.claim_batch(queues text[], owner_id text, claim_tokens text[], lease interval, budget interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.claim_batch(queues text[], owner_id text, claim_tokens text[], lease interval, budget interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.claim_jobs(queues text[], owner_id text, claim_nonce text, max_jobs integer, lease interval, budget interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.claim_jobs(queues text[], owner_id text, claim_nonce text, max_jobs integer, lease interval, budget interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.claim_jobs(queues text[], owner_id text, claim_nonce text, max_jobs integer, lease interval, budget interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.claim_next(queues text[], owner_id text, claim_token text, lease interval, budget interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.claim_next(queues text[], owner_id text, claim_token text, lease interval, budget interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.claim_next(queues text[], owner_id text, claim_token text, lease interval, budget interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.claim_state(job_id text, owner_id text, generation bigint, claim_token text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.claim_state(job_id text, owner_id text, generation bigint, claim_token text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.claim_state(job_id text, owner_id text, generation bigint, claim_token text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.complete(job_id text, owner_id text, generation bigint, claim_token text, result jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.complete(job_id text, owner_id text, generation bigint, claim_token text, result jsonb) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.complete(job_id text, owner_id text, generation bigint, claim_token text, result jsonb) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.complete_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], results jsonb[]) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.complete_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], results jsonb[]) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.complete_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], results jsonb[]) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.create_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.create_queue(queue text, lease interval, max_attempts integer, backoff_base interval, backoff_factor double precision, backoff_max interval, dead_letter boolean, requeue_priority text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.discard_dead_letter(dlq_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.discard_dead_letter(dlq_id text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.drop_schedule(schedule text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.drop_schedule(schedule text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.extend(job_id text, owner_id text, generation bigint, claim_token text, budget interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.extend(job_id text, owner_id text, generation bigint, claim_token text, budget interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.extend(job_id text, owner_id text, generation bigint, claim_token text, budget interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.fail(job_id text, owner_id text, generation bigint, claim_token text, error text, retry boolean, retry_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.fail(job_id text, owner_id text, generation bigint, claim_token text, error text, retry boolean, retry_at timestamp with time zone) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.fail(job_id text, owner_id text, generation bigint, claim_token text, error text, retry boolean, retry_at timestamp with time zone) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.finalize_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text, execution_ref text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.finalize_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text, execution_ref text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.finalize_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text, execution_ref text) TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.jobs TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.jobs TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.get_job(job_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.get_job(job_id text) TO fenceq_producer;
GRANT ALL ON FUNCTION fenceq.get_job(job_id text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.get_job(job_id text) TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.job_events TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.job_events TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.get_job_events(job_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.get_job_events(job_id text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.get_job_events(job_id text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.heartbeat(job_id text, owner_id text, generation bigint, claim_token text, lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.heartbeat(job_id text, owner_id text, generation bigint, claim_token text, lease interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.heartbeat(job_id text, owner_id text, generation bigint, claim_token text, lease interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.heartbeat_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.heartbeat_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], lease interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.heartbeat_batch(job_ids text[], owner_ids text[], generations bigint[], claim_tokens text[], lease interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.next_due(queues text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.next_due(queues text[]) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.next_due(queues text[]) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.pause_queue(queue text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.pause_queue(queue text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.progress(job_id text, owner_id text, generation bigint, claim_token text, progress jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.progress(job_id text, owner_id text, generation bigint, claim_token text, progress jsonb) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.progress(job_id text, owner_id text, generation bigint, claim_token text, progress jsonb) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.purge(older_than interval, max_rows integer, submissions_older_than interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.purge(older_than interval, max_rows integer, submissions_older_than interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.reap(max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.reap(max_rows integer) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.reap(max_rows integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.recover_claim(owner_id text, claim_token text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.recover_claim(owner_id text, claim_token text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.recover_claim(owner_id text, claim_token text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.release(job_id text, owner_id text, generation bigint, claim_token text, run_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.release(job_id text, owner_id text, generation bigint, claim_token text, run_at timestamp with time zone) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.release(job_id text, owner_id text, generation bigint, claim_token text, run_at timestamp with time zone) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.release_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.release_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.release_dispatch(job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.release_lock(lock text, owner_id text, token bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.release_lock(lock text, owner_id text, token bigint) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.release_lock(lock text, owner_id text, token bigint) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.renew_lock(lock text, owner_id text, token bigint, ttl interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.renew_lock(lock text, owner_id text, token bigint, ttl interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.renew_lock(lock text, owner_id text, token bigint, ttl interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.replace_dispatch_ref(job_id text, owner_id text, generation bigint, claim_token text, expected_ref text, execution_ref text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.replace_dispatch_ref(job_id text, owner_id text, generation bigint, claim_token text, expected_ref text, execution_ref text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.replace_dispatch_ref(job_id text, owner_id text, generation bigint, claim_token text, expected_ref text, execution_ref text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.replay_dead_letter(dlq_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.replay_dead_letter(dlq_id text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.replay_dead_letters(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.replay_dead_letters(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.reserve_dispatch(job_id text, owner_id text, generation bigint, claim_token text, backend text, reservation_ref text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.reserve_dispatch(job_id text, owner_id text, generation bigint, claim_token text, backend text, reservation_ref text) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.reserve_dispatch(job_id text, owner_id text, generation bigint, claim_token text, backend text, reservation_ref text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.resume_queue(queue text) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.resume_queue(queue text) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.retry_jobs(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.retry_jobs(queue text, job_ids text[], task text, payload_contains jsonb, error_contains text, max_rows integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.sample_activity(max_minutes integer, keep interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.sample_activity(max_minutes integer, keep interval) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.sample_activity(max_minutes integer, keep interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.search_jobs(queue text, status text, task text, payload_contains jsonb, error_contains text, submission_prefix text, since timestamp with time zone, until timestamp with time zone, before_seq bigint, max_rows integer, max_scan integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.search_jobs(queue text, status text, task text, payload_contains jsonb, error_contains text, submission_prefix text, since timestamp with time zone, until timestamp with time zone, before_seq bigint, max_rows integer, max_scan integer) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.search_jobs(queue text, status text, task text, payload_contains jsonb, error_contains text, submission_prefix text, since timestamp with time zone, until timestamp with time zone, before_seq bigint, max_rows integer, max_scan integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.set_pid(job_id text, owner_id text, generation bigint, claim_token text, pid integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.set_pid(job_id text, owner_id text, generation bigint, claim_token text, pid integer) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.set_pid(job_id text, owner_id text, generation bigint, claim_token text, pid integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.set_queue_history(queue text, enabled boolean, retention interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.set_queue_history(queue text, enabled boolean, retention interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.set_queue_limits(queue text, max_claimed integer, max_claimed_per_key integer, rate_limit integer, rate_period interval) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.set_queue_limits(queue text, max_claimed integer, max_claimed_per_key integer, rate_limit integer, rate_period interval) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.set_queue_notify(queue text, notify boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.set_queue_notify(queue text, notify boolean) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.set_queue_notify_done(queue text, notify boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.set_queue_notify_done(queue text, notify boolean) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.set_schedule(schedule text, queue text, task text, cron text, payload jsonb, time_zone text, priority integer, max_attempts integer, active_key text, paused boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.set_schedule(schedule text, queue text, task text, cron text, payload jsonb, time_zone text, priority integer, max_attempts integer, active_key text, paused boolean) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) TO fenceq_producer;
GRANT ALL ON FUNCTION fenceq.submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.submit(queue text, task text, payload jsonb, submission_id text, job_id text, priority integer, run_at timestamp with time zone, expires_at timestamp with time zone, max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[]) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.submit_batch(queue text, requests jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.submit_batch(queue text, requests jsonb) TO fenceq_producer;
GRANT ALL ON FUNCTION fenceq.submit_batch(queue text, requests jsonb) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.submit_batch(queue text, requests jsonb) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.tick(max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.tick(max_rows integer) TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.tick(max_rows integer) TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.verify_schema() FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.verify_schema() TO fenceq_admin;

REVOKE ALL ON FUNCTION fenceq.version() FROM PUBLIC;
GRANT ALL ON FUNCTION fenceq.version() TO fenceq_producer;
GRANT ALL ON FUNCTION fenceq.version() TO fenceq_worker;
GRANT ALL ON FUNCTION fenceq.version() TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.attempts TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.attempts TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.checkpoints TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.checkpoints TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.dead_letters TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.dead_letters TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.dependencies TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.dependencies TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.dispatches TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.dispatches TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.locks TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.locks TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.queue_stats TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.queue_stats TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.schedules TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.schedules TO fenceq_admin;

GRANT SELECT ON TABLE fenceq.submissions TO fenceq_worker;
GRANT SELECT ON TABLE fenceq.submissions TO fenceq_admin;
