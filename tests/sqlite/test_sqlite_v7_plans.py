"""The version-7 statement files (docs/design-v7.md) read fenceq's tables
through index ranges, never a whole table: every statement's query plan, on
a migrated file, scans no private table except the queues (one row per
queue) and a live status's backlog through its partial index (search_jobs,
sample_activity: bounded by the backlog, as on PostgreSQL). SQLite's planner
would otherwise walk fenceq__jobs for a join with a scratch table."""

from __future__ import annotations

import contextlib
import re
import sqlite3

import pytest

from fenceq.backends.sqlite import database_path, load_script

FILES = ("sample_activity", "activity", "search_jobs", "retry_jobs", "cancel_jobs", "replay_dead_letters")
ALIAS = re.compile(r"\b(?:FROM|JOIN)\s+(fenceq__\w+)(?:\s+INDEXED BY \w+)?\s+AS\s+(\w+)", re.IGNORECASE)
# Whole reads allowed: the queues, and the backlogs through their partial indexes.
ALLOWED = re.compile(r"USING (?:COVERING )?INDEX (?:sqlite_autoindex_fenceq__queues_1|fenceq__jobs_pending_idx"
                     r"|fenceq__jobs_claimed_idx)\b")


def whole_table_reads(connection: sqlite3.Connection, sql: str, parameters) -> list[str]:
    tables = {alias: table for table, alias in ALIAS.findall(sql)}
    plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + sql, dict.fromkeys(parameters))]
    reads = []
    for step in plan:
        scanned = re.match(r"SCAN (\w+)", step)
        if scanned is None or ALLOWED.search(step):
            continue
        table = tables.get(scanned.group(1), scanned.group(1))
        if table.startswith("fenceq__") and table != "fenceq__queues":
            reads.append(f"{step} ({table})")
    return reads


@pytest.mark.parametrize("name", FILES)
def test_no_statement_reads_a_whole_table(sqlite_db, name):
    with contextlib.closing(sqlite3.connect(database_path(sqlite_db.url))) as connection:
        reads = {}
        for statement in load_script(name):
            if statement.setup:
                connection.execute(statement.sql)
                continue
            found = whole_table_reads(connection, statement.sql, statement.parameters)
            if found:
                reads[statement.sql.strip().splitlines()[0]] = found
    assert reads == {}


def test_the_check_sees_a_whole_table_read(sqlite_db):
    """The test above can fail: a join of a scratch table keyed by seq with
    the jobs, left to the planner, walks fenceq__jobs."""
    with contextlib.closing(sqlite3.connect(database_path(sqlite_db.url))) as connection:
        connection.execute("CREATE TEMP TABLE scratch (seq INTEGER PRIMARY KEY)")
        sql = "SELECT j.job_id FROM temp.scratch AS r JOIN fenceq__jobs AS j ON j.seq = r.seq WHERE j.status = 'x'"
        assert whole_table_reads(connection, sql, ()) != []
