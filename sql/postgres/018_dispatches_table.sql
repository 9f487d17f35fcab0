-- fenceq for PostgreSQL, part 1: external execution (version 6,
-- docs/design-v6.md, docs/guarantees.md §19).
--
-- What it holds: the dispatches, below.
-- Who writes it: reserve_dispatch, finalize_dispatch, replace_dispatch_ref,
-- release_dispatch, adopt_dispatch and dispatch_repair_candidates (part 8a,
-- 080_dispatch.sql); purge (060_operators.sql) deletes a job's row with
-- the job. reap (053_reap.sql) and release (052_settle.sql) read it.

-- Dispatches: a claim's reservation of work in an external system, then the
-- external system's id for it. Live while its job is claimed at the same
-- generation (an adoption moves the generation along); a settled job leaves
-- its row behind unread, so no settling path writes here. release_dispatch
-- deletes a row; purge deletes it with its job.
CREATE TABLE IF NOT EXISTS fenceq._dispatches (
    job_id          text COLLATE "C" NOT NULL,
    backend         text COLLATE "C" NOT NULL,
    generation      bigint NOT NULL,
    state           text COLLATE "C" NOT NULL,
    reservation_ref text COLLATE "C" NOT NULL,
    execution_ref   text COLLATE "C",
    reserved_at     timestamptz NOT NULL,
    finalized_at    timestamptz,
    checked_at      timestamptz,
    CONSTRAINT _dispatches_pkey PRIMARY KEY (job_id),
    CONSTRAINT _dispatches_state_check CHECK (
        (state = 'reserved' AND execution_ref IS NULL) OR (state = 'running' AND execution_ref IS NOT NULL))
);
-- dispatch_repair_candidates reads one backend's rows.
CREATE INDEX IF NOT EXISTS _dispatches_backend_idx ON fenceq._dispatches (backend);
