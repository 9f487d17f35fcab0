-- fenceq for PostgreSQL, part 1d (version 6): what external execution and
-- the job history keep. The functions that write these are parts 8a
-- (080_dispatch.sql) and 8b (082_history.sql); design: docs/design-v6.md.
--
-- Idempotent like part 1: every object is created only when missing. The
-- three _queues columns have constant defaults, so adding them rewrites no
-- row.

ALTER TABLE fenceq._queues
    -- Where a job requeued by reap (its lease lapsed) re-enters its priority.
    ADD COLUMN IF NOT EXISTS requeue_priority text COLLATE "C" NOT NULL DEFAULT 'keep'
        CONSTRAINT _queues_requeue_priority_check CHECK (requeue_priority IN ('keep', 'first', 'last')),
    -- Whether this queue's jobs write _events, and for how long purge keeps them.
    ADD COLUMN IF NOT EXISTS history boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS history_retention interval;

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

-- Events: one row per transition of a job whose queue has history on,
-- written by the function that makes the transition, in its transaction.
CREATE TABLE IF NOT EXISTS fenceq._events (
    job_id     text COLLATE "C" NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    queue      text COLLATE "C" NOT NULL,
    at         timestamptz NOT NULL,
    event      text COLLATE "C" NOT NULL,
    generation bigint,
    owner_id   text COLLATE "C",
    detail     jsonb NOT NULL,
    CONSTRAINT _events_pkey PRIMARY KEY (job_id, seq)
);
-- purge's retention: a queue's oldest events first.
CREATE INDEX IF NOT EXISTS _events_queue_at_idx ON fenceq._events (queue, at);
