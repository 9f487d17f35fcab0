"""A real ``fenceq worker`` process and a client (docs/guarantees.md §17):
the handler's progress reports reach the job row while it runs, and
``submit_and_wait`` returns the job the worker completed. Both engines."""

from __future__ import annotations

import concurrent.futures

from conftest import PATIENCE, wait_for


def test_reports_reach_the_job_and_submit_and_wait_returns_the_result(db, work_queue, spawn_worker, tmp_path):
    spawn_worker("w1", "--lease", "3s")  # a beat, and so a report, every second
    finish = tmp_path / "finish"
    request = (work_queue, "reporter", {"until": str(finish)})
    with db.connect() as client, db.connect() as observer:
        client.set_queue_notify_done(work_queue, True)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.submit_and_wait, *request, timeout=PATIENCE, submission_id="r-1")
            job_id = observer.submit(*request, submission_id="r-1")  # the same request: its job id
            running = wait_for(lambda: (job := observer.get_job(job_id)).progress and job, what="a report")
            finish.touch()
            job = waiting.result(PATIENCE)
    assert running.status == "claimed" and running.progress_at is not None
    assert (job.job_id, job.status) == (job_id, "completed")
    assert job.result["reports"] >= running.progress["reports"] >= 1
