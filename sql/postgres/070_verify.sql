-- fenceq for PostgreSQL, part 7: verify_schema, the admission check that
-- migrations run before they finish.

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
COMMENT ON FUNCTION fenceq.verify_schema() IS
    'Admission check of the deployed schema: encoding, column types, deterministic collations, exact unique identity indexes, the active-key and activity indexes, the public types and views, safe defaults, no triggers, SECURITY DEFINER with pinned search_path, no PUBLIC EXECUTE, no superuser owner. One row per check.';
