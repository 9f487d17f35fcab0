-- fenceq for PostgreSQL, part 1b: what version 3 adds to the tables of
-- part 1.
--
-- Columns are appended with ALTER TABLE ... ADD COLUMN IF NOT EXISTS, never
-- written into part 1's CREATE TABLE, so that a fresh install and an upgrade
-- from version 2 build the same tables column for column. Every added column
-- is nullable or has a constant default: adding it rewrites no row and holds
-- its table's ACCESS EXCLUSIVE lock only for the catalog change.
-- Idempotent like part 1.

-- Flow control (docs/guarantees.md §12): per-queue limits, NULL = no limit.
ALTER TABLE fenceq._queues
    ADD COLUMN IF NOT EXISTS max_claimed integer,
    ADD COLUMN IF NOT EXISTS max_claimed_per_key integer,
    ADD COLUMN IF NOT EXISTS rate_limit integer,
    ADD COLUMN IF NOT EXISTS rate_period interval;

-- A job's concurrency key: max_claimed_per_key counts claimed jobs per key.
ALTER TABLE fenceq._jobs
    ADD COLUMN IF NOT EXISTS concurrency_key text COLLATE "C";

-- Waiting for results and fenced progress (docs/guarantees.md §17): whether
-- a queue's terminal transitions notify fenceq_done (off by default: a
-- notifying commit serialises, §11), and a claimed job's latest progress
-- report. progress and progress_at are written by heartbeat-like updates:
-- no index may cover them, so that those stay HOT.
ALTER TABLE fenceq._queues
    ADD COLUMN IF NOT EXISTS notify_done boolean NOT NULL DEFAULT false;
ALTER TABLE fenceq._jobs
    ADD COLUMN IF NOT EXISTS progress jsonb,
    ADD COLUMN IF NOT EXISTS progress_at timestamptz;
