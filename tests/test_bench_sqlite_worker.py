"""bench.sqlite_worker stays runnable: each of its drains does every job
(it asserts so itself) and the record has its figures. No timing is judged."""

from __future__ import annotations

from bench.sqlite_worker import SYSTEMS, run


def test_each_system_drains_every_job_and_the_record_has_its_figures(tmp_path):
    result = run(tmp_path, jobs=120, rounds=1)
    assert set(result["jobs_per_s"]) == set(SYSTEMS) == set(result["cpu_us_per_job"])
    assert all(rate > 0 for rate in result["jobs_per_s"].values())
    assert result["worker_to_loop"] > 0 and result["loop_to_bare"] > 0
    assert not list(tmp_path.iterdir()), "the database files are removed"
