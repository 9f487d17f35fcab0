"""The SQL surface as a service in another language sees it: raw SQL calls,
untyped literals, SQLSTATEs, notifications and admission (docs/guarantees.md §2, §3, §6)."""

from __future__ import annotations

import psycopg
import pytest

import fenceq

SNAPSHOT = ("SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM ("
            " SELECT row_to_json(j)::text AS t FROM fenceq._jobs j UNION ALL"
            " SELECT row_to_json(s)::text FROM fenceq._submissions s UNION ALL"
            " SELECT row_to_json(c)::text FROM fenceq._claims c UNION ALL"
            " SELECT row_to_json(q)::text FROM fenceq._queues q UNION ALL"
            " SELECT row_to_json(d)::text FROM fenceq._dead_letters d) AS x")

FENCE = "'job-1', 'w', 1, 'nonce-7f3a'"
BAD_CALLS = [
    ("SELECT fenceq.create_queue('')", "QF102"),
    ("SELECT fenceq.create_queue('q2', lease => '1 day')", "QF105"),
    ("SELECT fenceq.create_queue('q2', lease => '1 month')", "QF105"),
    ("SELECT fenceq.create_queue('q2', lease => '-1 second')", "QF105"),
    ("SELECT fenceq.create_queue('q2', max_attempts => 0)", "QF104"),
    ("SELECT fenceq.create_queue('q2', backoff_factor => 'NaN')", "QF104"),
    ("SELECT fenceq.create_queue('q2', backoff_factor => 'Infinity')", "QF104"),
    ("SELECT fenceq.create_queue('q2', backoff_base => '2 hours')", "QF105"),
    ("SELECT fenceq.create_queue('q', max_attempts => 9)", "QF100"),
    ("SELECT fenceq.alter_queue('q', backoff_factor => 0.5)", "QF104"),
    ("SELECT fenceq.alter_queue('nope')", "QF101"),
    ("SELECT fenceq.pause_queue(NULL)", "QF102"),
    ("SELECT fenceq.set_queue_notify('q', NULL)", "QF100"),
    ("SELECT fenceq.submit('q', NULL)", "QF102"),
    ("SELECT fenceq.submit('q', repeat('x', 256))", "QF102"),
    ("SELECT fenceq.submit('q', 't', job_id => repeat('j', 37))", "QF102"),
    ("SELECT fenceq.submit('q', 't', job_id => 'job-1')", "QF203"),
    ("SELECT fenceq.submit('q', 't', max_attempts => 0)", "QF104"),
    ("SELECT fenceq.submit('q', 't', run_at => 'infinity')", "QF105"),
    ("SELECT fenceq.submit('q', 't', run_at => '10000-01-01 00:00:00+00')", "QF105"),
    ("SELECT fenceq.submit('q', 't', payload => jsonb_build_object('x', repeat('y', 1048576)))", "QF103"),
    ("SELECT fenceq.submit('nope', 't')", "QF101"),
    ("SELECT fenceq.submit('q', 't', payload => '{\"x\": 1}', submission_id => 'sub-1')", "QF201"),
    ("SELECT fenceq.submit('q', 't', active_key => 'busy')", "QF202"),
    ("SELECT fenceq.submit_batch('q', '{}')", "QF100"),
    ("SELECT fenceq.submit_batch('q', '[1]')", "QF100"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"queue\": \"q\"}]')", "QF100"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": 1}]')", "QF102"),
    ("SELECT fenceq.submit('q', 't', payload => (repeat('[', 129) || repeat(']', 129))::jsonb, "
     "submission_id => 'deep')", "QF103"),
    ("SELECT fenceq.submit_batch('q', jsonb_build_array(jsonb_build_object('task', 't', "
     "'payload', (repeat('[', 129) || repeat(']', 129))::jsonb)))", "QF103"),
    (f"SELECT fenceq.complete({FENCE}, (repeat('{{\"a\":', 129) || '1' || repeat('}}', 129))::jsonb)",
     "QF103"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\"}, {\"task\": \"\"}]')", "QF102"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\"}, {\"task\": null}]')", "QF102"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\"}, {\"payload\": 1}]')", "QF102"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\"}, null]')", "QF100"),
    ("SELECT fenceq.submit_batch('q', jsonb_build_array(jsonb_build_object('task', 't', "
     "'payload', repeat('x', 1048577))))", "QF103"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"priority\": 1.5}]')", "QF104"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"priority\": true}]')", "QF104"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"max_attempts\": 4294967296}]')", "QF104"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"run_at\": \"2030-01-01T00:00:00\"}]')", "QF105"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"run_at\": \"2030-02-30T00:00:00Z\"}]')", "QF105"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"run_at\": \"tomorrow\"}]')", "QF105"),
    ("SELECT fenceq.submit_batch('q', '[{\"task\": \"t\", \"force\": \"yes\"}]')", "QF100"),
    ("SELECT fenceq.submit_batch('nope', '[]')", "QF101"),
    ("SELECT * FROM fenceq.claim_next('{}', 'w', 'nonce-new')", "QF100"),
    ("SELECT * FROM fenceq.claim_next(NULL, 'w', 'nonce-new')", "QF100"),
    ("SELECT * FROM fenceq.claim_next('{q,NULL}', 'w', 'nonce-new')", "QF102"),
    ("SELECT * FROM fenceq.claim_next('{q,nope}', 'w', 'nonce-new')", "QF101"),
    ("SELECT * FROM fenceq.claim_next('{q}', '', 'nonce-new')", "QF102"),
    ("SELECT * FROM fenceq.claim_next('{q}', 'w', NULL)", "QF102"),
    ("SELECT * FROM fenceq.claim_next('{q}', 'w', 'nonce-new', lease => '0 seconds')", "QF105"),
    ("SELECT * FROM fenceq.claim_next('{q}', 'w', 'nonce-new', budget => '1 day')", "QF105"),
    ("SELECT * FROM fenceq.claim_next('{q}', 'w', 'nonce-7f3a')", "QF301"),
    ("SELECT * FROM fenceq.claim_batch('{q}', 'w', '{a,a}')", "QF301"),
    ("SELECT * FROM fenceq.claim_batch('{q}', 'w', '{a,NULL}')", "QF102"),
    ("SELECT * FROM fenceq.claim_batch('{q}', 'w', '{a,\"\"}')", "QF102"),
    ("SELECT * FROM fenceq.claim_batch('{q,\"\"}', 'w', '{a,b}')", "QF102"),
    ("SELECT * FROM fenceq.claim_batch('{q}', 'w', '{a,nonce-7f3a}')", "QF301"),
    ("SELECT * FROM fenceq.recover_claim('w', '')", "QF102"),
    ("SELECT fenceq.heartbeat('job-1', 'w', 0, 'nonce-7f3a')", "QF106"),
    (f"SELECT fenceq.heartbeat({FENCE}, lease => '1 day')", "QF105"),
    ("SELECT fenceq.heartbeat(NULL, 'w', 1, 'nonce-7f3a')", "QF106"),
    ("SELECT fenceq.heartbeat_batch('{a}', '{w,w}', '{1}', '{t}')", "QF100"),
    ("SELECT fenceq.heartbeat_batch('{a}', '{w}', '{0}', '{t}')", "QF106"),
    ("SELECT fenceq.complete('', 'w', 1, 'nonce-7f3a')", "QF106"),
    ("SELECT fenceq.complete_batch('{a}', '{w}', '{1}', '{t}', ARRAY['1','2']::jsonb[])", "QF100"),
    ("SELECT fenceq.complete_batch('{a}', '{w}', '{0}', '{t}')", "QF106"),
    ("SELECT fenceq.complete_batch('{a}', '{w}', '{1}', '{t}', array_fill(to_jsonb(repeat('x', 1048576)), '{1}'))",
     "QF103"),
    ("SELECT fenceq.heartbeat_batch('{a}', '{w}', '{1}', '{t}', lease => '1 day')", "QF105"),
    (f"SELECT fenceq.fail({FENCE}, NULL)", "QF100"),
    (f"SELECT fenceq.fail({FENCE}, 'e', retry => NULL)", "QF100"),
    (f"SELECT fenceq.fail({FENCE}, 'e', retry_at => '-infinity')", "QF105"),
    (f"SELECT fenceq.release({FENCE}, run_at => 'infinity')", "QF105"),
    (f"SELECT fenceq.checkpoint({FENCE}, '', '1')", "QF102"),
    (f"SELECT fenceq.checkpoint({FENCE}, 's', 'null')", "QF103"),
    (f"SELECT fenceq.checkpoint({FENCE}, 's', NULL)", "QF103"),
    (f"SELECT fenceq.set_pid({FENCE}, 0)", "QF104"),
    ("SELECT * FROM fenceq.claim_state('job-1', 'w', -1, 'nonce-7f3a')", "QF106"),
    ("SELECT fenceq.acknowledge_cancel('job-1', 'w', 1, '')", "QF106"),
    ("SELECT * FROM fenceq.reap(0)", "QF104"),
    ("SELECT fenceq.cancel(NULL)", "QF102"),
    ("SELECT fenceq.cancel('job-1', NULL)", "QF100"),
    ("SELECT * FROM fenceq.get_job('')", "QF102"),
    ("SELECT fenceq.purge(NULL)", "QF100"),
    ("SELECT fenceq.purge('1 day')", "QF105"),
    ("SELECT fenceq.purge('1 second', 0)", "QF104"),
    ("SELECT fenceq.purge('100000000 hours')", "QF105"),
    ("SELECT fenceq.create_queue('q2', lease => '100000000 hours')", "QF105"),
    ("SELECT fenceq.create_queue('q2', backoff_base => '2562047000 hours', backoff_max => '2562047000 hours')",
     "QF105"),
    ("SELECT * FROM fenceq.claim_next('{q}', 'w', 'nonce-new', budget => '100000000 hours')", "QF105"),
    ("SELECT fenceq.complete_batch('{a}', '{{w}}', '{1}', '{t}')", "QF106"),
    ("SELECT fenceq.replay_dead_letter('ABCDEF')", "QF102"),
    ("SELECT fenceq.discard_dead_letter(NULL)", "QF102"),
    ("SELECT fenceq.submit('q', 't', priority => 2147483648)", "42883"),
    ("SELECT fenceq.submit('q', 't', payload => '{bad json')", "22P02"),
]


@pytest.fixture
def seeded(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t", job_id="job-1", submission_id="sub-1")
        client.submit("q", "t", active_key="busy")
        client.claim_next(["q"], "w", "nonce-7f3a")
    return pg


@pytest.mark.parametrize("statement, sqlstate", BAD_CALLS, ids=[s for s, _ in BAD_CALLS])
def test_bad_sql_call_raises_its_code_and_changes_nothing(seeded, statement, sqlstate):
    before = seeded.sql(SNAPSHOT)
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(statement)
    assert info.value.sqlstate == sqlstate, (info.value.sqlstate, info.value.diag.message_primary)
    assert seeded.sql(SNAPSHOT) == before
    message = info.value.diag.message_primary or ""
    for secret in ("nonce-7f3a", "sub-1", "busy", "job-1"):
        assert secret not in message


def test_complete_batch_refuses_one_result_past_the_bounds_among_plain_ones(seeded):
    """complete_batch looks at its results once, set-wise, and checks each
    only when one needs it: a result nested too deep beside a plain one is
    still refused, with nothing changed."""
    before = seeded.sql(SNAPSHOT)
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT fenceq.complete_batch('{a,b}', '{w,w}', '{1,1}', '{t,t}',"
                         " ARRAY['{}', repeat('[', 129) || repeat(']', 129)]::jsonb[])")
    assert info.value.sqlstate == "QF103"
    assert seeded.sql(SNAPSHOT) == before


def test_batch_errors_name_the_index_in_detail(seeded):
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT fenceq.submit_batch('q', '[{\"task\":\"a\"},{\"task\":\"b\",\"job_id\":\"job-1\"}]')")
    assert info.value.sqlstate == "QF203"
    assert info.value.diag.message_detail == "request index 1"


def test_untyped_literals_resolve_to_exactly_one_function(seeded):
    rows = seeded.sql("SELECT p.proname, count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                      " WHERE n.nspname = 'fenceq' GROUP BY p.proname HAVING count(*) > 1")
    assert rows == []
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        job_id = conn.execute("SELECT fenceq.submit('q', 'lit', '{\"a\": 1}', 'sub-lit', NULL, 3)").fetchone()[0]
        row = conn.execute("SELECT job_id, generation FROM fenceq.claim_next(queues => '{q}', owner_id => 'w2',"
                           " claim_token => 'nonce-2', lease => '10 seconds')").fetchone()
        assert row[1] == 1
        assert conn.execute("SELECT fenceq.complete(job_id => %s, owner_id => 'w2', generation => 1,"
                            " claim_token => 'nonce-2', result => '{\"ok\": true}')", (row[0],)).fetchone()[0] is True
        assert job_id


def test_storage_that_changes_the_claim_identity_rolls_the_claim_back(seeded):
    seeded.sql("""
        CREATE FUNCTION public.fold_owner() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN NEW.owner_id := lower(NEW.owner_id); RETURN NEW; END $$;
        CREATE TRIGGER fold BEFORE UPDATE ON fenceq._jobs FOR EACH ROW EXECUTE FUNCTION public.fold_owner();
    """)
    with seeded.connect() as client:
        client.submit("q", "t2")
        before = seeded.sql(SNAPSHOT)
        with pytest.raises(fenceq.ClaimConflict) as info:
            client.claim_next(["q"], "Worker", fenceq.new_claim_token())
        assert info.value.sqlstate == "QF302"
        assert seeded.sql(SNAPSHOT) == before
        assert {c.check_name: c.ok for c in client.verify_schema()}["no_triggers"] is False


@pytest.mark.parametrize("queues", [["q"], ["q", "other"]])
def test_generation_exhausted_only_past_the_largest(seeded, queues):
    with seeded.connect() as client:
        client.create_queue("other")
        job_id = client.submit("q", "t3", priority=9)
        seeded.sql("UPDATE fenceq._jobs SET generation = 9223372036854775806 WHERE job_id = %s", (job_id,))
        last = client.claim_next(queues, "w", fenceq.new_claim_token())
        assert (last.job_id, last.generation) == (job_id, 9223372036854775807)
        assert client.release(last.fence)
        with pytest.raises(fenceq.ClaimConflict) as info:
            client.claim_next(queues, "w", fenceq.new_claim_token())
        assert info.value.sqlstate == "QF303"
        assert client.get_job(job_id).status == "pending", "the refused claim changed nothing"


def _notifications(conn: psycopg.Connection) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in conn.notifies(timeout=0.3, stop_after=10)]


def test_notifications(seeded):
    with psycopg.connect(seeded.url, autocommit=True) as listener, seeded.connect() as client:
        listener.execute("LISTEN fenceq_jobs")
        listener.execute("LISTEN fenceq_control")
        job_id = client.submit("q", "t")
        assert _notifications(listener) == [("fenceq_jobs", "q")]
        client.set_queue_notify("q", False)
        client.submit("q", "t")
        assert _notifications(listener) == []
        client.set_queue_notify("q", True)
        assert client.cancel(job_id) == "cancelled"
        assert _notifications(listener) == [("fenceq_control", job_id)]
        old = client.submit("q", "t", active_key="k")
        _notifications(listener)
        client.submit("q", "t", active_key="k", force=True)
        assert set(_notifications(listener)) == {("fenceq_control", old), ("fenceq_jobs", "q")}
        client.pause_queue("q")
        client.resume_queue("q")
        assert _notifications(listener) == [("fenceq_jobs", "q")]


def test_every_function_has_a_comment_and_is_locked_down(seeded):
    rows = seeded.sql("""
        SELECT p.proname, obj_description(p.oid, 'pg_proc') IS NOT NULL, p.prosecdef, p.proconfig,
               l.lanname, p.provolatile
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
         WHERE n.nspname = 'fenceq'""")
    assert len(rows) > 30
    inlined = set()
    for name, commented, definer, config, language, volatility in rows:
        assert commented, name
        if not definer:  # a private helper the planner inlines into its caller
            assert name.startswith("_") and language == "sql" and config is None, name
            inlined.add(name)
            continue
        planner = {"plan_cache_mode=force_generic_plan", "enable_seqscan=off"}
        assert [c for c in config if c not in planner] == ["search_path=pg_catalog, fenceq, pg_temp"], name
    assert inlined == {"_is_plain_duration", "_is_plain_fence", "_is_plain_json", "_is_plain_time", "_new_job_id",
                       "_is_plain_json_int", "_fingerprint_of", "_holds_fence"}


@pytest.mark.parametrize("name, definition", [
    ("_tampered", "LANGUAGE plpgsql IMMUTABLE AS $$BEGIN RETURN true; END$$"),  # not inlinable
    ("_tampered", "LANGUAGE sql IMMUTABLE SET search_path = public RETURN true"),  # its own settings
    ("tampered", "LANGUAGE sql IMMUTABLE RETURN true"),  # a public function is never one
])
def test_verify_schema_refuses_a_helper_that_is_not_inlined(seeded, name, definition):
    seeded.sql(f"CREATE FUNCTION fenceq.{name}() RETURNS boolean {definition}")
    with seeded.connect() as client:
        refused = [c.detail for c in client.verify_schema() if c.check_name == "security_definer" and not c.ok]
    assert refused == [f"not SECURITY DEFINER: {name}"]


def test_verify_schema_refuses_tampering(seeded):
    seeded.sql("DROP INDEX fenceq._jobs_active_key_idx")
    seeded.sql('ALTER TABLE fenceq._claims DROP CONSTRAINT _claims_pkey')
    seeded.sql('CREATE UNIQUE INDEX ON fenceq._claims (claim_token) WHERE job_id IS NOT NULL')
    seeded.sql("ALTER TABLE fenceq._jobs ALTER COLUMN generation SET DEFAULT 1")
    seeded.sql("GRANT EXECUTE ON FUNCTION fenceq.version() TO PUBLIC")
    with seeded.connect() as client:
        failed = {c.check_name for c in client.verify_schema() if not c.ok}
    assert failed == {"active_key_unique", "claim_token_unique", "defaults", "no_public_execute"}


def test_verify_schema_checks_the_public_shapes(seeded):
    seeded.sql("CREATE OR REPLACE VIEW fenceq.attempts AS SELECT job_id, generation, owner_id,"
               " claimed_at, claimed_at AS appended FROM fenceq._claims")  # appending is allowed
    with seeded.connect() as client:
        assert all(c.ok for c in client.verify_schema())
    seeded.sql("DROP VIEW fenceq.attempts")
    seeded.sql("CREATE VIEW fenceq.attempts AS SELECT generation, job_id, owner_id, claimed_at FROM fenceq._claims")
    seeded.sql("ALTER VIEW fenceq.attempts OWNER TO fenceq_owner")
    with seeded.connect() as client:
        assert {c.check_name for c in client.verify_schema() if not c.ok} == {"public_shapes"}


def test_complete_batch_results_follow_their_fences_whatever_the_array_bounds(seeded):
    with seeded.connect() as client:
        client.submit_batch("q", [{"task": "a"}, {"task": "b"}])
        claims = client.claim_batch(["q"], "w2", [fenceq.new_claim_token(), fenceq.new_claim_token()])
    ids = [c.job_id for c in claims]
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        answer = conn.execute(
            "SELECT fenceq.complete_batch(%s, %s, %s, %s, '[0:1]={\"\\\"first\\\"\",\"\\\"second\\\"\"}'::jsonb[])",
            (ids, ["w2", "w2"], [c.generation for c in claims], [c.claim_token for c in claims])).fetchone()[0]
        assert answer == [True, True]
        results = dict(conn.execute("SELECT job_id, result FROM fenceq.jobs WHERE job_id = ANY(%s)", (ids,)))
    assert [results[i] for i in ids] == ["first", "second"]


def test_replaying_a_dead_letter_whose_key_is_taken_is_qf202(seeded):
    with seeded.connect() as client:
        client.create_queue("dlq", max_attempts=1)
        job_id = client.submit("dlq", "t", active_key="k")
        client.fail(client.claim_next(["dlq"], "w", fenceq.new_claim_token()).fence, "boom")
        client.submit("dlq", "t", active_key="k")
        dlq_id = client.get_job(job_id).dlq_id
        before = seeded.sql(SNAPSHOT)
        with pytest.raises(fenceq.SubmissionConflict) as info:
            client.replay_dead_letter(dlq_id)
        assert info.value.sqlstate == "QF202"
        assert seeded.sql(SNAPSHOT) == before


@pytest.mark.parametrize("call, code", [
    ("SELECT fenceq.heartbeat(NULL, '', 0, NULL, lease => interval '0')", "QF105"),
    ("SELECT fenceq.complete(NULL, '', 0, NULL, result => %s::jsonb)", "QF103"),
    ("SELECT fenceq.heartbeat(NULL, '', 0, NULL)", "QF106"),
])
def test_a_bad_value_is_named_before_a_malformed_fence(seeded, call, code):
    deep = "[" * 129 + "]" * 129
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(call, (deep,) if "%s" in call else None)
    assert info.value.sqlstate == code
