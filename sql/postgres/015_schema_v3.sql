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

-- Named locks (docs/guarantees.md §15): one row per lock name ever
-- acquired. A release clears owner_id and expires_at but keeps the row and
-- its token, so that the lock's fencing tokens only rise, across releases
-- too. A row is held while owner_id is set and expires_at is after now.
CREATE TABLE IF NOT EXISTS fenceq._locks (
    lock       text COLLATE "C" NOT NULL,
    owner_id   text COLLATE "C",
    token      bigint NOT NULL,
    expires_at timestamptz,
    CONSTRAINT _locks_pkey PRIMARY KEY (lock),
    CONSTRAINT _locks_token_check CHECK (token >= 0),
    CONSTRAINT _locks_holder_check CHECK ((owner_id IS NULL) = (expires_at IS NULL))
);
