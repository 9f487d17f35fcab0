"""The version-7 operations (docs/design-v7.md: sample_activity, activity,
search_jobs and the bulk actions) refuse malformed input before anything is
sent, with the code the SQL would raise, and declare what they answer (no
database needed)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fenceq import ops
from fenceq.errors import ConfigError
from fenceq.types import ActivityBucket, JobPage, SearchedJob

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
WINDOW = {"since": NOW - timedelta(hours=1)}


@pytest.mark.parametrize("build, sqlstate", [
    (lambda: ops.sample_activity(max_minutes=0), "QF104"),
    (lambda: ops.sample_activity(max_minutes=11_521), "QF104"),
    (lambda: ops.sample_activity(max_minutes=True), "QF104"),
    (lambda: ops.sample_activity(keep=timedelta(0)), "QF105"),
    (lambda: ops.sample_activity(keep=3600), "QF105"),
    (lambda: ops.sample_activity(keep=timedelta(seconds=59)), "QF105"),
    # activity: the queue, then since, then the bucket rules.
    (lambda: ops.activity(""), "QF102"),
    (lambda: ops.activity(None, None), "QF100"),
    (lambda: ops.activity(None, timedelta(0)), "QF105"),
    (lambda: ops.activity(None, timedelta(hours=192, minutes=1)), "QF104"),
    (lambda: ops.activity(None, timedelta(hours=193), timedelta(hours=1)), "QF104"),   # with a bucket too
    (lambda: ops.activity(None, timedelta(hours=1), timedelta(0)), "QF105"),
    (lambda: ops.activity(None, timedelta(hours=1), timedelta(seconds=90)), "QF104"),
    (lambda: ops.activity(None, timedelta(days=7, minutes=1), timedelta(minutes=1)), "QF104"),
    (lambda: ops.activity(None, timedelta(days=7, seconds=30), timedelta(minutes=1)), "QF104"),   # ceil: 10,081
    # search_jobs: each argument, then the bounding filter.
    (lambda: ops.search_jobs(queue="", status="pending"), "QF102"),
    (lambda: ops.search_jobs(status="done"), "QF100"),
    (lambda: ops.search_jobs(status="pending", task=""), "QF102"),
    (lambda: ops.search_jobs(status="pending", payload_contains="tenant"), "QF100"),
    (lambda: ops.search_jobs(status="pending", payload_contains={"x": float("nan")}), "QF103"),
    (lambda: ops.search_jobs(status="pending", error_contains=""), "QF100"),
    (lambda: ops.search_jobs(status="pending", error_contains="e" * 1001), "QF100"),
    (lambda: ops.search_jobs(submission_prefix="s" * 256), "QF102"),
    (lambda: ops.search_jobs(status="failed", since=datetime(2026, 1, 1)), "QF105"),
    (lambda: ops.search_jobs(status="pending", before_seq=1.5), "QF104"),
    (lambda: ops.search_jobs(status="pending", max_rows=0), "QF104"),
    (lambda: ops.search_jobs(status="pending", max_rows=1001), "QF104"),
    (lambda: ops.search_jobs(status="pending", max_scan=0), "QF104"),
    (lambda: ops.search_jobs(status="pending", max_scan=1_000_001), "QF104"),
    (lambda: ops.search_jobs(), "QF100"),
    (lambda: ops.search_jobs(queue="q", task="t", payload_contains={"a": 1}), "QF100"),
    (lambda: ops.search_jobs(status="pending", since=NOW), "QF100"),     # a window bounds finished jobs
    (lambda: ops.search_jobs(status="claimed", until=NOW), "QF100"),
    # Bulk actions: the queue, the selection and filters, max_rows, then "some filter".
    (lambda: ops.retry_jobs("", task="t"), "QF102"),
    (lambda: ops.retry_jobs("q", job_ids="j1"), "QF100"),
    (lambda: ops.retry_jobs("q", job_ids=[]), "QF100"),
    (lambda: ops.retry_jobs("q", job_ids=["j" * 256]), "QF102"),
    (lambda: ops.retry_jobs("q", job_ids=["j"] * 10_001), "QF100"),
    (lambda: ops.retry_jobs("q", task="t", max_rows=0), "QF104"),
    (lambda: ops.retry_jobs("q", task="t", max_rows=100_001), "QF104"),
    (lambda: ops.retry_jobs("q"), "QF100"),
    (lambda: ops.retry_jobs("q", max_rows=0), "QF104"),
    (lambda: ops.cancel_jobs("q"), "QF100"),
    (lambda: ops.cancel_jobs("q", task="t", force=True), "QF100"),
    (lambda: ops.cancel_jobs("q", task="t", force=True, max_rows=0), "QF104"),   # the flags come last
    (lambda: ops.cancel_jobs("q", task="t", include_claimed=1), "QF100"),
    (lambda: ops.cancel_jobs("q", payload_contains=5), "QF100"),
    (lambda: ops.replay_dead_letters("q"), "QF100"),
    (lambda: ops.replay_dead_letters("q", error_contains="x\x00"), "QF100"),
    (lambda: ops.replay_dead_letters("q", job_ids=[1]), "QF102"),
])
def test_malformed_input_is_refused_with_the_sql_code(build, sqlstate):
    with pytest.raises(ConfigError) as info:
        build()
    assert info.value.sqlstate == sqlstate


@pytest.mark.parametrize("since, bucket", [
    (timedelta(minutes=1), None), (timedelta(hours=2), None), (timedelta(hours=192), None),
    (timedelta(days=7), timedelta(minutes=1)), (timedelta(hours=192), timedelta(hours=1)),
    (timedelta(minutes=90), timedelta(minutes=15)), (timedelta(minutes=10_080, seconds=30), timedelta(minutes=2)),
])
def test_the_bucket_rules_let_these_through(since, bucket):
    op = ops.activity(None, since, bucket)
    assert (op.returns, op.writes) == (ActivityBucket, False)
    assert [(arg.name, arg.value) for arg in op.args] == [("queue", None), ("since", since), ("bucket", bucket)]


@pytest.mark.parametrize("filters", [
    {"submission_prefix": "tenant-7/"}, {"status": "pending"}, {"status": "claimed"}, {"status": "failed"},
    {"status": "failed", **WINDOW}, {"status": "expired", "until": NOW}, {"error_contains": "timeout"},
    WINDOW, {"submission_prefix": "p", **WINDOW},
])
def test_each_bounding_filter_lets_a_search_through(filters):
    op = ops.search_jobs(**filters)
    assert (op.name, op.returns, op.writes) == ("search_jobs", SearchedJob, False)
    sent = {arg.name: arg.value for arg in op.args}
    assert sent == {**filters, "max_rows": 50, "max_scan": 10_000}, "unset filters are left to the defaults"


def test_payload_contains_is_checked_and_sent_as_cancel_matching_does():
    pattern = {"tenant": "acme", "tags": ["x"]}
    searched = {a.name: a for a in ops.search_jobs(status="pending", payload_contains=pattern).args}
    cancelled = {a.name: a for a in ops.cancel_matching("q", payload_contains=pattern).args}
    assert searched["payload_contains"] == cancelled["payload_contains"]
    assert searched["payload_contains"].value == '{"tags":["x"],"tenant":"acme"}'


@pytest.mark.parametrize("build, name, flags", [
    (lambda **kw: ops.retry_jobs("q", **kw), "retry_jobs", {}),
    (lambda **kw: ops.cancel_jobs("q", **kw), "cancel_jobs", {"include_claimed": False, "force": False}),
    (lambda **kw: ops.replay_dead_letters("q", **kw), "replay_dead_letters", {}),
])
def test_a_bulk_action_takes_a_selection_a_filter_or_both(build, name, flags):
    for given in ({"job_ids": ("a", "b")}, {"task": "t"}, {"job_ids": ["a"], "task": "t"}):
        op = build(**given)
        assert (op.name, op.returns, op.writes) == (name, int, True)
        sent = {arg.name: arg.value for arg in op.args}
        expected = {"queue": "q", "max_rows": 1_000, **flags, **given}
        if "job_ids" in given:
            expected["job_ids"] = list(given["job_ids"])
        assert sent == expected


def test_a_page_carries_the_last_seq_as_its_cursor():
    assert JobPage.of([]) == JobPage([], None)
    fields = dict(job_id="j", queue="q", task="t", payload=None, priority=0, status="pending", attempts=0,
                  max_attempts=3, run_at=NOW, expires_at=None, owner_id=None, generation=0,
                  lease_expires_at=None, budget_expires_at=None, cancel_requested=False, pid=None, result=None,
                  last_error=None, submission_id=None, fingerprint=None, active_key=None, dlq_id=None,
                  created_at=NOW, finished_at=None)
    jobs = [SearchedJob(**fields, seq=9), SearchedJob(**fields, seq=4)]
    assert JobPage.of(jobs).next_before_seq == 4
