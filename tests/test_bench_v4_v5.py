"""bench/v4_v5.py's --markdown mode renders a run's JSON (no server)."""

from __future__ import annotations

import json

from bench import v4_v5


def _per_job(server_us: float, index_entries: float) -> dict:
    return {"server_us": server_us, "statements": 5, "wal_bytes": 1700.0, "index entries": index_entries,
            "heap inserts": 1.0, "heap updates (non-HOT)": 2.0, "row locks": 2.2, "full-page images": 0.04}


def _call(answer: str) -> dict:
    return {"issued": True, "waited": True, "wait_event_type": "Lock", "wait_event": "relation",
            "blocked_by_step": True, "issued_at": 0.1, "answered_at": 0.4, "answer": answer}


def _run() -> dict:
    per_job = {"bare": _per_job(70, 2), "v4": _per_job(280, 6), "v5": _per_job(350, 6)}
    drains = {n: {s: {"median_jobs_s": rate, "ratio_to_bare": rate / 1000}
                  for s, rate in (("bare", 1000.0), ("v4", 700.0), ("v5", 650.0))} for n in ("1", "4")}
    return {
        "started": "2026-12-02 22:00 UTC", "load_average": [0.5, 0.5, 0.5], "measured_code": "abc1234",
        "server": {"version": "PostgreSQL 15", "fsync": "on", "pg_stat_statements.track": "all", "jit": "on"},
        "machine": {"nproc": "2"},
        "args": {"diag_jobs": "30", "diag_rounds": "1", "drain_jobs": "30", "rounds": "1", "later": "100", "submit_batches": "1",
                 "upgrade_sizes": "100"},
        "per_job": per_job, "per_job_batch_10": per_job, "drains": drains,
        "later": {"bare": {"empty claim": 50000.0}, "v4": {"empty claim": 7500.0, "next_due": 31500.0},
                  "v5": {"empty claim": 80.0, "next_due": 60.0}},
        "later_jobs": 100_000, "submit_size": 1000,
        "submit_batch": {"plain": {s: {"server_ms_per_batch": ms} for s, ms in
                                   (("bare", 8.5), ("v4", 14.0), ("v5", 10.0))},
                         "owned": {"v4": {"server_ms_per_batch": 41.0}, "v5": {"server_ms_per_batch": 45.1}}},
        "upgrade": [{"jobs": 100_000, "jobs_table_mb": 40.0, "step_seconds": 1.25, "step_error": None,
                     "by_status": {"pending due later": 50_000, "pending due now": 25_000, "completed": 25_000},
                     "step_statements_ms": [["UPDATE fenceq._jobs AS j SET scheduled = $1", 600.0]],
                     "during_step": {"claim_next": _call("answered a row"), "submit": {"issued": False}}}],
    }


def test_markdown_renders_every_table_with_ratios_and_changes(tmp_path):
    out = tmp_path / "v4-v5.json"
    out.write_text(json.dumps(_run()), encoding="utf-8")
    text = v4_v5.markdown(json.loads(out.read_text(encoding="utf-8")))
    lines = text.splitlines()
    assert "| server time per job (µs, top-level statements) | 70 | 280 (4.00×) | 350 (5.00×) | +25% |" in lines
    assert "| empty claim | 50,000 | 7,500 | 80 | -99% |" in lines
    assert "| next_due | — | 31,500 | 60 | -100% |" in lines
    assert "| plain requests | 8.5 | 14.0 (1.65×) | 10.0 (1.18×) | -29% |" in lines
    assert "| owned requests (submission_id) | — | 41.0 (4.82×) | 45.1 (5.31×) | +10% |" in lines
    assert "| 4 workers | 1,000 jobs/s (1.00×) | 700 jobs/s (0.70×) | 650 jobs/s (0.65×) | -7% |" in lines
    assert "| 100,000 jobs | 50,000 / 25,000 / 25,000 | 40 MB | 1.25 |" in lines
    assert "| `UPDATE fenceq._jobs AS j SET scheduled = $1` | 600 |" in lines
    assert ("| claim_next | 100,000 | Lock: relation (the step) | 0.10 | 0.40 | answered a row | 1.25 |"
            in lines)
    assert "| submit | 100,000 | not issued (the step's lock was not seen) | | | | |" in lines


def test_markdown_mode_prints_the_tables_of_out(tmp_path, capsys):
    out = tmp_path / "v4-v5.json"
    out.write_text(json.dumps(_run()), encoding="utf-8")
    assert v4_v5.main(["--url", "postgresql://unused", "--markdown", "--out", str(out)]) == 0
    assert "| per job, one job at a time | bare | version 4 | version 5 | v5 vs v4 |" in capsys.readouterr().out
