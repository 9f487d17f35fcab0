-- fenceq for PostgreSQL, part 8a (version 6): external execution under a
-- fence (docs/guarantees.md §19, docs/design-v6.md, docs/external-execution.md).
-- What it holds: the calls a worker makes around work it hands to another
-- system (reserve, finalize, release, replace), the takeover of a lapsed
-- dispatch (adopt_dispatch), the reconciler's page of lapsed dispatches
-- and the dispatches view. Who writes _dispatches: only these functions,
-- and purge (with the job). reap (part 5) and release read it: a claim with
-- a live dispatch is never requeued.
--
-- A dispatch is live while its job is claimed at the dispatch's generation.
-- Every call here that takes a fence judges it as every fenced write does:
-- the job row locked first (_lock_live), then the clock read.

-- _live_dispatch: the live dispatch of a job whose row the caller holds
-- locked, or a row of NULLs.
CREATE OR REPLACE FUNCTION fenceq._live_dispatch(job fenceq._jobs)
RETURNS fenceq._dispatches
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq._live_dispatch(fenceq._jobs) IS
    'Private. The live dispatch (claimed at the same generation) of a locked job row, or NULLs.';

-- _check_ref: a reference sent to or received from an external system.
CREATE OR REPLACE FUNCTION fenceq._check_ref(value text, what text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    PERFORM fenceq._check_name(_check_ref.value, _check_ref.what, max_length => 1024);
END
$$;
COMMENT ON FUNCTION fenceq._check_ref(text, text) IS
    'Private. Refuse (QF102) a NULL, empty or over-long (1,024 characters) dispatch reference.';

-- reserve_dispatch: before calling an external system, record that this
-- live claim is about to start work there under reservation_ref (the
-- idempotency key the caller sends). From now on reap leaves the job
-- claimed and only adopt_dispatch takes it over.
-- True: reserved now, or already under this backend and ref (a retried
-- call; nothing written). False: the fence is not live or the job's cancel
-- is requested; nothing changed. QF305: the claim's live dispatch is for
-- another backend or under another ref (release_dispatch it first).
-- Locking: the job row (and the dispatch row it writes).
CREATE OR REPLACE FUNCTION fenceq.reserve_dispatch(
    job_id text, owner_id text, generation bigint, claim_token text,
    backend text, reservation_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq.reserve_dispatch(text, text, bigint, text, text, text) IS
    'Record that this live claim is about to start work in an external system under reservation_ref. True when reserved (or already so: a retry); false for a fence that is not live or a cancel-requested job; QF305 when the claim holds another dispatch.';

-- finalize_dispatch: the external system accepted the work: record its id.
-- True: the reservation under reservation_ref is now running as
-- execution_ref, or already was (a retried call; nothing written). False:
-- the fence is not live, there is no live dispatch, it was reserved under
-- another ref, or it runs under another execution ref (replace_dispatch_ref
-- moves it); nothing changed. A requested cancel does not refuse: the work
-- exists and must be recorded before it can be stopped.
-- Locking: the job row, then the dispatch row.
CREATE OR REPLACE FUNCTION fenceq.finalize_dispatch(
    job_id text, owner_id text, generation bigint, claim_token text,
    reservation_ref text, execution_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq.finalize_dispatch(text, text, bigint, text, text, text) IS
    'Record the external system''s execution_ref for this live claim''s reservation. True when recorded (or already so: a retry); false for a fence that is not live, no dispatch, or another reservation or execution ref.';

-- release_dispatch: the external call was never made: drop the
-- reservation. The claim stays live and may reserve again, or release,
-- complete or fail as usual. True when dropped; false when the fence is not
-- live or there is no reservation under reservation_ref (a running dispatch
-- is never released: its work exists). A requested cancel does not refuse.
-- Locking: the job row, then the dispatch row.
CREATE OR REPLACE FUNCTION fenceq.release_dispatch(
    job_id text, owner_id text, generation bigint, claim_token text, reservation_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq.release_dispatch(text, text, bigint, text, text) IS
    'Drop this live claim''s dispatch reservation because the external call was never made; the claim stays live. False for a fence that is not live, another ref, or a running dispatch.';

-- replace_dispatch_ref: the external system moved the work to another id.
-- True when the running dispatch's execution ref was expected_ref and is
-- now execution_ref, or already is execution_ref (a retried call; nothing
-- written). False otherwise (fence not live, no running dispatch, another
-- ref); nothing changed. A requested cancel does not refuse.
-- Locking: the job row, then the dispatch row.
CREATE OR REPLACE FUNCTION fenceq.replace_dispatch_ref(
    job_id text, owner_id text, generation bigint, claim_token text,
    expected_ref text, execution_ref text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq.replace_dispatch_ref(text, text, bigint, text, text, text) IS
    'Move this live claim''s running dispatch from expected_ref to execution_ref. True when moved (or already there: a retry); false otherwise.';

-- adopt_dispatch: take over a dispatched job whose claim lapsed, to
-- reconcile it with the external system. One claim row (the job stays
-- claimed; generation + 1 under the new owner and token, the attempt not
-- counted again, the lease from `lease` or the queue's, no budget) when the
-- job's lease has lapsed and its live dispatch is for `backend` with the
-- recorded ref (the reservation ref while reserved, the execution ref once
-- running) exactly expected_ref. No row otherwise: a live claim, another
-- backend or ref, no dispatch, an unknown job. The old fence is dead from
-- then on. QF301 for a used token, QF303 at the largest generation.
-- Locking: the job row, then the dispatch row; the clock is read after the
-- job row's lock.
CREATE OR REPLACE FUNCTION fenceq.adopt_dispatch(
    job_id text, backend text, expected_ref text, owner_id text, claim_token text,
    lease interval DEFAULT NULL)
RETURNS SETOF fenceq.claim
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq.adopt_dispatch(text, text, text, text, text, interval) IS
    'Take over a job whose dispatching claim lapsed, when its recorded ref is exactly expected_ref: one claim row (generation + 1, the attempt not counted again), else no row. QF301 for a used token.';

-- dispatch_repair_candidates: a bounded, fair page of one backend's live
-- dispatches whose claim lapsed, for a reconciler to adopt: never checked
-- first (by when the claim lapsed), then the oldest check, then job id.
-- Each row returned is marked checked now, so the next call pages onward;
-- a newer mark by a concurrent call is never overwritten, and rows another
-- call holds are skipped. Does not lock job rows.
CREATE OR REPLACE FUNCTION fenceq.dispatch_repair_candidates(backend text, max_rows integer DEFAULT 100)
RETURNS TABLE(job_id text, queue text, task text, state text, ref text, generation bigint,
              lapsed_at timestamptz, checked_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
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
COMMENT ON FUNCTION fenceq.dispatch_repair_candidates(text, integer) IS
    'A bounded, fair page (max_rows) of one backend''s dispatches whose claim lapsed, never-checked first; each returned row is marked checked now.';

-- dispatches: every live dispatch (its job claimed at its generation).
CREATE OR REPLACE VIEW fenceq.dispatches AS
SELECT j.job_id, j.queue, d.backend, d.state, d.reservation_ref, d.execution_ref, j.owner_id,
       j.generation, j.lease_expires_at, d.checked_at
  FROM fenceq._dispatches AS d
  JOIN fenceq._jobs AS j ON j.job_id = d.job_id
 WHERE j.status = 'claimed' AND j.generation = d.generation;
COMMENT ON VIEW fenceq.dispatches IS
    'One row per job whose dispatch to an external system is live (reserved or running, the job claimed at that generation).';
