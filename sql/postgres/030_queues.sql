-- fenceq for PostgreSQL, part 3: queues.

-- _check_queue_settings: the §2 rules for queue settings.
CREATE OR REPLACE FUNCTION fenceq._check_queue_settings(
    lease interval, max_attempts integer, backoff_base interval,
    backoff_factor double precision, backoff_max interval)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    PERFORM fenceq._check_interval(_check_queue_settings.lease, 'lease', nullable => false);
    PERFORM fenceq._check_interval(_check_queue_settings.backoff_base, 'backoff_base',
                                   allow_zero => true, nullable => false);
    PERFORM fenceq._check_interval(_check_queue_settings.backoff_max, 'backoff_max',
                                   allow_zero => true, nullable => false);
    IF _check_queue_settings.max_attempts IS NULL OR _check_queue_settings.max_attempts < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_attempts must be a positive integer');
    END IF;
    IF _check_queue_settings.backoff_factor IS NULL
       OR _check_queue_settings.backoff_factor = 'NaN'::double precision
       OR _check_queue_settings.backoff_factor = 'Infinity'::double precision
       OR _check_queue_settings.backoff_factor < 1 THEN
        PERFORM fenceq._raise('QF104', 'backoff_factor must be finite and at least 1');
    END IF;
    IF _check_queue_settings.backoff_max < _check_queue_settings.backoff_base THEN
        PERFORM fenceq._raise('QF105', 'backoff_max must not be less than backoff_base');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_queue_settings(interval, integer, interval, double precision, interval) IS
    'Private. Refuse queue settings that break the docs/guarantees.md §2 rules (QF104, QF105).';

-- _check_requeue_priority: where a job reap requeues re-enters (part 5's
-- _requeue_at): keep, first or last; NULL passes (each caller says what it
-- means).
CREATE OR REPLACE FUNCTION fenceq._check_requeue_priority(value text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    IF _check_requeue_priority.value NOT IN ('keep', 'first', 'last') THEN
        PERFORM fenceq._raise('QF100', 'requeue_priority must be keep, first or last');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._check_requeue_priority(text) IS
    'Private. Refuse (QF100) a requeue_priority other than keep, first or last.';

-- Version 6 appended requeue_priority to create_queue and alter_queue: the
-- version 5 signatures go (a function is never overloaded).
DROP FUNCTION IF EXISTS fenceq.create_queue(text, interval, integer, interval, double precision, interval, boolean);
DROP FUNCTION IF EXISTS fenceq.alter_queue(text, interval, integer, interval, double precision, interval, boolean);

-- create_queue: declare a queue.
-- Locking: inserts the queue row; a concurrent identical create waits for it.
-- Idempotent: true when created; false when it exists with exactly these
-- settings; QF100 when it exists with other settings (use alter_queue).
-- requeue_priority (version 6): NULL is 'keep' for a new queue and matches
-- any setting of an existing one, so callers written before it keep working
-- after an operator changed it.
CREATE OR REPLACE FUNCTION fenceq.create_queue(
    queue text,
    lease interval DEFAULT '30 seconds',
    max_attempts integer DEFAULT 5,
    backoff_base interval DEFAULT '1 second',
    backoff_factor double precision DEFAULT 2,
    backoff_max interval DEFAULT '1 hour',
    dead_letter boolean DEFAULT true,
    requeue_priority text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_existing fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(create_queue.queue, 'queue');
    PERFORM fenceq._check_queue_settings(create_queue.lease, create_queue.max_attempts,
        create_queue.backoff_base, create_queue.backoff_factor, create_queue.backoff_max);
    IF create_queue.dead_letter IS NULL THEN
        PERFORM fenceq._raise('QF100', 'dead_letter is required');
    END IF;
    PERFORM fenceq._check_requeue_priority(create_queue.requeue_priority);
    INSERT INTO fenceq._queues AS q (queue, lease, max_attempts, backoff_base, backoff_factor,
                                     backoff_max, dead_letter, created_at, requeue_priority)
    VALUES (create_queue.queue, create_queue.lease, create_queue.max_attempts,
            create_queue.backoff_base, create_queue.backoff_factor, create_queue.backoff_max,
            create_queue.dead_letter, clock_timestamp(), coalesce(create_queue.requeue_priority, 'keep'))
    ON CONFLICT (queue) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT * INTO v_existing FROM fenceq._queues AS q WHERE q.queue = create_queue.queue;
    IF v_existing.lease = create_queue.lease
       AND v_existing.max_attempts = create_queue.max_attempts
       AND v_existing.backoff_base = create_queue.backoff_base
       AND v_existing.backoff_factor = create_queue.backoff_factor
       AND v_existing.backoff_max = create_queue.backoff_max
       AND v_existing.dead_letter = create_queue.dead_letter
       AND v_existing.requeue_priority = coalesce(create_queue.requeue_priority, v_existing.requeue_priority) THEN
        RETURN false;
    END IF;
    PERFORM fenceq._raise('QF100', 'the queue exists with other settings; use alter_queue');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION fenceq.create_queue(text, interval, integer, interval, double precision, interval, boolean, text) IS
    'Declare a queue with its defaults. True when created, false when it already exists with exactly these settings; QF100 when it exists with others.';

-- alter_queue: change some settings; NULL leaves a setting unchanged. The
-- §2 rules apply to the settings as they are after the change.
-- Locking: the queue row, for the update.
CREATE OR REPLACE FUNCTION fenceq.alter_queue(
    queue text,
    lease interval DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_factor double precision DEFAULT NULL,
    backoff_max interval DEFAULT NULL,
    dead_letter boolean DEFAULT NULL,
    requeue_priority text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue fenceq._queues;
BEGIN
    PERFORM fenceq._check_name(alter_queue.queue, 'queue');
    PERFORM fenceq._check_requeue_priority(alter_queue.requeue_priority);
    SELECT * INTO v_queue FROM fenceq._queues AS q WHERE q.queue = alter_queue.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    v_queue.lease := coalesce(alter_queue.lease, v_queue.lease);
    v_queue.max_attempts := coalesce(alter_queue.max_attempts, v_queue.max_attempts);
    v_queue.backoff_base := coalesce(alter_queue.backoff_base, v_queue.backoff_base);
    v_queue.backoff_factor := coalesce(alter_queue.backoff_factor, v_queue.backoff_factor);
    v_queue.backoff_max := coalesce(alter_queue.backoff_max, v_queue.backoff_max);
    v_queue.dead_letter := coalesce(alter_queue.dead_letter, v_queue.dead_letter);
    PERFORM fenceq._check_queue_settings(v_queue.lease, v_queue.max_attempts,
        v_queue.backoff_base, v_queue.backoff_factor, v_queue.backoff_max);
    UPDATE fenceq._queues AS q
       SET lease = v_queue.lease, max_attempts = v_queue.max_attempts,
           backoff_base = v_queue.backoff_base, backoff_factor = v_queue.backoff_factor,
           backoff_max = v_queue.backoff_max, dead_letter = v_queue.dead_letter,
           requeue_priority = coalesce(alter_queue.requeue_priority, q.requeue_priority)
     WHERE q.queue = alter_queue.queue;
END
$$;
COMMENT ON FUNCTION fenceq.alter_queue(text, interval, integer, interval, double precision, interval, boolean, text) IS
    'Change queue settings (NULL = unchanged); the rules apply to the result. QF101 for an unknown queue.';

-- _set_queue_flag: shared body of pause_queue, resume_queue and
-- set_queue_notify. True when the flag changed.
CREATE OR REPLACE FUNCTION fenceq._set_queue_flag(queue text, flag text, value boolean)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_old boolean;
BEGIN
    PERFORM fenceq._check_name(_set_queue_flag.queue, 'queue');
    IF _set_queue_flag.value IS NULL THEN
        PERFORM fenceq._raise('QF100', _set_queue_flag.flag || ' is required');
    END IF;
    SELECT CASE _set_queue_flag.flag WHEN 'paused' THEN q.paused ELSE q.notify END
      INTO v_old
      FROM fenceq._queues AS q WHERE q.queue = _set_queue_flag.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF v_old = _set_queue_flag.value THEN
        RETURN false;
    END IF;
    IF _set_queue_flag.flag = 'paused' THEN
        UPDATE fenceq._queues AS q SET paused = _set_queue_flag.value WHERE q.queue = _set_queue_flag.queue;
        IF NOT _set_queue_flag.value THEN
            PERFORM fenceq._notify_jobs(_set_queue_flag.queue);
        END IF;
    ELSE
        UPDATE fenceq._queues AS q SET notify = _set_queue_flag.value WHERE q.queue = _set_queue_flag.queue;
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq._set_queue_flag(text, text, boolean) IS
    'Private. Set a queue''s paused or notify flag; true when it changed.';

-- pause_queue: stop claims from a queue; it keeps accepting work.
-- True when the flag changed; QF101 for an unknown queue.
CREATE OR REPLACE FUNCTION fenceq.pause_queue(queue text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN fenceq._set_queue_flag(pause_queue.queue, 'paused', true);
END
$$;
COMMENT ON FUNCTION fenceq.pause_queue(text) IS
    'Pause claims from a queue (submissions still accepted). True when the flag changed; QF101 for an unknown queue.';

-- resume_queue: allow claims again and notify listeners.
CREATE OR REPLACE FUNCTION fenceq.resume_queue(queue text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN fenceq._set_queue_flag(resume_queue.queue, 'paused', false);
END
$$;
COMMENT ON FUNCTION fenceq.resume_queue(text) IS
    'Resume claims from a paused queue (notifying fenceq_jobs when the queue notifies). True when the flag changed; QF101 for an unknown queue.';

-- set_queue_notify: whether jobs becoming pending and free to run (due now or
-- later) send fenceq_jobs notifications.
CREATE OR REPLACE FUNCTION fenceq.set_queue_notify(queue text, notify boolean)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
BEGIN
    RETURN fenceq._set_queue_flag(set_queue_notify.queue, 'notify', set_queue_notify.notify);
END
$$;
COMMENT ON FUNCTION fenceq.set_queue_notify(text, boolean) IS
    'Turn fenceq_jobs notifications for a queue on or off. True when the flag changed; QF101 for an unknown queue.';

-- set_queue_limits: set a queue's concurrency and rate limits, all four at
-- once; NULL means no such limit, all NULL removes them.
--   max_claimed          at most this many of its jobs claimed at once;
--   max_claimed_per_key  at most this many claimed per concurrency_key
--                        (jobs without a key are not counted);
--   rate_limit per rate_period  at most this many successful claims in any
--                        window of that length (sliding, never a burst more).
-- Claims then take fewer jobs, possibly none, rather than exceed a limit
-- (claim_batch). Lowering a limit below the current usage claims nothing
-- until usage falls; it revokes no claim.
-- Locking: the queue row FOR UPDATE (claimers of a limited queue take turns
-- on it). Idempotent. QF101 for an unknown queue; QF104 for a limit that is
-- not a positive integer; QF100 when rate_limit and rate_period are not
-- given together; the interval rules of §2 for rate_period.
CREATE OR REPLACE FUNCTION fenceq.set_queue_limits(
    queue text,
    max_claimed integer DEFAULT NULL,
    max_claimed_per_key integer DEFAULT NULL,
    rate_limit integer DEFAULT NULL,
    rate_period interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(set_queue_limits.queue, 'queue');
    IF set_queue_limits.max_claimed < 1 OR set_queue_limits.max_claimed_per_key < 1
       OR set_queue_limits.rate_limit < 1 THEN
        PERFORM fenceq._raise('QF104', 'a limit must be a positive integer or NULL');
    END IF;
    IF (set_queue_limits.rate_limit IS NULL) <> (set_queue_limits.rate_period IS NULL) THEN
        PERFORM fenceq._raise('QF100', 'rate_limit and rate_period go together');
    END IF;
    PERFORM fenceq._check_interval(set_queue_limits.rate_period, 'rate_period', backwards => true);
    UPDATE fenceq._queues AS q
       SET max_claimed = set_queue_limits.max_claimed,
           max_claimed_per_key = set_queue_limits.max_claimed_per_key,
           rate_limit = set_queue_limits.rate_limit,
           rate_period = set_queue_limits.rate_period
     WHERE q.queue = set_queue_limits.queue;
    IF NOT FOUND THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;
    IF set_queue_limits.rate_limit IS NULL THEN
        DELETE FROM fenceq._rate_window AS r WHERE r.queue = set_queue_limits.queue;
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq.set_queue_limits(text, integer, integer, integer, interval) IS
    'Set a queue''s limits (NULL = none): max_claimed, max_claimed_per_key, rate_limit per rate_period. Claims take fewer jobs rather than exceed one.';
