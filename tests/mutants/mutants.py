"""The mutant list (tests/mutants/mutants.toml): loading it and applying one
mutant to a copy of the SQL. Shared by `make mutants` (run.py) and the cheap
check in `make test` (tests/test_mutants_list.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIST = REPO / "tests" / "mutants" / "mutants.toml"
ENGINES = ("postgres", "sqlite")
# A killer is a pytest node id; tests/isolation/specs/<name>.spec is kept
# for isolation specs (issue 19 §1) once their runner can target a database.
_PYTEST_NODE = re.compile(r"^(tests/[\w/]+\.py)::(\w+)(\[[^\]]+\])?$")


@dataclass(frozen=True)
class Mutant:
    id: str
    engine: str
    file: str            # relative to the repository, under sql/
    section: str         # the docs/guarantees.md section whose rule it breaks, "§N"
    guarantee: str       # the rule, in a few words
    original: str        # exact text, found exactly once in file
    replacement: str
    killers: tuple[str, ...]  # tests that must turn red, in the order they are run


def load(path: Path = LIST) -> list[Mutant]:
    with path.open("rb") as handle:
        entries = tomllib.load(handle)["mutant"]
    return [Mutant(**{**entry, "killers": tuple(entry["killers"])}) for entry in entries]


def collected(mutants: list[Mutant], repo: Path = REPO) -> set[str]:
    """The node ids pytest collects from the killers' test files."""
    files = sorted({k.split("::", 1)[0] for m in mutants for k in m.killers if (repo / k.split("::", 1)[0]).is_file()})
    if not files:
        return set()
    output = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                            cwd=repo, capture_output=True, text=True).stdout
    return {line.strip() for line in output.splitlines() if "::" in line}


def problems(mutants: list[Mutant], repo: Path = REPO, node_ids: set[str] | None = None) -> list[str]:
    """Everything that keeps the list from applying to the SQL at `repo`
    (with node_ids, the collected tests: each killer must be one of them)."""
    found = []
    seen = set()
    for m in mutants:
        where = f"mutant {m.id}"
        if m.id in seen:
            found.append(f"{where}: id repeated")
        seen.add(m.id)
        if m.engine not in ENGINES:
            found.append(f"{where}: engine must be one of {ENGINES}")
        if not m.file.startswith(f"sql/{m.engine}/") or not (repo / m.file).is_file():
            found.append(f"{where}: {m.file} is not a file under sql/{m.engine}/")
            continue
        count = (repo / m.file).read_text(encoding="utf-8").count(m.original)
        if count != 1:
            found.append(f"{where}: its original text occurs {count} times in {m.file}, not once")
        if m.original == m.replacement:
            found.append(f"{where}: the replacement is the original")
        if not re.fullmatch(r"§\d+", m.section):
            found.append(f"{where}: section must be §N of docs/guarantees.md")
        if not m.killers:
            found.append(f"{where}: names no killer test")
        for killer in m.killers:
            match = _PYTEST_NODE.match(killer)
            if not match:
                found.append(f"{where}: killer {killer} is not a pytest node id tests/...py::test[...]")
                continue
            test_file = repo / match.group(1)
            if not test_file.is_file() or not re.search(
                    rf"^(async )?def {match.group(2)}\(", test_file.read_text(encoding="utf-8"), re.M):
                found.append(f"{where}: killer {killer} names no test function")
            if node_ids is not None and killer not in node_ids:
                found.append(f"{where}: killer {killer} is not a collected test")
            params = match.group(3) or ""
            other = [e for e in ENGINES if e != m.engine]
            if any(re.search(rf"\b{e}\b", params) for e in other):
                found.append(f"{where}: killer {killer} runs on the other engine")
    return found


# The install script's closing admission check (verify_schema must pass),
# which mutant_plugin.py leaves out so that the tests, not the install,
# have to notice a mutant it would refuse.
_ADMISSION = re.compile(r"^-- Admission: .*?^END\n\$\$;\n", re.M | re.S)


def install_script_without_admission(sql_root: Path) -> str:
    """The PostgreSQL install script of sql_root (its postgres/*.sql in
    order, in one transaction) without its admission check."""
    script = "\n".join(path.read_text(encoding="utf-8") for path in sorted((sql_root / "postgres").glob("[0-9]*.sql")))
    script, found = _ADMISSION.subn("", script)
    if found != 1:
        raise ValueError(f"the install script's admission check was found {found} times, not once")
    return f"BEGIN;\n{script}\nCOMMIT;"


def apply(mutant: Mutant, target: Path, repo: Path = REPO) -> None:
    """Copy the repository's sql/ to target/sql with this one break applied."""
    shutil.copytree(repo / "sql", target / "sql")
    path = target / mutant.file
    text = path.read_text(encoding="utf-8")
    if text.count(mutant.original) != 1:
        raise ValueError(f"mutant {mutant.id}: original text not found exactly once in {mutant.file}")
    path.write_text(text.replace(mutant.original, mutant.replacement), encoding="utf-8")
