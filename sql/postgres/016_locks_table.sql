-- fenceq for PostgreSQL, part 1: the named locks (version 3,
-- docs/guarantees.md §15).
--
-- What it holds: one row per lock name ever acquired. A release clears
-- owner_id and expires_at but keeps the row and its token, so that the
-- lock's fencing tokens only rise, across releases too. A row is held while
-- owner_id is set and expires_at is after now.
-- Who writes it: acquire_lock, renew_lock and release_lock (056_locks.sql).
CREATE TABLE IF NOT EXISTS fenceq._locks (
    lock       text COLLATE "C" NOT NULL,
    owner_id   text COLLATE "C",
    token      bigint NOT NULL,
    expires_at timestamptz,
    CONSTRAINT _locks_pkey PRIMARY KEY (lock),
    CONSTRAINT _locks_token_check CHECK (token >= 0),
    CONSTRAINT _locks_holder_check CHECK ((owner_id IS NULL) = (expires_at IS NULL))
);
