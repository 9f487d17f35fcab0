"""The SQLite fuzzer, in two layers.

- ``sqlite`` (client): every operation of the SQLite backend (its statement
  files in sql/sqlite/, its views and verify_schema) through the client
  method of the same name, with generated Python arguments read off the
  method's signature: careful ones, and hostile ones (wrong types, None,
  NUL and lone surrogates, huge and deep JSON, limit durations and moments,
  naive datetimes, malformed fences).
- ``sqlite-file``: every statement file run as sql/sqlite/README.md tells
  any driver to run it, with raw parameter values (any SQLite type,
  malformed JSON and timestamp texts, out-of-range integers): the files
  check their own inputs, so they must answer a QF row, not fail.

A refused call must leave every table of the file as it was.
"""

from __future__ import annotations

import collections.abc
import contextlib
import hashlib
import inspect
import json
import sqlite3
import types
import typing
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from hypothesis import strategies as st

import fenceq
import fuzz_values as fv
from fenceq import canonical
from fenceq.backends import sqlite as backend
from fenceq.types import Fence
from fuzz_hints import FENCE_PARTS, FRESH_TOKENS, OWNERS, Context, Pools
from fuzz_outcomes import SQLITE_DOCUMENTED_CODES, Tally

CLIENT, FILE = "sqlite", "sqlite-file"


def operations() -> list[str]:
    """Every operation the SQLite backend runs: its statement files, the
    operations it answers from views, and those it runs in Python."""
    files = {p.stem for p in backend.sql_dir("sqlite").glob("*.sql") if p.stem != "schema"}
    return sorted((files - backend.STATEMENT_PARTS) | set(backend._VIEWS) | set(backend._IN_PYTHON))


def statement_files() -> list[str]:
    return sorted(p.stem for p in backend.sql_dir("sqlite").glob("*.sql") if p.stem != "schema")


# The database: digest and pools ------------------------------------------------------

class State:
    """Reads the file on a connection of its own (WAL: beside the client's)."""

    def __init__(self, path: str, context: Context):
        self.path = path
        self.reader = sqlite3.connect(path, isolation_level=None)
        self.context = context
        self.tables = [r[0] for r in self.reader.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' ORDER BY name")]
        # Every column in the sort: row order cannot depend on the query plan.
        self.scans = [f'SELECT * FROM "{t}" ORDER BY ' + ", ".join(
            str(i + 1) for i in range(len(self.reader.execute(f'PRAGMA table_info("{t}")').fetchall())))
            for t in self.tables]
        self.digest = ""
        self.data_version = -1
        self.refresh()

    def current_digest(self) -> str:
        hasher = hashlib.md5()
        for scan in self.scans:
            hasher.update(scan.encode())
            hasher.update(repr(self.reader.execute(scan).fetchall()).encode("utf-8", "surrogatepass"))
        return hasher.hexdigest()

    def _data_version(self) -> int:
        """SQLite's count of commits by other connections to the file, as
        this connection sees it: unchanged means nothing was committed."""
        return self.reader.execute("PRAGMA data_version").fetchone()[0]

    def changed(self) -> bool:
        """Whether the committed content of some table differs from the
        digest held (and now holds the new one). The digest is computed
        again only when a commit happened; a commit that left the content as
        it was does not count. On True, ``refresh`` reads the new pools."""
        version = self._data_version()
        if version == self.data_version:
            return False
        self.data_version = version
        digest, self.digest = self.digest, self.current_digest()
        return digest != self.digest

    def refresh(self) -> None:
        run = self.reader.execute
        version = self._data_version()
        if version != self.data_version:
            self.data_version, self.digest = version, self.current_digest()
        live = run("SELECT job_id, owner_id, generation, claim_token FROM fenceq__jobs"
                   " WHERE status = 'claimed' ORDER BY job_id LIMIT 40").fetchall()
        stale = run("SELECT job_id, owner_id, generation, claim_token FROM fenceq__claims"
                    " WHERE job_id IS NOT NULL ORDER BY claimed_at DESC LIMIT 20").fetchall()
        # Every spent key: a claim_jobs call's row (version 8) names no job of its own.
        tokens = [r[0] for r in run("SELECT claim_token FROM fenceq__claims ORDER BY claimed_at DESC LIMIT 20")]
        self.context.pools = Pools(
            queues=[r[0] for r in run("SELECT queue FROM fenceq__queues ORDER BY queue LIMIT 60")],
            fences=[tuple(r) for r in live], stale=[tuple(r) for r in stale], tokens=tokens,
            job_ids=[r[0] for r in run("SELECT job_id FROM fenceq__jobs ORDER BY seq DESC LIMIT 40")],
            dlq_ids=[r[0] for r in run("SELECT dlq_id FROM fenceq__dead_letters ORDER BY failed_at DESC LIMIT 20")],
            jobs=run("SELECT count(*) FROM fenceq__jobs").fetchone()[0])

    def close(self) -> None:
        self.reader.close()


SEED_QUEUES = [("q-main", 30, 5, True), ("q-short", 1, 2, True), ("q-once", 30, 1, True), ("q-nodlq", 30, 1, False)]
CHURN = ["submit", "claim", "claim", "dead-letter", "cancel", "expire"]
MAX_JOBS = 120


def _quietly(call: Callable[[], Any]) -> Any:
    """A setup call: fenceq may refuse it (a queue the fuzzer paused, an
    active key in use); only its own refusals pass."""
    try:
        return call()
    except fenceq.FenceqError as error:
        if not (error.sqlstate or "").startswith("QF"):
            raise
        return None


def reseed(client: fenceq.Client, state: State, salt: int) -> None:
    with contextlib.closing(sqlite3.connect(state.path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for table in state.tables:
            conn.execute(f'DELETE FROM "{table}"')
        conn.execute("COMMIT")
    for queue, lease, attempts, dlq in SEED_QUEUES:
        client.create_queue(queue, lease=timedelta(seconds=lease), max_attempts=attempts, dead_letter=dlq)
    for i in range(24):
        queue = SEED_QUEUES[i % 2][0] if i % 5 else "q-once"
        client.submit(queue, "send-mail", {"n": i}, priority=i % 3,
                      submission_id=f"seed-{salt}-{i}" if i % 4 == 0 else None)
    for i in range(10):
        churn(client, state, "claim", salt + i)
    for i, action in enumerate(["dead-letter", "dead-letter", "cancel", "expire"]):
        churn(client, state, action, salt + i)
    state.refresh()


def churn(client: fenceq.Client, state: State, action: str, salt: int) -> None:
    """One state change made with valid calls (not counted)."""
    if action == "submit":
        _quietly(lambda: client.submit(SEED_QUEUES[salt % 4][0], "resize",
                                       active_key=f"key-{salt % 3}" if salt % 2 else None, force=salt % 4 == 1))
    elif action == "claim":
        lease = None if salt % 3 else timedelta(milliseconds=50)
        _quietly(lambda: client.claim_next([q[0] for q in SEED_QUEUES], OWNERS[salt % len(OWNERS)],
                                           fenceq.new_claim_token(), lease=lease))
    else:
        live = state.reader.execute("SELECT job_id, owner_id, generation, claim_token FROM fenceq__jobs"
                                    " WHERE status = 'claimed' ORDER BY random() LIMIT 1").fetchone()
        if live is None:
            return
        fence = Fence(*live)
        if action == "dead-letter":
            _quietly(lambda: client.fail(fence, "boom", retry=False))
        elif action == "cancel":
            _quietly(lambda: client.cancel(fence.job_id))
        else:
            with contextlib.closing(sqlite3.connect(state.path, isolation_level=None)) as conn:
                conn.execute("UPDATE fenceq__jobs SET lease_expires_at = lease_expires_at - 3600000000"
                             " WHERE job_id = ?", (fence.job_id,))
    state.refresh()


# Client layer: Python arguments by signature -------------------------------------------

class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


ANYTHING = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 2**31, 2**63, 2**64, 1.5, float("nan"), float("inf"), "", "x",
                     b"bytes", bytearray(b"x"), [], {}, (), ["a"], {"a": 1}, {1, 2}, frozenset(), object(),
                     Unprintable(), Fence("j", "o", 1, "t"), Fence("", "", 0, ""), timedelta(seconds=1),
                     datetime(2000, 1, 1), datetime.now(timezone.utc), iter(["q"]), range(3), 1j])
    | st.sampled_from(fv.UNENCODABLE_TEXTS) | fv.hostile_text() | fv.integers() | fv.timedeltas() | fv.moments()
    | fv.json_documents() | st.builds(_cycle))

SHORT_DELTAS = st.integers(1, 120).map(lambda n: timedelta(seconds=n))
NEAR_MOMENTS = st.integers(-3600, 3600).map(lambda n: datetime.now(timezone.utc) + timedelta(seconds=n))


class PythonCalls:
    """Strategies of client calls, built once per operation."""

    def __init__(self, context: Context):
        self.context = context
        self.fence = context.fence.map(lambda f: None if f is None else Fence(*f))
        self.fences = context.batch.map(lambda fs: [Fence(*f) for f in fs])
        self._calls: dict[str, st.SearchStrategy[tuple[list[Any], dict[str, Any]]]] = {}

    def call(self, name: str) -> st.SearchStrategy[tuple[list[Any], dict[str, Any]]]:
        if name not in self._calls:
            method = getattr(fenceq.Client, name)
            signature = inspect.signature(method)
            hints = typing.get_type_hints(method)
            params = [p for p in signature.parameters.values() if p.name != "self"]
            self._calls[name] = st.composite(lambda draw: self._draw(draw, params, hints))()
        return self._calls[name]

    def _draw(self, draw: Any, params: list[inspect.Parameter], hints: dict[str, Any]):
        names = {p.name for p in params}
        self.context.focus = None
        mode = draw(st.integers(0, 99))
        target = draw(st.integers(0, len(params) - 1)) if params else -1
        positional, keywords = [], {}
        for index, param in enumerate(params):
            hostile = (mode >= 50 and index == target) or (mode >= 85 and draw(st.integers(0, 9)) < 3)
            optional = param.default is not inspect.Parameter.empty
            if optional and draw(st.integers(0, 99)) < 40 and not hostile:
                continue
            value = draw(ANYTHING) if hostile else self._careful(draw, param.name, hints.get(param.name), names)
            if param.kind is inspect.Parameter.KEYWORD_ONLY:
                keywords[param.name] = value
            else:
                positional.append(value)
        return positional, keywords

    def _careful(self, draw: Any, name: str, annotation: Any, names: set[str]) -> Any:
        context = self.context
        if name == "fence":
            return draw(self.fence)
        if name == "fences":
            return draw(self.fences)
        if name == "results":
            return draw(st.none() | st.lists(fv.small_json, max_size=4))
        if name == "queues":
            return draw(st.lists(context.from_pool("queues", fv.plain_text()), min_size=1, max_size=3))
        if name == "claim_tokens":
            return draw(st.lists(FRESH_TOKENS, min_size=1, max_size=4))
        if name == "requests":
            return draw(st.lists(st.fixed_dictionaries(
                {"task": st.sampled_from(["send-mail", "t"])},
                optional={"payload": fv.small_json, "priority": st.integers(0, 5),
                          "submission_id": st.sampled_from(["sub-1", "sub-2"]), "active_key": st.just("key-1"),
                          "run_at": NEAR_MOMENTS, "job_id": context.from_pool("job_ids", fv.plain_text(30))}),
                max_size=5))
        if name in FENCE_PARTS and context.focus is None and draw(st.integers(0, 2)) == 0:
            context.focus = draw(context.fence)
        hint = context.hint(name)
        if hint is not None and name not in ("generation",):
            return draw(hint)
        return draw(by_annotation(annotation))


def by_annotation(annotation: Any) -> st.SearchStrategy[Any]:
    """A careful value of an annotated type; anything for a type this
    fuzzer does not know."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return st.one_of([by_annotation(a) for a in args] + [st.none()])
    origin = typing.get_origin(annotation) or annotation
    simple = {str: fv.plain_text(), int: st.integers(1, 10), bool: st.booleans(), float: st.floats(1, 4),
              timedelta: SHORT_DELTAS, datetime: NEAR_MOMENTS, Any: fv.small_json}
    if annotation in simple:
        return simple[annotation]
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable) and args:
        return st.lists(by_annotation(args[0]), min_size=1, max_size=3)
    if annotation is Fence:
        return st.builds(Fence, fv.plain_text(36), fv.plain_text(), st.integers(1, 3), fv.plain_text())
    return ANYTHING


# File layer: raw driver values by parameter name ----------------------------------------

INTERVAL_NAMES = {"lease", "budget", "backoff_base", "backoff_max", "older_than", "submissions_older_than"}
TIME_NAMES = {"run_at", "expires_at", "retry_at"}
FLAG_NAMES = {"force", "retry", "notify", "dead_letter", "include_handled"}
JSON_NAMES = {"payload", "result", "value"}
ARRAY_NAMES = {"queues": 0, "job_ids": 0, "owner_ids": 1, "generations": 2, "claim_tokens": 3}

TIME_TEXTS = ["2000-01-01T00:00:00.000000Z", "9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00.000000Z",
              "10000-01-01T00:00:00.000000Z", "2000-01-01", "2000-01-01T00:00:00Z", "2000-01-01 00:00:00+00",
              "2000-02-30T00:00:00.000000Z", "infinity", "", "2000-01-01T00:00:00.000000+01:00"]
WIRE_ANYTHING = st.one_of(
    st.none(), st.sampled_from([0, 1, -1, 2, 2**31, 2**63 - 1, -(2**63), 0.5, 1e308, float("inf"), float("-inf")]),
    st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), fv.hostile_text(),
    st.sampled_from(["a\x00b", "\x00"]), st.binary(max_size=8), fv.json_texts(), st.sampled_from(TIME_TEXTS))


def utc_text(moment: datetime) -> str:
    return canonical.utc_text(moment)


class WireCalls:
    """Strategies of raw parameter dictionaries, one per statement file."""

    def __init__(self, context: Context):
        self.context = context
        self._calls: dict[str, st.SearchStrategy[dict[str, Any]]] = {}

    def call(self, name: str) -> st.SearchStrategy[dict[str, Any]]:
        if name not in self._calls:
            parameters = backend._plan(name).parameters
            self._calls[name] = st.composite(lambda draw: self._draw(draw, parameters))()
        return self._calls[name]

    def _draw(self, draw: Any, parameters: tuple[str, ...]) -> dict[str, Any]:
        context = self.context
        context.focus = draw(context.fence) if set(parameters) & set(FENCE_PARTS) else None
        batch = draw(context.batch) if set(parameters) & set(ARRAY_NAMES) else []
        mode = draw(st.integers(0, 99))
        target = draw(st.integers(0, len(parameters) - 1)) if parameters else -1
        bound = {}
        for index, name in enumerate(parameters):
            hostile = (mode >= 50 and index == target) or (mode >= 85 and draw(st.integers(0, 9)) < 3)
            if draw(st.integers(0, 99)) < 3 and not hostile:
                bound[name] = None  # omitted: its default
            else:
                bound[name] = draw(WIRE_ANYTHING) if hostile else self._careful(draw, name, batch, bound)
        return bound

    def _careful(self, draw: Any, name: str, batch: list[Any], bound: dict[str, Any]) -> Any:
        context = self.context
        if name in INTERVAL_NAMES:
            return draw(st.integers(1, 120_000_000))
        if name in TIME_NAMES:
            return utc_text(draw(NEAR_MOMENTS))
        if name in FLAG_NAMES:
            return draw(st.integers(0, 1))
        if name in JSON_NAMES:
            return canonical.canonical_json(draw(fv.small_json))
        if name == "queues":
            return json.dumps(draw(st.lists(context.from_pool("queues", fv.plain_text()), min_size=1, max_size=3)))
        if name == "claim_tokens" and not batch:
            return json.dumps(draw(st.lists(FRESH_TOKENS, min_size=1, max_size=4)))
        if name in ARRAY_NAMES:
            return json.dumps([f[ARRAY_NAMES[name]] for f in batch])
        if name == "results":
            return "[" + ",".join(canonical.canonical_json(draw(fv.small_json)) for _ in batch) + "]"
        if name == "requests":
            tasks = draw(st.lists(st.sampled_from(["send-mail", "t"]), max_size=4))
            return json.dumps([{"task": t, "payload": None, "force": False} for t in tasks])
        if name == "fingerprint":
            return draw(st.none() | FRESH_TOKENS.map(lambda h: "fq1:" + h * 2))
        if name in ("priority", "max_attempts", "max_rows", "pid", "limit"):
            return draw(st.integers(1, 10))
        if name == "backoff_factor":
            return draw(st.floats(1, 4))
        hint = context.hint(name)
        if hint is not None:
            value = draw(hint)
            return canonical.canonical_json(value) if isinstance(value, (dict, list)) else value
        return draw(fv.plain_text())


def run_file(connection: sqlite3.Connection, name: str, bound: dict[str, Any]) -> str | None:
    """Run a statement file as sql/sqlite/README.md tells any driver to:
    BEGIN IMMEDIATE, each statement in order, then the last one's first
    row decides. Answers the refusal's SQLSTATE, or None on success."""
    plan = backend._plan(name)
    connection.execute("BEGIN IMMEDIATE")
    try:
        for sql in plan.setup + plan.statements:
            cursor = connection.execute(sql, bound)
        rows = cursor.fetchall()
        if rows and rows[0][0] is not None:
            connection.execute("ROLLBACK")
            return rows[0][0]
        connection.execute("COMMIT")
        return None
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


# The fuzzer -----------------------------------------------------------------------------

class Fuzzer:
    """Both layers on one SQLite file."""

    def __init__(self, url: str):
        self.client = fenceq.connect(url)
        self.path = backend.database_path(url)
        self.context = Context()
        self.state = State(self.path, self.context)
        self.python_calls = PythonCalls(self.context)
        self.wire_calls = WireCalls(self.context)
        self.raw = backend.open_connection(self.path)
        reseed(self.client, self.state, 0)

    def _prelude(self, data: Any) -> None:
        action, salt = data.draw(st.tuples(st.integers(0, 99), st.integers(0, 10**6)), label="churn")
        pools = self.context.pools
        if pools.jobs > MAX_JOBS or len(pools.queues) > 50 or not pools.queues:
            reseed(self.client, self.state, salt)
        elif action < 12 or not pools.fences:
            churn(self.client, self.state, CHURN[action % len(CHURN)], salt)

    def fuzz_client(self, name: str, tally: Tally, data: Any) -> None:
        self._prelude(data)
        positional, keywords = data.draw(self.python_calls.call(name), label="call")
        tally.calls += 1
        try:
            getattr(self.client, name)(*positional, **keywords)
        except fenceq.FenceqError as error:
            self._refused(tally, error.sqlstate or type(error).__name__, (name, positional, keywords))
            return
        except Exception as error:  # a raw error escaping the client is a finding
            self._refused(tally, type(error).__name__, (name, positional, keywords))
            return
        self._succeeded(tally)

    def fuzz_file(self, name: str, tally: Tally, data: Any) -> None:
        self._prelude(data)
        bound = data.draw(self.wire_calls.call(name), label="parameters")
        tally.calls += 1
        try:
            code = run_file(self.raw, name, bound)
        except Exception as error:
            self._refused(tally, f"{type(error).__name__}", (name, bound), str(error))
            return
        if code is not None:
            self._refused(tally, code, (name, bound))
        else:
            self._succeeded(tally)

    def _succeeded(self, tally: Tally) -> None:
        tally.ok += 1
        if self.state.changed():
            tally.changed += 1
            self.state.refresh()

    def _refused(self, tally: Tally, code: str, call: Any, message: str = "") -> None:
        if code.startswith("QF"):
            tally.qf[code] += 1
        elif code in SQLITE_DOCUMENTED_CODES:
            tally.pre[code] += 1
        else:
            tally.finding(code, _show(call), message or code)
        if self.state.changed():
            tally.finding("changed-on-refusal", _show(call), f"refused with {code}, yet a table changed")
            self.state.refresh()

    def close(self) -> None:
        self.client.close()
        self.raw.close()
        self.state.close()


def _show(call: Any) -> str:
    try:
        return repr(call)
    except Exception:
        return "<a call whose arguments have no repr>"
