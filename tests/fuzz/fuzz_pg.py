"""The PostgreSQL fuzzer: every public function of schema ``fenceq``, as
the catalog lists it at run time, called through raw SQL in named notation
with generated arguments.

An argument is drawn by its declared type (and, where ``fuzz_hints`` has
one, by its name) and rendered as SQL: a typed literal, an untyped literal
(PostgreSQL resolves its type), NULL, a value of another type, an odd array
(bounds, dimensions, NULL elements), limit intervals and timestamps, huge
and deep JSON, Unicode edge cases (NUL through an escape string, since a
query text cannot carry it). Each call runs in its own transaction; after a
refused one the digest of every ``fenceq._*`` table must be unchanged.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from hypothesis import strategies as st

import fuzz_values as fv
from fuzz_hints import FENCE_PARTS, FRESH_TOKENS, OWNERS, Context, Fence4, Pools
from fuzz_outcomes import Tally, pre_fenceq

ENGINE = "postgres"
CALL_TIMEOUT = "60s"  # bounds a hang only; a call cut off by it is a finding (57014)


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # format_type(): text, bigint, interval, timestamp with time zone, text[], ...
    has_default: bool


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    procedure: bool


def public_functions(conn: psycopg.Connection) -> list[Function]:
    """Every function (and procedure) of schema fenceq whose name does not
    start with an underscore, with its input parameters."""
    rows = conn.execute("""
        SELECT p.proname, p.prokind = 'p', p.pronargdefaults,
               ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) WITH ORDINALITY AS a(t, i) ORDER BY i),
               coalesce(p.proargnames, '{}'), coalesce(p.proargmodes::text[], '{}')
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'fenceq' AND p.proname !~ '^_' AND p.prokind IN ('f', 'p')
         ORDER BY p.proname""").fetchall()
    result = []
    for name, procedure, defaults, types, all_names, modes in rows:
        # proargnames also names OUT columns; proargtypes holds the inputs only.
        names = [n for i, n in enumerate(all_names) if not modes or modes[i] in ("i", "b", "v")]
        first_default = len(types) - defaults
        params = tuple(Param(names[i] if i < len(names) else f"${i + 1}", types[i], i >= first_default)
                       for i in range(len(types)))
        result.append(Function(name, params, procedure))
    return result


def private_tables(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'fenceq' AND c.relkind IN ('r', 'p') AND c.relname LIKE '\\_%'"
        " ORDER BY c.relname").fetchall()]


# Literals ---------------------------------------------------------------------------

def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def typed(text: str, type_: str) -> str:
    return f"{quote(text)}::{type_}"


def spelled(texts: st.SearchStrategy[str], type_: str) -> st.SearchStrategy[str]:
    """Texts as literals of ``type_``: cast, or untyped for PostgreSQL to resolve."""
    return st.tuples(texts, st.booleans()).map(lambda t: typed(t[0], type_) if t[1] else quote(t[0]))


# Text with NUL, as an escape string (a query text cannot carry it): 22021.
NUL_TEXTS = st.sampled_from([r"E'\000'", r"E'a\000b'", r"E'q\x00'::text", r"convert_from('\x6100'::bytea, 'UTF8')"])

INTERVAL_TEXTS = ["30 seconds", "1 microsecond", "0", "-1 second", "-1 microsecond", "1 day", "1 mon",
                  "1 year", "178000000 years", "-178000000 years", "2562047788:00:54.775807",
                  "-2562047788:00:54.775808", "infinity", "-infinity", "P1D", "PT0.000001S", "@ 1 hour ago",
                  "7000 years", "8000 years", "1.5 seconds", "00:00:00.0000001", "not an interval"]
TIMESTAMP_TEXTS = ["infinity", "-infinity", "epoch", "now", "today", "tomorrow", "yesterday",
                   "0001-01-01 00:00:00+00", "0001-01-01 00:00:00+01", "4713-11-24 00:00:00+00 BC",
                   "9999-12-31 23:59:59.999999+00", "9999-12-31 23:59:59.999999-01",
                   "10000-01-01 00:00:00+00", "294276-12-31 23:59:59.999999+00", "2000-01-01 00:00:00+15:59",
                   "2000-02-30 00:00:00+00", "2000-01-01", "not a time"]
TIMESTAMP_EXPRESSIONS = ["clock_timestamp()", "(now() - interval '1 day')", "(now() + interval '1 second')",
                         "(now() + interval '1 hour')", "(now() - interval '1 microsecond')"]
KNOWN_TYPES = ["text", "integer", "bigint", "boolean", "double precision", "interval",
               "timestamp with time zone", "jsonb"]


def interval_literal(value: timedelta) -> str:
    return f"{value // timedelta(microseconds=1)} microseconds"


def float_text(value: float) -> str:
    return repr(value).replace("inf", "Infinity").replace("nan", "NaN")


@functools.cache
def base_value(type_: str) -> st.SearchStrategy[str]:
    """A literal of a scalar type, as SQL (typed or not), at the boundaries."""
    if type_ == "text":
        return spelled(fv.hostile_text(), "text")
    if type_ in ("integer", "bigint", "smallint", "numeric"):
        return st.one_of(fv.integers().map(str), spelled(fv.integers().map(str), type_))
    if type_ == "boolean":
        return st.sampled_from(["true", "false", "'t'", "'yes'::boolean", "'off'", "'maybe'", "'2'::text"])
    if type_ in ("double precision", "real"):
        return spelled(st.one_of(st.sampled_from(fv.FLOAT_EDGES), st.floats()).map(float_text), type_)
    if type_ == "interval":
        return spelled(st.one_of(st.sampled_from(INTERVAL_TEXTS), fv.timedeltas().map(interval_literal)), type_)
    if type_.startswith("timestamp"):
        texts = st.one_of(st.sampled_from(TIMESTAMP_TEXTS), fv.moments().map(datetime.isoformat))
        return st.one_of(spelled(texts, "timestamptz"), st.sampled_from(TIMESTAMP_EXPRESSIONS))
    if type_ in ("jsonb", "json"):
        return spelled(fv.json_texts(), type_)
    # A type this fuzzer has no generator for: strings of every kind, cast
    # to it or left untyped, and literals of the types it knows.
    return st.one_of(spelled(fv.hostile_text(), type_), st.sampled_from(KNOWN_TYPES).flatmap(base_value))


@functools.cache
def typical_value(type_: str) -> st.SearchStrategy[str]:
    """A literal of a scalar type as a careful caller writes it."""
    if type_ in ("integer", "bigint", "smallint", "numeric"):
        return st.one_of(st.integers(0, 10).map(str), spelled(st.integers(0, 10).map(str), type_))
    if type_ == "boolean":
        return st.sampled_from(["true", "false"])
    if type_ in ("double precision", "real"):
        return st.floats(1, 4).map(lambda x: typed(repr(x), type_))
    if type_ == "interval":
        return spelled(st.integers(1, 120).map(lambda n: f"{n} seconds"), "interval")
    if type_.startswith("timestamp"):
        return st.sampled_from(TIMESTAMP_EXPRESSIONS)
    if type_ in ("jsonb", "json"):
        return fv.small_json.map(lambda v: typed(json.dumps(v, ensure_ascii=False), type_))
    if type_ == "text":
        return spelled(fv.plain_text(), "text")
    return base_value(type_)


def python_literal(value: Any, type_: str) -> str:
    """A Python value as a typed literal of the parameter's type."""
    if value is None:
        return f"NULL::{type_}"
    if isinstance(value, (dict, list)) or type_ in ("jsonb", "json"):
        return typed(json.dumps(value, ensure_ascii=False), type_)
    return typed(str(value), type_)


def array_of(elements: list[str], type_: str, cast: bool = True) -> str:
    """SQL element expressions as an array (ARRAY[...], cast or not)."""
    body = f"ARRAY[{', '.join(elements)}]"
    return f"{body}::{type_}" if cast else body


def element_text(expression: str) -> str:
    """An element's text for an array literal '{...}', from a literal."""
    match = re.fullmatch(r"'((?:[^']|'')*)'(::.+)?", expression)
    text = match.group(1).replace("''", "'") if match else expression
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


ARRAY_SHAPES = ["plain", "bounds0", "negative", "nulls", "two-d", "seven-d"]


def shaped_array(elements: list[str], shape: str, type_: str) -> str:
    items = ",".join(element_text(e) for e in elements)
    n = len(elements)
    body = {"plain": "{" + items + "}", "bounds0": f"[0:{n - 1}]={{{items}}}",
            "negative": f"[-5:{n - 6}]={{{items}}}", "nulls": "{" + items + ",NULL}",
            "two-d": "{{" + items + "},{" + items + "}}", "seven-d": "{{{{{{{" + items + "}}}}}}}"}[shape]
    return typed(body, type_)


@functools.cache
def odd_array(type_: str) -> st.SearchStrategy[str]:
    """Arrays with odd bounds, dimensions, NULL elements, mixed element
    types, or past the limits."""
    element = type_[:-2]
    return st.one_of(
        st.builds(shaped_array, st.lists(base_value(element), min_size=1, max_size=3),
                  st.sampled_from(ARRAY_SHAPES), st.just(type_)),
        st.builds(array_of, st.lists(base_value(element), max_size=4), st.just(type_), st.booleans()),
        st.sampled_from([typed("{}", type_), typed("{NULL}", type_), f"ARRAY[NULL]::{type_}", "ARRAY[]",
                         f"array_fill(NULL::{element}, ARRAY[2])", "ARRAY[1, 'a'::text]",
                         f"array_fill('x'::text, ARRAY[10001])::{type_}", quote("{a,b"), quote("not an array")]))


# Pools and digests --------------------------------------------------------------------

class State:
    """One database: what it holds (pools) and the digest of its tables."""

    def __init__(self, conn: psycopg.Connection, context: Context):
        self.conn = conn
        self.context = context
        self.tables = private_tables(conn)
        digests = ", ".join(f"(SELECT md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), ''))"
                            f" FROM fenceq.{table} AS t)" for table in self.tables)
        self.digest_query = f"SELECT ARRAY[{digests}]"
        # Every row version (where it lies, which transaction wrote it) of
        # every table, in one hash: a committed insert, update or delete
        # changes it; a rolled-back one cannot (its versions are invisible).
        versions = " UNION ALL ".join(f"SELECT {quote(table)}, string_agg(ctid::text || ':' || xmin::text, ','"
                                      f" ORDER BY ctid) FROM fenceq.{table}" for table in self.tables)
        self.versions_query = f"SELECT md5(string_agg(t || '=' || coalesce(v, ''), ';')) FROM ({versions}) AS s(t, v)"
        self.versions = ""
        self.query = f"""SELECT ({self.versions_query}), ARRAY[{digests}],
            ARRAY(SELECT queue FROM fenceq._queues ORDER BY queue LIMIT 60),
            ARRAY(SELECT ARRAY[job_id, owner_id, generation::text, claim_token] FROM fenceq._jobs
                   WHERE status = 'claimed' ORDER BY job_id LIMIT 40),
            ARRAY(SELECT ARRAY[c.job_id, c.owner_id, c.generation::text, c.claim_token] FROM fenceq._claims AS c
                   WHERE c.job_id IS NOT NULL ORDER BY c.claimed_at DESC LIMIT 20),
            -- Every spent key: a claim_jobs call's row (version 8) names no job of its own.
            ARRAY(SELECT c.claim_token FROM fenceq._claims AS c ORDER BY c.claimed_at DESC LIMIT 20),
            ARRAY(SELECT job_id FROM fenceq._jobs ORDER BY seq DESC LIMIT 40),
            ARRAY(SELECT dlq_id FROM fenceq._dead_letters ORDER BY failed_at DESC LIMIT 20),
            (SELECT count(*) FROM fenceq._jobs)"""
        self.digest: list[str] = []
        self.refresh()

    @property
    def pools(self) -> Pools:
        return self.context.pools

    def refresh(self) -> None:
        versions, digest, queues, live, stale, tokens, job_ids, dlq_ids, jobs = self.conn.execute(self.query).fetchone()
        self.versions, self.digest = versions, digest
        self.context.pools = Pools(queues, [_fence(f) for f in live], [_fence(f) for f in stale],
                           tokens, job_ids, dlq_ids, jobs)

    def changed(self) -> bool:
        """Whether the committed content of some table differs from the
        digest held. The digest is computed again only when a row version
        changed (most calls commit no write); a write that left the content
        as it was does not count. On True, ``refresh`` reads the new state."""
        versions = self.conn.execute(self.versions_query).fetchone()[0]
        if versions == self.versions:
            return False
        self.versions = versions
        return self.conn.execute(self.digest_query).fetchone()[0] != self.digest


def _fence(parts: list[str]) -> Fence4:
    return parts[0], parts[1], int(parts[2]), parts[3]


# Keeping the database useful ----------------------------------------------------------

SEED_QUEUES = [("q-main", "30 seconds", 5, True), ("q-short", "1 second", 2, True),
               ("q-once", "30 seconds", 1, True), ("q-nodlq", "30 seconds", 1, False)]


def _call(conn: psycopg.Connection, sql: str) -> None:
    """A setup call; fenceq may refuse it (a queue the fuzzer paused, an
    active key in use): setup is best effort, but only QF refusals pass."""
    try:
        conn.execute(sql)
    except psycopg.Error as error:
        if not (error.sqlstate or "").startswith("QF"):
            raise


def reseed(state: State, salt: int) -> None:
    """Empty every table, then declare queues, submit jobs, claim some, and
    fail some into dead letters."""
    conn = state.conn
    conn.execute("TRUNCATE " + ", ".join(f"fenceq.{t}" for t in state.tables))
    for queue, lease, attempts, dlq in SEED_QUEUES:
        _call(conn, f"SELECT fenceq.create_queue(queue => {quote(queue)}, lease => {quote(lease)}::interval,"
                    f" max_attempts => {attempts}, dead_letter => {str(dlq).lower()})")
    _call(conn, "SELECT fenceq.pause_queue(queue => 'q-once')")
    for i in range(24):
        queue = SEED_QUEUES[i % 2][0] if i % 5 else "q-once"
        _call(conn, f"SELECT fenceq.submit(queue => {quote(queue)}, task => 'send-mail',"
                    f" payload => '{{\"n\": {i}}}'::jsonb, priority => {i % 3},"
                    f" submission_id => {quote(f'seed-{salt}-{i}') if i % 4 == 0 else 'NULL'})")
    _call(conn, "SELECT fenceq.resume_queue(queue => 'q-once')")
    for i in range(10):
        churn(state, "claim", salt + i)
    churn(state, "dead-letter", salt)
    churn(state, "dead-letter", salt + 1)
    churn(state, "cancel", salt)
    churn(state, "expire", salt)


def churn(state: State, action: str, salt: int) -> None:
    """One state change made with valid calls (not counted), so that calls
    meet every kind of row: new jobs, live and expired claims, cancel
    requests, dead letters."""
    conn = state.conn
    if action == "submit":
        queue = SEED_QUEUES[salt % len(SEED_QUEUES)][0]
        _call(conn, f"SELECT fenceq.submit(queue => {quote(queue)}, task => 'resize',"
                    f" active_key => {quote(f'key-{salt % 3}') if salt % 2 else 'NULL'},"
                    f" force => {str(salt % 4 == 1).lower()})")
    elif action == "claim":
        owner = OWNERS[salt % len(OWNERS)]
        lease = "NULL" if salt % 3 else "'50 milliseconds'::interval"
        _call(conn, f"SELECT * FROM fenceq.claim_next(queues => ARRAY['q-main', 'q-short', 'q-once', 'q-nodlq'],"
                    f" owner_id => {quote(owner)}, claim_token => {quote(uuid.uuid4().hex)},"
                    f" lease => {lease})")
    elif action in ("dead-letter", "cancel", "expire"):
        live = conn.execute("SELECT job_id, owner_id, generation, claim_token FROM fenceq._jobs"
                            " WHERE status = 'claimed' ORDER BY random() LIMIT 1").fetchone()
        if live is None:
            return
        job, owner, generation, token = live
        fence = (f"job_id => {quote(job)}, owner_id => {quote(owner)}, generation => {generation},"
                 f" claim_token => {quote(token)}")
        if action == "dead-letter":
            _call(conn, f"SELECT fenceq.fail({fence}, error => 'boom', retry => false)")
        elif action == "cancel":
            _call(conn, f"SELECT fenceq.cancel(job_id => {quote(job)})")
        else:
            conn.execute("UPDATE fenceq._jobs SET lease_expires_at = clock_timestamp() - interval '1 second'"
                         " WHERE job_id = %s", (job,))
    state.refresh()


CHURN = ["submit", "claim", "claim", "dead-letter", "cancel", "expire"]
MAX_JOBS = 120


# Calls ----------------------------------------------------------------------------------

FENCE_ARRAYS = {"job_ids": 0, "owner_ids": 1, "generations": 2, "claim_tokens": 3}


class Calls:
    """The strategies of calls, built once, reading the database's state
    from a Context at draw time."""

    def __init__(self, context: Context):
        self.context = context
        self.requests = self._requests()
        self._calls: dict[str, st.SearchStrategy[str]] = {}

    def call(self, function: Function) -> st.SearchStrategy[str]:
        if function.name not in self._calls:
            self._calls[function.name] = st.composite(lambda draw: self._draw_call(draw, function))()
        return self._calls[function.name]

    def _draw_call(self, draw: Any, function: Function) -> str:
        """Named notation: half of the calls careful, a third with one
        hostile argument, the rest with many."""
        context = self.context
        names = {p.name for p in function.params}
        context.focus = None
        if names & set(FENCE_PARTS) and ("job_id" in names or draw(st.integers(0, 2)) == 0):
            context.focus = draw(context.fence)
        batch = draw(context.batch) if names & set(FENCE_ARRAYS) else []
        mode = draw(st.integers(0, 99))
        target = draw(st.integers(0, len(function.params) - 1)) if function.params else -1
        parts = []
        for index, param in enumerate(function.params):
            hostile = (mode >= 50 and index == target) or (mode >= 85 and draw(st.integers(0, 9)) < 3)
            leave_out = param.has_default and draw(st.integers(0, 99)) < 40
            if mode >= 85 and not param.has_default:
                leave_out = draw(st.integers(0, 99)) < 2
            if not leave_out:
                value = self._hostile(draw, param) if hostile else self._careful(draw, param, batch)
                parts.append(f"{param.name} => {value}")
        if mode >= 85 and draw(st.integers(0, 19)) == 0:
            parts.append("no_such_parameter => 1")
        call = f"fenceq.{function.name}({', '.join(parts)})"
        return f"CALL {call}" if function.procedure else f"SELECT count(*) FROM {call} AS r"

    def _hostile(self, draw: Any, param: Param) -> str:
        """NULL, a value of another type, NUL, a boundary, an odd array."""
        type_ = param.type
        roll = draw(st.integers(0, 99))
        if roll < 15:
            return draw(st.sampled_from(["NULL", f"NULL::{type_}"]))
        if roll < 35:
            return draw(st.sampled_from(KNOWN_TYPES).flatmap(base_value))
        if roll < 45 and type_ in ("text", "jsonb", "text[]"):
            return draw(NUL_TEXTS)
        return draw(odd_array(type_) if type_.endswith("[]") else base_value(type_))

    def _careful(self, draw: Any, param: Param, batch: list[Fence4]) -> str:
        """As a careful caller writes it, drawing on the hints."""
        type_, context = param.type, self.context
        if type_.endswith("[]"):
            element = type_[:-2]
            if param.name in FENCE_ARRAYS:
                part = FENCE_ARRAYS[param.name]
                values = [python_literal(f[part], element) for f in batch]
            elif param.name == "queues":
                values = [python_literal(q, element) for q in
                          draw(st.lists(context.from_pool("queues", fv.plain_text()), min_size=1, max_size=3))]
            elif param.name == "claim_tokens":
                values = [python_literal(t, element) for t in draw(st.lists(FRESH_TOKENS, min_size=1, max_size=4))]
            else:
                values = draw(st.lists(typical_value(element), min_size=1, max_size=3))
            return array_of(values, type_)
        if param.name == "requests":
            return draw(self.requests)
        hint = context.hint(param.name)
        if hint is not None:
            return python_literal(draw(hint), type_)
        return draw(typical_value(type_))

    def _requests(self) -> st.SearchStrategy[str]:
        """submit_batch's JSON array of requests: mostly well formed, each
        field sometimes hostile."""
        texts = fv.hostile_text()
        moments = st.one_of(st.none(), fv.moments().map(datetime.isoformat), st.sampled_from(TIMESTAMP_TEXTS))
        fields = {
            "payload": fv.json_documents(),
            "submission_id": st.one_of(st.none(), st.sampled_from(["sub-1", "sub-2"]), texts),
            "job_id": st.one_of(st.none(), self.context.from_pool("job_ids", texts)),
            "priority": st.one_of(st.none(), fv.integers(), st.sampled_from(["1", 1.5, True])),
            "run_at": moments,
            "expires_at": moments,
            "max_attempts": st.one_of(st.none(), fv.integers()),
            "active_key": st.one_of(st.none(), st.sampled_from(["key-1"]), texts),
            "force": st.one_of(st.booleans(), st.sampled_from(["true", 1, None])),
            "unknown": st.just(1),
        }
        request = st.fixed_dictionaries(
            {"task": st.one_of(st.sampled_from(["send-mail", "t"]), texts, fv.integers())}, optional=fields)
        documents = st.one_of(st.lists(request, max_size=5), st.lists(request, max_size=5),
                              st.sampled_from([[], [None], [1], {"task": "t"}, "x", [[{"task": "t"}]]]))
        return documents.map(lambda d: typed(json.dumps(d, ensure_ascii=False), "jsonb"))


def inside_fenceq(error: psycopg.Error) -> bool:
    context = error.diag.context or ""
    return "PL/pgSQL function" in context or "SQL function" in context


class Fuzzer:
    """Calls the functions of one database and tallies what they answer."""

    def __init__(self, url: str):
        self.url = url
        self.context = Context()
        self.calls = Calls(self.context)
        self.conn = self._connect()
        self.state = State(self.conn, self.context)
        reseed(self.state, 0)
        self.functions = public_functions(self.conn)

    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self.url, autocommit=True)
        conn.execute(f"SET statement_timeout = '{CALL_TIMEOUT}'")
        return conn

    def fuzz(self, function: Function, tally: Tally, data: Any) -> None:
        """One call (after, sometimes, a state change), tallied."""
        state = self.state
        action, salt = data.draw(st.tuples(st.integers(0, 99), st.integers(0, 10**6)), label="churn")
        if state.pools.jobs > MAX_JOBS or len(state.pools.queues) > 50 or not state.pools.queues:
            reseed(state, salt)
        elif action < 12 or not state.pools.fences:
            churn(state, CHURN[action % len(CHURN)], salt)
        sql = data.draw(self.calls.call(function), label="call")
        tally.calls += 1
        try:
            self.conn.execute(sql).fetchall()
        except psycopg.Error as error:
            if self.conn.closed or self.conn.broken:
                tally.finding("connection-lost", sql, str(error))
                self.conn = self._connect()
                self.state = State(self.conn, self.context)
                return
            self._refused(tally, sql, error)
            return
        tally.ok += 1
        if state.changed():
            tally.changed += 1
            state.refresh()

    def _refused(self, tally: Tally, sql: str, error: psycopg.Error) -> None:
        code = error.sqlstate or f"client:{type(error).__name__}"
        if code.startswith("QF"):
            tally.qf[code] += 1
        elif pre_fenceq(code) and not inside_fenceq(error):
            tally.pre[code] += 1
        else:
            where = "inside fenceq" if inside_fenceq(error) else "before fenceq"
            tally.finding(code, sql, f"{where}: {str(error).splitlines()[0] if str(error) else ''}")
        if self.state.changed():
            tally.finding("changed-on-refusal", sql, f"refused with {code}, yet a table changed")
            self.state.refresh()

    def close(self) -> None:
        self.conn.close()
