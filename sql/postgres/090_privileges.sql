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
-- A type's default lets PUBLIC use it; the private one (version 8) is the
-- functions' own.
REVOKE ALL ON TYPE fenceq._call_claim FROM PUBLIC;

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
            'claim_next', 'claim_batch', 'claim_jobs', 'recover_claim', 'heartbeat', 'heartbeat_batch', 'complete',
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
