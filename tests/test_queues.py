"""Queues: create_queue, alter_queue, pause/resume, notify (docs/guarantees.md §3)."""

from datetime import timedelta

import fenceq
from helpers import claim, raises_code


def test_create_queue_is_idempotent_for_identical_settings(client):
    assert client.create_queue("emails", lease=timedelta(seconds=10), max_attempts=3) is True
    assert client.create_queue("emails", lease=timedelta(seconds=10), max_attempts=3) is False


def test_create_queue_with_other_settings_conflicts(client):
    client.create_queue("emails")
    with raises_code("QF100"):
        client.create_queue("emails", max_attempts=9)


def test_alter_queue_changes_only_named_settings(client):
    client.create_queue("emails", max_attempts=3)
    client.alter_queue("emails", max_attempts=7)
    job_id = client.submit("emails", "t")
    assert client.get_job(job_id).max_attempts == 7
    # The rules apply to the settings after the change.
    with raises_code("QF105"):
        client.alter_queue("emails", backoff_base=timedelta(hours=2))  # above backoff_max (1 hour)
    assert client.create_queue("emails", max_attempts=7) is False  # unchanged by the refused call


def test_unknown_queue_is_qf101_everywhere(client):
    with raises_code("QF101"):
        client.alter_queue("nope", max_attempts=2)
    with raises_code("QF101"):
        client.pause_queue("nope")
    with raises_code("QF101"):
        client.resume_queue("nope")
    with raises_code("QF101"):
        client.set_queue_notify("nope", False)
    with raises_code("QF101"):
        client.submit("nope", "t")
    with raises_code("QF101"):
        client.claim_next(["nope"], "w", fenceq.new_claim_token())


def test_paused_queue_accepts_work_but_gives_none(client, queue):
    assert client.pause_queue(queue) is True
    assert client.pause_queue(queue) is False
    client.submit(queue, "t")
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None
    assert client.resume_queue(queue) is True
    assert client.resume_queue(queue) is False
    assert claim(client, queue).task == "t"


def test_set_queue_notify_reports_change(client, queue):
    assert client.set_queue_notify(queue, False) is True
    assert client.set_queue_notify(queue, False) is False
    assert [s.notify for s in client.stats() if s.queue == queue] == [False]


def test_queue_settings_are_validated(client):
    with raises_code("QF105"):
        client.create_queue("q", lease=timedelta(0))
    with raises_code("QF104"):
        client.create_queue("q", max_attempts=0)
    with raises_code("QF104"):
        client.create_queue("q", backoff_factor=0.5)
    with raises_code("QF104"):
        client.create_queue("q", backoff_factor=float("inf"))
    with raises_code("QF102"):
        client.create_queue("")
    with raises_code("QF102"):
        client.create_queue("x" * 256)
    assert client.stats() == []
