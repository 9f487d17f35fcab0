"""The CLI commands this issue adds: queue, submit, job, cancel, dlq, worker
errors. Run in-process through ``fenceq.cli.main`` on both backends."""

from __future__ import annotations

import json

import pytest

import fenceq
from fenceq.cli import main


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
    code, out, _ = run(capsys, "dlq", "list", "--all", "--url", db.url)
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
