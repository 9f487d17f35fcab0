"""fenceq.testing (docs/testing-your-tasks.md): one test of a user's tasks
passing in all three modes (inline, in memory, a throwaway PostgreSQL
database through pytest-postgresql), what each mode adds, the database
mode over both engines of the ``db`` fixture, and the pytest plugin's
fixtures and options seen from a user's test session."""

from __future__ import annotations

from datetime import timedelta

import pytest
import thumbnails
from thumbnails import Size, flaky_fetch, make_thumbnail, publish, refuse

import fenceq
from fenceq.testing import DatabaseMode, InlineMode, MemoryMode

PATIENCE = 60.0  # seconds: bounds a failure only

pytest_plugins = ["pytester"]


@pytest.fixture
def fenceq_app() -> fenceq.App:
    return thumbnails.app


@pytest.fixture(params=["fenceq_inline", "fenceq_memory", "fenceq_postgres"])
def tasks_mode(request):
    return request.getfixturevalue(request.param)


# The docs' test, in every mode ------------------------------------------------------


def test_a_thumbnail_is_made(tasks_mode):
    job = make_thumbnail.submit(url="https://example.com/a.png", size=Size(4, 3))
    assert job.wait(timeout=PATIENCE) == {"url": "https://example.com/a.png", "pixels": 2500, "area": 12}
    assert job.status() == "completed"


def test_a_refused_image_fails_at_once(tasks_mode):
    with pytest.raises(fenceq.TaskFailed) as failed:
        refuse.submit(url="x.txt").wait(timeout=PATIENCE)
    assert "NonRetryable: x.txt is not an image" in failed.value.last_error
    assert failed.value.job.attempts == 1


async def test_a_follow_up_job_runs_too(tasks_mode):
    publishing = await publish.submit_async(url="b.png")
    follow_up_id = await publishing.wait_async(timeout=PATIENCE)
    follow_up = fenceq.JobHandle(follow_up_id, make_thumbnail, thumbnails.app.submitter)
    assert (await follow_up.wait_async(timeout=PATIENCE))["area"] == 4


def test_a_bad_call_is_refused_before_anything_is_sent(tasks_mode):
    with pytest.raises(fenceq.ConfigError, match="parameter size.width: expected int, got str"):
        make_thumbnail.submit(url="a.png", size={"width": "4", "height": 3})


# What each mode adds ---------------------------------------------------------------------


def test_inline_raises_the_handlers_error_as_the_cause(fenceq_inline):
    thumbnails.attempts.clear()
    with pytest.raises(fenceq.TaskFailed) as failed:
        flaky_fetch.submit(url="c.png")
    assert isinstance(failed.value.__cause__, ConnectionError) and failed.value.status == "pending"
    assert thumbnails.attempts == [1]  # one claim


def test_inline_runs_at_once_whatever_the_delay_and_dependencies(fenceq_inline):
    first = make_thumbnail.submit(url="a", size=Size(1, 1))
    later = make_thumbnail.options(delay=timedelta(hours=1), depends_on=[first.id]).submit(url="b", size=Size(1, 1))
    assert later.status() == "completed"


def test_memory_retries_when_the_clock_moves(fenceq_memory):
    thumbnails.attempts.clear()
    job = flaky_fetch.submit(url="d.png")
    assert job.status() == "pending"  # nothing runs until a drain
    fenceq_memory.drain()
    assert (job.status(), thumbnails.attempts) == ("pending", [1])  # its retry is due in a second
    fenceq_memory.advance(timedelta(seconds=1))
    assert job.wait() == "fetched" and thumbnails.attempts == [1, 2]


def test_memory_runs_a_delayed_job_once_its_time_comes(fenceq_memory):
    job = make_thumbnail.options(delay=60, priority=3).submit(url="e", size=Size(1, 2))
    with pytest.raises(fenceq.WaitTimeout):
        job.wait()  # the drain finds nothing due: nothing moves the clock but the test
    fenceq_memory.advance(60)
    assert job.wait()["area"] == 2 and job.read().priority == 3


def test_memory_cancels_dependents_of_a_failed_job(fenceq_memory):
    failing = refuse.submit(url="f")
    dependent = make_thumbnail.options(depends_on=[failing.id]).submit(url="g", size=Size(1, 1))
    with pytest.raises(fenceq.TaskCancelled) as cancelled:
        dependent.wait()
    assert cancelled.value.last_error == "dependency_failed"


def test_memory_replays_a_submission_and_keeps_active_keys(fenceq_memory):
    upload = make_thumbnail.options(submission_id="upload-1")
    assert upload.submit(url="h", size=Size(1, 1)).id == upload.submit(url="h", size=Size(1, 1)).id
    with pytest.raises(fenceq.SubmissionConflict):
        upload.submit(url="other", size=Size(1, 1))
    make_thumbnail.options(active_key="k").submit(url="i", size=Size(1, 1))
    with pytest.raises(fenceq.SubmissionConflict):
        make_thumbnail.options(active_key="k").submit(url="j", size=Size(1, 1))
    with pytest.raises(fenceq.ConfigError, match="does not model concurrency_key"):
        make_thumbnail.options(concurrency_key="c").submit(url="k", size=Size(1, 1))


def test_a_mode_gives_the_submissions_back_when_it_closes():
    before = thumbnails.app.submitter
    with MemoryMode(thumbnails.app):
        assert thumbnails.app.submitter is not before
    assert thumbnails.app.submitter is before
    with pytest.raises(fenceq.ConfigError, match="not open"):
        InlineMode(thumbnails.app).client()


# The database mode over both engines ------------------------------------------------------


def test_the_database_mode_runs_a_real_worker(db):
    with DatabaseMode(thumbnails.app, db.url, queue_options={"backoff_base": timedelta(0),
                                                              "backoff_max": timedelta(0)}):
        thumbnails.attempts.clear()
        assert flaky_fetch.submit(url="l").wait(timeout=PATIENCE) == "fetched"
        assert thumbnails.attempts == [1, 2]
        assert make_thumbnail.using(thumbnails.app.client()).submit(url="m", size=Size(1, 1)).wait(
            timeout=PATIENCE)["pixels"] == 100


# The plugin as a user's session sees it ----------------------------------------------------

USER_TESTS = '''
import pytest
import fenceq

app = fenceq.App(queues=["q"])

@app.task
def double(ctx, value: int) -> int:
    return 2 * value

@pytest.fixture
def fenceq_app():
    return app

def test_double(fenceq):
    assert double.submit(value=21).wait(timeout=60) == 42
    print("mode:", type(fenceq).__name__)
'''


@pytest.mark.parametrize("mode, name", [("inline", "InlineMode"), ("memory", "MemoryMode")])
def test_the_fenceq_fixture_takes_its_mode_from_the_command_line(pytester, mode, name):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", f"--fenceq-mode={mode}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*mode: {name}*"])


def test_without_an_app_the_fixture_says_what_to_do(pytester):
    pytester.makepyfile(test_user="def test_it(fenceq_inline):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*override the fenceq_app fixture*"])
