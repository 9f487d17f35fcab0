"""`make mutants` (issue 19 §2): every mutant of tests/mutants/mutants.toml
must turn at least one of its killer tests red.

For each mutant: copy sql/, apply its one break, and run its killer tests
(pytest, stop at the first failure) on databases that run the mutated SQL
(mutant_plugin.py). A mutant is killed when a test FAILS; a test that
errors (a mutated install that does not apply, a fixture that breaks) or a
run that times out is a harness error, not a kill. First, the killers of
each engine run once on an unmutated copy, and must pass.

Writes tests/mutants/mutants-report.json and the generated section of
docs/mutants.md; exits 1 when a mutant survives or the harness failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutants as mutant_list  # noqa: E402

REPO = mutant_list.REPO
REPORT = REPO / "tests" / "mutants" / "mutants-report.json"
DOC = REPO / "docs" / "mutants.md"
BEGIN, END = "<!-- mutants-report:begin (written by make mutants) -->", "<!-- mutants-report:end -->"


def run_killers(engine: str, killers: list[str], sql_root: Path, timeout: float) -> dict:
    env = {**os.environ, "FENCEQ_TEST_MUTANT_SQL": str(sql_root), "FENCEQ_TEST_MUTANT_ENGINE": engine,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "tests" / "mutants"),
                                                        os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-rfE", "-p", "no:cacheprovider",
               "-p", "mutant_plugin", *killers]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return {"outcome": "timeout", "seconds": round(time.monotonic() - started, 1), "killed_by": [],
                "output": output[-4000:]}
    seconds = round(time.monotonic() - started, 1)
    failed = [k for k in killers if f"FAILED {k}" in output]
    if process.returncode == 0:
        outcome = "passed"
    elif process.returncode == 1 and failed:
        outcome = "failed"
    else:
        outcome = f"error (pytest exit {process.returncode})"
    return {"outcome": outcome, "seconds": seconds, "killed_by": failed, "output": output[-4000:]}


def baseline(mutants: list[mutant_list.Mutant], timeout: float) -> list[str]:
    """The killers pass on the unmutated SQL, installed the way mutants are."""
    errors = []
    for engine in mutant_list.ENGINES:
        killers = list(dict.fromkeys(k for m in mutants if m.engine == engine for k in m.killers))
        if not killers:
            continue
        with tempfile.TemporaryDirectory(prefix="fenceq-mutant-baseline-") as folder:
            shutil.copytree(REPO / "sql", Path(folder) / "sql")
            result = run_killers(engine, killers, Path(folder) / "sql", timeout * 2)
        print(f"baseline {engine}: {len(killers)} killer tests {result['outcome']} in {result['seconds']} s",
              flush=True)
        if result["outcome"] != "passed":
            errors.append(f"baseline {engine}: {result['outcome']}\n{result['output']}")
    return errors


def write_doc(report: dict) -> None:
    rows = ["| Mutant | Engine | § | Broken rule | Killed by | Seconds |", "|---|---|---|---|---|---|"]
    for m in report["mutants"]:
        killed = ", ".join(f"`{k}`" for k in m["killed_by"]) or f"**{m['outcome']}**"
        rows.append(f"| `{m['id']}` | {m['engine']} | {m['section']} | {m['guarantee']} | {killed} | {m['seconds']} |")
    section = "\n".join([
        BEGIN,
        f"Last run: `{report['command']}` on {report['finished_at']}: {report['killed']} of "
        f"{report['total']} mutants killed, {report['survived']} survived, {report['errors']} harness errors; "
        f"{report['seconds']} s in all (baseline included).",
        "",
        *rows,
        END])
    text = DOC.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + section + tail, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma list of mutant ids (the report is then not written)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant run")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()

    mutants = mutant_list.load()
    problems = mutant_list.problems(mutants, node_ids=mutant_list.collected(mutants))
    if problems:
        print("the mutant list does not apply:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m.id for m in mutants}
        if unknown:
            print(f"unknown mutant ids: {sorted(unknown)}", file=sys.stderr)
            return 1
        mutants = [m for m in mutants if m.id in wanted]

    started = time.monotonic()
    if not args.no_baseline:
        errors = baseline(mutants, args.timeout)
        if errors:
            print("\n".join(errors), file=sys.stderr)
            return 1
    results = []
    for m in mutants:
        with tempfile.TemporaryDirectory(prefix="fenceq-mutant-") as folder:
            mutant_list.apply(m, Path(folder))
            result = run_killers(m.engine, list(m.killers), Path(folder) / "sql", args.timeout)
        outcome = {"failed": "killed", "passed": "survived"}.get(result["outcome"], result["outcome"])
        print(f"{outcome:>9}  {m.id}  ({result['seconds']} s)  {' '.join(result['killed_by'])}", flush=True)
        if outcome not in ("killed", "survived"):
            print(result["output"], flush=True)
        results.append({"id": m.id, "engine": m.engine, "file": m.file, "section": m.section,
                        "guarantee": m.guarantee, "killers": list(m.killers), "outcome": outcome,
                        "killed_by": result["killed_by"], "seconds": result["seconds"]})
    killed = sum(r["outcome"] == "killed" for r in results)
    survived = sum(r["outcome"] == "survived" for r in results)
    report = {
        "command": "make mutants", "finished_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "total": len(results), "killed": killed, "survived": survived,
        "errors": len(results) - killed - survived, "seconds": round(time.monotonic() - started, 1),
        "mutants": results}
    print(f"{killed} of {len(results)} mutants killed, {survived} survived, "
          f"{report['errors']} harness errors, {report['seconds']} s")
    if not args.only:
        REPORT.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        write_doc(report)
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
