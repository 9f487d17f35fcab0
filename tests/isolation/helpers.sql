-- Helpers for the isolation specs, installed by tests/isolation/run in the
-- specs' database beside fenceq (schema iso, never fenceq's own objects).
--
-- Each permutation works on names of its own: its setup calls
-- iso.next_permutation(), and iso.id('q') is then 'q-<n>' for that
-- permutation, so no permutation sees another's queues, jobs, tokens,
-- submission ids, locks or schedules, and nothing needs deleting.
CREATE SCHEMA iso;
CREATE TABLE iso.permutation (n integer NOT NULL);
INSERT INTO iso.permutation VALUES (0);

CREATE FUNCTION iso.next_permutation() RETURNS void
LANGUAGE sql AS $$ UPDATE iso.permutation SET n = n + 1 $$;

CREATE FUNCTION iso.id(name text) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT name || '-' || n FROM iso.permutation $$;

-- The answer of a call as text, or what the caller is told when it is
-- refused: SQLSTATE and message (isolationtester prints only the message of
-- an error; the code is the contract). The call runs in a subtransaction.
CREATE FUNCTION iso.outcome(call text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_answer text;
BEGIN
    EXECUTE call INTO v_answer;
    RETURN coalesce(v_answer, 'NULL');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END
$$;

-- A value a step keeps for a later step (another session's included) to
-- compare, without printing it: iso.keep returns the value it keeps.
CREATE TABLE iso.kept (name text PRIMARY KEY, value text);

CREATE FUNCTION iso.keep(name text, value text) RETURNS text
LANGUAGE sql AS $$
    INSERT INTO iso.kept AS k VALUES (iso.id($1), $2)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value
    RETURNING k.value
$$;

CREATE FUNCTION iso.kept(name text) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT k.value FROM iso.kept AS k WHERE k.name = iso.id($1) $$;

-- The status of a job of this permutation (NULL: no such job).
CREATE FUNCTION iso.status(job text) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT status FROM fenceq.get_job(iso.id(job)) $$;

-- Teardown (a procedure: CALL prints nothing): every job left in the
-- permutation's queues ends terminal, so that no lapsed claim is left for a
-- later spec's reap to count.
CREATE PROCEDURE iso.finish(VARIADIC queues text[])
LANGUAGE sql AS $$
    SELECT fenceq.cancel_matching(iso.id(q), include_claimed => true, force => true)
      FROM unnest(queues) AS q
$$;

-- A job id of this permutation without its permutation's suffix, for
-- output that names which job a call got ('j-7' -> 'j').
CREATE FUNCTION iso.name(job_id text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT regexp_replace(job_id, '-[0-9]+$', '') $$;
