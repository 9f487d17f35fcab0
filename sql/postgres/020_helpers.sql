-- fenceq for PostgreSQL, part 2: private helpers.
--
-- Validation helpers raise QF1xx codes with messages that name the parameter,
-- never its value (docs/guarantees.md §2). Every function in the schema is SECURITY
-- DEFINER with a pinned search_path, so nothing on a caller's search_path can
-- shadow what it uses, and grants can be added without touching bodies.

-- _raise: raise a fenceq error. Inside submit_batch the element index being
-- processed is kept in the transaction-local setting fenceq.batch_index and
-- reported in DETAIL (an index, never content).
CREATE OR REPLACE FUNCTION fenceq._raise(code text, message text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._raise(text, text) IS
    'Private. Raise a fenceq error with the given QF SQLSTATE; adds the submit_batch element index to DETAIL.';

-- _check_name: an id or name must be a non-empty string of at most
-- max_length characters (docs/guarantees.md §2). NULL passes only when nullable.
CREATE OR REPLACE FUNCTION fenceq._check_name(
    value text, what text, max_length integer DEFAULT 255,
    nullable boolean DEFAULT false, code text DEFAULT 'QF102')
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._check_name(text, text, integer, boolean, text) IS
    'Private. Refuse (QF102 by default) a NULL, empty or over-long id or name.';

-- _check_names: _check_name for every element of an array; the array itself
-- must be non-NULL, non-empty and hold at most 10,000 elements (QF100).
CREATE OR REPLACE FUNCTION fenceq._check_names(names text[], what text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._check_names(text[], text) IS
    'Private. Refuse a NULL, empty or oversized array (QF100) or a bad element (QF102).';

-- _check_fence: the four fence parts must be well formed (QF106). Whether the
-- fence is live is decided later, under the row lock.
CREATE OR REPLACE FUNCTION fenceq._check_fence(
    job_id text, owner_id text, generation bigint, claim_token text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._check_fence(text, text, bigint, text) IS
    'Private. Refuse (QF106) a fence with an empty or over-long part or a generation below 1.';

-- _check_interval: a duration must be positive (or >= 0 when allow_zero),
-- have no month or day part (so no daylight-saving arithmetic applies), and
-- be short enough that now + value (or, with backwards, now - value) stays
-- within years 0001-9999, so no timestamp computed from it can overflow.
-- A missing required duration is QF100; a bad one QF105.
CREATE OR REPLACE FUNCTION fenceq._check_interval(
    value interval, what text, allow_zero boolean DEFAULT false, nullable boolean DEFAULT true,
    backwards boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._check_interval(interval, text, boolean, boolean, boolean) IS
    'Private. Refuse (QF105) a negative or zero interval, one with month or day parts, or one reaching past years 0001-9999; QF100 when a required one is missing.';

-- _check_time: timestamps must be finite and within years 0001-9999 UTC.
CREATE OR REPLACE FUNCTION fenceq._check_time(value timestamptz, what text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF _check_time.value IS NOT NULL AND (
        _check_time.value < timestamptz '0001-01-01 00:00:00+00'
        OR _check_time.value >= timestamptz '10000-01-01 00:00:00+00') THEN
        PERFORM fenceq._raise('QF105', _check_time.what || ' must be within years 0001-9999 UTC');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_time(timestamptz, text) IS
    'Private. Refuse (QF105) an infinite timestamp or one outside years 0001-9999 UTC.';

-- _canonical_json: the canonical JSON text of a jsonb value (docs/guarantees.md §4):
-- keys sorted by code point (COLLATE "C" on UTF-8 bytes), no spaces, strings
-- escaped and numbers printed as jsonb prints them. NULL gives 'null'.
CREATE OR REPLACE FUNCTION fenceq._canonical_json(value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
-- PL/pgSQL rather than SQL: its statement plans are cached for the session,
-- where a non-inlined SQL function is planned again on every call.
-- Scalars are spelled inline; only nested containers recurse.
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
COMMENT ON FUNCTION fenceq._canonical_json(jsonb) IS
    'Private. Canonical JSON text (sorted keys by code point, compact separators) used for fingerprints and size limits.';

-- _check_json: finite JSON (jsonb already refuses NaN, Infinity and \u0000)
-- nested at most 128 containers deep, of at most 1 MiB of UTF-8 in
-- canonical form. The depth bound keeps _canonical_json (one recursion per
-- level) far from the stack limit, and the client checks the same bound.
-- jsonb's own text is never shorter than the canonical form, so it is a
-- cheap first test of the size.
CREATE OR REPLACE FUNCTION fenceq._check_json(value jsonb, what text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
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
$$;
COMMENT ON FUNCTION fenceq._check_json(jsonb, text) IS
    'Private. Refuse (QF103) JSON nested more than 128 levels deep or larger than 1 MiB in canonical form.';

-- _fingerprint: 'fq1:' || SHA-256 of the canonical JSON of every submit
-- parameter as authored (docs/guarantees.md §4). NULLs stay null.
CREATE OR REPLACE FUNCTION fenceq._fingerprint(
    queue text, task text, payload jsonb, submission_id text, job_id text,
    priority integer, run_at timestamptz, expires_at timestamptz,
    max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[])
RETURNS text
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN fenceq._fingerprint_of(_fingerprint.queue, _fingerprint.task,
        fenceq._canonical_json(_fingerprint.payload), _fingerprint.submission_id, _fingerprint.job_id,
        _fingerprint.priority, _fingerprint.run_at, _fingerprint.expires_at, _fingerprint.max_attempts,
        _fingerprint.active_key, _fingerprint.force, _fingerprint.concurrency_key, _fingerprint.depends_on);
END
$$;
COMMENT ON FUNCTION fenceq._fingerprint(text, text, jsonb, text, text, integer, timestamptz, timestamptz, integer, text, boolean, text, text[]) IS
    'Private. The versioned submission fingerprint (fq1:sha256 of the canonical request document).';

-- _backoff: LEAST(base * factor^(attempt-1), max), computed in logarithms
-- first so that a large attempt count can never overflow.
CREATE OR REPLACE FUNCTION fenceq._backoff(
    attempt integer, base interval, factor double precision, max interval)
RETURNS interval
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._backoff(integer, interval, double precision, interval) IS
    'Private. Retry delay for an attempt: LEAST(base * factor^(attempt-1), max), overflow-free.';

-- _notify_jobs: a fenceq_jobs hint that work became due in a queue, when the
-- queue notifies (a notifying commit takes a cluster-wide lock: §11).
CREATE OR REPLACE FUNCTION fenceq._notify_jobs(queue text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = _notify_jobs.queue AND q.notify) THEN
        PERFORM pg_notify('fenceq_jobs', _notify_jobs.queue);
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._notify_jobs(text) IS
    'Private. Send a fenceq_jobs notification for a queue whose notify flag is on.';

-- _lock_identities: take transaction-scoped advisory locks on identity keys
-- (active keys, explicit job ids, submission ids) in one global order (by
-- hash), so that submits and batches touching the same identities serialise
-- instead of deadlocking, whatever order their requests come in.
CREATE OR REPLACE FUNCTION fenceq._lock_identities(keys text[])
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._lock_identities(text[]) IS
    'Private. Advisory transaction locks on identity keys, taken in hash order so concurrent submits never deadlock.';

-- _identity_keys: the lock keys of one submission (see _lock_identities).
CREATE OR REPLACE FUNCTION fenceq._identity_keys(
    queue text, active_key text, job_id text, submission_id text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN ARRAY['fenceq.key:' || _identity_keys.queue || E'\x1f' || _identity_keys.active_key,
                 'fenceq.job:' || _identity_keys.job_id,
                 'fenceq.submission:' || _identity_keys.submission_id];
END
$$;
COMMENT ON FUNCTION fenceq._identity_keys(text, text, text, text) IS
    'Private. The advisory lock keys of a submission: its active key, explicit job id and submission id.';

-- _is_plain_duration: whether a duration needs no closer look: NULL, or
-- positive, without month or day parts, and under a million hours (so now +
-- value stays within years 0001-9999). Hot functions test their arguments
-- with it in one expression and leave anything else to _check_interval,
-- which names the problem.
-- Deliberately a plain SQL function: not SECURITY DEFINER and with no SET
-- clause, so the planner inlines it into the calling statement at no cost
-- (a nested PL/pgSQL call would cost more than the check). Such helpers
-- read no table, run only inside callers that pin search_path, are granted
-- to no role, and have SQL-standard bodies bound at creation to pg_catalog
-- (part 1 installs on that search_path); verify_schema admits exactly these
-- helpers, by name, in exactly this shape.
CREATE OR REPLACE FUNCTION fenceq._is_plain_duration(value interval)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN value IS NULL
    OR (value > interval '0' AND value < interval '1000000 hours'
        AND pg_catalog.date_part('year', value) = 0 AND pg_catalog.date_part('month', value) = 0
        AND pg_catalog.date_part('day', value) = 0);
COMMENT ON FUNCTION fenceq._is_plain_duration(interval) IS
    'Private, inlined. True for NULL or a positive duration without month or day parts under a million hours.';

-- _is_plain_fence: whether the four fence parts are well formed (NULL when
-- a part is NULL); _check_fence names what is wrong. Inlined, as
-- _is_plain_duration is.
CREATE OR REPLACE FUNCTION fenceq._is_plain_fence(
    job_id text, owner_id text, generation bigint, claim_token text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN pg_catalog.length(job_id) BETWEEN 1 AND 36 AND pg_catalog.length(owner_id) BETWEEN 1 AND 255
   AND pg_catalog.length(claim_token) BETWEEN 1 AND 255 AND generation >= 1;
COMMENT ON FUNCTION fenceq._is_plain_fence(text, text, bigint, text) IS
    'Private, inlined. True for a well-formed fence; NULL when a part is NULL.';

-- _is_plain_json: whether a JSON value needs no closer look: NULL, or
-- nested less than 128 containers deep with a jsonb text of at most 1 MiB
-- (never shorter than the canonical form). Anything else goes to
-- _check_json, which measures the canonical form. Inlined, as
-- _is_plain_duration is.
CREATE OR REPLACE FUNCTION fenceq._is_plain_json(value jsonb)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN value IS NULL
    OR (NOT pg_catalog.jsonb_path_exists(value,
            'strict $.**{128} ? (@.type() == "object" || @.type() == "array")')
        AND pg_catalog.octet_length(value::text) <= 1048576);
COMMENT ON FUNCTION fenceq._is_plain_json(jsonb) IS
    'Private, inlined. True for NULL or JSON under the depth and size bounds by a cheap measure.';

-- _new_job_id: a generated job id, a version 7 UUID (RFC 9562): 48 bits of
-- Unix milliseconds, then random bits. Ids made close in time sort close,
-- so the job table's primary key grows at its right edge instead of
-- touching a random leaf (and writing a full-page image of it after each
-- checkpoint) for every insert and every non-HOT update. Inlined, as
-- _is_plain_duration is (volatile, as its body is).
CREATE OR REPLACE FUNCTION fenceq._new_job_id()
RETURNS text
LANGUAGE sql
VOLATILE
RETURN encode(set_bit(set_bit(
           overlay(uuid_send(gen_random_uuid())
                   PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                   FROM 1 FOR 6),
           52, 1), 53, 1), 'hex')::uuid::text;
COMMENT ON FUNCTION fenceq._new_job_id() IS
    'Private, inlined. A new job id: a time-ordered version 7 UUID as text.';

-- _new_job_ids: n new job ids for one submit_batch, made set-wise (version
-- 5): version 7 UUIDs that share one clock reading (48 bits of Unix
-- milliseconds) and 26 random bits, and end in a 48-bit counter that starts
-- at a random 44-bit value (RFC 9562's fixed-length counter method), so
-- they sort in batch order. One random UUID per batch instead of one per
-- job: _new_job_id per row cost 3.5 ms of a 13.9 ms batch of 1,000.
-- Ids of two batches in the same millisecond differ unless 70 random bits
-- agree; a collision is refused like any taken id (QF203).
CREATE OR REPLACE FUNCTION fenceq._new_job_ids(n integer)
RETURNS text[]
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
RETURN (SELECT coalesce(array_agg(b.prefix || lpad(to_hex(b.start + g.i), 12, '0') ORDER BY g.i), '{}')
          FROM (SELECT overlay(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
                               PLACING '-' FROM 9 FOR 0)
                       || '-7' || substring(r.uuid FROM 16 FOR 9) AS prefix,
                       ('x' || substring(r.uuid FROM 26 FOR 11))::bit(44)::bigint AS start
                  FROM (SELECT gen_random_uuid()::text AS uuid) AS r) AS b,
               generate_series(1, n) AS g(i));
COMMENT ON FUNCTION fenceq._new_job_ids(integer) IS
    'Private. n new job ids for one batch: version 7 UUIDs as text sharing a clock reading, in batch order.';

-- _is_plain_time: whether a timestamp needs no closer look: NULL, or within
-- years 0001-9999 UTC (infinity is not). _check_time names what is wrong.
-- Inlined, as _is_plain_duration is.
CREATE OR REPLACE FUNCTION fenceq._is_plain_time(value timestamptz)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN value IS NULL
    OR (value >= timestamptz '0001-01-01 00:00:00+00' AND value < timestamptz '10000-01-01 00:00:00+00');
COMMENT ON FUNCTION fenceq._is_plain_time(timestamptz) IS
    'Private, inlined. True for NULL or a timestamp within years 0001-9999 UTC.';

-- _is_plain_json_int: whether a submit_batch field needs no closer look:
-- absent, JSON null, or a JSON integer from min to 2^31-1. _json_int names
-- what is wrong. Inlined, as _is_plain_duration is.
CREATE OR REPLACE FUNCTION fenceq._is_plain_json_int(value jsonb, min integer)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE jsonb_typeof(value)
           WHEN 'number' THEN (value #>> '{}')::numeric BETWEEN min AND 2147483647
                              AND (value #>> '{}')::numeric = trunc((value #>> '{}')::numeric)
           ELSE coalesce(jsonb_typeof(value) = 'null', true) END;
COMMENT ON FUNCTION fenceq._is_plain_json_int(jsonb, integer) IS
    'Private, inlined. True for an absent or null field or a JSON integer from min to 2^31-1.';

-- _fingerprint_of: the fingerprint document, spelled once: 'fq1:' ||
-- SHA-256 of the canonical JSON of a request whose payload is given already
-- in canonical text (_fingerprint canonicalises it; submit_batch's owned
-- path does so for a whole batch in one statement). Timestamps as UTC
-- 'YYYY-MM-DDTHH:MM:SS.ffffffZ' (six fractional digits). Inlined, as
-- _is_plain_duration is.
CREATE OR REPLACE FUNCTION fenceq._fingerprint_of(
    queue text, task text, canonical_payload text, submission_id text, job_id text,
    priority integer, run_at timestamptz, expires_at timestamptz,
    max_attempts integer, active_key text, force boolean, concurrency_key text, depends_on text[])
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
RETURN 'fq1:' || encode(sha256(convert_to(
    '{"active_key":' || coalesce(to_json(active_key)::text, 'null')
    -- Parameters added after version 1 enter the document only when not
    -- NULL, so every earlier request keeps its fingerprint.
    || CASE WHEN concurrency_key IS NULL THEN '' ELSE ',"concurrency_key":' || to_json(concurrency_key)::text END
    || CASE WHEN depends_on IS NULL THEN '' ELSE ',"depends_on":' || to_json(depends_on)::text END
    || ',"expires_at":' || CASE WHEN expires_at IS NULL THEN 'null' ELSE to_json(to_char(
           expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text END
    || ',"force":' || CASE WHEN coalesce(force, false) THEN 'true' ELSE 'false' END
    || ',"job_id":' || coalesce(to_json(job_id)::text, 'null')
    || ',"max_attempts":' || coalesce(max_attempts::text, 'null')
    || ',"payload":' || canonical_payload
    || ',"priority":' || coalesce(priority::text, 'null')
    || ',"queue":' || to_json(queue)::text
    || ',"run_at":' || CASE WHEN run_at IS NULL THEN 'null' ELSE to_json(to_char(
           run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text END
    || ',"submission_id":' || to_json(submission_id)::text
    || ',"task":' || to_json(task)::text
    || ',"v":1}', 'UTF8')), 'hex');
COMMENT ON FUNCTION fenceq._fingerprint_of(text, text, text, text, text, integer, timestamptz, timestamptz, integer, text, boolean, text, text[]) IS
    'Private, inlined. The fingerprint of a request whose payload is given in canonical JSON text.';
