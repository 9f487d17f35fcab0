"""What the server did during a window of calls: pg_stat_statements (with
``track = all``, so the statements a function runs are visible beside its
own row), WAL written (``pg_stat_wal`` and the WAL insert position), and a
census of the WAL records by relation, read with ``pg_waldump``.

Index entries written are counted from the WAL: every B-tree leaf insertion
writes exactly one WAL record (``INSERT_LEAF``, ``INSERT_POST`` into a
posting list, or a leaf ``SPLIT_L``/``SPLIT_R`` that carries the new tuple),
attributed to its index by relfilenode. This counts what was written, HOT
updates (no index entries) and partial indexes (entries only where the
predicate holds) included, with nothing inferred from the schema.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

PG_BINDIRS = ["/usr/lib/postgresql/15/bin"]

# Our own probes, not the measured calls.
_PROBES = ("pg_stat_statements", "pg_current_wal", "pg_stat_wal", "pg_current_xact_id")

_RECORD = re.compile(r"^rmgr: (\w+)\s.*?desc: (\S+)(.*)$")
_BLOCK = re.compile(r"blkref #(\d+): rel \d+/\d+/(\d+)(?: fork \w+)? blk \d+( FPW)?")
_HEAP_KINDS = {"INSERT": "heap inserts", "INSERT+INIT": "heap inserts",
               "UPDATE": "heap updates (non-HOT)", "UPDATE+INIT": "heap updates (non-HOT)",
               "HOT_UPDATE": "HOT updates", "HOT_UPDATE+INIT": "HOT updates",
               "LOCK": "row locks", "DELETE": "heap deletes"}
_LEAF_INSERTS = {"INSERT_LEAF", "INSERT_POST"}
_SPLITS = {"SPLIT_L", "SPLIT_R"}


def find_waldump() -> str | None:
    for directory in PG_BINDIRS:
        candidate = Path(directory, "pg_waldump")
        if candidate.exists():
            return str(candidate)
    return shutil.which("pg_waldump")


def count_records(lines) -> dict[str, Counter]:
    """WAL records by relfilenode: index entries, full-page images, heap
    changes by kind."""
    by_rel: dict[str, Counter] = defaultdict(Counter)
    for line in lines:
        match = _RECORD.match(line)
        if not match:
            continue
        rmgr, kind, rest = match.groups()
        blocks = _BLOCK.findall(rest)
        for _, rel, fpw in blocks:
            if fpw:
                by_rel[rel]["full-page images"] += 1
        if not blocks:
            continue
        first = blocks[0][1]
        if rmgr == "Btree" and (kind in _LEAF_INSERTS or (kind in _SPLITS and "level 0" in rest)):
            by_rel[first]["index entries"] += 1
        elif rmgr == "Heap" and kind in _HEAP_KINDS:
            by_rel[first][_HEAP_KINDS[kind]] += 1
        elif rmgr == "Heap2" and kind.startswith("MULTI_INSERT"):
            tuples = re.search(r"ntuples:? (\d+)", rest)
            by_rel[first]["heap inserts"] += int(tuples.group(1)) if tuples else 1
    return by_rel


class ServerStats:
    """Opens and closes measured windows on an admin connection (sync)."""

    def __init__(self, conn):
        self.conn = conn
        self.waldump = find_waldump()
        self.wal_dir = Path(conn.execute("SHOW data_directory").fetchone()[0], "pg_wal")
        self.dbid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()"
                                 ).fetchone()[0]
        self._start: tuple | None = None

    def _wal(self) -> tuple:
        return self.conn.execute(
            "SELECT pg_current_wal_insert_lsn(), w.wal_records, w.wal_fpi, w.wal_bytes "
            "FROM pg_stat_wal AS w").fetchone()

    def begin(self) -> None:
        self.conn.execute("SELECT pg_stat_statements_reset()")
        self._start = self._wal()

    def end(self, calls: int, jobs: int) -> dict:
        """The window's figures; per-call and per-job values divide by
        `calls` and `jobs` (they differ for batch calls)."""
        lsn0, records0, fpi0, bytes0 = self._start
        lsn1, records1, fpi1, bytes1 = self._wal()
        # A durable commit flushes the WAL past lsn1, so pg_waldump can read it all.
        self.conn.execute("SELECT pg_current_xact_id()")
        lsn_bytes = self.conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (lsn1, lsn0)).fetchone()[0]
        return {"calls": calls, "jobs": jobs,
                "statements": self._statements(),
                "wal": {"bytes": float(lsn_bytes), "records": records1 - records0,
                        "fpi": fpi1 - fpi0, "stat_bytes": float(bytes1 - bytes0)},
                "relations": self._relations(lsn0, lsn1)}

    def _statements(self) -> list[dict]:
        rows = self.conn.execute(
            "SELECT query, toplevel, calls, total_exec_time, plans, total_plan_time, rows, "
            "wal_records, wal_fpi, wal_bytes "
            "FROM pg_stat_statements WHERE dbid = %s ORDER BY total_exec_time DESC",
            (self.dbid,)).fetchall()
        return [{"query": " ".join(q.split()), "toplevel": top, "calls": calls, "total_ms": total,
                 "plans": plans, "plan_ms": plan_ms, "rows": n, "wal_records": wr, "wal_fpi": wf,
                 "wal_bytes": float(wb)}
                for q, top, calls, total, plans, plan_ms, n, wr, wf, wb in rows
                if not any(probe in q for probe in _PROBES)]

    def _relations(self, lsn0, lsn1) -> dict[str, dict[str, int]] | None:
        if not self.waldump:
            return None
        try:
            out = subprocess.run([self.waldump, "-p", str(self.wal_dir), "-s", str(lsn0),
                                  "-e", str(lsn1)], capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode != 0 and not out.stdout:
            return None
        names = dict(self.conn.execute(
            "SELECT pg_relation_filenode(c.oid)::text, c.oid::regclass::text FROM pg_class AS c "
            "WHERE c.relkind IN ('r', 'i', 't') AND pg_relation_filenode(c.oid) IS NOT NULL"
        ).fetchall())
        return {names.get(rel, f"relfilenode {rel}"): dict(counts)
                for rel, counts in count_records(out.stdout.splitlines()).items()}
