"""How much of the machine's CPU went to something other than this run.

Throughput on a small machine is only comparable when nothing else runs.
The bench reads /proc (Linux only) at the start and the end: total busy CPU
time, its own processes (itself and its reaped worker processes), and the
PostgreSQL server it measures (the postmaster, its reaped children and its
live backends). What is left is other load, reported in the doc.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Sample:
    busy: float       # seconds, all CPUs, user + nice + system
    total: float      # seconds, all CPUs
    ours: float       # this process and its reaped children
    server: float     # the measured server: postmaster, reaped children, live backends


def _proc_times(pid: int, children: bool) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # after the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def _children_of(ppid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == ppid:
            out.append(int(entry.name))
    return out


def postmaster_pid(conn) -> int | None:
    """The measured server's postmaster pid, from its data directory."""
    try:
        data = conn.execute("SHOW data_directory").fetchone()[0]
        return int(Path(data, "postmaster.pid").read_text().splitlines()[0])
    except Exception:
        return None


def _foreign_backend(pid: int, dbname: str | None) -> bool:
    """A live client backend of the measured server connected to another
    database (someone else's load on the same server)."""
    if not dbname:
        return False
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    parts = title.split()
    # "postgres: <user> <database> <host(port)> <state>"; background processes have no host part
    return (len(parts) >= 4 and parts[0] == "postgres:" and "(" in parts[3]
            and parts[2] != dbname)


def sample(postmaster: int | None, workers: list[int] = (), dbname: str | None = None) -> Sample | None:
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    values = [int(v) for v in first[1:]] + [0] * 8
    # user nice system idle iowait irq softirq steal: process time is
    # user + nice + system; interrupt time (loopback traffic, block I/O) is
    # not charged to any process, so it is left out of both sides.
    total = sum(values[:8])
    process_busy = values[0] + values[1] + values[2]
    server = 0.0
    if postmaster:
        server = _proc_times(postmaster, children=True)
        server += sum(_proc_times(pid, children=False) for pid in _children_of(postmaster)
                      if not _foreign_backend(pid, dbname))
    ours = _proc_times(os.getpid(), children=True)
    ours += sum(_proc_times(pid, children=False) for pid in workers)  # live, not yet reaped
    return Sample(busy=process_busy / TICK, total=total / TICK, ours=ours, server=server)


def other_load(start: Sample | None, end: Sample | None) -> dict[str, float] | None:
    """CPU-seconds used by neither the bench nor its server, and the share
    of the machine's capacity over the run that they represent."""
    if start is None or end is None or end.total <= start.total:
        return None
    busy = end.busy - start.busy
    ours = end.ours - start.ours
    server = end.server - start.server
    other = max(0.0, busy - ours - server)
    capacity = end.total - start.total
    return {"busy": busy, "bench": ours, "server": server, "other": other,
            "capacity": capacity, "other_share": other / capacity}
