-- fenceq for PostgreSQL, part 5: periodic schedules (set_schedule, drop_schedule, tick).
--
-- A schedule submits one job per occurrence of a cron expression evaluated
-- in an IANA time zone (docs/guarantees.md §14). set_schedule parses the
-- expression once into the allowed values of each field; tick submits the
-- latest due occurrence of each due schedule through submit, under the
-- submission id 'fenceq:schedule:<schedule>:<occurrence>', so no occurrence
-- ever makes two jobs. python_client/fenceq/cron.py is the same grammar and
-- evaluation step for step (SQLite's schedules are evaluated there), and
-- tests/test_cron.py holds the two to the same answers.

-- _cron_value: one number or name of a cron field as its value, within
-- low..high (QF100 otherwise). A name (three letters, any case) is the
-- position in names counted from low.
CREATE OR REPLACE FUNCTION fenceq._cron_value(
    token text, what text, low integer, high integer, names text[])
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_value integer;
BEGIN
    IF _cron_value.token ~ '^[0-9]+$' THEN
        v_value := _cron_value.token::integer;
    ELSE
        -- COLLATE "C": ASCII case mapping only, whatever the database's locale.
        v_value := _cron_value.low + array_position(_cron_value.names, upper(_cron_value.token COLLATE "C")) - 1;
        IF v_value IS NULL THEN
            PERFORM fenceq._raise('QF100', format('cron expression does not parse (%s field)', _cron_value.what));
        END IF;
    END IF;
    IF v_value NOT BETWEEN _cron_value.low AND _cron_value.high THEN
        PERFORM fenceq._raise('QF100', format('cron expression is out of range (%s field)', _cron_value.what));
    END IF;
    RETURN v_value;
END
$$;
COMMENT ON FUNCTION fenceq._cron_value(text, text, integer, integer, text[]) IS
    'Private. A cron field''s number or name as its value within the field''s range; QF100 otherwise.';

-- _cron_field: the values one cron field allows, ascending and distinct. A
-- field is a comma-separated list of *, */S, A, A-B and A-B/S (A, B one or
-- two digits or a name; S one or two digits, at least 1). QF100 naming the
-- field (never its text) when it does not parse or leaves low..high.
CREATE OR REPLACE FUNCTION fenceq._cron_field(
    field text, what text, low integer, high integer, names text[] DEFAULT '{}')
RETURNS integer[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_item text;
    v_parts text[];
    v_first integer;
    v_last integer;
    v_step integer;
    v_values integer[] := '{}';
BEGIN
    FOREACH v_item IN ARRAY string_to_array(_cron_field.field, ',') LOOP
        v_parts := regexp_match(v_item,
            '^(?:(\*)|([0-9]{1,2}|[A-Za-z]{3})(?:-([0-9]{1,2}|[A-Za-z]{3}))?)(?:/([0-9]{1,2}))?$');
        -- A step needs a range (A/S alone is not classic cron).
        IF v_parts IS NULL OR (v_parts[2] IS NOT NULL AND v_parts[3] IS NULL AND v_parts[4] IS NOT NULL) THEN
            PERFORM fenceq._raise('QF100', format('cron expression does not parse (%s field)', _cron_field.what));
        END IF;
        IF v_parts[1] IS NOT NULL THEN
            v_first := _cron_field.low;
            v_last := _cron_field.high;
        ELSE
            v_first := fenceq._cron_value(v_parts[2], _cron_field.what, _cron_field.low, _cron_field.high,
                                          _cron_field.names);
            v_last := CASE WHEN v_parts[3] IS NULL THEN v_first
                           ELSE fenceq._cron_value(v_parts[3], _cron_field.what, _cron_field.low,
                                                   _cron_field.high, _cron_field.names) END;
        END IF;
        v_step := coalesce(v_parts[4]::integer, 1);
        IF v_first > v_last OR v_step < 1 THEN
            PERFORM fenceq._raise('QF100', format('cron expression is out of range (%s field)', _cron_field.what));
        END IF;
        v_values := v_values || ARRAY(SELECT generate_series(v_first, v_last, v_step));
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT v.value FROM unnest(v_values) AS v(value) ORDER BY v.value);
END
$$;
COMMENT ON FUNCTION fenceq._cron_field(text, text, integer, integer, text[]) IS
    'Private. The values a cron field allows, ascending; QF100 naming the field when it does not parse or is out of range.';

-- _cron_parse: a cron expression as the allowed values of its fields
-- (weekdays 0-6 from Sunday; 7 is Sunday too) and whether day of month and
-- day of week must both match: they must unless both are restricted (a
-- field starting with * is not), as in classic cron. Five fields separated
-- by spaces or tabs, or @hourly, @daily, @weekly, @monthly, @yearly; names
-- and macros in any case; ASCII only. QF100 for an expression that does not
-- parse or can never fire (0 0 30 2 *).
CREATE OR REPLACE FUNCTION fenceq._cron_parse(
    cron text, OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT months integer[],
    OUT weekdays integer[], OUT days_and boolean)
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_text text;
    v_fields text[];
BEGIN
    IF _cron_parse.cron IS NULL OR length(_cron_parse.cron) NOT BETWEEN 1 AND 255 THEN
        PERFORM fenceq._raise('QF100', 'cron expression must be a string of 1 to 255 characters');
    END IF;
    IF octet_length(_cron_parse.cron) <> length(_cron_parse.cron) THEN
        PERFORM fenceq._raise('QF100', 'cron expression does not parse');
    END IF;
    v_text := btrim(_cron_parse.cron, E' \t');
    IF left(v_text, 1) = '@' THEN
        v_text := CASE lower(v_text COLLATE "C")
                      WHEN '@hourly' THEN '0 * * * *' WHEN '@daily' THEN '0 0 * * *'
                      WHEN '@weekly' THEN '0 0 * * 0' WHEN '@monthly' THEN '0 0 1 * *'
                      WHEN '@yearly' THEN '0 0 1 1 *' END;
        IF v_text IS NULL THEN
            PERFORM fenceq._raise('QF100', 'cron expression names an unknown macro');
        END IF;
    END IF;
    v_fields := regexp_split_to_array(v_text, E'[ \t]+');
    IF cardinality(v_fields) <> 5 THEN
        PERFORM fenceq._raise('QF100', 'cron expression must have five fields');
    END IF;
    minutes := fenceq._cron_field(v_fields[1], 'minute', 0, 59);
    hours := fenceq._cron_field(v_fields[2], 'hour', 0, 23);
    days := fenceq._cron_field(v_fields[3], 'day of month', 1, 31);
    months := fenceq._cron_field(v_fields[4], 'month', 1, 12,
        '{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}');
    weekdays := ARRAY(SELECT DISTINCT w.value % 7
                        FROM unnest(fenceq._cron_field(v_fields[5], 'day of week', 0, 7,
                                                       '{SUN,MON,TUE,WED,THU,FRI,SAT}')) AS w(value)
                       ORDER BY 1);
    days_and := left(v_fields[3], 1) = '*' OR left(v_fields[5], 1) = '*';
    -- With a day of month required, some allowed month must have that day
    -- (February has a 29th in leap years); any weekday comes round.
    IF days_and AND NOT EXISTS (
        SELECT 1 FROM unnest(months) AS m(month), unnest(days) AS d(day)
         WHERE d.day <= ('{31,29,31,30,31,30,31,31,30,31,30,31}'::integer[])[m.month]) THEN
        PERFORM fenceq._raise('QF100', 'cron expression can never fire');
    END IF;
END
$$;
COMMENT ON FUNCTION fenceq._cron_parse(text) IS
    'Private. A cron expression as the allowed values of its fields and whether day of month and day of week must both match; QF100 when it does not parse or can never fire.';

-- _cron_instant: the first instant at which the local clock in time_zone
-- reads local or later: local's first instance when it occurs twice (a
-- fall-back), the end of the gap when it does not occur (a spring-forward).
-- AT TIME ZONE alone picks the later instance and the offset before a gap.
-- As PostgreSQL itself does, it assumes a zone's offset changes at most once
-- in any 48 hours: the offsets a day before and after are the only ones.
-- Offsets and transitions are whole seconds.
CREATE OR REPLACE FUNCTION fenceq._cron_instant(local timestamp, time_zone text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_utc timestamptz := _cron_instant.local AT TIME ZONE 'UTC';
    -- '24 hours', never '1 day': a day of timestamptz arithmetic follows the session's zone.
    v_day_before timestamptz := v_utc - interval '24 hours';
    v_day_after timestamptz := v_utc + interval '24 hours';
    v_before interval := (v_day_before AT TIME ZONE _cron_instant.time_zone) - (v_day_before AT TIME ZONE 'UTC');
    v_after interval := (v_day_after AT TIME ZONE _cron_instant.time_zone) - (v_day_after AT TIME ZONE 'UTC');
    v_early timestamptz := v_utc - greatest(v_before, v_after);
    v_late timestamptz := v_utc - least(v_before, v_after);
    v_middle timestamptz;
BEGIN
    IF (v_early AT TIME ZONE _cron_instant.time_zone) = _cron_instant.local THEN
        RETURN v_early;
    END IF;
    IF (v_late AT TIME ZONE _cron_instant.time_zone) = _cron_instant.local THEN
        RETURN v_late;
    END IF;
    -- In a gap: the wall clock jumps past local between v_early and v_late.
    WHILE v_late - v_early > interval '1 second' LOOP
        v_middle := v_early + make_interval(secs => floor(extract(epoch FROM v_late - v_early) / 2));
        IF (v_middle AT TIME ZONE _cron_instant.time_zone) >= _cron_instant.local THEN
            v_late := v_middle;
        ELSE
            v_early := v_middle;
        END IF;
    END LOOP;
    RETURN v_late;
END
$$;
COMMENT ON FUNCTION fenceq._cron_instant(timestamp, text) IS
    'Private. The first instant at which the local clock of a time zone reads a wall time or later: its first instance, or the end of the daylight-saving gap it falls in.';

-- _cron_step: the schedule's first occurrence strictly after instant
-- (forward), or its last at or before instant (backward). Local wall times
-- that match are walked in order from the wall clock at instant (backward:
-- plus any fall-back of the last day, whose first pass may lie ahead of the
-- wall clock) and each becomes an instant by _cron_instant, which never
-- decreases as the wall time grows. NULL when none lies within 28 years
-- (every expression set_schedule admits fires within 12) or years
-- 0001-9999.
CREATE OR REPLACE FUNCTION fenceq._cron_step(schedule fenceq._schedules, instant timestamptz, forward boolean)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_zone text := _cron_step.schedule.time_zone;
    v_local timestamp := _cron_step.instant AT TIME ZONE v_zone;
    v_day_before timestamptz := _cron_step.instant - interval '24 hours';
    v_direction integer := CASE WHEN _cron_step.forward THEN 1 ELSE -1 END;
    v_start timestamp;
    v_start_day date;
    v_start_hour integer;
    v_start_minute integer;
    v_limit date;
    v_day date;
    v_hours integer[];
    v_minutes integer[];
    v_hour integer;
    v_minute integer;
    v_at timestamptz;
BEGIN
    IF _cron_step.forward THEN
        v_start := date_trunc('minute', v_local) + interval '1 minute';
        v_hours := _cron_step.schedule.cron_hours;
        v_minutes := _cron_step.schedule.cron_minutes;
    ELSE
        v_start := date_trunc('minute', v_local + greatest(
            ((v_day_before AT TIME ZONE v_zone) - (v_day_before AT TIME ZONE 'UTC'))
            - (v_local - (_cron_step.instant AT TIME ZONE 'UTC')), interval '0'));
        v_hours := ARRAY(SELECT h.value FROM unnest(_cron_step.schedule.cron_hours) WITH ORDINALITY AS h(value, i)
                          ORDER BY h.i DESC);
        v_minutes := ARRAY(SELECT m.value FROM unnest(_cron_step.schedule.cron_minutes) WITH ORDINALITY AS m(value, i)
                            ORDER BY m.i DESC);
    END IF;
    v_start_day := v_start::date;
    v_start_hour := extract(hour FROM v_start)::integer;
    v_start_minute := extract(minute FROM v_start)::integer;
    v_limit := CASE WHEN _cron_step.forward THEN least(v_start_day + 10227, date '9999-12-30')
                    ELSE greatest(v_start_day - 10227, date '0001-01-03') END;
    v_day := v_start_day;
    WHILE CASE WHEN _cron_step.forward THEN v_day <= v_limit ELSE v_day >= v_limit END LOOP
        IF NOT extract(month FROM v_day)::integer = ANY (_cron_step.schedule.cron_months) THEN
            -- On to the first day of the next month, or the last of the previous.
            IF make_date(extract(year FROM v_day)::integer, extract(month FROM v_day)::integer, 1)
               = (CASE WHEN _cron_step.forward THEN date '9999-12-01' ELSE date '0001-01-01' END) THEN
                RETURN NULL;
            END IF;
            v_day := CASE WHEN _cron_step.forward
                          THEN make_date(extract(year FROM v_day)::integer + extract(month FROM v_day)::integer / 12,
                                         extract(month FROM v_day)::integer % 12 + 1, 1)
                          ELSE make_date(extract(year FROM v_day)::integer, extract(month FROM v_day)::integer, 1) - 1
                     END;
            CONTINUE;
        END IF;
        -- (Parenthesised: IF would take the first THEN as its own.)
        IF (CASE WHEN _cron_step.schedule.cron_days_and
                 THEN extract(day FROM v_day)::integer = ANY (_cron_step.schedule.cron_days)
                      AND extract(dow FROM v_day)::integer = ANY (_cron_step.schedule.cron_weekdays)
                 ELSE extract(day FROM v_day)::integer = ANY (_cron_step.schedule.cron_days)
                      OR extract(dow FROM v_day)::integer = ANY (_cron_step.schedule.cron_weekdays) END) THEN
            FOREACH v_hour IN ARRAY v_hours LOOP
                CONTINUE WHEN v_day = v_start_day AND (v_hour - v_start_hour) * v_direction < 0;
                FOREACH v_minute IN ARRAY v_minutes LOOP
                    CONTINUE WHEN v_day = v_start_day AND v_hour = v_start_hour
                                  AND (v_minute - v_start_minute) * v_direction < 0;
                    v_at := fenceq._cron_instant(v_day + make_time(v_hour, v_minute, 0), v_zone);
                    IF (CASE WHEN _cron_step.forward THEN v_at > _cron_step.instant
                             ELSE v_at <= _cron_step.instant END) THEN
                        RETURN v_at;
                    END IF;
                END LOOP;
            END LOOP;
        END IF;
        v_day := v_day + v_direction;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION fenceq._cron_step(fenceq._schedules, timestamptz, boolean) IS
    'Private. A schedule''s first occurrence after an instant (forward) or last at or before it; NULL when none lies within 28 years.';

-- _try_lock_identities: _lock_identities without waiting: true when every
-- key's advisory transaction lock is now held, false as soon as one is busy
-- (the keys taken before it stay held until the transaction ends).
CREATE OR REPLACE FUNCTION fenceq._try_lock_identities(keys text[])
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
DECLARE
    v_key text;
BEGIN
    FOREACH v_key IN ARRAY _try_lock_identities.keys LOOP
        CONTINUE WHEN v_key IS NULL;
        IF NOT pg_try_advisory_xact_lock(hashtextextended(v_key, 0)) THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq._try_lock_identities(text[]) IS
    'Private. Try the advisory transaction locks of identity keys without waiting; false when one is held elsewhere.';

-- set_schedule: create a schedule or replace its definition. The schedule
-- name is 1 to 218 characters, so that its submission ids stay within 255.
-- Replacing recomputes the next occurrence from now (a paused schedule has
-- none); the last run and job are kept. True when anything changed; false
-- when the schedule exists exactly so (the cron text, zone name and payload
-- compared exactly). QF101 for an undeclared queue; QF100 for a cron
-- expression that does not parse or can never fire, or a time zone that
-- pg_timezone_names does not list by that exact name. Nothing changes on
-- an error.
-- Locking: the schedule row (a concurrent twin of a new schedule waits on
-- its insert); the clock is read after the lock.
CREATE OR REPLACE FUNCTION fenceq.set_schedule(
    schedule text,
    queue text,
    task text,
    cron text,
    payload jsonb DEFAULT NULL,
    time_zone text DEFAULT 'UTC',
    priority integer DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    active_key text DEFAULT NULL,
    paused boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_new fenceq._schedules;
    v_old fenceq._schedules;
    v_cron record;
BEGIN
    PERFORM fenceq._check_name(set_schedule.schedule, 'schedule', max_length => 218);
    PERFORM fenceq._check_name(set_schedule.queue, 'queue');
    PERFORM fenceq._check_name(set_schedule.task, 'task');
    PERFORM fenceq._check_name(set_schedule.active_key, 'active_key', nullable => true);
    IF set_schedule.max_attempts < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_attempts must be a positive integer');
    END IF;
    IF set_schedule.paused IS NULL THEN
        PERFORM fenceq._raise('QF100', 'paused is required');
    END IF;
    v_new.payload := CASE WHEN jsonb_typeof(set_schedule.payload) = 'null' THEN NULL ELSE set_schedule.payload END;
    IF v_new.payload IS NOT NULL THEN
        PERFORM fenceq._check_json(v_new.payload, 'payload');
    END IF;
    SELECT * INTO v_cron FROM fenceq._cron_parse(set_schedule.cron);
    -- pg_timezone_names reads every zone file (about 0.1 s): a zone some
    -- schedule has already is known.
    IF set_schedule.time_zone IS NULL
       OR NOT EXISTS (SELECT 1 FROM fenceq._schedules AS s WHERE s.time_zone = set_schedule.time_zone)
          AND NOT EXISTS (SELECT 1 FROM pg_timezone_names AS z WHERE z.name = set_schedule.time_zone) THEN
        PERFORM fenceq._raise('QF100', 'time_zone must name a known IANA time zone');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.queue = set_schedule.queue) THEN
        PERFORM fenceq._raise('QF101', 'unknown queue');
    END IF;

    v_new.schedule := set_schedule.schedule;
    v_new.queue := set_schedule.queue;
    v_new.task := set_schedule.task;
    v_new.cron := set_schedule.cron;
    v_new.time_zone := set_schedule.time_zone;
    v_new.priority := set_schedule.priority;
    v_new.max_attempts := set_schedule.max_attempts;
    v_new.active_key := set_schedule.active_key;
    v_new.paused := set_schedule.paused;
    v_new.cron_minutes := v_cron.minutes;
    v_new.cron_hours := v_cron.hours;
    v_new.cron_days := v_cron.days;
    v_new.cron_months := v_cron.months;
    v_new.cron_weekdays := v_cron.weekdays;
    v_new.cron_days_and := v_cron.days_and;
    LOOP
        IF NOT v_new.paused THEN
            v_new.next_run_at := fenceq._cron_step(v_new, clock_timestamp(), true);
        END IF;
        INSERT INTO fenceq._schedules AS s SELECT v_new.* ON CONFLICT (schedule) DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
        SELECT * INTO v_old FROM fenceq._schedules AS s WHERE s.schedule = set_schedule.schedule FOR UPDATE;
        EXIT WHEN FOUND;  -- else it was dropped meanwhile: insert again
    END LOOP;
    IF (v_old.queue, v_old.task, v_old.cron, v_old.time_zone, fenceq._canonical_json(v_old.payload),
        v_old.priority, v_old.max_attempts, v_old.active_key, v_old.paused)
       IS NOT DISTINCT FROM
       (v_new.queue, v_new.task, v_new.cron, v_new.time_zone, fenceq._canonical_json(v_new.payload),
        v_new.priority, v_new.max_attempts, v_new.active_key, v_new.paused) THEN
        RETURN false;
    END IF;
    v_new.next_run_at := CASE WHEN v_new.paused THEN NULL ELSE fenceq._cron_step(v_new, clock_timestamp(), true) END;
    UPDATE fenceq._schedules AS s
       SET queue = v_new.queue, task = v_new.task, cron = v_new.cron, time_zone = v_new.time_zone,
           payload = v_new.payload, priority = v_new.priority, max_attempts = v_new.max_attempts,
           active_key = v_new.active_key, paused = v_new.paused, cron_minutes = v_new.cron_minutes,
           cron_hours = v_new.cron_hours, cron_days = v_new.cron_days, cron_months = v_new.cron_months,
           cron_weekdays = v_new.cron_weekdays, cron_days_and = v_new.cron_days_and,
           next_run_at = v_new.next_run_at
     WHERE s.schedule = set_schedule.schedule;
    RETURN true;
END
$$;
COMMENT ON FUNCTION fenceq.set_schedule(text, text, text, text, jsonb, text, integer, integer, text, boolean) IS
    'Create a schedule or replace its definition (the next occurrence is recomputed from now). True when anything changed, false when identical. QF101 unknown queue; QF100 a cron expression that does not parse or can never fire, or an unknown time zone.';

-- drop_schedule: delete a schedule; the jobs it submitted stay.
-- True when it existed. Locking: the schedule row.
CREATE OR REPLACE FUNCTION fenceq.drop_schedule(schedule text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fenceq._check_name(drop_schedule.schedule, 'schedule', max_length => 218);
    DELETE FROM fenceq._schedules AS s WHERE s.schedule = drop_schedule.schedule;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION fenceq.drop_schedule(text) IS
    'Delete a schedule (the jobs it submitted stay). True when it existed.';

-- tick: submit the jobs of due schedules, the longest due first, at most
-- max_rows schedules. For each, one job for the latest due occurrence
-- (missed earlier ones are skipped) with run_at = that occurrence and
-- submission_id = 'fenceq:schedule:' || schedule || ':' || occurrence (UTC,
-- YYYY-MM-DDTHH:MM:SSZ); with an active key held by an active job the
-- occurrence is skipped, never forced. Then the next occurrence is the first
-- after now. Returns the number of jobs submitted.
-- Locking: FOR UPDATE SKIP LOCKED on the schedule rows, the clock read after
-- each lock; the occurrence's identities (submission id, active key) are
-- taken without waiting, and a schedule whose identity is busy stays due for
-- the next tick. So concurrent ticks never wait on each other, and one
-- occurrence never makes two jobs: ticks racing, a tick retried after a lost
-- acknowledgement, pg_cron and every worker at once. An occurrence already
-- submitted under its id is not submitted again.
CREATE OR REPLACE FUNCTION fenceq.tick(max_rows integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, fenceq, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_schedule fenceq._schedules;
    v_cutoff timestamptz;
    v_now timestamptz;
    v_occurrence timestamptz;
    v_submission_id text;
    v_job_id text;
    v_submitted integer := 0;
BEGIN
    IF tick.max_rows IS NULL OR tick.max_rows < 1 THEN
        PERFORM fenceq._raise('QF104', 'max_rows must be a positive integer');
    END IF;
    -- A variable, not clock_timestamp() inline, so the index can serve it.
    v_cutoff := clock_timestamp();
    FOR v_schedule IN
        SELECT s.* FROM fenceq._schedules AS s
         WHERE s.next_run_at <= v_cutoff
         ORDER BY s.next_run_at
         LIMIT tick.max_rows
           FOR UPDATE SKIP LOCKED
    LOOP
        v_now := clock_timestamp();
        v_job_id := NULL;
        -- The latest occurrence due; none when the last one due lies before
        -- next_run_at (the zone's rules changed since it was computed).
        v_occurrence := fenceq._cron_step(v_schedule, v_now, false);
        IF v_occurrence >= v_schedule.next_run_at THEN
            v_submission_id := 'fenceq:schedule:' || v_schedule.schedule || ':'
                || to_char(v_occurrence AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"');
            CONTINUE WHEN NOT fenceq._try_lock_identities(fenceq._identity_keys(
                v_schedule.queue, v_schedule.active_key, NULL, v_submission_id));
            SELECT s.job_id INTO v_job_id FROM fenceq._submissions AS s WHERE s.submission_id = v_submission_id;
            IF NOT FOUND AND (v_schedule.active_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM fenceq._jobs AS j
                 WHERE j.queue = v_schedule.queue AND j.active_key = v_schedule.active_key
                   AND j.status IN ('pending', 'claimed'))) THEN
                v_job_id := fenceq.submit(queue => v_schedule.queue, task => v_schedule.task,
                    payload => v_schedule.payload, submission_id => v_submission_id,
                    priority => v_schedule.priority, run_at => v_occurrence,
                    max_attempts => v_schedule.max_attempts, active_key => v_schedule.active_key);
                v_submitted := v_submitted + 1;
            END IF;
        END IF;
        UPDATE fenceq._schedules AS s
           SET next_run_at = fenceq._cron_step(v_schedule, v_now, true),
               last_run_at = CASE WHEN v_job_id IS NULL THEN s.last_run_at ELSE v_occurrence END,
               last_job_id = coalesce(v_job_id, s.last_job_id)
         WHERE s.schedule = v_schedule.schedule;
    END LOOP;
    RETURN v_submitted;
END
$$;
COMMENT ON FUNCTION fenceq.tick(integer) IS
    'Submit one job for the latest due occurrence of each due schedule (at most max_rows schedules; missed occurrences are skipped, a busy active key skips the occurrence), then move each to its first occurrence after now. Returns the jobs submitted. Concurrent ticks never wait on each other or make two jobs for one occurrence.';

-- The schedules, as set_schedule defined them, with their next and last
-- occurrences. Columns are only ever appended (docs/guarantees.md §3).
CREATE OR REPLACE VIEW fenceq.schedules AS
SELECT s.schedule, s.queue, s.task, s.cron, s.time_zone, s.payload, s.priority, s.max_attempts,
       s.active_key, s.paused, s.next_run_at, s.last_run_at, s.last_job_id
  FROM fenceq._schedules AS s;
COMMENT ON VIEW fenceq.schedules IS
    'Every schedule: its definition, the next occurrence tick submits (NULL while paused) and the last occurrence submitted with its job.';
