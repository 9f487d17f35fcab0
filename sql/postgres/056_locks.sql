-- fenceq for PostgreSQL, part 5: named locks with fencing tokens
-- (docs/guarantees.md §15).
--
-- A named lock is one row of fenceq._locks: for work that must run once at
-- a time (a nightly report, a migration, maintenance), with the guarantee a
-- claim gives a job. acquire_lock hands out a fencing token; every token of
-- a lock is larger than the one before, across releases too, because a
-- released lock keeps its row and its last token. A holder fences writes to
-- its own tables by calling check_lock in the same transaction.
--
-- Row locks, and why each function takes the mode it does:
-- - acquire_lock locks the row FOR UPDATE, the one mode that conflicts with
--   FOR KEY SHARE: it waits for every transaction in which check_lock
--   answered, so that no token is handed on while a fenced transaction of
--   the holder may still commit. It must stay FOR UPDATE: the UPDATE alone
--   changes no key column and would take only FOR NO KEY UPDATE, which a
--   key-share lock does not block.
-- - check_lock locks the row FOR KEY SHARE, which only FOR UPDATE (that is,
--   acquire_lock) waits for, until the caller's transaction ends.
-- - renew_lock and release_lock lock the row FOR NO KEY UPDATE, which does
--   not wait for check_lock: the holder's renewals (typically on another
--   connection) never queue behind its own fenced transactions, so a long
--   fenced transaction cannot make the lock lapse. That is safe: neither
--   hands out a token, and a key-share lock carries over to the row version
--   they write, so an acquire after a release still waits for the
--   transactions in which check_lock answered.
-- Each function judges the lock on clock_timestamp() read after its row
-- lock is held, so a wait for the lock past expiry can never authorise
-- anything. Like every function, they are specified under READ COMMITTED;
-- under REPEATABLE READ or SERIALIZABLE a row lock on a lock that changed
-- since the transaction's snapshot fails with 40001.

-- _check_lock_token: a fencing token is a positive bigint (QF104).
CREATE OR REPLACE FUNCTION fenceq._check_lock_token(token bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF _check_lock_token.token IS NULL OR _check_lock_token.token < 1 THEN
        PERFORM fenceq._raise('QF104', 'token must be a positive integer');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_lock_token(bigint) IS
    'Private. Refuse (QF104) a NULL fencing token or one below 1.';

-- _hold_lock: the preamble of renew_lock and release_lock. Locks the lock's
-- row FOR NO KEY UPDATE, which does not wait for check_lock (see the top of
-- this file), then reads clock_timestamp(): that reading when owner_id
-- holds the lock live with token, else NULL. The row lock is held until the
-- caller's transaction ends.
CREATE OR REPLACE FUNCTION fenceq._hold_lock(lock text, owner_id text, token bigint)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_lock fenceq._locks;
    v_now timestamptz;
BEGIN
    SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = _hold_lock.lock FOR NO KEY UPDATE;
    v_now := clock_timestamp();  -- read after the row lock is held
    IF v_lock.owner_id = _hold_lock.owner_id AND v_lock.token = _hold_lock.token AND v_lock.expires_at > v_now THEN
        RETURN v_now;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION fenceq._hold_lock(text, text, bigint) IS
    'Private. Lock a named lock''s row, then judge the hold on a clock read after the lock: that reading when this owner holds it live with this token, else NULL.';

-- acquire_lock: take a named lock for ttl, or renew it for its live holder.
-- Answers the fencing token when the lock is free, released, lapsed (judged
-- on the clock read after the row lock), or already held live by this
-- owner (then renewed to now + ttl, with the same token); NULL, changing
-- nothing, while another owner holds it live. A taken lock gets the
-- previous token + 1 (the first acquire of a name gets 1), also when the
-- same owner takes back a lock that lapsed; QF304 when that would pass the
-- largest bigint. Idempotent for the live holder: repeating the call
-- renews and answers the same token.
-- Locking: the lock's row FOR UPDATE, never a weaker mode (docs/guarantees.md
-- §15), so it waits for transactions in which check_lock answered. The first
-- acquire of a name inserts its row; concurrent first acquires insert one
-- row between them (ON CONFLICT: the later ones wait for the first one's
-- transaction, then lock its row).
CREATE OR REPLACE FUNCTION fenceq.acquire_lock(lock text, owner_id text, ttl interval)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_lock fenceq._locks;
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(acquire_lock.lock, 'lock');
    PERFORM fenceq._check_name(acquire_lock.owner_id, 'owner_id');
    PERFORM fenceq._check_interval(acquire_lock.ttl, 'ttl', nullable => false);
    SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = acquire_lock.lock FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fenceq._locks AS l (lock, token) VALUES (acquire_lock.lock, 0)
        ON CONFLICT (lock) DO NOTHING;
        SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = acquire_lock.lock FOR UPDATE;
    END IF;
    v_now := clock_timestamp();  -- read after the row lock is held
    IF v_lock.expires_at > v_now THEN
        IF v_lock.owner_id <> acquire_lock.owner_id THEN
            RETURN NULL;
        END IF;
        UPDATE fenceq._locks AS l SET expires_at = v_now + acquire_lock.ttl WHERE l.lock = acquire_lock.lock;
        RETURN v_lock.token;
    END IF;
    IF v_lock.token = 9223372036854775807 THEN
        PERFORM fenceq._raise('QF304', 'the lock''s token is exhausted');
    END IF;
    UPDATE fenceq._locks AS l
       SET owner_id = acquire_lock.owner_id, token = l.token + 1, expires_at = v_now + acquire_lock.ttl
     WHERE l.lock = acquire_lock.lock
    RETURNING l.token INTO v_lock.token;
    RETURN v_lock.token;
END
$$;
COMMENT ON FUNCTION fenceq.acquire_lock(text, text, interval) IS
    'Take a named lock for ttl: its new fencing token (larger than every earlier one), the same token renewed for its live holder, or NULL while another owner holds it. QF304 when the token is exhausted.';

-- renew_lock: extend a live hold to now + ttl. True while this owner holds
-- the lock live with this token; false, changing nothing, once the hold
-- lapsed (also when nobody took the lock since: a lapsed hold is over, take
-- the lock again with acquire_lock for a new token), after a release, or
-- for another owner or token.
-- Locking: the lock's row FOR NO KEY UPDATE, which does not wait for
-- check_lock (docs/guarantees.md §15).
CREATE OR REPLACE FUNCTION fenceq.renew_lock(lock text, owner_id text, token bigint, ttl interval)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM fenceq._check_name(renew_lock.lock, 'lock');
    PERFORM fenceq._check_name(renew_lock.owner_id, 'owner_id');
    PERFORM fenceq._check_lock_token(renew_lock.token);
    PERFORM fenceq._check_interval(renew_lock.ttl, 'ttl', nullable => false);
    v_now := fenceq._hold_lock(renew_lock.lock, renew_lock.owner_id, renew_lock.token);
    IF v_now IS NULL THEN
        RETURN false;
    END IF;
    UPDATE fenceq._locks AS l SET expires_at = v_now + renew_lock.ttl WHERE l.lock = renew_lock.lock;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.renew_lock(text, text, bigint, interval) IS
    'Extend a live hold of a named lock to now + ttl. True while this owner holds it live with this token; false once lapsed, released or taken over.';

-- release_lock: end a live hold at once. True when this owner held the
-- lock live with this token: the lock is free, and keeps its token so that
-- the next acquire answers a larger one. False, changing nothing, for a
-- lapsed hold, a second release, or another owner or token.
-- Locking: the lock's row FOR NO KEY UPDATE, which does not wait for
-- check_lock; the next acquire still does (docs/guarantees.md §15).
CREATE OR REPLACE FUNCTION fenceq.release_lock(lock text, owner_id text, token bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(release_lock.lock, 'lock');
    PERFORM fenceq._check_name(release_lock.owner_id, 'owner_id');
    PERFORM fenceq._check_lock_token(release_lock.token);
    IF fenceq._hold_lock(release_lock.lock, release_lock.owner_id, release_lock.token) IS NULL THEN
        RETURN false;
    END IF;
    UPDATE fenceq._locks AS l SET owner_id = NULL, expires_at = NULL WHERE l.lock = release_lock.lock;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.release_lock(text, text, bigint) IS
    'Release a live hold of a named lock; the lock keeps its token, so the next acquire answers a larger one. True when released; false when lapsed, released already or taken over.';

-- check_lock: the fence for a holder's own writes. True while the token is
-- the live holder's (judged on the clock read after the row lock); false
-- for an unknown lock, a released or lapsed hold, or a stale token. Either
-- way the lock's row stays locked until the caller's transaction ends, so
-- no owner can acquire the lock (and no larger token can exist) before the
-- caller's writes in that transaction commit or roll back: call it in the
-- transaction that writes, before the writes, and commit them only on true.
-- Changes nothing. In autocommit its answer is only a snapshot.
-- Locking: the lock's row FOR KEY SHARE, which acquire_lock's FOR UPDATE
-- waits for; renew_lock and release_lock do not (docs/guarantees.md §15).
-- It waits for an acquire in progress and answers on its outcome.
CREATE OR REPLACE FUNCTION fenceq.check_lock(lock text, token bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_lock fenceq._locks;
BEGIN
    PERFORM fenceq._check_name(check_lock.lock, 'lock');
    PERFORM fenceq._check_lock_token(check_lock.token);
    SELECT * INTO v_lock FROM fenceq._locks AS l WHERE l.lock = check_lock.lock FOR KEY SHARE;
    -- The clock is read here, after the row lock is held.
    RETURN coalesce(v_lock.token = check_lock.token AND v_lock.expires_at > clock_timestamp(), false);
END
$$;
COMMENT ON FUNCTION fenceq.check_lock(text, bigint) IS
    'True while the token is the live holder''s of a named lock. Holds the lock row until the caller''s transaction ends, so no owner acquires it meanwhile: call it in the transaction that makes the fenced writes.';

-- Named locks as they stand: a lock is held while owner_id is set and
-- expires_at is after now; a released lock shows NULLs there and its last
-- token. Columns are only ever appended (docs/guarantees.md §3).
CREATE OR REPLACE VIEW fenceq.locks AS
SELECT l.lock, l.owner_id, l.token, l.expires_at
  FROM fenceq._locks AS l;
COMMENT ON VIEW fenceq.locks IS
    'Every named lock ever acquired: its holder and expiry (NULL once released; a past expiry has lapsed) and its last fencing token.';
