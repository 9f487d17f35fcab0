-- fenceq for PostgreSQL, part 1: the queues table.
--
-- What it holds: one row per queue, a named lane with its defaults for the
-- jobs submitted to it, its flow-control limits and its switches.
-- Who writes it: the queue functions of part 3 (030_queues.sql:
-- create_queue, alter_queue, pause_queue, resume_queue, set_queue_notify,
-- set_queue_limits), set_queue_notify_done (058_progress.sql) and
-- set_queue_history (082_history.sql). The hot path only reads it.
--
-- Jobs reference queues by name with no foreign key: an FK would share-lock
-- the queue row on every insert (multixact churn under load,
-- docs/guarantees.md §11).
CREATE TABLE IF NOT EXISTS fenceq._queues (
    queue          text COLLATE "C" NOT NULL,
    lease          interval NOT NULL,
    max_attempts   integer NOT NULL,
    backoff_base   interval NOT NULL,
    backoff_factor double precision NOT NULL,
    backoff_max    interval NOT NULL,
    dead_letter    boolean NOT NULL,
    paused         boolean NOT NULL DEFAULT false,
    notify         boolean NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL,
    -- Flow control (version 3, docs/guarantees.md §12): per-queue limits,
    -- NULL = no limit. Claims count them (_pick_limited).
    max_claimed         integer,
    max_claimed_per_key integer,
    rate_limit          integer,
    rate_period         interval,
    -- Waiting for results (version 4, docs/guarantees.md §17): whether the
    -- queue's terminal transitions notify fenceq_done (off by default: a
    -- notifying commit serialises, §11).
    notify_done    boolean NOT NULL DEFAULT false,
    -- Version 6: where a job requeued by reap (its lease lapsed) re-enters
    -- its priority.
    requeue_priority text COLLATE "C" NOT NULL DEFAULT 'keep',
    -- Whether this queue's jobs write _events, and for how long purge keeps
    -- them (version 6, docs/guarantees.md §20).
    history           boolean NOT NULL DEFAULT false,
    history_retention interval,
    CONSTRAINT _queues_pkey PRIMARY KEY (queue),
    CONSTRAINT _queues_requeue_priority_check CHECK (requeue_priority IN ('keep', 'first', 'last'))
);
