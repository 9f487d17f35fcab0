"""fenceq benchmark (issue 8): every fenceq figure beside a bare-SQL
baseline measured in the same run, against the same PostgreSQL server.

Run it with ``make bench`` (a durable server, fsync on, pg_stat_statements
preloaded, port 54339), or directly::

    .venv/bin/python -m bench --url postgresql://postgres@127.0.0.1:54339/postgres [--quick]

The run creates a fresh database (``fenceq_bench``), installs fenceq with
``fenceq.migrate.migrate`` and a minimal ``bare_jobs`` table beside it,
measures, records the run in ``bench/runs/v<version>.json`` and rewrites
``docs/benchmarks.md`` from every recorded run.
"""
