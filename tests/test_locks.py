"""Named locks with fencing tokens (docs/guarantees.md §15), on both engines,
and with real concurrent sessions where PostgreSQL's row locks are the
point."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from datetime import datetime, timedelta
from typing import Any, Callable

import psycopg
import pytest

import fenceq
from fenceq.backends import write_lock_held
from fenceq.backends.sqlite import database_path
from fenceq.locks import check_lock_in_transaction
from fenceq.migrate import rollback
from fenceq.ops import Arg, Op
from helpers import raises_code, wait_until_past
from test_pg_roles import login  # noqa: F401  (a fixture)

LONG = timedelta(seconds=60)
SHORT = timedelta(seconds=1)
GENEROUS = 30.0  # seconds: bounds a wait that only a failure would exhaust
MAX_TOKEN = 2**63 - 1


def lock_rows(db) -> list[tuple[str, str | None, int, datetime | None]]:
    """Every row of the locks view: (lock, owner_id, token, expires_at)."""
    if db.backend == "postgres":
        return [tuple(r) for r in db.sql("SELECT lock, owner_id, token, expires_at FROM fenceq.locks ORDER BY 1")]
    rows = db.sql("SELECT lock, owner_id, token, expires_at FROM fenceq_locks ORDER BY 1")
    return [(lock, owner, token, None if at is None else datetime.fromisoformat(at))
            for lock, owner, token, at in rows]


def lock_row(db, lock: str) -> tuple[str | None, int, datetime | None]:
    (row,) = [r[1:] for r in lock_rows(db) if r[0] == lock]
    return row


def wait_for(condition: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + GENEROUS
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


# The operations, one per engine -------------------------------------------------

def test_tokens_strictly_increase_across_releases_and_takeovers(db, client):
    tokens = []
    for owner in ("a", "b", "a", "c"):
        token = client.acquire_lock("nightly", owner, LONG)
        assert client.release_lock("nightly", owner, token) is True
        tokens.append(token)
    assert tokens == [1, 2, 3, 4]
    assert client.acquire_lock("other", "a", LONG) == 1  # each name counts on its own
    assert lock_row(db, "nightly") == (None, 4, None)  # a released lock keeps its token


def test_the_live_holder_acquiring_again_renews_with_the_same_token(db, client):
    token = client.acquire_lock("nightly", "a", SHORT)
    _, _, first_expiry = lock_row(db, "nightly")
    assert client.acquire_lock("nightly", "a", LONG) == token
    assert lock_row(db, "nightly")[:2] == ("a", token)
    assert lock_row(db, "nightly")[2] > first_expiry
    wait_until_past(first_expiry)
    assert client.check_lock("nightly", token) is True


def test_another_owner_is_refused_while_live_and_takes_over_after_the_lapse(db, client):
    token = client.acquire_lock("nightly", "a", SHORT)
    held = lock_rows(db)
    assert client.acquire_lock("nightly", "b", LONG) is None
    assert lock_rows(db) == held  # the refusal changed nothing
    wait_until_past(held[0][3])
    assert client.acquire_lock("nightly", "b", LONG) == token + 1
    assert lock_row(db, "nightly")[:2] == ("b", token + 1)


def test_a_stale_token_is_refused_once_another_owner_acquired(db, client):
    stale = client.acquire_lock("nightly", "a", SHORT)
    assert client.check_lock("nightly", stale) is True
    wait_until_past(lock_row(db, "nightly")[2])
    fresh = client.acquire_lock("nightly", "b", LONG)
    assert fresh > stale
    taken = lock_rows(db)
    assert client.check_lock("nightly", stale) is False
    assert client.renew_lock("nightly", "a", stale, LONG) is False
    assert client.release_lock("nightly", "a", stale) is False
    assert lock_rows(db) == taken
    assert client.check_lock("nightly", fresh) is True
    assert client.renew_lock("nightly", "b", fresh, LONG) is True


def test_a_lapsed_hold_stays_over_even_when_nobody_took_the_lock(db, client):
    token = client.acquire_lock("nightly", "a", SHORT)
    wait_until_past(lock_row(db, "nightly")[2])
    lapsed = lock_rows(db)
    assert client.check_lock("nightly", token) is False
    assert client.renew_lock("nightly", "a", token, LONG) is False
    assert client.release_lock("nightly", "a", token) is False
    assert lock_rows(db) == lapsed
    assert client.acquire_lock("nightly", "a", LONG) == token + 1  # a new hold, a new token


def test_only_the_holder_with_its_token_renews_or_releases(db, client):
    token = client.acquire_lock("nightly", "a", LONG)
    held = lock_rows(db)
    assert client.renew_lock("nightly", "b", token, LONG) is False
    assert client.renew_lock("nightly", "a", token + 1, LONG) is False
    assert client.release_lock("nightly", "b", token) is False
    assert client.release_lock("nightly", "A", token) is False  # owners compare exactly
    assert client.check_lock("nightly", token + 1) is False
    assert client.check_lock("unknown", 1) is False
    assert lock_rows(db) == held
    assert client.release_lock("nightly", "a", token) is True
    assert client.release_lock("nightly", "a", token) is False
    assert client.check_lock("nightly", token) is False


def test_an_exhausted_token_is_qf304_and_changes_nothing(db, client):
    client.release_lock("nightly", "a", client.acquire_lock("nightly", "a", LONG))
    db.sql(f"UPDATE {'fenceq._locks' if db.backend == 'postgres' else 'fenceq__locks'} SET token = {MAX_TOKEN}")
    released = lock_rows(db)
    with raises_code("QF304") as info:
        client.acquire_lock("nightly", "b", LONG)
    assert isinstance(info.value, fenceq.ClaimConflict)
    assert lock_rows(db) == released


def test_the_live_holder_of_the_largest_token_keeps_renewing(db, client):
    client.acquire_lock("nightly", "a", LONG)
    db.sql(f"UPDATE {'fenceq._locks' if db.backend == 'postgres' else 'fenceq__locks'} SET token = {MAX_TOKEN}")
    assert client.acquire_lock("nightly", "a", LONG) == MAX_TOKEN
    assert client.renew_lock("nightly", "a", MAX_TOKEN, LONG) is True
    assert client.check_lock("nightly", MAX_TOKEN) is True


def _op(name: str, **values: Any) -> Op:
    kinds = {"lock": "text", "owner_id": "text", "token": "bigint", "ttl": "interval"}
    return Op(name, tuple(Arg(key, kinds[key], value) for key, value in values.items()), "scalar")


GOOD = {"lock": "nightly", "owner_id": "a", "token": 1, "ttl": LONG}
PARAMETERS = {"acquire_lock": ("lock", "owner_id", "ttl"), "renew_lock": ("lock", "owner_id", "token", "ttl"),
              "release_lock": ("lock", "owner_id", "token"), "check_lock": ("lock", "token")}
BAD_VALUES = [("lock", "", "QF102"), ("lock", "x" * 256, "QF102"), ("lock", None, "QF102"),
              ("owner_id", "", "QF102"), ("owner_id", "o" * 256, "QF102"), ("owner_id", None, "QF102"),
              ("token", 0, "QF104"), ("token", -1, "QF104"), ("token", None, "QF104"),
              ("ttl", None, "QF100"), ("ttl", timedelta(0), "QF105"), ("ttl", timedelta(seconds=-1), "QF105"),
              ("ttl", timedelta(days=5_000_000), "QF105")]
@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_bad_input_reaching_the_sql_is_a_qf_code_and_changes_nothing(db, client, name):
    token = client.acquire_lock("nightly", "a", LONG)
    before = lock_rows(db)
    for key, value, code in [bad for bad in BAD_VALUES if bad[0] in PARAMETERS[name]]:
        values = {k: GOOD[k] for k in PARAMETERS[name]} | {key: value}
        with raises_code(code) as info:
            client._backend.run(_op(name, **values))  # past the client's own checks
        assert info.value.__cause__ is not None, (key, value)
        assert "nightly" not in str(info.value)  # messages never echo values
        assert lock_rows(db) == before, (key, value)
        with raises_code(code):
            getattr(client, name)(**values)  # the client refuses it with the same code
    assert client.check_lock("nightly", token) is True


@pytest.mark.parametrize("call, code", [
    (lambda c: c.acquire_lock("nightly", "a", 30), "QF105"),
    (lambda c: c.check_lock("nightly", True), "QF104"),
    (lambda c: c.check_lock("nightly", 2**63), "QF104"),
    (lambda c: c.renew_lock("nightly", "a", 1.0, LONG), "QF104"),
    (lambda c: c.release_lock("nightly", "a\x00", 1), "QF102"),
    (lambda c: c.lock("nightly", "a", ttl=timedelta(0)), "QF105"),
])
def test_the_client_refuses_what_the_sql_could_not_take(db, client, call, code):
    with raises_code(code):
        call(client)
    assert lock_rows(db) == []


def test_a_ttl_with_a_day_part_is_refused_by_the_sql(pg):
    with psycopg.connect(pg.url, autocommit=True) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT fenceq.acquire_lock('nightly', 'a', '1 day')")
    assert info.value.sqlstate == "QF105"
    assert lock_rows(pg) == []


# The context manager --------------------------------------------------------------

def test_the_context_manager_renews_past_the_ttl_and_releases_on_exit(db, client):
    ttl = timedelta(seconds=3)  # renewed every second: slack for a busy machine
    with client.lock("nightly", "a", ttl=ttl) as held:
        first_expiry = lock_row(db, "nightly")[2]
        wait_for(lambda: lock_row(db, "nightly")[2] > first_expiry, "the lock was never renewed")
        wait_until_past(first_expiry)
        assert client.check_lock("nightly", held.token) is True
        assert not held.lost.is_set()
    assert lock_row(db, "nightly") == (None, held.token, None)
    with client.lock("nightly", "b", ttl=ttl) as again:
        assert again.token == held.token + 1


def test_the_context_manager_refuses_a_lock_another_owner_holds(db, client):
    client.acquire_lock("nightly", "b", LONG)
    held = lock_rows(db)
    entered = False
    with pytest.raises(fenceq.LockBusy):
        with client.lock("nightly", "a", ttl=LONG):
            entered = True
    assert not entered
    assert lock_rows(db) == held


def _take_over(db, token: int) -> int:
    """Another party ends the hold and takes the lock: the holder's next
    renewal is refused."""
    with db.connect() as other:
        assert other.release_lock("nightly", "a", token)
        return other.acquire_lock("nightly", "b", LONG)


def test_the_context_manager_tells_the_holder_the_lock_was_lost(db, client):
    told = threading.Event()
    with pytest.raises(fenceq.LockLost):
        with client.lock("nightly", "a", ttl=timedelta(seconds=1.5), on_lost=told.set) as held:
            _take_over(db, held.token)
            assert held.lost.wait(GENEROUS), "the loss was never noticed"
            assert told.is_set() and "refused" in held.lost_reason
            with pytest.raises(fenceq.LockLost):
                held.raise_if_lost()
    assert lock_row(db, "nightly")[:2] == ("b", held.token + 1)  # the new holder's hold is untouched


def test_an_exception_in_the_block_is_not_replaced_by_the_loss(db, client):
    with pytest.raises(KeyError):
        with client.lock("nightly", "a", ttl=timedelta(seconds=1.5)) as held:
            _take_over(db, held.token)
            held.lost.wait(GENEROUS)
            raise KeyError("the block's own error")
    assert held.lost.is_set()


def test_a_hold_gone_at_release_counts_as_lost(db, client):
    with pytest.raises(fenceq.LockLost):
        with client.lock("nightly", "a", ttl=LONG) as held:  # no renewal comes before the exit
            _take_over(db, held.token)
    assert "release" in held.lost_reason


async def _renewed_after(db, expiry: datetime) -> None:
    while lock_row(db, "nightly")[2] <= expiry:
        await asyncio.sleep(0.01)


async def test_the_async_context_manager_renews_tells_and_releases(db):
    async with await db.connect_async() as client:
        ttl = timedelta(seconds=1.5)
        async with client.lock("nightly", "a", ttl=ttl) as held:
            first_expiry = lock_row(db, "nightly")[2]
            await asyncio.wait_for(_renewed_after(db, first_expiry), GENEROUS)
            assert await client.check_lock("nightly", held.token) is True
        assert lock_row(db, "nightly") == (None, held.token, None)

        told = []
        with pytest.raises(fenceq.LockLost):
            async with client.lock("nightly", "a", ttl=ttl, on_lost=lambda: told.append(True)) as lost:
                await asyncio.to_thread(_take_over, db, lost.token)
                await asyncio.wait_for(lost.lost.wait(), GENEROUS)
        assert told == [True]
        with pytest.raises(fenceq.LockBusy):
            async with client.lock("nightly", "a", ttl=ttl):
                pass


# Fenced transactions of one's own: held.transaction() ------------------------------

def _report_lines(db) -> list[str]:
    return [line for (line,) in db.sql("SELECT line FROM report_lines ORDER BY line")]


def _insert(db) -> str:
    db.sql("CREATE TABLE report_lines (line text NOT NULL)")
    return f"INSERT INTO report_lines VALUES ({'%s' if db.backend == 'postgres' else '?'})"


def test_a_fenced_transaction_commits_while_the_token_is_current(db, client):
    insert = _insert(db)
    client.create_queue("reports")
    with pytest.raises(fenceq.LockLost):
        with client.lock("nightly", "a", ttl=LONG) as held:
            with held.transaction() as tx:
                tx.execute(insert, ("one",))
                tx.submit("reports", "mail", {"line": "one"})
            assert _report_lines(db) == ["one"] and len(client.pending_jobs("reports")) == 1
            _take_over(db, held.token)
            with held.transaction() as tx:  # begins with check_lock: refused before any write
                tx.execute(insert, ("stale",))
    assert _report_lines(db) == ["one"] and "check_lock" in held.lost_reason


def test_a_hold_that_ends_during_the_fenced_transaction_rolls_it_back(db, client):
    insert = _insert(db)
    with pytest.raises(fenceq.LockLost):
        with client.lock("nightly", "a", ttl=LONG if db.backend == "postgres" else SHORT) as held:
            with held.transaction() as tx:
                tx.execute(insert, ("late",))
                if db.backend == "postgres":  # a release does not wait for the fenced transaction
                    with db.connect() as other:
                        assert other.release_lock("nightly", "a", held.token)
                else:  # renewals wait for it (the write lock), so the hold lapses
                    wait_until_past(lock_row(db, "nightly")[2])
    assert _report_lines(db) == []


async def test_the_async_fenced_transaction_commits_and_refuses_a_stale_token(db):
    insert = _insert(db)
    async with await db.connect_async() as client:
        with pytest.raises(fenceq.LockLost):
            async with client.lock("nightly", "a", ttl=LONG) as held:
                async with held.transaction() as tx:
                    await tx.execute(insert, ("one",))
                await asyncio.to_thread(_take_over, db, held.token)
                async with held.transaction() as tx:
                    await tx.execute(insert, ("stale",))
    assert _report_lines(db) == ["one"]


# PostgreSQL: row locks between real concurrent sessions ---------------------------

def _blocked_by(watcher: psycopg.Connection, waiter: psycopg.Connection, blocker: psycopg.Connection) -> bool:
    return watcher.execute("SELECT %s = ANY (pg_blocking_pids(%s))",
                           (blocker.info.backend_pid, waiter.info.backend_pid)).fetchone()[0]


class Session:
    """A client on a connection of its own (autocommit), whose call runs in
    a thread so that the test can watch it wait."""

    def __init__(self, pg):
        self.connection = psycopg.connect(pg.url, autocommit=True)
        self.client = fenceq.connect(connection=self.connection)
        self.answer: Any = None
        self._thread: threading.Thread | None = None

    def start(self, call: Callable[[fenceq.Client], Any]) -> None:
        def run() -> None:
            self.answer = call(self.client)

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def finish(self) -> Any:
        self._thread.join(GENEROUS)
        assert not self._thread.is_alive(), "the call never returned"
        return self.answer

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def sessions(pg):
    opened = []

    def open_session() -> Session:
        opened.append(Session(pg))
        return opened[-1]

    with psycopg.connect(pg.url, autocommit=True) as watcher:
        yield open_session, watcher
    for session in opened:
        session.close()


def test_check_lock_keeps_other_owners_out_until_the_transaction_ends(pg, sessions):
    open_session, watcher = sessions
    with pg.connect() as setup:
        token = setup.acquire_lock("nightly", "a", SHORT)
    pg.sql("CREATE TABLE report (line text)")
    with psycopg.connect(pg.url) as holder:  # one transaction, as the holder's app writes
        assert fenceq.connect(connection=holder).check_lock("nightly", token) is True
        holder.execute("INSERT INTO report VALUES ('written under token 1')")
        wait_until_past(lock_row(pg, "nightly")[2])  # the hold lapses while the transaction is open
        taker = open_session()
        taker.start(lambda c: c.acquire_lock("nightly", "b", LONG))
        wait_for(lambda: _blocked_by(watcher, taker.connection, holder), "acquire_lock never waited")
        holder.commit()
    assert taker.finish() == token + 1
    assert pg.sql("SELECT line FROM report") == [("written under token 1",)]


def test_the_holder_renews_and_releases_without_waiting_for_its_fenced_transaction(pg, sessions):
    open_session, watcher = sessions
    with pg.connect() as setup:
        token = setup.acquire_lock("nightly", "a", LONG)
    with psycopg.connect(pg.url) as holder:
        assert fenceq.connect(connection=holder).check_lock("nightly", token) is True
        renewer = open_session()
        renewer.start(lambda c: (c.renew_lock("nightly", "a", token, LONG), c.release_lock("nightly", "a", token)))
        assert renewer.finish() == (True, True)
        taker = open_session()
        taker.start(lambda c: c.acquire_lock("nightly", "b", LONG))
        wait_for(lambda: _blocked_by(watcher, taker.connection, holder),
                 "an acquire after the release must still wait for the fenced transaction")
        holder.rollback()
    assert taker.finish() == token + 1


@pytest.mark.parametrize("call, answer", [
    (lambda c, token: c.acquire_lock("nightly", "b", LONG), "taken"),
    (lambda c, token: c.check_lock("nightly", token), False),
    (lambda c, token: c.renew_lock("nightly", "a", token, LONG), False),
    (lambda c, token: c.release_lock("nightly", "a", token), False),
], ids=["acquire_lock", "check_lock", "renew_lock", "release_lock"])
def test_every_lock_function_judges_the_hold_after_its_row_lock_wait(pg, sessions, call, answer):
    """The call is seen waiting for the row lock while the hold lapses; once
    it has the lock it must judge the hold lapsed."""
    open_session, watcher = sessions
    with pg.connect() as setup:
        token = setup.acquire_lock("nightly", "a", SHORT)
    with psycopg.connect(pg.url) as locker:
        locker.execute("SELECT 1 FROM fenceq._locks WHERE lock = 'nightly' FOR UPDATE")
        waiter = open_session()
        waiter.start(lambda c: call(c, token))
        wait_for(lambda: _blocked_by(watcher, waiter.connection, locker), "the call never waited")
        wait_until_past(lock_row(pg, "nightly")[2])
        locker.commit()
    assert waiter.finish() == (token + 1 if answer == "taken" else answer)


def test_under_repeatable_read_a_takeover_after_the_snapshot_is_never_true(pg):
    with pg.connect() as other:
        stale = other.acquire_lock("nightly", "a", LONG)
        with psycopg.connect(pg.url) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT 1")  # the transaction's snapshot: a holds the lock
            assert other.release_lock("nightly", "a", stale)
            assert other.acquire_lock("nightly", "b", LONG) == stale + 1
            with pytest.raises(fenceq.PersistenceFailed) as info:
                fenceq.connect(connection=conn).check_lock("nightly", stale)
            assert info.value.__cause__.sqlstate == "40001"


def test_concurrent_first_acquires_of_a_name_insert_one_row(pg):
    owners = [f"owner-{n}" for n in range(8)]
    start = threading.Barrier(len(owners))
    answers = {}

    def acquire(owner: str) -> None:
        with pg.connect() as client:
            start.wait()
            answers[owner] = client.acquire_lock("fresh", owner, LONG)

    threads = [threading.Thread(target=acquire, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GENEROUS)
    assert sorted(answers.values(), key=lambda a: a is not None) == [None] * 7 + [1]
    (winner,) = [owner for owner, token in answers.items() if token == 1]
    assert lock_rows(pg) == [("fresh", winner, 1, lock_row(pg, "fresh")[2])]


def test_workers_and_admins_may_use_locks_and_producers_may_not(pg, login):  # noqa: F811
    for group in ("fenceq_worker", "fenceq_admin"):
        url = login(group)
        with fenceq.connect(url) as member:
            token = member.acquire_lock(f"for-{group}", "a", LONG)
            assert member.check_lock(f"for-{group}", token) and member.renew_lock(f"for-{group}", "a", token, LONG)
            assert member.release_lock(f"for-{group}", "a", token)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT token FROM fenceq.locks WHERE lock = %s", (f"for-{group}",)).fetchall() == [
                (token,)]
    producer = login("fenceq_producer")
    with fenceq.connect(producer) as member:
        for call in (lambda: member.acquire_lock("p", "a", LONG), lambda: member.check_lock("p", 1),
                     lambda: member.renew_lock("p", "a", 1, LONG), lambda: member.release_lock("p", "a", 1)):
            with raises_code("42501"):
                call()
    with psycopg.connect(producer) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT * FROM fenceq.locks")
    assert info.value.sqlstate == "42501"


# SQLite: the caller's write transaction is the fence ------------------------------

def test_check_lock_in_the_callers_write_transaction_keeps_other_owners_out(sqlite_db):
    with sqlite_db.connect() as setup:
        token = setup.acquire_lock("nightly", "a", SHORT)
    path = database_path(sqlite_db.url)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE report (line TEXT)")
        conn.execute("BEGIN IMMEDIATE")
        assert check_lock_in_transaction(conn, "nightly", token) is True
        conn.execute("INSERT INTO report VALUES ('written under token 1')")
        assert conn.in_transaction and write_lock_held(sqlite_db.url)  # it committed nothing
        wait_until_past(lock_row(sqlite_db, "nightly")[2])
        answers = []

        def take() -> None:
            with sqlite_db.connect() as other:
                answers.append(other.acquire_lock("nightly", "b", LONG))

        taker = threading.Thread(target=take)
        taker.start()
        assert taker.is_alive() and answers == []  # it cannot write while the transaction holds the file
        conn.execute("COMMIT")
        taker.join(GENEROUS)
    assert answers == [token + 1]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT line FROM report").fetchall() == [("written under token 1",)]


def test_check_lock_in_transaction_needs_an_open_transaction_and_good_input(sqlite_db):
    with contextlib.closing(sqlite3.connect(database_path(sqlite_db.url), isolation_level=None)) as conn:
        with raises_code("QF100"):
            check_lock_in_transaction(conn, "nightly", 1)
        conn.execute("BEGIN IMMEDIATE")
        assert check_lock_in_transaction(conn, "nightly", 1) is False
        with raises_code("QF104"):
            check_lock_in_transaction(conn, "nightly", 0)
        assert conn.in_transaction  # the caller decides what becomes of its transaction
        conn.execute("ROLLBACK")


def test_rolling_back_to_version_2_refuses_while_a_lock_row_exists(db, client):
    client.release_lock("nightly", "a", client.acquire_lock("nightly", "a", LONG))
    with raises_code("QF901"):
        rollback(db.url, to_version=2)
    assert lock_rows(db) == [("nightly", None, 1, None)]  # a released lock's token is data too
    assert rollback(db.url, to_version=2, allow_data_loss=True) == ["0003_fenceq_v3"]
