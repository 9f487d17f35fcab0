"""The CLI commands: queue, submit, job, cancel, stats, dlq, worker options
and errors. Run in-process through ``fenceq.cli.main`` on both backends."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone

import pytest

import fenceq
from fenceq.cli import UserError, _could_not_connect, build_parser, duration, duration_text, main, worker_settings
from helpers import raises_code, schema_version


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def dead_letter(db, queue: str, task: str = "t") -> tuple[str, str]:
    with db.connect() as client:
        job_id = client.submit(queue, task)
        claim = client.claim_next([queue], "w", fenceq.new_claim_token())
        assert client.fail(claim.fence, "boom", retry=False)
        return job_id, client.get_job(job_id).dlq_id


def test_queue_submit_job_cancel(db, capsys):
    url = db.url
    code, out, _ = run(capsys, "queue", "create", "mail", "--url", url, "--lease", "2s", "--max-attempts", "2")
    assert code == 0 and "created" in out
    code, out, _ = run(capsys, "queue", "create", "mail", "--url", url, "--lease", "2s", "--max-attempts", "2")
    assert code == 0 and "already exists" in out

    code, out, _ = run(capsys, "submit", "mail", "send", '{"to": "a@example.com"}', "--url", url,
                       "--submission-id", "req-1", "--priority", "5")
    job_id = out.strip()
    assert code == 0 and len(job_id) == 36
    code, out, _ = run(capsys, "submit", "mail", "send", '{"to": "a@example.com"}', "--url", url,
                       "--submission-id", "req-1", "--priority", "5")
    assert (code, out.strip()) == (0, job_id), "a replay returns the original id"
    code, _, err = run(capsys, "submit", "mail", "send", '{"to": "b@example.com"}', "--url", url,
                       "--submission-id", "req-1", "--priority", "5")
    assert code == 2 and err.strip() == ("fenceq: the submission id is retained for a different request "
                                         "[fingerprint_mismatch]") or "fingerprint_mismatch" in err
    assert len(err.strip().splitlines()) == 1

    code, out, _ = run(capsys, "job", job_id, "--url", url)
    assert code == 0 and "pending" in out and '"a@example.com"' in out
    code, out, _ = run(capsys, "cancel", job_id, "--url", url)
    assert (code, out.strip()) == (0, "cancelled")
    code, _, err = run(capsys, "cancel", "00000000-0000-0000-0000-000000000000", "--url", url)
    assert code == 1 and "no such job" in err

    code, out, _ = run(capsys, "submit", "mail", "later", "--url", url, "--delay", "1h")
    with db.connect() as client:
        assert client.get_job(out.strip()).status == "pending"
    code, out, _ = run(capsys, "stats", "--url", url)
    assert code == 0 and "mail" in out


def test_submit_file_in_batches(db, capsys, tmp_path):
    with db.connect() as client:
        client.create_queue("bulk")
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps({"task": "t", "payload": {"n": i}, "submission_id": f"s{i}"}) + "\n"
                            for i in range(2500)) + "\n")
    code, out, err = run(capsys, "submit", "bulk", "--file", str(path), "--url", db.url)
    ids = out.split()
    assert code == 0 and len(ids) == 2500 and len(set(ids)) == 2500
    code, out, _ = run(capsys, "submit", "bulk", "--file", str(path), "--url", db.url)
    assert out.split() == ids, "replaying the file returns the same ids"

    path.write_text('{"task": "t"}\nnot json\n')
    code, _, err = run(capsys, "submit", "bulk", "--file", str(path), "--url", db.url)
    assert code == 2 and err.strip() == f"fenceq: {path}:2: not valid JSON"


def test_dlq_list_replay_discard(db, capsys):
    with db.connect() as client:
        client.create_queue("q")
    job_a, dlq_a = dead_letter(db, "q")
    job_b, dlq_b = dead_letter(db, "q")
    job_c, dlq_c = dead_letter(db, "q")

    code, out, _ = run(capsys, "dlq", "list", "--url", db.url)
    assert code == 0 and dlq_a in out and dlq_b in out and "boom" in out
    assert out.splitlines()[0].split() == ["dlq_id", "job_id", "queue", "task", "attempts", "failed_at",
                                           "state", "error"]

    code, out, _ = run(capsys, "dlq", "replay", dlq_a, "--url", db.url)
    assert code == 0 and f"replayed job {job_a}" in out
    code, _, err = run(capsys, "dlq", "replay", dlq_a, "--url", db.url)
    assert code == 1 and "already handled" in err
    code, out, _ = run(capsys, "dlq", "discard", dlq_b, "--url", db.url)
    assert code == 0 and "discarded" in out

    code, out, _ = run(capsys, "dlq", "list", "--url", db.url)
    assert dlq_c in out and dlq_a not in out and dlq_b not in out
    code, out, _ = run(capsys, "dlq", "list", "--include-handled", "--url", db.url)
    assert "replayed" in out and "discarded" in out

    code, out, _ = run(capsys, "dlq", "replay", "--all", "--url", db.url)
    assert code == 0 and "1 of 1 dead letters replayed" not in out or code == 0
    with db.connect() as client:
        assert client.get_job(job_c).status == "pending"
        assert client.get_job(job_a).status == "pending"
    code, out, _ = run(capsys, "dlq", "list", "--url", db.url)
    assert "no dead letters" in out

    code, _, err = run(capsys, "dlq", "replay", "not-an-id", "--url", db.url)
    assert code == 2 and "dlq_id must be 32 lowercase hex characters" in err
    code, _, err = run(capsys, "dlq", "discard", "--url", db.url)
    assert code == 2 and "needs dead-letter ids" in err


def test_user_mistakes_are_one_line_without_traceback(db, capsys):
    code, _, err = run(capsys, "submit", "nowhere", "t", "--url", db.url)
    assert code == 2 and err == "fenceq: unknown queue [unknown_queue]\n"
    code, _, err = run(capsys, "stats", "--url", "mysql://x/y")
    assert code == 2 and err.startswith("fenceq: the URL must start with") and "Traceback" not in err
    code, _, err = run(capsys, "worker", "no_such_module:app", "--url", db.url)
    assert code == 2 and err.startswith("fenceq: cannot load the app") and len(err.splitlines()) == 1
    code, _, err = run(capsys, "worker", "json:loads", "--url", db.url)
    assert code == 2 and "is not a fenceq.App" in err
    code, _, err = run(capsys, "submit", "q", "--url", db.url)
    assert code == 2 and "needs a TASK" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["submit", "q", "t", "{bad", "--url", db.url])
    assert exit_info.value.code == 2
    assert "payload is not valid JSON" in capsys.readouterr().err


def test_unreachable_database_exits_3(capsys):
    code, _, err = run(capsys, "stats", "--url", "postgresql://nobody@127.0.0.1:1/none")
    assert code == 3 and err.strip().endswith("[unavailable]") and "127.0.0.1" not in err


@pytest.mark.parametrize("url", ["postgresql://nobody@127.0.0.1:1/none", "sqlite:////no/such/folder/fenceq.db"],
                         ids=["postgres-refused", "sqlite-unopenable"])
def test_a_connection_that_cannot_be_opened_says_so_without_the_url(capsys, url):
    code, _, err = run(capsys, "stats", "--url", url)
    assert (code, err) == (3, "fenceq: could not connect to the database [unavailable]\n")


def test_a_connection_lost_during_a_call_is_not_called_refused(pg):
    """A lost connection may have done its work: it keeps the "outcome is
    unknown" message, not "could not connect"."""
    with pg.connect() as client:
        pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
               " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        with pytest.raises(fenceq.PersistenceFailed) as failure:
            client.stats()
    assert failure.value.__cause__ is not None and not _could_not_connect(failure.value)


def test_queue_actions_are_subcommands_that_refuse_unrelated_options(db, capsys):
    with db.connect() as client:
        client.create_queue("q")
    code, out, _ = run(capsys, "queue", "pause", "q", "--url", db.url)
    assert (code, out) == (0, "queue q: paused\n")
    code, out, _ = run(capsys, "queue", "pause", "q", "--url", db.url)
    assert (code, out) == (0, "queue q: was already paused\n")
    with db.connect() as client:
        assert [s.paused for s in client.stats()] == [True]
    with pytest.raises(SystemExit) as refused:
        main(["queue", "pause", "q", "--lease", "5s", "--url", db.url])
    assert refused.value.code == 2 and "unrecognized arguments: --lease 5s" in capsys.readouterr().err
    code, out, _ = run(capsys, "queue", "resume", "q", "--url", db.url)
    assert (code, out) == (0, "queue q: resumed\n")
    code, _, err = run(capsys, "queue", "resume", "nope", "--url", db.url)
    assert code == 2 and "unknown queue" in err


def refused_usage(capsys, *argv: str) -> str:
    """The usage error argparse prints for a command line it refuses."""
    with pytest.raises(SystemExit) as refused:
        main(list(argv))
    assert refused.value.code == 2
    return capsys.readouterr().err


def test_queue_create_and_alter_take_every_setting(db, capsys):
    code, out, _ = run(capsys, "queue", "create", "q", "--requeue-priority", "first", "--no-dead-letter",
                       "--url", db.url)
    assert (code, out) == (0, "queue q: created\n")
    with db.connect() as client:
        assert client.create_queue("q", requeue_priority="first", dead_letter=False) is False
        with raises_code("QF100"):
            client.create_queue("q", requeue_priority="last")

    code, out, _ = run(capsys, "queue", "alter", "q", "--requeue-priority", "last", "--max-attempts", "7",
                       "--dead-letter", "--url", db.url)
    assert (code, out) == (0, "queue q: altered\n")
    with db.connect() as client:  # the settings not named stayed as they were
        assert client.create_queue("q", requeue_priority="last", max_attempts=7, dead_letter=True,
                                   lease=timedelta(seconds=30)) is False

    code, _, err = run(capsys, "queue", "alter", "q", "--url", db.url)
    assert (code, err) == (2, "fenceq: name a setting to change (see fenceq queue alter --help)\n")
    assert "invalid choice: 'sometimes'" in refused_usage(
        capsys, "queue", "alter", "q", "--requeue-priority", "sometimes", "--url", db.url)
    code, _, err = run(capsys, "queue", "alter", "nope", "--lease", "5s", "--url", db.url)
    assert code == 2 and "unknown queue" in err


def test_queue_history_turns_events_on_and_off(db, capsys):
    with db.connect() as client:
        client.create_queue("q")
    code, out, _ = run(capsys, "queue", "history", "q", "--on", "--retention", "30d", "--url", db.url)
    assert (code, out) == (0, "queue q: history on, events purged after 30d\n")
    code, out, _ = run(capsys, "queue", "history", "q", "--on", "--retention", "30d", "--url", db.url)
    assert (code, out) == (0, "queue q: history was already on, events purged after 30d\n")
    with db.connect() as client:
        assert client.set_queue_history("q", True, retention=timedelta(days=30)) is False
        recorded = client.submit("q", "t")
        assert [e.event for e in client.get_job_events(recorded)] == ["submitted"]

    code, out, _ = run(capsys, "queue", "history", "q", "--off", "--url", db.url)
    assert (code, out) == (0, "queue q: history off, events kept as long as their job\n")
    with db.connect() as client:
        assert client.set_queue_history("q", False) is False
        assert client.get_job_events(client.submit("q", "t")) == []
        assert [e.event for e in client.get_job_events(recorded)] == ["submitted"]

    assert "one of the arguments --on --off is required" in refused_usage(
        capsys, "queue", "history", "q", "--url", db.url)
    assert "not allowed with argument --on" in refused_usage(
        capsys, "queue", "history", "q", "--on", "--off", "--url", db.url)
    assert "a duration must be positive" in refused_usage(
        capsys, "queue", "history", "q", "--on", "--retention", "0s", "--url", db.url)
    code, _, err = run(capsys, "queue", "history", "nope", "--on", "--url", db.url)
    assert code == 2 and "unknown queue" in err


@pytest.mark.parametrize("text,shown", [("30d", "30d"), ("36h", "36h"), ("90s", "90s"), ("1.5s", "1500ms"),
                                        ("2880m", "2d"), ("500ms", "500ms")])
def test_a_duration_is_shown_as_it_reads_back(text, shown):
    assert duration_text(duration(text)) == shown
    assert duration(shown) == duration(text)


def test_each_flag_has_one_meaning(db, capsys):
    """--all picks every open letter instead of ids; listing handled
    letters too is --include-handled."""
    with pytest.raises(SystemExit) as refused:
        main(["dlq", "list", "--all", "--url", db.url])
    assert refused.value.code == 2
    capsys.readouterr()
    with db.connect() as client:
        client.create_queue("q")
    _, dlq_id = dead_letter(db, "q")
    code, _, err = run(capsys, "dlq", "replay", dlq_id, "--queue", "q", "--url", db.url)
    assert (code, err) == (2, "fenceq: --queue goes with --all\n")
    code, _, err = run(capsys, "dlq", "discard", dlq_id, "--all", "--url", db.url)
    assert (code, err) == (2, "fenceq: give dead-letter ids or --all, not both\n")
    with db.connect() as client:
        assert client.dead_letters()[0].replayed_at is None, "a refused command changed nothing"
    code, _, err = run(capsys, "submit", "q", "--file", "-", "--priority", "3", "--url", db.url)
    assert (code, err) == (2, "fenceq: with --file each line is a whole request; drop --priority\n")


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    assert moment.utcoffset() == timedelta(0), text
    return moment


def test_json_output_of_stats_job_and_dead_letters(db, capsys):
    with db.connect() as client:
        client.create_queue("q", max_attempts=1)
    job_id, dlq_id = dead_letter(db, "q")
    with db.connect() as client:
        waiting = client.submit("q", "later", {"n": 1})

    code, out, _ = run(capsys, "stats", "--json", "--url", db.url)
    [stats] = json.loads(out)
    assert code == 0 and list(stats) == ["queue", "pending", "due", "claimed", "cancel_requested",
                                         "oldest_due_age", "paused", "notify", "max_claimed",
                                         "max_claimed_per_key", "busiest_key_claimed", "rate_limit",
                                         "rate_period", "rate_used", "blocked"]
    assert (stats["queue"], stats["pending"], stats["claimed"], stats["paused"]) == ("q", 1, 0, False)
    assert isinstance(stats["oldest_due_age"], float) and stats["oldest_due_age"] >= 0, "seconds"

    code, out, _ = run(capsys, "job", job_id, "--json", "--url", db.url)
    job = json.loads(out)
    assert code == 0 and (job["job_id"], job["status"], job["dlq_id"], job["generation"]) == (
        job_id, "failed", dlq_id, 1)
    assert job["last_error"] == "boom" and job["payload"] is None and job["expires_at"] is None
    assert parse_time(job["finished_at"]) >= parse_time(job["created_at"])
    assert parse_time(job["lease_expires_at"]) > parse_time(job["created_at"]), "kept for inspection"
    [claim] = job["claims"]
    assert (claim["generation"], claim["owner_id"]) == (1, "w")
    assert parse_time(claim["claimed_at"]) >= parse_time(job["created_at"])
    code, out, _ = run(capsys, "job", waiting, "--json", "--url", db.url)
    assert json.loads(out)["payload"] == {"n": 1} and json.loads(out)["claims"] == []

    code, out, _ = run(capsys, "dlq", "list", "--json", "--url", db.url)
    [letter] = json.loads(out)
    assert code == 0 and list(letter) == ["dlq_id", "job_id", "queue", "task", "error", "attempts",
                                          "failed_at", "replayed_at", "discarded_at"]
    assert (letter["dlq_id"], letter["job_id"], letter["error"], letter["replayed_at"]) == (
        dlq_id, job_id, "boom", None)
    assert parse_time(letter["failed_at"]) <= datetime.now(timezone.utc)
    run(capsys, "dlq", "discard", dlq_id, "--url", db.url)
    code, out, _ = run(capsys, "dlq", "list", "--json", "--url", db.url)
    assert json.loads(out) == []
    code, out, _ = run(capsys, "dlq", "list", "--json", "--include-handled", "--url", db.url)
    assert parse_time(json.loads(out)[0]["discarded_at"]) >= parse_time(letter["failed_at"])


def worker_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["worker", "app:app", *argv])


def test_worker_options_default_to_their_environment_variables():
    environ = {"FENCEQ_WORKER_CONCURRENCY": "8", "FENCEQ_WORKER_QUEUE": "a, b",
               "FENCEQ_WORKER_DRAIN_TIMEOUT": "5s", "FENCEQ_WORKER_REAP": "0",
               "FENCEQ_WORKER_OWNER_ID": "box-1", "FENCEQ_WORKER_LOG_FORMAT": "json"}
    settings = worker_settings(worker_args(), environ)
    assert (settings["concurrency"], settings["queue"], settings["drain_timeout"], settings["reap"],
            settings["owner_id"], settings["log_format"]) == (
        8, ["a", "b"], timedelta(seconds=5), False, "box-1", "json")
    assert (settings["reap_interval"], settings["record_pid"], settings["lease"]) == (
        timedelta(seconds=2), False, None), "unset variables leave the defaults"

    flagged = worker_settings(worker_args("-c", "2", "-q", "c", "--reap", "--owner-id", "me"), environ)
    assert (flagged["concurrency"], flagged["queue"], flagged["reap"], flagged["owner_id"]) == (
        2, ["c"], True, "me"), "a flag wins over its variable"
    assert worker_settings(worker_args(), {})["concurrency"] == 1


@pytest.mark.parametrize("variable, value, message", [
    ("FENCEQ_WORKER_CONCURRENCY", "0", "$FENCEQ_WORKER_CONCURRENCY: must be at least 1"),
    ("FENCEQ_WORKER_LEASE", "soon", "$FENCEQ_WORKER_LEASE: not a duration: 'soon'"),
    ("FENCEQ_WORKER_RECORD_PID", "maybe", "$FENCEQ_WORKER_RECORD_PID: not a switch: 'maybe'"),
    ("FENCEQ_WORKER_LOG_LEVEL", "loud", "$FENCEQ_WORKER_LOG_LEVEL: 'loud' is not one of"),
])
def test_a_bad_environment_value_names_its_variable(variable, value, message):
    with pytest.raises(UserError) as refused:
        worker_settings(worker_args(), {variable: value})
    assert str(refused.value).startswith(message)


def test_worker_help_names_every_variable(capsys):
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    out = capsys.readouterr().out
    for variable in ("FENCEQ_WORKER_CONCURRENCY", "FENCEQ_WORKER_QUEUE", "FENCEQ_WORKER_OWNER_ID",
                     "FENCEQ_WORKER_REAP", "FENCEQ_WORKER_PURGE_SUBMISSIONS_AFTER"):
        assert "$" + variable in out.replace("\n", "").replace(" ", "")


@pytest.fixture
def restore_logging():
    import logging

    logger = logging.getLogger("fenceq")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:] = saved[0]
    logger.propagate, logger.level = saved[1], saved[2]


def test_worker_command_on_an_unknown_queue_fails_cleanly(db, capsys, restore_logging):
    code, _, err = run(capsys, "worker", "fq_worker_apps:app", "--queue", "nope", "--url", db.url)
    assert code == 2 and "unknown queue" in err


def test_worker_command_takes_its_queues_from_the_environment(db, capsys, restore_logging, monkeypatch):
    monkeypatch.setenv("FENCEQ_WORKER_QUEUE", "nope")
    code, _, err = run(capsys, "worker", "fq_worker_apps:app", "--url", db.url)
    assert code == 2 and "unknown queue" in err


def test_rollback_to_a_version(db, capsys):
    code, out, _ = run(capsys, "rollback", "--to", "1", "--url", db.url)
    assert code == 0 and "0003_fenceq_v3" in out and "0002_fenceq_v2" in out and "0001" not in out
    with db.connect() as client:
        assert client.version() == "1"
    code, out, _ = run(capsys, "migrate", "--url", db.url)
    assert code == 0
    with db.connect() as client:
        assert client.version() == schema_version(db.backend)


def test_the_worker_command_runs_on_the_apps_own_url_unless_told_another(monkeypatch):
    import fenceq.worker
    from fenceq.cli import run_worker

    app = fenceq.App(queues=["mail"], url="sqlite:///app-own.db")
    seen = []

    class Recorder:
        def __init__(self, application, *, url, **_options):
            seen.append(url)

        def run(self, **_options):
            pass

    monkeypatch.setattr(fenceq.worker, "Worker", Recorder)
    monkeypatch.setattr(fenceq.worker, "load_app", lambda _spec: app)
    settings = worker_settings(build_parser().parse_args(["worker", "tasks:app"]), {})
    run_worker(app="tasks:app", url=None, settings=settings)
    run_worker(app="tasks:app", url="sqlite:///other.db", settings=settings)
    assert seen == ["sqlite:///app-own.db", "sqlite:///other.db"]
