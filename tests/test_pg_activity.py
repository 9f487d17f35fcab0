"""The activity series on PostgreSQL (schema version 7, docs/design-v7.md
§1-§2, guarantees.md §21): what sample_activity writes for a minute, from a
history whose timestamps the test sets; which minutes a call writes; racing
samplers in real sessions; activity()'s buckets; and plans that read index
ranges, never a whole table. The calls are made in SQL: these are the
functions' own rules, on the engine where they are PL/pgSQL."""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import fenceq
from helpers import claim
from test_pg_plans import _nested_plans


def bucket(ms: float) -> int:
    """The histogram bucket of a duration (design-v7 §1), for values off the bounds."""
    return min(127, math.floor(4 * math.log2(max(ms, 1))))


def histogram(*durations_ms: float) -> list[int]:
    hist = [0] * (max(bucket(ms) for ms in durations_ms) + 1)
    for ms in durations_ms:
        hist[bucket(ms)] += 1
    return hist


def closed_minute(pg) -> object:
    """The start of the last closed minute now."""
    return pg.sql("SELECT fenceq._activity_end(clock_timestamp()) - interval '1 minute'")[0][0]


def seed_row(pg, queue: str, minute) -> None:
    """An activity row as if sampled at ``minute``: the next call catches up from there."""
    pg.sql("INSERT INTO fenceq._activity VALUES (%s, %s, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, '{}', '{}')",
           (queue, minute))


def rows(pg, queue: str) -> list[dict]:
    with psycopg.connect(pg.url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute("SELECT * FROM fenceq._activity WHERE queue = %s ORDER BY minute", (queue,)).fetchall()


def call_args(args: dict) -> tuple[str, dict]:
    """Named arguments; a timedelta as an interval of seconds, as the client
    sends it (psycopg would send days, which fenceq refuses)."""
    values = {name: f"{v.total_seconds()} seconds" if isinstance(v, timedelta) else v for name, v in args.items()}
    return ", ".join(f"{name} => %({name})s" for name in args), values


def sample(pg, **args) -> int:
    call, values = call_args(args)
    return pg.sql(f"SELECT fenceq.sample_activity({call})", values)[0][0]


def at(pg, job_id: str, **stamps) -> None:
    """Set a job's timestamps (created_at, run_at, finished_at) to given instants."""
    sets = ", ".join(f"{column} = %({column})s" for column in stamps)
    pg.sql(f"UPDATE fenceq._jobs SET {sets} WHERE job_id = %(job_id)s", {**stamps, "job_id": job_id})


def claimed_at(pg, job_id: str, generation: int, when) -> None:
    pg.sql("UPDATE fenceq._claims SET claimed_at = %s WHERE job_id = %s AND generation = %s",
           (when, job_id, generation))


def test_a_minute_counts_what_happened_in_it(pg):
    m = closed_minute(pg) - timedelta(minutes=2)
    s = timedelta(seconds=1)
    with pg.connect() as client:
        client.create_queue("q", max_attempts=2)
        client.create_queue("other")
        done = client.submit("q", "t")
        c = claim(client, "q")
        assert client.complete(c.fence)
        retried = client.submit("q", "t")
        first = claim(client, "q")
        assert client.fail(first.fence, "boom")
        pg.sql("UPDATE fenceq._jobs SET run_at = clock_timestamp() WHERE job_id = %s", (retried,))
        second = claim(client, "q")
        assert second.job_id == retried and client.fail(second.fence, "boom again", retry=False)
        waiting = client.submit("q", "t")
        cancelled = client.submit("q", "t")
        assert client.cancel(cancelled) == "cancelled"
        expired = client.submit("q", "t")
        elsewhere = client.submit("other", "t")
    pg.sql("UPDATE fenceq._jobs SET status = 'expired', finished_at = clock_timestamp() WHERE job_id = %s",
           (expired,))
    at(pg, done, created_at=m + s, run_at=m + s, finished_at=m + 3 * s)
    claimed_at(pg, done, 1, m + 2 * s)
    at(pg, retried, created_at=m - 300 * s, run_at=m + 10 * s, finished_at=m + 50 * s)
    claimed_at(pg, retried, 1, m - 240 * s)
    claimed_at(pg, retried, 2, m + 20 * s)
    at(pg, waiting, created_at=m + 30 * s)
    at(pg, cancelled, created_at=m - 600 * s, finished_at=m + 40 * s)
    at(pg, expired, created_at=m - 600 * s, finished_at=m + 45 * s)
    at(pg, elsewhere, created_at=m + 5 * s)
    seed_row(pg, "q", m - timedelta(minutes=5))
    seed_row(pg, "other", m - timedelta(minutes=5))

    assert sample(pg) >= 2 * 7, "five minutes and the closed ones since, of both queues"
    row = next(r for r in rows(pg, "q") if r["minute"] == m)
    assert {k: row[k] for k in ("submitted", "claimed", "retried", "completed", "failed", "cancelled", "expired")} \
        == {"submitted": 2, "claimed": 2, "retried": 1, "completed": 1, "failed": 1, "cancelled": 1, "expired": 1}
    # Waits: the final claim's claimed_at - run_at (1 s, 10 s); run times:
    # finished_at - that claimed_at (1 s, 30 s).
    assert row["wait_hist"] == histogram(1000, 10000)
    assert row["run_hist"] == histogram(1000, 30000)
    assert (row["pending"], row["due"], row["running"]) == (None, None, None), "caught up: no depth"
    other = next(r for r in rows(pg, "other") if r["minute"] == m)
    assert (other["submitted"], other["claimed"], other["wait_hist"]) == (1, 0, [])
    earlier = next(r for r in rows(pg, "q") if r["minute"] == m - timedelta(minutes=4))
    assert (earlier["submitted"], earlier["claimed"], earlier["retried"]) == (0, 1, 0), "the first claim of retried"


def test_the_first_call_writes_the_last_closed_minute_with_depth_and_a_second_call_nothing(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        client.submit("q", "t", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
        client.submit("q", "t")
        claim(client, "q")
    before = closed_minute(pg)
    assert sample(pg) == 1
    after = closed_minute(pg)
    [row] = rows(pg, "q")
    assert row["minute"] in (before, after)
    assert (row["pending"], row["due"], row["running"]) == (2, 1, 1)
    assert sample(pg) in (0, 1), "a minute closed meanwhile at most"
    assert len(rows(pg, "q")) == len({r["minute"] for r in rows(pg, "q")})


def test_a_catch_up_goes_oldest_first_within_max_minutes_and_keep(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.create_queue("new")
    end = closed_minute(pg) + timedelta(minutes=1)
    seed_row(pg, "q", end - timedelta(minutes=10))
    assert sample(pg, max_minutes=3) == 3 + 1, "and the new queue's last closed minute"
    minutes = [r["minute"] for r in rows(pg, "q")]
    assert minutes == [end - timedelta(minutes=k) for k in (10, 9, 8, 7)]
    assert [r["minute"] for r in rows(pg, "new")] in ([end - timedelta(minutes=1)], [end])
    assert all(r["pending"] is None for r in rows(pg, "q")), "not the last closed minute: no depth"
    assert sample(pg) >= 6
    written = rows(pg, "q")
    assert [r["minute"] for r in written] == [written[0]["minute"] + timedelta(minutes=k) for k in range(len(written))]
    assert written[-1]["pending"] == 0 and all(r["pending"] is None for r in written[:-1])

    seed_row(pg, "q", end - timedelta(hours=200))
    sample(pg, keep=timedelta(hours=1))
    assert min(r["minute"] for r in rows(pg, "q")) >= end - timedelta(hours=1, minutes=1), "older rows deleted"
    pg.sql("DELETE FROM fenceq._activity")
    seed_row(pg, "q", end - timedelta(hours=3))
    sample(pg, max_minutes=11520, keep=timedelta(minutes=30))
    assert [r["minute"] for r in rows(pg, "q")][0] >= end - timedelta(minutes=31), "none older than keep"


@pytest.mark.parametrize("args, code", [
    ({"max_minutes": 0}, "QF104"), ({"max_minutes": 11521}, "QF104"), ({"max_minutes": None}, "QF104"),
    ({"keep": timedelta(seconds=30)}, "QF105"), ({"keep": None}, "QF100"), ({"keep": "8 days"}, "QF105")])
def test_sample_activity_refuses_bad_bounds(pg, args, code):
    with pytest.raises(psycopg.Error) as info:
        sample(pg, **args)
    assert info.value.sqlstate == code


def test_racing_samplers_write_each_minute_once(pg):
    """Two real sessions: while one sampler's transaction is open the other
    answers 0 at once; then many samplers at the same moment write every
    minute exactly once between them."""
    with pg.connect() as client:
        for n in range(3):
            client.create_queue(f"q{n}")
    end = closed_minute(pg) + timedelta(minutes=1)
    for n in range(3):
        seed_row(pg, f"q{n}", end - timedelta(minutes=30))
    with psycopg.connect(pg.url) as first, psycopg.connect(pg.url, autocommit=True) as second:
        written = first.execute("SELECT fenceq.sample_activity(max_minutes => 5)").fetchone()[0]
        assert written == 15
        assert second.execute("SELECT fenceq.sample_activity(max_minutes => 5)").fetchone()[0] == 0
        first.commit()
        assert second.execute("SELECT count(*) FROM fenceq._activity").fetchone()[0] == 3 + 15

    answers: list[int] = []
    start = threading.Barrier(6)

    def sampler() -> None:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            start.wait()
            for _ in range(5):
                answers.append(conn.execute("SELECT fenceq.sample_activity(max_minutes => 2)").fetchone()[0])

    threads = [threading.Thread(target=sampler) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = pg.sql("SELECT count(*), count(DISTINCT (queue, minute)) FROM fenceq._activity")[0]
    assert total[0] == total[1] == 3 + 15 + sum(answers)
    assert sum(answers) > 0


def test_a_repeatable_read_sampler_behind_another_fails_with_40001_not_a_duplicate(pg):
    """Functions are specified under READ COMMITTED (guarantees §3); under a
    stricter level a sampler whose snapshot predates another's rows gets
    40001, never a second row nor a raw unique violation."""
    with pg.connect() as client:
        client.create_queue("q")
    seed_row(pg, "q", closed_minute(pg) - timedelta(minutes=5))
    with psycopg.connect(pg.url) as late:
        late.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        late.execute("SELECT count(*) FROM fenceq._activity").fetchone()  # the snapshot
        assert sample(pg) >= 5
        with pytest.raises(psycopg.errors.SerializationFailure):
            late.execute("SELECT fenceq.sample_activity()")
    assert pg.sql("SELECT count(*) = count(DISTINCT minute) FROM fenceq._activity")[0][0]


def activity(pg, **args) -> list[dict]:
    call, values = call_args(args)
    with psycopg.connect(pg.url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(f"SELECT * FROM fenceq.activity({call})", values).fetchall()


def test_activity_sums_buckets_merges_histograms_and_keeps_the_last_depth(pg):
    with pg.connect() as client:
        client.create_queue("a")
        client.create_queue("b")
    end = closed_minute(pg) + timedelta(minutes=1)
    ms = [1000, 1000, 10000]  # a: two waits of 1 s; b: one of 10 s

    def put(queue, minute, submitted, depth, waits):
        pg.sql("INSERT INTO fenceq._activity VALUES (%s, %s, %s, 1, 0, 1, 0, 0, 0, %s, %s, %s, %s, '{}')",
               (queue, minute, submitted, depth, depth, depth, histogram(*waits)))

    put("a", end - timedelta(minutes=3), 2, 7, ms[:2])
    put("a", end - timedelta(minutes=2), 1, 5, ms[:1])
    put("b", end - timedelta(minutes=3), 4, 1, ms[2:])
    rows_a = activity(pg, queue="a", since=timedelta(minutes=4), bucket=timedelta(minutes=2))
    assert len(rows_a) == 2 and rows_a[1]["bucket_start"] == end - timedelta(minutes=2)
    assert [r["submitted"] for r in rows_a] == [2, 1], "the minute 3 before the end is in the first bucket"
    assert rows_a[0]["bucket_start"] == end - timedelta(minutes=4)
    assert (rows_a[0]["pending"], rows_a[1]["pending"]) == (7, 5)
    both = activity(pg, since=timedelta(minutes=4), bucket=timedelta(minutes=4))
    assert [(r["submitted"], r["claimed"], r["pending"]) for r in both] == [(7, 3, 5 + 1)], \
        "summed; each queue's last sample in the bucket"
    [row] = both
    middle = lambda k: timedelta(milliseconds=2 ** ((k + 0.5) / 4))  # noqa: E731
    assert abs(row["wait_p50"] - middle(bucket(1000))) < timedelta(microseconds=2)
    assert abs(row["wait_p95"] - middle(bucket(10000))) < timedelta(microseconds=2)
    assert row["run_p50"] is None, "no run times: NULL"
    empty = activity(pg, queue="b", since=timedelta(minutes=2))
    assert [(r["submitted"], r["pending"], r["wait_p50"]) for r in empty] == [(0, None, None)] * 2


@pytest.mark.parametrize("since, buckets", [(timedelta(hours=1), 60), (timedelta(minutes=90), 90),
                                            (timedelta(hours=3), 12), (timedelta(hours=48), 192),
                                            (timedelta(hours=72), 72), (timedelta(hours=192), 192)])
def test_activity_chooses_its_bucket_by_the_range(pg, since, buckets):
    assert len(activity(pg, since=since)) == buckets


@pytest.mark.parametrize("args, code", [
    ({"queue": "nope"}, "QF101"), ({"since": timedelta(hours=193)}, "QF104"),
    ({"bucket": timedelta(seconds=90)}, "QF104"), ({"since": timedelta(hours=192), "bucket": timedelta(minutes=1)},
                                                  "QF104"),
    ({"since": "1 day"}, "QF105"), ({"since": None}, "QF100"), ({"queue": ""}, "QF102")])
def test_activity_refuses_a_bad_range(pg, args, code):
    with pytest.raises(psycopg.Error) as info:
        activity(pg, **args)
    assert info.value.sqlstate == code


def test_sampling_and_reading_read_index_ranges_at_any_size(pg):
    """Plans made while the tables were empty, used once they hold a
    history: the finished jobs by range, the live ones and the rows by
    their indexes, never a whole table."""
    with pg.connect() as client:
        client.create_queue("q")
    with psycopg.connect(pg.url, autocommit=True) as admin:
        for table in ("_jobs", "_claims", "_activity"):
            admin.execute(f"VACUUM ANALYZE fenceq.{table}")
    calls = ["SELECT fenceq.sample_activity()", "SELECT * FROM fenceq.activity('q', '3 hours')",
             "SELECT * FROM fenceq.activity(NULL, '1 hour')"]
    with psycopg.connect(pg.url, autocommit=True) as session:
        for _ in range(6):
            for call in calls:
                session.execute(call).fetchall()
        with pg.connect() as client:
            client.submit_batch("q", [{"task": "t"} for _ in range(3000)])
            for c in client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(2000)]):
                client.complete(c.fence)
        pg.sql("DELETE FROM fenceq._activity")
        seed_row(pg, "q", closed_minute(pg) - timedelta(minutes=90))
        plans = "\n".join(_nested_plans(session, call) for call in calls)
    for table in ("_jobs", "_claims", "_activity"):
        assert f"Seq Scan on {table}" not in plans, plans
    assert "_jobs_finished_idx" in plans and "_jobs_pending_idx" in plans and "_activity_pkey" in plans, plans
