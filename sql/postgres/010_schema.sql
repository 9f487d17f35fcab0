-- fenceq for PostgreSQL, part 1: the schema "fenceq", and the search_path
-- the install runs on.
--
-- Part 1 is the tables, their indexes and the row types, one file per
-- concern (011 to 019), each saying what it holds and which functions write
-- it; parts 2 to 9 are the functions, the views and the privileges.
-- Everything lives in the schema "fenceq". Tables start with "_": they are
-- private, reachable only through the functions (docs/guarantees.md §3, §10).
-- Identity columns use COLLATE "C" so that comparison is byte-exact and
-- deterministic whatever the database's default collation is.
--
-- Part 1 is idempotent: every object is created only when missing, so the
-- install script can be applied again safely. It is a complete install, not
-- an upgrade (`fenceq migrate` upgrades). Each table lists its columns in
-- the order the versions added them: a migration step appends a version's
-- new columns (ALTER TABLE ... ADD COLUMN), so a fresh install and an
-- upgraded database have the same tables column for column
-- (tests/test_pg_schema_dump.py compares them).
--
-- Until version 7 part 1 was cut by version, and comments in the functions
-- and the migration steps still use those names: part 1b (version 3's
-- columns and tables), part 1c (version 5: jobs due later wait apart, now
-- in 012_jobs_table.sql), part 1d (version 6: 018_dispatches_table.sql and
-- _events) and part 1e (version 7: _activity, the type job_search_row and
-- the index of unhandled dead letters).

-- Names in the SQL-bodied helpers (RETURN ...) are bound when they are
-- created, so the install runs on a search_path nobody else can write to
-- (pg_temp is never searched for functions or operators); part 9 puts the
-- caller's path back. Transaction-local: it ends with the install anyway.
SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),
       set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE SCHEMA IF NOT EXISTS fenceq;
COMMENT ON SCHEMA fenceq IS
    'fenceq: a fenced, owned work queue. Call the functions; the _tables are private.';
