"""Concurrency and rate limits, and concurrency keys (docs/guarantees.md §12).

Racing claimers are real sessions, each with its own connection, on both
engines; each race asserts an exact total that a single lost update would
exceed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

import fenceq
from helpers import claim, raises_code, wait_until_past

HOUR = timedelta(hours=1)


def tokens(n: int) -> list[str]:
    return [fenceq.new_claim_token() for _ in range(n)]


def drain(client: fenceq.Client, queues: list[str], owner: str = "w") -> list[fenceq.Claim]:
    claims = []
    while (c := client.claim_next(queues, owner, fenceq.new_claim_token())) is not None:
        claims.append(c)
    return claims


def test_max_claimed_caps_claims_and_frees_a_slot_on_completion(client, queue):
    for _ in range(6):
        client.submit(queue, "t")
    client.set_queue_limits(queue, max_claimed=3)
    got = client.claim_batch([queue], "w", tokens(5))
    assert len(got) == 3
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None
    assert client.complete(got[0].fence)
    assert len(client.claim_batch([queue], "w", tokens(5))) == 1
    stats = next(s for s in client.stats() if s.queue == queue)
    assert (stats.claimed, stats.max_claimed) == (3, 3)


def test_a_key_at_its_limit_is_passed_over_for_another_key(client, queue):
    a = [client.submit(queue, "t", concurrency_key="tenant-a") for _ in range(3)]
    b = client.submit(queue, "t", concurrency_key="tenant-b")
    free = client.submit(queue, "t")
    client.set_queue_limits(queue, max_claimed_per_key=1)
    got = [c.job_id for c in client.claim_batch([queue], "w", tokens(5))]
    assert got == [a[0], b, free]  # claim order, tenant-a's others passed over
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None
    assert client.get_job(a[0]).concurrency_key == "tenant-a"
    assert next(s for s in client.stats() if s.queue == queue).busiest_key_claimed == 1


def test_claim_next_takes_a_key_up_to_its_limit_then_passes_it_over(client, queue):
    a = [client.submit(queue, "t", concurrency_key="tenant-a") for _ in range(3)]
    b = client.submit(queue, "t", concurrency_key="tenant-b")
    client.set_queue_limits(queue, max_claimed_per_key=2)
    assert [c.job_id for c in drain(client, [queue])] == [a[0], a[1], b]  # exactly 2 of tenant-a


def test_jobs_without_a_key_are_not_limited_by_the_per_key_limit(client, queue):
    for _ in range(4):
        client.submit(queue, "t")
    client.set_queue_limits(queue, max_claimed_per_key=1)
    assert len(drain(client, [queue])) == 4


def test_rate_limit_counts_claims_in_the_window(client, queue):
    for _ in range(5):
        client.submit(queue, "t")
    client.set_queue_limits(queue, rate_limit=2, rate_period=HOUR)
    assert len(client.claim_batch([queue], "w", tokens(3))) == 2
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None
    stats = next(s for s in client.stats() if s.queue == queue)
    assert (stats.rate_limit, stats.rate_period, stats.rate_used) == (2, HOUR, 2)


def test_rate_window_slides(client, queue):
    for _ in range(3):
        client.submit(queue, "t")
    client.set_queue_limits(queue, rate_limit=1, rate_period=timedelta(seconds=1))
    first = claim(client, queue)
    wait_until_past(client.attempts(first.job_id)[0].claimed_at + timedelta(seconds=1))
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is not None


def test_removing_limits_claims_freely_again(client, queue):
    for _ in range(4):
        client.submit(queue, "t")
    client.set_queue_limits(queue, max_claimed=1, rate_limit=1, rate_period=HOUR)
    assert len(drain(client, [queue])) == 1
    client.set_queue_limits(queue)
    assert len(drain(client, [queue])) == 3


def test_a_limited_queue_merges_with_others_by_priority(client):
    client.create_queue("limited")
    client.create_queue("open")
    high = [client.submit("limited", "t", priority=9) for _ in range(3)]
    low = [client.submit("open", "t", priority=1) for _ in range(2)]
    client.set_queue_limits("limited", max_claimed=1)
    got = [c.job_id for c in client.claim_batch(["limited", "open"], "w", tokens(4))]
    assert got == [high[0], *low]


@pytest.mark.parametrize("bad, code", [
    ({"max_claimed": 0}, "QF104"), ({"max_claimed_per_key": -1}, "QF104"), ({"rate_limit": 0,
     "rate_period": HOUR}, "QF104"), ({"rate_limit": 5}, "QF100"), ({"rate_period": HOUR}, "QF100"),
    ({"rate_limit": 1, "rate_period": timedelta(0)}, "QF105")])
def test_bad_limits_are_refused_and_change_nothing(client, queue, bad, code):
    client.set_queue_limits(queue, max_claimed=7)
    with raises_code(code):
        client.set_queue_limits(queue, **bad)
    assert next(s for s in client.stats() if s.queue == queue).max_claimed == 7


def test_limits_of_an_undeclared_queue(client):
    with raises_code("QF101"):
        client.set_queue_limits("nope", max_claimed=1)


def test_concurrency_key_is_part_of_the_submission_fingerprint(client, queue):
    job = client.submit(queue, "t", submission_id="s1", concurrency_key="k")
    assert client.submit(queue, "t", submission_id="s1", concurrency_key="k") == job
    with raises_code("QF201"):
        client.submit(queue, "t", submission_id="s1")
    with raises_code("QF201"):
        client.submit_batch(queue, [{"task": "t", "submission_id": "s1", "concurrency_key": "other"}])
    assert client.submit_batch(queue, [{"task": "t", "submission_id": "s1", "concurrency_key": "k"}]) == [job]
    with raises_code("QF102"):
        client.submit(queue, "t", concurrency_key="")


def _race(db, queue: str, sessions: int = 8) -> list[fenceq.Claim]:
    def claimer(n: int) -> list[fenceq.Claim]:
        with db.connect() as own:
            got = []
            for _ in range(6):  # each session keeps trying, claims or not
                got += own.claim_batch([queue], f"w{n}", tokens(2))
            return got

    with ThreadPoolExecutor(sessions) as pool:
        return [c for claims in pool.map(claimer, range(sessions)) for c in claims]


def test_racing_claimers_never_exceed_max_claimed(db, client, queue):
    for _ in range(40):
        client.submit(queue, "t")
    client.set_queue_limits(queue, max_claimed=5)
    assert len(_race(db, queue)) == 5


def test_racing_claimers_never_exceed_the_per_key_limit(db, client, queue):
    for n in range(30):
        client.submit(queue, "t", concurrency_key=f"k{n % 3}")
    client.set_queue_limits(queue, max_claimed_per_key=2)
    claimed = _race(db, queue)
    keys = [client.get_job(c.job_id).concurrency_key for c in claimed]
    assert sorted(keys) == ["k0", "k0", "k1", "k1", "k2", "k2"]


def test_racing_claimers_never_exceed_the_rate(db, client, queue):
    for _ in range(40):
        client.submit(queue, "t")
    client.set_queue_limits(queue, rate_limit=7, rate_period=HOUR)
    claimed = _race(db, queue)
    for c in claimed:  # completing frees no rate: the window counts claims
        assert client.complete(c.fence)
    assert len(claimed) == 7
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None
