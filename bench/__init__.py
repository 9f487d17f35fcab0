"""fenceq benchmark: every fenceq figure beside a bare-SQL baseline measured
in the same run, against the same PostgreSQL server.

Run it with ``make bench`` (a durable server, fsync on, on port 54339), or
directly::

    FENCEQ_BENCH_PG_URL=postgresql://postgres@127.0.0.1:54339/postgres \\
        .venv/bin/python -m bench

The run creates a fresh database (``fenceq_bench``) on that server, installs
fenceq with ``fenceq.migrate.migrate``, creates a minimal ``bare_jobs`` table
beside it, measures, and writes ``docs/benchmarks.md``. See ``python -m bench
--help`` for the knobs (``--scale`` to shrink or grow every job count).
"""
