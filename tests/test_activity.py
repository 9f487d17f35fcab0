"""The operator's view over time (schema version 7, issue 27; docs/design-v7.md
§1-§2), on both engines: ``sample_activity`` writes a per-queue, per-minute
series off the hot path, ``activity`` reads it in buckets.

Written from the design, before the SQL. There is no test clock: a test
moves its jobs' timestamps (and its claims' claimed_at) with SQL into
minutes well in the past, and seeds the queue's last sample just before
them, so that the sampler catches up over exactly those minutes. What
depends on the minute a call falls in (the last closed minute) is checked
against the minute before the call and the minute after it, whichever the
call saw; no test sleeps.
"""

from __future__ import annotations

import json
import math
import threading
from datetime import datetime, timedelta, timezone

import pytest

import fenceq
from fenceq.ops import Arg, Op, Shape
from helpers import claim, raises_code

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)
SECONDS = timedelta(seconds=10)
CLOSING = timedelta(seconds=10)
SQLITE_NOW = "(unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000"
COUNTS = ("submitted", "claimed", "retried", "completed", "failed", "cancelled", "expired")


# Reaching under the operations: time as the tables keep it ---------------------------------

def private(db, name: str) -> str:
    return f"fenceq._{name}" if db.backend == "postgres" else f"fenceq__{name}"


def mark(db) -> str:
    return "%s" if db.backend == "postgres" else "?"


def stored(db, moment: datetime):
    """A time as the tables keep it (SQLite: INTEGER microseconds)."""
    return moment if db.backend == "postgres" else (moment - EPOCH) // timedelta(microseconds=1)


def db_now(db) -> datetime:
    if db.backend == "postgres":
        return db.sql("SELECT clock_timestamp()")[0][0]
    return EPOCH + timedelta(microseconds=db.sql(f"SELECT {SQLITE_NOW}")[0][0])


def minute_of(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def last_closed(db) -> datetime:
    """The start of the last closed minute by the database's clock (a minute
    closes 10 seconds after it ends: design-v7 "Changes from the draft" 2)."""
    return minute_of(db_now(db) - CLOSING) - MINUTE


def _ids(db, job_ids) -> tuple[str, object]:
    if db.backend == "postgres":
        return "= ANY(%s)", list(job_ids)
    return "IN (SELECT value FROM json_each(?))", json.dumps(list(job_ids))


def set_jobs(db, job_ids, **moments: datetime) -> None:
    """Move the jobs' timestamps (created_at, run_at, expires_at, finished_at)."""
    match, ids = _ids(db, job_ids)
    assignments = ", ".join(f"{column} = {mark(db)}" for column in moments)
    db.sql(f"UPDATE {private(db, 'jobs')} SET {assignments} WHERE job_id {match}",
           [stored(db, moment) for moment in moments.values()] + [ids])


def set_claims(db, job_ids, generation: int, claimed_at: datetime) -> None:
    """Move the claimed_at of the jobs' claims of one generation (the ledger)."""
    match, ids = _ids(db, job_ids)
    db.sql(f"UPDATE {private(db, 'claims')} SET claimed_at = {mark(db)} WHERE generation = {mark(db)}"
           f" AND job_id {match}", [stored(db, claimed_at), generation, ids])


def seed_sample(db, queue: str, minute: datetime, *, submitted: int = 0, pending: int | None = None,
                due: int | None = None, running: int | None = None) -> None:
    """A row of the series as a sampler would have written it (no
    histograms): the queue's last sample, where the next call catches up."""
    empty = "'{}'" if db.backend == "postgres" else "'[]'"
    m = mark(db)
    db.sql(f"INSERT INTO {private(db, 'activity')} (queue, minute, submitted, claimed, retried, completed, failed,"
           f" cancelled, expired, pending, due, running, wait_hist, run_hist)"
           f" VALUES ({m}, {m}, {m}, 0, 0, 0, 0, 0, 0, {m}, {m}, {m}, {empty}, {empty})",
           [queue, stored(db, minute), submitted, pending, due, running])


def sample_rows(db, queue: str, start: datetime = EPOCH, end: datetime | None = None) -> int:
    """How many rows the series holds for the queue with start <= minute < end."""
    end = end or datetime(9999, 1, 1, tzinfo=timezone.utc)
    m = mark(db)
    return db.sql(f"SELECT count(*) FROM {private(db, 'activity')} WHERE queue = {m} AND minute >= {m}"
                  f" AND minute < {m}", [queue, stored(db, start), stored(db, end)])[0][0]


def by_start(buckets) -> dict[datetime, fenceq.ActivityBucket]:
    return {b.bucket_start: b for b in buckets}


def counts(bucket) -> tuple[int, ...]:
    return tuple(getattr(bucket, name) for name in COUNTS)


def depth(bucket) -> tuple[int | None, ...]:
    return bucket.pending, bucket.due, bucket.running


def minutes_through(first: datetime, last: datetime) -> int:
    return (last - first) // MINUTE + 1


def middle_of_bucket(milliseconds: float) -> timedelta:
    """design-v7 §1: bucket floor(4·log2(max(d_ms, 1))), at most 127, read
    as the geometric middle of its bucket."""
    k = min(math.floor(4 * math.log2(max(milliseconds, 1))), 127)
    return timedelta(milliseconds=2 ** ((k + 0.5) / 4))


def close_to(actual: timedelta | None, expected: timedelta) -> bool:
    return actual is not None and abs(actual - expected) <= timedelta(microseconds=1)


# sample_activity -----------------------------------------------------------------------------

def test_the_first_sample_writes_each_queue_its_last_closed_minute_with_the_live_depth(db, client):
    client.create_queue("q", lease=timedelta(minutes=10))
    client.create_queue("idle")
    client.submit("q", "t")
    client.submit("q", "t", run_at=db_now(db) + timedelta(hours=1))
    client.submit("q", "t")
    claim(client, "q")
    live = {s.queue: s for s in client.stats()}["q"]
    before = last_closed(db)
    assert client.sample_activity() == 2, "one row per queue, idle ones too"
    after = last_closed(db)
    sampled = [b for b in client.activity(queue="q") if b.pending is not None]
    assert [b.bucket_start in (before, after) for b in sampled] == [True]
    assert depth(sampled[0]) == (live.pending, live.due, live.claimed) == (2, 1, 1)
    [idle] = [b for b in client.activity(queue="idle") if b.pending is not None]
    assert depth(idle) == (0, 0, 0) and counts(idle) == (0,) * 7


def test_each_minute_counts_what_happened_in_it(db, client):
    client.create_queue("q", lease=timedelta(minutes=10), max_attempts=2, backoff_base=timedelta(0))
    done = client.submit("q", "t")
    done_claim = claim(client, "q")
    retried = client.submit("q", "t")
    assert client.fail(claim(client, "q").fence, "once")
    second = claim(client, "q")
    assert second.job_id == retried and client.fail(second.fence, "twice")          # its last attempt
    assert client.complete(done_claim.fence)
    cancelled = client.submit("q", "t")
    assert client.cancel(cancelled) == "cancelled"
    expired = client.submit("q", "t", expires_at=db_now(db) + timedelta(hours=1))
    set_jobs(db, [expired], expires_at=db_now(db) - timedelta(seconds=1))
    assert client.reap().expired == 1
    running = client.submit("q", "t")
    assert claim(client, "q").job_id == running
    waiting = client.submit("q", "t")

    base = last_closed(db) - 20 * MINUTE
    m = [base + k * MINUTE for k in range(5)]
    set_jobs(db, [done], created_at=m[0] + SECONDS, run_at=m[0] + SECONDS, finished_at=m[2] + SECONDS)
    set_claims(db, [done], 1, m[1] + SECONDS)
    set_jobs(db, [retried], created_at=m[0] + SECONDS, run_at=m[3], finished_at=m[3] + 2 * SECONDS)
    set_claims(db, [retried], 1, m[1] + SECONDS)
    set_claims(db, [retried], 2, m[3] + SECONDS)
    set_jobs(db, [cancelled], created_at=m[1] + SECONDS, finished_at=m[2] + SECONDS)
    set_jobs(db, [expired], created_at=m[1] + SECONDS, finished_at=m[4] + SECONDS)
    set_jobs(db, [running], created_at=m[2] + SECONDS, run_at=m[2] + SECONDS)
    set_claims(db, [running], 1, m[2] + 2 * SECONDS)
    set_jobs(db, [waiting], created_at=m[0] + SECONDS)
    seed_sample(db, "q", base - MINUTE)

    before = last_closed(db)
    written = client.sample_activity()
    after = last_closed(db)
    assert written in (minutes_through(base, before), minutes_through(base, after))
    assert sample_rows(db, "q", base) == written
    buckets = by_start(client.activity(queue="q"))
    assert [counts(buckets[minute]) for minute in m] == [
        # submitted, claimed, retried, completed, failed, cancelled, expired
        (3, 0, 0, 0, 0, 0, 0),
        (2, 2, 0, 0, 0, 0, 0),
        (1, 1, 0, 1, 0, 1, 0),
        (0, 1, 1, 0, 1, 0, 0),
        (0, 0, 0, 0, 0, 0, 1),
    ]
    assert all(counts(b) == (0,) * 7 for start, b in buckets.items() if start > m[-1])
    sampled = [b for b in buckets.values() if b.pending is not None]
    assert [b.bucket_start in (before, after) for b in sampled] == [True], "depth on the last closed minute only"
    assert depth(sampled[0]) == (1, 1, 1)


def test_catching_up_writes_at_most_max_minutes_oldest_first(db, client):
    client.create_queue("q")
    base = last_closed(db) - 10 * MINUTE
    seed_sample(db, "q", base - MINUTE)
    early, late = client.submit("q", "t"), client.submit("q", "t")
    set_jobs(db, [early], created_at=base + MINUTE + SECONDS)
    set_jobs(db, [late], created_at=base + 5 * MINUTE + SECONDS)

    assert client.sample_activity(max_minutes=3) == 3
    assert sample_rows(db, "q", base) == sample_rows(db, "q", base, base + 3 * MINUTE) == 3
    buckets = by_start(client.activity(queue="q"))
    assert [buckets[base + k * MINUTE].submitted for k in range(6)] == [0, 1, 0, 0, 0, 0], "base+5 waits"
    assert all(b.pending is None for b in buckets.values()), "the last closed minute is not reached yet"

    assert client.sample_activity(max_minutes=3) == 3
    assert by_start(client.activity(queue="q"))[base + 5 * MINUTE].submitted == 1
    before = last_closed(db)
    rest = client.sample_activity()
    after = last_closed(db)
    assert rest in (minutes_through(base + 6 * MINUTE, before), minutes_through(base + 6 * MINUTE, after))
    buckets = by_start(client.activity(queue="q"))
    sampled = [b for b in buckets.values() if b.pending is not None]
    assert [b.bucket_start in (before, after) for b in sampled] == [True]
    assert depth(sampled[0]) == (2, 2, 0)
    assert all(buckets[base + k * MINUTE].pending is None for k in range(9)), "minutes caught up have no depth"


def test_a_minute_is_written_once_and_never_rewritten(db, client):
    client.create_queue("q")
    base = last_closed(db) - 30 * MINUTE
    seed_sample(db, "q", base - MINUTE)
    job_id = client.submit("q", "t")
    set_jobs(db, [job_id], created_at=base + SECONDS)
    first = client.sample_activity()
    assert by_start(client.activity(queue="q"))[base].submitted == 1
    set_jobs(db, [job_id], created_at=base + MINUTE + SECONDS)   # history changed after the sample
    again = client.sample_activity()
    assert again in (0, 1), "only a minute that closed in between"
    buckets = by_start(client.activity(queue="q"))
    assert (buckets[base].submitted, buckets[base + MINUTE].submitted) == (1, 0)
    assert sample_rows(db, "q") == 1 + first + again


def test_racing_samplers_write_each_minute_once(db, client):
    client.create_queue("q")
    base = last_closed(db) - 30 * MINUTE
    seed_sample(db, "q", base - MINUTE)
    samplers = [db.connect() for _ in range(2)]
    start = threading.Barrier(len(samplers))
    answers, errors = [], []

    def sample(sampler) -> None:
        try:
            start.wait()
            answers.append(sampler.sample_activity())
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=sample, args=(s,)) for s in samplers]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        for sampler in samplers:
            sampler.close()
    assert errors == [] and len(answers) == 2
    assert sum(answers) == sample_rows(db, "q", base) >= 30, "each row counted by the call that wrote it"


def test_samples_older_than_keep_are_deleted(db, client):
    client.create_queue("q")
    recent = last_closed(db) - 5 * MINUTE
    for age in (timedelta(days=9), timedelta(days=7), timedelta(days=2)):
        seed_sample(db, "q", recent - age, submitted=1)
    seed_sample(db, "q", recent)
    client.sample_activity()
    assert sample_rows(db, "q", end=recent - timedelta(hours=192)) == 0, "the default keeps 192 hours"
    assert sample_rows(db, "q", end=recent) == 2
    assert sum(b.submitted for b in client.activity(queue="q", since=timedelta(hours=192))) == 2
    client.sample_activity(keep=timedelta(days=1))
    assert sample_rows(db, "q", end=recent) == 0
    assert sample_rows(db, "q", recent) >= 1, "the recent rows stay"


def test_the_series_survives_purge(db, client):
    client.create_queue("q")
    job_id = client.submit("q", "t")
    assert client.complete(claim(client, "q").fence)
    base = last_closed(db) - 10 * MINUTE
    set_jobs(db, [job_id], created_at=base + SECONDS, run_at=base + SECONDS, finished_at=base + MINUTE)
    set_claims(db, [job_id], 1, base + 2 * SECONDS)
    seed_sample(db, "q", base - MINUTE)
    client.sample_activity()
    assert client.purge(timedelta(0)) == 1 and client.get_job(job_id) is None
    buckets = by_start(client.activity(queue="q"))
    assert (buckets[base].submitted, buckets[base].claimed, buckets[base + MINUTE].completed) == (1, 1, 1)


# Histograms ----------------------------------------------------------------------------------

def test_wait_and_run_percentiles_come_from_histograms_merged_across_queues(db, client):
    client.create_queue("fast", lease=timedelta(minutes=10))
    client.create_queue("slow", lease=timedelta(minutes=10), max_attempts=1, dead_letter=False)
    fast = client.submit_batch("fast", [{"task": "t"}] * 90)
    claims = client.claim_batch(["fast"], "w", [fenceq.new_claim_token() for _ in fast])
    assert client.complete_batch([c.fence for c in claims]) == [True] * 90
    slow = client.submit_batch("slow", [{"task": "t"}] * 10)
    for c in client.claim_batch(["slow"], "w", [fenceq.new_claim_token() for _ in slow]):
        assert client.fail(c.fence, "slow")
    client.submit("fast", "t")                        # the depth of each queue, summed for all queues
    client.submit("slow", "t")
    client.submit("slow", "t")

    base = last_closed(db) - 10 * MINUTE
    finished = base + 5 * MINUTE + 30 * timedelta(seconds=1)
    shapes = {"fast": (fast, timedelta(seconds=1), timedelta(seconds=2)),
              "slow": (slow, timedelta(seconds=60), timedelta(seconds=120))}
    for job_ids, wait, run in shapes.values():
        set_jobs(db, job_ids, created_at=base + SECONDS, run_at=finished - run - wait, finished_at=finished)
        set_claims(db, job_ids, 1, finished - run)
    for queue in shapes:
        seed_sample(db, queue, base - MINUTE)
    client.sample_activity()

    quick, slowly = middle_of_bucket(1_000), middle_of_bucket(60_000)
    short, long = middle_of_bucket(2_000), middle_of_bucket(120_000)
    at = finished.replace(second=0)
    one = by_start(client.activity(queue="fast"))[at]
    assert (one.completed, one.failed) == (90, 0)
    assert all(close_to(p, quick) for p in (one.wait_p50, one.wait_p95))
    assert all(close_to(p, short) for p in (one.run_p50, one.run_p95))
    other = by_start(client.activity(queue="slow"))[at]
    assert (other.completed, other.failed) == (0, 10), "failed jobs are charted too"
    assert all(close_to(p, slowly) for p in (other.wait_p50, other.wait_p95))
    assert all(close_to(p, long) for p in (other.run_p50, other.run_p95))

    merged = by_start(client.activity())
    every = merged[at]
    assert (every.completed, every.failed) == (90, 10)
    assert close_to(every.wait_p50, quick) and close_to(every.wait_p95, slowly)
    assert close_to(every.run_p50, short) and close_to(every.run_p95, long)
    assert merged[base].submitted == 100
    assert (merged[at].claimed, merged[at - 2 * MINUTE].claimed) == (90, 10)   # the slow ones ran two minutes
    quiet = [b for start, b in merged.items() if start != at]
    assert all((b.wait_p50, b.wait_p95, b.run_p50, b.run_p95) == (None,) * 4 for b in quiet)
    [sampled] = [b for b in merged.values() if b.pending is not None]
    assert depth(sampled) == (3, 3, 0)


@pytest.mark.parametrize("milliseconds", [0.2, 1, 1.5, 999, 86_400_000, 10 ** 12])
def test_a_duration_is_read_as_the_middle_of_its_bucket(db, client, milliseconds):
    """Below a millisecond counts as one; the last bucket (127, ~50 days) holds longer ones."""
    client.create_queue("q", lease=timedelta(minutes=10))
    job_id = client.submit("q", "t")
    assert client.complete(claim(client, "q").fence)
    base = last_closed(db) - 10 * MINUTE
    run = timedelta(milliseconds=milliseconds)
    finished = base + 59 * timedelta(seconds=1)
    set_jobs(db, [job_id], created_at=finished - run, run_at=finished - run, finished_at=finished)
    set_claims(db, [job_id], 1, finished - run)
    seed_sample(db, "q", base - MINUTE)
    client.sample_activity()
    [bucket] = [b for b in client.activity(queue="q") if b.completed]
    assert close_to(bucket.run_p50, middle_of_bucket(milliseconds))
    assert close_to(bucket.run_p95, middle_of_bucket(milliseconds))
    assert close_to(bucket.wait_p50, middle_of_bucket(0)), "claimed as it fell due: no wait"
    assert middle_of_bucket(10 ** 12) == middle_of_bucket(10 ** 13) > timedelta(days=45)


# activity: buckets ---------------------------------------------------------------------------

@pytest.mark.parametrize("since, width", [
    (timedelta(hours=1), MINUTE), (timedelta(hours=2), MINUTE),
    (timedelta(hours=2, minutes=1), 15 * MINUTE), (timedelta(hours=48), 15 * MINUTE),
    (timedelta(hours=48, minutes=1), 60 * MINUTE), (timedelta(hours=192), 60 * MINUTE),
])
def test_the_bucket_follows_since_and_every_bucket_appears(db, client, since, width):
    client.create_queue("q")
    before = last_closed(db)
    buckets = client.activity(queue="q", since=since)
    after = last_closed(db)
    starts = [b.bucket_start for b in buckets]
    assert all(later - earlier == width for earlier, later in zip(starts, starts[1:])), "oldest first"
    assert len(starts) == -(-since // width), "ceil(since / bucket) whole buckets"
    assert starts[-1] + width in (before + MINUTE, after + MINUTE), "the last ends where the closed minutes end"
    assert all(counts(b) == (0,) * 7 for b in buckets), "zeros, not missing rows"
    assert all(depth(b) == (None,) * 3 and b.wait_p50 is None and b.run_p95 is None for b in buckets)


def test_one_minute_buckets_end_at_the_last_closed_minute(db, client):
    client.create_queue("q")
    before = last_closed(db)
    starts = [b.bucket_start for b in client.activity(queue="q", since=timedelta(hours=1))]
    after = last_closed(db)
    assert len(starts) == 60 and starts[-1] in (before, after)


def test_an_explicit_bucket(db, client):
    client.create_queue("q")
    starts = [b.bucket_start for b in client.activity(queue="q", since=timedelta(hours=1),
                                                        bucket=timedelta(minutes=7))]
    assert all(later - earlier == 7 * MINUTE for earlier, later in zip(starts, starts[1:]))
    assert len(starts) == 9, "ceil(60 / 7)"
    week = client.activity(queue="q", since=timedelta(days=7), bucket=MINUTE)
    assert len(week) == 10_080, "the most buckets a call may ask for"


def test_a_bucket_sums_its_minutes_and_shows_its_last_sampled_depth(db, client):
    """Three samples in the middle of a 15-minute bucket: the buckets end
    where the closed minutes end, so they share one even if a minute closes
    before the call."""
    client.create_queue("q")
    end = last_closed(db) + MINUTE
    middle = end - 188 * MINUTE                                           # in [end - 195, end - 180)
    seed_sample(db, "q", middle - MINUTE, submitted=2, pending=5, due=4, running=1)
    seed_sample(db, "q", middle, submitted=3, pending=7, due=6, running=2)
    seed_sample(db, "q", middle + MINUTE, submitted=4)                  # caught up later: no depth
    seed_sample(db, "q", middle + 30 * MINUTE, submitted=1)             # two buckets on
    buckets = client.activity(queue="q", since=timedelta(hours=6))

    def holding(minute):
        [bucket] = [b for b in buckets if b.bucket_start <= minute < b.bucket_start + 15 * MINUTE]
        return bucket

    assert holding(middle - MINUTE) == holding(middle + MINUTE)
    assert (holding(middle).submitted, depth(holding(middle))) == (9, (7, 6, 2))
    later = holding(middle + 30 * MINUTE)
    assert (later.submitted, depth(later)) == (1, (None,) * 3)
    assert sum(b.submitted for b in buckets) == 10


def test_all_queues_sum_counts_and_depth(db, client):
    client.create_queue("a")
    client.create_queue("b")
    client.create_queue("quiet")
    minute = last_closed(db) - 30 * MINUTE
    seed_sample(db, "a", minute, submitted=2, pending=5, due=1, running=3)
    seed_sample(db, "b", minute, submitted=3, pending=7, due=2, running=0)
    every = by_start(client.activity())[minute]
    assert (every.submitted, depth(every)) == (5, (12, 3, 3))
    assert by_start(client.activity(queue="quiet"))[minute].submitted == 0


# Refusals ------------------------------------------------------------------------------------

def unchecked(client, name: str, shape: Shape, *args: Arg):
    """An operation built by hand: its values reach the SQL without the client's checks."""
    return client._backend.run(Op(name, args, shape))


def test_an_unknown_queue_is_qf101(client):
    client.create_queue("q")
    with raises_code("QF101"):
        client.activity(queue="nope")


@pytest.mark.parametrize("since, bucket, code", [
    (timedelta(hours=192, minutes=1), None, "QF104"),                # at most 192 hours back
    (timedelta(hours=193), 60 * MINUTE, "QF104"),                    # with a bucket too
    (timedelta(hours=1), timedelta(seconds=90), "QF104"),            # a whole number of minutes
    (timedelta(days=7, minutes=1), MINUTE, "QF104"),                 # at most 10,080 buckets
    (timedelta(days=7, seconds=1), MINUTE, "QF104"),                 # ceil(since / bucket) of them
    (timedelta(0), None, "QF105"),
    (timedelta(hours=1), timedelta(0), "QF105"),
])
def test_the_sql_refuses_what_the_bucket_rules_forbid(client, since, bucket, code):
    client.create_queue("q")
    with raises_code(code):
        unchecked(client, "activity", Shape.ROWS, Arg("queue", "text", "q"), Arg("since", "interval", since),
                  Arg("bucket", "interval", bucket))


@pytest.mark.parametrize("arguments, code", [
    ((Arg("max_minutes", "integer", 0),), "QF104"),
    ((Arg("max_minutes", "integer", 11_521),), "QF104"),
    ((Arg("keep", "interval", timedelta(0)),), "QF105"),
    ((Arg("keep", "interval", timedelta(seconds=-1)),), "QF105"),
    ((Arg("keep", "interval", timedelta(seconds=59)),), "QF105"),     # at least a minute
])
def test_sample_activity_refuses_bad_bounds_and_writes_nothing(db, client, arguments, code):
    client.create_queue("q")
    with raises_code(code):
        unchecked(client, "sample_activity", Shape.SCALAR, *arguments)
    assert sample_rows(db, "q") == 0
