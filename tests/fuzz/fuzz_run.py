"""``make fuzz``: every function on every engine, at least --calls times
each, in worker processes (one database or file each), with progress; then
the table of counts, printed, written to tests/fuzz/fuzz-counts.json and
into docs/fuzzing.md between its generated-section markers.

    python tests/fuzz/fuzz_run.py --url postgresql://postgres@127.0.0.1:54329/postgres

--engines and --functions run a part (a run can be split over sittings);
its counts are merged into the report: they replace the rows of what ran
and keep the others, and each row names the run it comes from.

Exits 1 when a function was not fuzzed enough or a finding is not in
fuzz_outcomes.KNOWN_FINDINGS. The short profile of ``make test`` is
tests/fuzz/test_fuzz.py, which uses the same pieces.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_outcomes import KNOWN_FINDINGS, Tally, drive  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COUNTS = ROOT / "tests" / "fuzz" / "fuzz-counts.json"
DOC = ROOT / "docs" / "fuzzing.md"
START, END = "<!-- fuzz-counts:start -->", "<!-- fuzz-counts:end -->"
ENGINES = ("postgres", "sqlite", "sqlite-file")


SCRATCH_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def scratch_folder(prefix: str = "fenceq-fuzz-") -> str:
    """SQLite files live in memory where the machine has /dev/shm (a commit
    is an fsync under synchronous = FULL)."""
    return tempfile.mkdtemp(prefix=prefix, dir=SCRATCH_DIR)


class Fuzzers:
    """One fuzzer per engine, opened on first use, on its own database."""

    def __init__(self, pg_url: str, sqlite_url: str):
        self.pg_url, self.sqlite_url = pg_url, sqlite_url
        self._pg: Any = None
        self._sqlite: Any = None

    def postgres(self) -> Any:
        if self._pg is None:
            from fuzz_pg import Fuzzer
            self._pg = Fuzzer(self.pg_url)
        return self._pg

    def sqlite(self) -> Any:
        if self._sqlite is None:
            from fuzz_sqlite import Fuzzer
            self._sqlite = Fuzzer(self.sqlite_url)
        return self._sqlite

    def close(self) -> None:
        for fuzzer in (self._pg, self._sqlite):
            if fuzzer is not None:
                fuzzer.close()


def functions(engine: str, fuzzers: Fuzzers) -> list[str]:
    """What each engine offers to fuzz, enumerated at run time."""
    import fuzz_sqlite

    if engine == "postgres":
        return [f.name for f in fuzzers.postgres().functions]
    return fuzz_sqlite.operations() if engine == "sqlite" else fuzz_sqlite.statement_files()


def run_calls(fuzzers: Fuzzers, engine: str, name: str, calls: int, seed: int) -> Tally:
    """``calls`` generated calls of one function on one engine."""
    tally = Tally(engine, name)
    if engine == "postgres":
        fuzzer = fuzzers.postgres()
        function = next(f for f in fuzzer.functions if f.name == name)
        drive(calls, seed, lambda data: fuzzer.fuzz(function, tally, data))
    elif engine == "sqlite":
        fuzzer = fuzzers.sqlite()
        drive(calls, seed, lambda data: fuzzer.fuzz_client(name, tally, data))
    else:
        fuzzer = fuzzers.sqlite()
        drive(calls, seed, lambda data: fuzzer.fuzz_file(name, tally, data))
    return tally


def migrated_sqlite_url(folder: str) -> str:
    from fenceq.migrate import migrate

    url = f"sqlite:///{folder}/fuzz.db"
    migrate(url)
    return url


# Worker processes ---------------------------------------------------------------------

_worker: Fuzzers | None = None


def _start_worker(server_url: str, template: str, prefix: str) -> None:
    global _worker
    name = f"{prefix}{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    _worker = Fuzzers(server_url.rsplit("/", 1)[0] + "/" + name, migrated_sqlite_url(scratch_folder(prefix)))


def _task(engine: str, name: str, calls: int, seed: int) -> dict[str, Any]:
    assert _worker is not None
    return run_calls(_worker, engine, name, calls, seed).as_json()


def _tally_from(data: dict[str, Any]) -> Tally:
    from fuzz_outcomes import Finding

    tally = Tally(data["engine"], data["function"], data["calls"], data["ok"], data["changed"])
    tally.qf.update(data["qf"])
    tally.pre.update(data["pre"])
    tally.findings = {k: Finding(**f) for k, f in data["findings"].items()}
    return tally


# Report --------------------------------------------------------------------------------

def _codes(counter: Any) -> str:
    return ", ".join(f"{code} {n}" for code, n in sorted(counter.items())) or "–"


def table(tallies: list[Tally], runs: list[int] | None = None) -> str:
    """The counts as a Markdown table; with ``runs``, a first column names
    the run each row comes from."""
    lines = ["| engine | function | calls | ok | ok, changed state | QF codes | allowed pre-fenceq | findings |",
             "|---|---|---:|---:|---:|---|---|---|"]
    if runs:
        lines = ["| run " + lines[0], "|---:" + lines[1]]
    for i, t in enumerate(tallies):
        found = ", ".join(f"{k} {f.count}" + ("" if (t.engine, t.function, k) in KNOWN_FINDINGS else " (NEW)")
                          for k, f in sorted(t.findings.items())) or "–"
        lines.append(("| " + str(runs[i]) + " " if runs else "")
                     + f"| {t.engine} | {t.function} | {t.calls} | {t.ok} | {t.changed} | {_codes(t.qf)} "
                     f"| {_codes(t.pre)} | {found} |")
    return "\n".join(lines)


def _runs_and_tallies(report: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A report's runs, and its tallies each with the index of its run (a
    report written before runs were recorded is one run)."""
    if "runs" in report:
        return report["runs"], report["tallies"]
    calls = report["calls_per_function"]
    run = {"command": command_line(calls, None, None), "calls_per_function": calls, "seconds": report["seconds"],
           "calls": sum(t["calls"] for t in report["tallies"])}
    return [run], [t | {"run": 0} for t in report["tallies"]]


def merged_report(previous: dict[str, Any] | None, run: dict[str, Any], tallies: list[Tally],
                  whole_engines: set[str]) -> dict[str, Any]:
    """The previous report with this run's tallies in place of the rows of
    the same engine and function; an engine that ran whole loses its other
    rows too (functions gone since). Runs no row comes from are dropped."""
    runs, kept = _runs_and_tallies(previous) if previous else ([], [])
    ran = {(t.engine, t.function) for t in tallies}
    kept = [t for t in kept if (t["engine"], t["function"]) not in ran and t["engine"] not in whole_engines]
    rows = [(runs[t["run"]], t) for t in kept] + [(run, t.as_json()) for t in tallies]
    order = {engine: i for i, engine in enumerate(ENGINES)}
    rows.sort(key=lambda r: (order.get(r[1]["engine"], len(order)), r[1]["engine"], r[1]["function"]))
    used: list[dict[str, Any]] = []
    for source, _ in rows:
        if not any(source is u for u in used):
            used.append(source)
    return {"runs": used, "tallies": [t | {"run": next(i for i, u in enumerate(used) if u is source)}
                                      for source, t in rows]}


def section(report: dict[str, Any]) -> str:
    """The generated section of docs/fuzzing.md: how the counts were
    gathered (each run: its command, calls, minutes), then the table; a
    row names its run when there are several."""
    runs, rows = _runs_and_tallies(report)
    tallies = [_tally_from(t) for t in rows]

    def describe(i: int, run: dict[str, Any]) -> str:
        kept = sum(t.calls for t, row in zip(tallies, rows) if row["run"] == i)
        calls = (f"{kept} calls" if kept == run["calls"]
                 else f"{kept} of its {run['calls']} calls (the others ran again later)")
        return (f"`{run['command']}`: {calls} in {run['seconds'] / 60:.1f} minutes "
                f"(at least {run['calls_per_function']} per function per engine)")

    minutes = sum(r["seconds"] for r in runs) / 60
    if len(runs) == 1:
        head = describe(0, runs[0]) + "."
    else:
        asked = sorted({r["calls_per_function"] for r in runs})
        mixed = (f" The runs asked for different counts ({', '.join(map(str, asked))} calls per function):"
                 " each row's run says which." if len(asked) > 1 else "")
        head = (f"Gathered by {len(runs)} runs, {minutes:.1f} minutes in all; the column run names "
                f"the run of each row.{mixed}\n\n"
                + "\n".join(f"{i + 1}. {describe(i, run)}" for i, run in enumerate(runs)))
    return f"{START}\n{head}\n\n{table(tallies, [r['run'] + 1 for r in rows] if len(runs) > 1 else None)}\n{END}"


def write_report(report: dict[str, Any]) -> None:
    COUNTS.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    text = DOC.read_text(encoding="utf-8")
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + section(report) + tail, encoding="utf-8")


def command_line(calls: int, engines: str | None, names: str | None) -> str:
    """The make command that runs what these arguments ran."""
    parts = ["make fuzz"] + ([f"FUZZ_CALLS={calls}"] if calls != 10_000 else [])
    parts += [f"FUZZ_ENGINES={engines}"] if engines else []
    parts += [f"FUZZ_FUNCTIONS={names}"] if names else []
    return " ".join(parts)


def _listed(text: str, known: Any, parser: argparse.ArgumentParser, option: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = sorted(set(items) - set(known))
    if unknown or not items:
        parser.error(f"{option}: unknown {', '.join(unknown) or '(empty)'}; known: {', '.join(known)}")
    return [k for k in known if k in items]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL server's URL (a database fenceq creates in)")
    parser.add_argument("--calls", type=int, default=10_000, help="calls per function per engine")
    parser.add_argument("--chunk", type=int, default=2_500, help="calls per task")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--engines", help=f"a comma list of {','.join(ENGINES)} (default: all)")
    parser.add_argument("--functions", help="a comma list of function names (default: all)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    engines = _listed(args.engines, ENGINES, parser, "--engines") if args.engines else ENGINES

    from fenceq.migrate import migrate

    prefix = f"fenceq_fuzz_{os.getpid()}_"
    template = f"{prefix}template"
    with psycopg.connect(args.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{template}"')
    base = args.url.rsplit("/", 1)[0]
    started = time.monotonic()
    try:
        migrate(f"{base}/{template}")
        local = Fuzzers(f"{base}/{template}", migrated_sqlite_url(scratch_folder(prefix)))
        names = {engine: functions(engine, local) for engine in engines}
        local.close()
        if args.functions:
            wanted = _listed(args.functions, sorted({n for e in engines for n in names[e]}), parser, "--functions")
            names = {engine: [n for n in found if n in wanted] for engine, found in names.items()}
        tasks = [(engine, name, min(args.chunk, args.calls - done), seed)
                 for engine in engines for name in names[engine]
                 for seed, done in enumerate(range(0, args.calls, args.chunk))]
        tallies = {(e, n): Tally(e, n) for e in engines for n in names[e]}
        print(f"fuzz: {len(tasks)} tasks, {sum(t[2] for t in tasks)} calls, {args.workers} workers", flush=True)
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context, initializer=_start_worker,
                                                    initargs=(args.url, template, prefix)) as pool:
            futures = {pool.submit(_task, *task): task for task in tasks}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                engine, name, calls, _ = futures[future]
                tally = _tally_from(future.result())
                tallies[(engine, name)].merge(tally)
                elapsed = time.monotonic() - started
                print(f"[{done:4}/{len(tasks)}] {elapsed / 60:5.1f} min  {engine:<11} {name:<22} "
                      f"{tally.calls} calls, {tally.ok} ok, findings: {sorted(tally.findings) or '-'}", flush=True)
    finally:
        with psycopg.connect(args.url, autocommit=True) as conn:
            for (name,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                        (prefix.replace("_", "\\_") + "%",)).fetchall():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for folder in Path(SCRATCH_DIR).glob(f"{prefix}*"):
            shutil.rmtree(folder, ignore_errors=True)  # this run's SQLite files, the workers' too
    seconds = time.monotonic() - started
    result = list(tallies.values())
    print(table(result))
    print(f"fuzz: {sum(t.calls for t in result)} calls in {seconds / 60:.1f} minutes")
    if not args.no_write:
        run = {"command": command_line(args.calls, args.engines, args.functions), "calls_per_function": args.calls,
               "seconds": round(seconds), "workers": args.workers, "calls": sum(t.calls for t in result)}
        previous = json.loads(COUNTS.read_text()) if COUNTS.exists() else None
        write_report(merged_report(previous, run, result, set() if args.functions else set(engines)))
    short = [t for t in result if t.calls < args.calls]
    new = [(t.engine, t.function, k, f) for t in result for k, f in t.unexpected().items()]
    for engine, function, kind, found in new:
        print(f"NEW FINDING {engine} {function} {kind} ({found.count}x): {found.message}\n    {found.example}")
    for t in short:
        print(f"NOT FUZZED ENOUGH {t.engine} {t.function}: {t.calls} calls")
    return 1 if new or short else 0


if __name__ == "__main__":
    raise SystemExit(main())
