"""The security catalog (issue 19 §4): read from the catalog of a fresh
install, so every object of schema fenceq, present now or added later, is
held to it. docs/dba.md §2.2 says what is granted; docs/guarantees.md §10."""

from __future__ import annotations

import dataclasses
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest

import fenceq
from fenceq.ops import Arg, Op, Shape
from security_catalog import OWNERS, golden, privileges

ROOT = Path(__file__).resolve().parents[1]
GROUP_ROLES = ("fenceq_producer", "fenceq_worker", "fenceq_admin")
TRUSTED_SCHEMAS = ("pg_catalog", "fenceq")  # only fenceq_owner and superusers create in them


@pytest.fixture
def login(pg) -> Iterator[Callable[..., str]]:
    """Login roles, members of a group role or of none; dropped afterwards."""
    created: list[str] = []

    def make(group: str | None) -> str:
        name = f"app_{group.split('_')[1] if group else 'outsider'}_{uuid.uuid4().hex[:8]}"
        pg.sql(f"CREATE ROLE {name} LOGIN" + (f" IN ROLE {group}" if group else ""))
        created.append(name)
        return name

    yield make
    for name in reversed(created):
        pg.sql(f"DROP OWNED BY {name} CASCADE")
        pg.sql(f"DROP ROLE {name}")


def url_of(pg, role: str) -> str:
    return pg.url.replace("postgres@", f"{role}@", 1)


def sqlstate_of(conn: psycopg.Connection, statement: str) -> str | None:
    try:
        conn.execute(statement)
    except psycopg.Error as error:
        return error.sqlstate
    return None


def test_every_function_pins_its_search_path_or_is_bound_when_created(pg):
    rows = pg.sql("""
        SELECT p.proname, p.prosecdef, l.lanname, p.prosqlbody IS NOT NULL, coalesce(p.proconfig, '{}')
          FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
         WHERE p.pronamespace = 'fenceq'::regnamespace""")
    assert len(rows) > 40
    for name, definer, language, bound, config in rows:
        if not definer:
            # An inlined helper runs with its caller's rights and settings:
            # a SQL-standard body resolves every name once, when created.
            assert (language, bound, config) == ("sql", True, []), name
            continue
        paths = [c.split("=", 1)[1] for c in config if c.startswith("search_path=")]
        assert len(paths) == 1, f"{name} does not pin search_path: {config}"
        schemas = [s.strip().strip('"') for s in paths[0].split(",")]
        assert "pg_temp" not in schemas[:-1], f"{name}: pg_temp must be last or absent: {paths[0]}"
        assert schemas[0] == "pg_catalog", f"{name}: pg_catalog must come first: {paths[0]}"
        assert set(schemas) - {"pg_temp"} <= set(TRUSTED_SCHEMAS), f"{name}: untrusted schema in {paths[0]}"


def test_the_trusted_schemas_admit_no_other_creator(pg):
    """Only superusers and the owner (with the deploy role, its member,
    docs/dba.md §2.1) may create where the pinned search_path looks."""
    rows = pg.sql("""
        SELECT r.rolname, n.nspname FROM pg_roles AS r CROSS JOIN pg_namespace AS n
         WHERE n.nspname = ANY (%s) AND NOT r.rolsuper AND NOT pg_has_role(r.oid, 'fenceq_owner', 'USAGE')
           AND has_schema_privilege(r.oid, n.oid, 'CREATE')""", (list(TRUSTED_SCHEMAS),))
    assert rows == []


def test_privileges_are_exactly_the_golden_list(pg):
    """Regenerate the list on purpose with `make privileges` when a grant
    changes; docs/dba.md's table is made from it (scripts/gen-docs)."""
    with psycopg.connect(pg.url) as conn:
        assert privileges(conn) == golden()


def test_public_may_execute_read_or_use_nothing(pg):
    with psycopg.connect(pg.url) as conn:
        granted = privileges(conn).get("PUBLIC", {})
    # PostgreSQL's default for a type: it lets PUBLIC neither read nor call anything.
    assert granted == {"USAGE": ["type fenceq.claim", "type fenceq.job_search_row"]}
    assert "PUBLIC" not in golden() or golden()["PUBLIC"] == granted


def test_no_default_privileges_reach_the_schema(pg):
    assert pg.sql("""
        SELECT d.defaclrole::regrole::text, d.defaclobjtype FROM pg_default_acl AS d
         WHERE d.defaclnamespace = 'fenceq'::regnamespace
            OR d.defaclrole = 'fenceq_owner'::regrole""") == []


def test_every_object_is_owned_by_fenceq_owner(pg):
    with psycopg.connect(pg.url) as conn:
        owners = dict(conn.execute(OWNERS).fetchall())
    assert len(owners) > 60 and set(owners.values()) == {"fenceq_owner"}


def test_the_dba_guide_names_only_rights_the_roles_hold():
    """docs/dba.md §2.2's prose table agrees with the golden list (the exact
    list beneath it is generated from it, tests/test_docs.py)."""
    text = (ROOT / "docs" / "dba.md").read_text(encoding="utf-8")
    granted = golden()
    public_functions = {o.removeprefix("function fenceq.") for o in granted["fenceq_admin"]["EXECUTE"]}
    views = {o.removeprefix("view fenceq.") for o in granted["fenceq_admin"]["SELECT"]}
    for role in GROUP_ROLES:
        row = re.search(rf"^\| `{role}` \| (.*) \| (.*) \|$", text, re.M)
        assert row, role
        may_call, may_read = (set(re.findall(r"`([a-z_]+)`", cell)) for cell in row.groups())
        executes = {o.removeprefix("function fenceq.") for o in granted[role]["EXECUTE"]}
        reads = {o.removeprefix("view fenceq.") for o in granted[role].get("SELECT", [])}
        assert may_call & public_functions <= executes, role
        assert may_read & views <= reads, role
        assert granted[role]["USAGE"] == ["schema fenceq"], role
    assert "SELECT" not in granted["fenceq_producer"]  # "nothing else (no views)"
    assert granted["fenceq_admin"]["SELECT"] == granted["fenceq_worker"]["SELECT"]  # "every view"


def _relations(pg) -> list[tuple[str, str, str]]:
    return pg.sql("""
        SELECT c.oid::regclass::text, c.relkind::text,
               (SELECT quote_ident(a.attname) FROM pg_attribute AS a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                   AND a.attidentity = '' AND a.attgenerated = '' ORDER BY a.attnum LIMIT 1)
          FROM pg_class AS c
         WHERE c.relnamespace = 'fenceq'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')""")


@pytest.mark.parametrize("group", GROUP_ROLES)
def test_a_group_role_can_neither_write_a_table_nor_create_in_the_schema(pg, login, group):
    with pg.connect() as admin:
        admin.create_queue("q")
        admin.submit("q", "t")
        claim = admin.claim_next(["q"], "w", fenceq.new_claim_token())
    before = pg.sql("SELECT j.*::text FROM fenceq._jobs AS j")
    refused, views = [], []
    for relation, kind, column in _relations(pg):
        if kind == "S":
            refused += [f"SELECT nextval('{relation}')", f"SELECT setval('{relation}', 1)"]
        else:
            writes = [f"INSERT INTO {relation} DEFAULT VALUES", f"UPDATE {relation} SET {column} = {column}",
                      f"DELETE FROM {relation}", f"TRUNCATE {relation}"]
            (views if kind == "v" else refused).extend(writes)
    # A fence bypassed by a direct write: the lease of the live claim, taken over.
    refused += [f"UPDATE fenceq._jobs SET owner_id = 'thief', lease_expires_at = 'infinity'"
                f" WHERE job_id = '{claim.job_id}'",
                "UPDATE fenceq._claims SET owner_id = 'thief'",
                "CREATE TABLE fenceq.planted (id int)",
                "CREATE VIEW fenceq.planted AS SELECT 1 AS one",
                "CREATE SEQUENCE fenceq.planted",
                "CREATE TYPE fenceq.planted AS (id int)",
                "CREATE FUNCTION fenceq.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'epoch'::timestamptz $$",
                "CREATE OPERATOR fenceq.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_catalog.texteq)",
                "CREATE OR REPLACE FUNCTION fenceq.version() RETURNS text LANGUAGE sql AS $$ SELECT '0' $$",
                "ALTER FUNCTION fenceq.submit RESET ALL",  # names are not overloaded
                "DROP FUNCTION fenceq.version",
                "DROP VIEW fenceq.jobs",
                "ALTER TABLE fenceq._jobs DISABLE ROW LEVEL SECURITY",
                "CREATE TRIGGER planted BEFORE UPDATE ON fenceq._jobs"
                " FOR EACH ROW EXECUTE FUNCTION fenceq.version()",
                "SET ROLE fenceq_owner",
                "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA fenceq TO PUBLIC",
                "GRANT ALL ON ALL TABLES IN SCHEMA fenceq TO PUBLIC"]
    role = login(group)
    with psycopg.connect(url_of(pg, role), autocommit=True) as conn:
        answers = {statement: sqlstate_of(conn, statement) for statement in refused}
        # A view that is not updatable refuses a write before any privilege
        # check (55000, and 42809 for TRUNCATE); the catalog check below
        # holds the privileges themselves.
        view_answers = {statement: sqlstate_of(conn, statement) for statement in views}
    assert {s: a for s, a in answers.items() if a != "42501"} == {}
    assert {s: a for s, a in view_answers.items() if a not in {"42501", "55000", "42809"}} == {}
    assert pg.sql("""
        SELECT c.oid::regclass::text FROM pg_class AS c
         WHERE c.relnamespace = 'fenceq'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
           AND (has_table_privilege(%(role)s, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
                OR has_any_column_privilege(%(role)s, c.oid, 'INSERT, UPDATE, REFERENCES'))""",
                  {"role": role}) == []
    assert pg.sql("SELECT j.*::text FROM fenceq._jobs AS j") == before
    with psycopg.connect(pg.url) as conn:
        assert privileges(conn) == golden()
    with pg.connect() as admin:
        assert admin.heartbeat(claim.fence) and admin.complete(claim.fence)


# --- The search_path capture class of attacks ---------------------------

# Operators a hostile role shadows, on every pair of types PostgreSQL itself
# defines them for.
SHADOWED_OPERATORS = ("=", "<>", "<", "<=", ">", ">=", "||", "->", "->>", "#>", "#>>", "@>", "<@",
                      "?", "?|", "?&", "+", "-", "*", "/", "~~", "~", "^@", "&&")


def _called_catalog_functions(pg) -> set[str]:
    texts = pg.sql("""
        SELECT pg_get_functiondef(p.oid) FROM pg_proc AS p WHERE p.pronamespace = 'fenceq'::regnamespace
        UNION ALL
        SELECT pg_get_viewdef(c.oid) FROM pg_class AS c
         WHERE c.relnamespace = 'fenceq'::regnamespace AND c.relkind = 'v'""")
    words = set()
    for (text,) in texts:
        words |= {w.lower() for w in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", text)}
    catalog = {name for (name,) in pg.sql(
        "SELECT DISTINCT p.proname FROM pg_proc AS p WHERE p.pronamespace = 'pg_catalog'::regnamespace")}
    return words & catalog


def _plant_look_alikes(pg, hostile_url: str, schemas: tuple[str, ...]) -> set[str]:
    """In each schema, a look-alike of every overload of every pg_catalog
    function fenceq calls and of the common operators, each raising, and a
    table named like each fenceq relation. Returns the names shadowed."""
    names = sorted(_called_catalog_functions(pg))
    overloads = pg.sql("""
        SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)
          FROM pg_proc AS p
         WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY (%s)""",
                       (names,))
    operators = pg.sql("""
        SELECT o.oprname, nullif(o.oprleft, 0)::regtype::text, o.oprright::regtype::text, o.oprresult::regtype::text
          FROM pg_operator AS o
         WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprname = ANY (%s)""",
                       (list(SHADOWED_OPERATORS),))
    relations = [name for (name,) in pg.sql(
        "SELECT c.relname FROM pg_class AS c WHERE c.relnamespace = 'fenceq'::regnamespace"
        " AND c.relkind IN ('r', 'v', 'S')")]
    shadowed: set[str] = set()
    with psycopg.connect(hostile_url, autocommit=True) as conn:
        for schema in schemas:
            for name, arguments, returns in overloads:
                # "any" arguments are C-only: the look-alike takes anyarray or
                # anyelement instead, which a call can match just as well.
                arguments = arguments.replace('VARIADIC "any"', "VARIADIC anyarray").replace('"any"', "anyelement")
                created = sqlstate_of(conn, f"""
                    CREATE FUNCTION {schema}.{name}({arguments}) RETURNS {returns}
                    LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'captured: {schema}.{name}'; END $$""")
                if created is None:
                    shadowed.add(name)
            for number, (operator, left, right, result) in enumerate(operators):
                function = f"{schema}.captured_operator_{number}"
                arguments = ", ".join(a for a in (left, right) if a)
                leftarg = f"LEFTARG = {left}, " if left else ""  # else a prefix operator
                if sqlstate_of(conn, f"""
                        CREATE FUNCTION {function}({arguments}) RETURNS {result} LANGUAGE plpgsql
                        AS $$ BEGIN RAISE EXCEPTION 'captured: {schema}.{operator}'; END $$""") is None \
                        and sqlstate_of(conn, f"CREATE OPERATOR {schema}.{operator} ({leftarg}"
                                              f"RIGHTARG = {right}, FUNCTION = {function})") is None:
                    shadowed.add(operator)
            for relation in relations:
                conn.execute(f'CREATE TABLE {schema}."{relation}" (job_id text, queue text)')
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO PUBLIC")
            conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO PUBLIC")
    return shadowed


def _outcome(call: Callable[[], Any]) -> Any:
    """What a call answered, without what differs between two runs (ids,
    tokens, times, queue names): booleans, counts, statuses and error codes."""
    try:
        value = call()
    except fenceq.FenceqError as error:
        return ("error", error.sqlstate or type(error).__name__)
    except psycopg.Error as error:
        return ("error", error.sqlstate, str(error)[:200])
    return _shape(value)


def _shape(value: Any) -> Any:
    if isinstance(value, (bool, int)) or value is None:
        return value
    if isinstance(value, str):
        return value if value in {"pending", "claimed", "completed", "failed", "cancelled",
                                  "cancel_requested"} else "str"
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    if isinstance(value, dict):  # a payload, result, checkpoint or progress
        return {k: _shape(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return {f.name: _shape(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.name.endswith(("_at", "_id", "token", "queue", "age", "fence", "lease", "budget"))}
    return type(value).__name__


def sql(client: fenceq.Client, name: str, shape: Shape, *args: tuple[str, str, Any]) -> Any:
    """A fenceq function called in SQL through a client's connection."""
    return client._backend.run(Op(name, tuple(Arg(*arg) for arg in args), shape))


def _scenario(admin: fenceq.Client, worker: fenceq.Client, producer: fenceq.Client, q: str,
              reader: fenceq.Client) -> list:
    """Every public function, once or more, with answers that do not depend
    on the clock; the views are read by ``reader``."""
    out: list = []
    run = lambda call: out.append(_outcome(call))  # noqa: E731
    run(lambda: admin.create_queue(q, lease=timedelta(minutes=5), max_attempts=1))
    run(lambda: admin.alter_queue(q, max_attempts=1))
    run(lambda: admin.set_queue_limits(q, max_claimed=100))
    run(lambda: admin.set_queue_notify(q, True))
    run(lambda: admin.set_queue_notify_done(q, True))
    first = producer.submit(q, "t", {"n": 1, "s": "x"}, submission_id=f"{q}-s1", active_key=f"{q}-k")
    run(lambda: producer.submit(q, "t", {"n": 1, "s": "x"}, submission_id=f"{q}-s1", active_key=f"{q}-k") == first)
    run(lambda: producer.submit(q, "t", {"n": 2}, submission_id=f"{q}-s1"))
    run(lambda: producer.submit(q, "t", {"n": 3}, active_key=f"{q}-k"))
    run(lambda: producer.submit_batch(q, [{"task": "b", "payload": {"i": i}} for i in range(4)]))
    run(lambda: producer.get_job(first))
    run(lambda: producer.version())
    token = fenceq.new_claim_token()
    claim = worker.claim_next([q], "w", token)
    run(lambda: claim.job_id == first)
    run(lambda: worker.recover_claim("w", token).job_id == first)
    run(lambda: worker.heartbeat(claim.fence))
    run(lambda: worker.checkpoint(claim.fence, "step", {"a": 1}))
    run(lambda: worker.progress(claim.fence, {"p": 50}))
    run(lambda: worker.set_pid(claim.fence, 4242))
    run(lambda: worker.claim_state(claim.fence))
    run(lambda: worker.extend(claim.fence, timedelta(minutes=1)))
    run(lambda: worker.complete(claim.fence, {"ok": True}))
    run(lambda: worker.complete(claim.fence))
    run(lambda: worker.heartbeat(claim.fence))
    batch = worker.claim_batch([q], "w", [fenceq.new_claim_token() for _ in range(4)])
    fences = [c.fence for c in batch]
    run(lambda: len(batch))
    run(lambda: worker.heartbeat_batch(fences))
    run(lambda: worker.complete_batch(fences[:1], [{"r": 1}]))
    run(lambda: worker.fail(fences[1], "boom", retry=False))
    run(lambda: worker.release(fences[2]))
    run(lambda: admin.cancel(batch[3].job_id))
    run(lambda: worker.claim_state(fences[3]))
    run(lambda: worker.acknowledge_cancel(fences[3]))
    letters = reader.dead_letters(queue=q)
    run(lambda: letters)
    run(lambda: admin.replay_dead_letter(letters[0].dlq_id) is not None)
    run(lambda: admin.discard_dead_letter(letters[0].dlq_id))
    # Version 7's calls (guarantees §21), made as a driver in another
    # language would make them: SQL with named arguments.
    run(lambda: len(sql(reader, "search_jobs", Shape.ROWS, ("queue", "text", q), ("status", "text", "pending"))))
    unordered = lambda rows: [{k: v for k, v in row.items() if k != "seq"} for row in rows]  # noqa: E731
    run(lambda: unordered(sql(reader, "search_jobs", Shape.ROWS, ("submission_prefix", "text", f"{q}-s"))))
    run(lambda: unordered(sql(reader, "search_jobs", Shape.ROWS, ("queue", "text", q), ("status", "text", "pending"),
                              ("error_contains", "text", "BOOM"))))  # the job replayed above
    run(lambda: len(sql(reader, "activity", Shape.ROWS, ("queue", "text", q))))
    run(lambda: isinstance(sql(worker, "sample_activity", Shape.SCALAR), int))
    run(lambda: sql(admin, "retry_jobs", Shape.SCALAR, ("queue", "text", q), ("task", "text", "b")))
    run(lambda: sql(admin, "replay_dead_letters", Shape.SCALAR, ("queue", "text", q), ("error_contains", "text", "boom")))
    run(lambda: sql(admin, "cancel_jobs", Shape.SCALAR, ("queue", "text", q), ("payload_contains", "jsonb", '{"i": 1}')))
    run(lambda: admin.cancel_matching(q, task="b", payload_contains={"i": 2}))
    run(lambda: admin.cancel_matching(q, task="b"))
    run(lambda: worker.reap(max_rows=100))
    lock = worker.acquire_lock(f"{q}-lock", "w", timedelta(minutes=1))
    run(lambda: lock is not None)
    run(lambda: worker.acquire_lock(f"{q}-lock", "other", timedelta(minutes=1)))
    run(lambda: worker.renew_lock(f"{q}-lock", "w", lock, timedelta(minutes=1)))
    run(lambda: worker.check_lock(f"{q}-lock", lock))
    run(lambda: worker.release_lock(f"{q}-lock", "w", lock))
    run(lambda: worker.check_lock(f"{q}-lock", lock))
    run(lambda: admin.set_schedule(f"{q}-every-minute", q, "cron", "* * * * *", {"from": "schedule"}))
    run(lambda: isinstance(worker.tick(max_rows=10), int))  # how many are due depends on the clock
    run(lambda: worker.next_due([q]) is not None)
    run(lambda: admin.drop_schedule(f"{q}-every-minute"))
    run(lambda: admin.pause_queue(q))
    run(lambda: worker.claim_next([q], "w", fenceq.new_claim_token()))
    run(lambda: admin.resume_queue(q))
    run(lambda: [s for s in reader.stats() if s.queue == q])
    run(lambda: admin.purge(timedelta(0), max_rows=100))
    run(lambda: [(c.check_name, c.ok) for c in admin.verify_schema()])
    return out


def test_look_alikes_planted_by_a_hostile_role_change_no_result(pg, login):
    """A role that may create in public (as before PostgreSQL 15) and owns a
    schema plants look-alikes there. Callers whose search_path puts both
    before pg_catalog call every function and get the answers they get
    without the look-alikes, and nothing fenceq does reaches one (each
    raises). The client's own reads of the views resolve their operators in
    the caller's search_path: they are run by callers whose search_path
    leaves pg_catalog first (PostgreSQL's default), as docs/dba.md §2.2 asks."""
    hostile = login(None)
    pg.sql(f"GRANT CREATE ON SCHEMA public TO {hostile}")
    pg.sql(f"CREATE SCHEMA hostile AUTHORIZATION {hostile}")

    def callers(search_path: str) -> dict[str, str]:
        urls = {}
        for group in GROUP_ROLES:
            role = login(group)
            pg.sql(f"ALTER ROLE {role} SET search_path = {search_path}")
            urls[group] = url_of(pg, role)
        return urls

    catalog_last = callers("hostile, public, pg_catalog, fenceq")
    catalog_first = callers('"$user", hostile, public')

    def scenario(q: str, urls: dict[str, str], reader_url: str) -> list:
        with fenceq.connect(urls["fenceq_admin"]) as admin, fenceq.connect(urls["fenceq_worker"]) as worker, \
                fenceq.connect(urls["fenceq_producer"]) as producer, fenceq.connect(reader_url) as reader:
            return _scenario(admin, worker, producer, q, reader)

    clean = scenario("clean", catalog_last, pg.url)
    assert not any(isinstance(o, tuple) and o[0] == "error" and len(o) > 2 for o in clean), clean
    called = _called_catalog_functions(pg)
    assert {"now", "clock_timestamp", "gen_random_uuid", "sha256", "jsonb_typeof", "format", "count"} <= called
    shadowed = _plant_look_alikes(pg, url_of(pg, hostile), ("public", "hostile"))
    assert called | set(SHADOWED_OPERATORS) <= shadowed, (called | set(SHADOWED_OPERATORS)) - shadowed
    with psycopg.connect(catalog_last["fenceq_worker"]) as conn:  # the look-alikes are live
        with pytest.raises(psycopg.errors.RaiseException, match="captured"):
            conn.execute("SELECT now()")
    assert scenario("trapped", catalog_last, pg.url) == clean
    assert scenario("read", catalog_first, catalog_first["fenceq_admin"]) == clean
    with pg.connect() as admin:
        assert all(check.ok for check in admin.verify_schema())
    pg.sql("DROP SCHEMA hostile CASCADE")
