"""docs/quickstart.md runs as written, so that it cannot drift from the code.

Its files (a ```python block whose first line is `# name.py`) are written to
an empty folder and its ```sh commands run there in order, with this venv's
`fenceq` and `python` first on PATH: a command must succeed, a ```text
block must be exactly what the command before it printed, and a pytest run
must pass every test the page defines. `fenceq worker` runs in the
background, as in the page's second terminal, until the page is done; then
it must stop cleanly on SIGTERM. `export` sets the environment of the
commands after it, the PostgreSQL URL pointing at a fresh, empty database
of the test server. Only the setup lines (venv, pip) are not run: this venv
has what they install, and the extras the page names must be declared.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

from conftest import pg_url

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "quickstart.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)
FILE_NAME = re.compile(r"# (\w+\.py)\n")
SETUP = ("python -m venv ", "pip install ")
EXTRA = re.compile(r"`'?(?:\.\./fenceq)?\[(\w+)\]'?`")
PATIENCE = 120  # seconds a command may take: bounds a failure only


def page_blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def declared_extras() -> set[str]:
    with open(ROOT / "pyproject.toml", "rb") as handle:
        return set(tomllib.load(handle)["project"]["optional-dependencies"])


def test_the_page_names_only_declared_extras_and_the_framework_extras_exist():
    named = set(EXTRA.findall(PAGE.read_text(encoding="utf-8")))
    assert named == {"pydantic", "django", "fastapi", "litestar"}
    assert named <= declared_extras()


class PageRun:
    """The page's commands, run in order in one folder."""

    def __init__(self, folder: Path, database_url: str):
        self.folder = folder
        self.database_url = database_url
        bin_dir = str(Path(sys.executable).parent)
        # A newcomer's shell: none of this run's fenceq or pytest settings.
        self.env = {name: value for name, value in os.environ.items()
                    if not name.startswith(("FENCEQ_", "PYTEST_"))}
        self.env["PATH"] = bin_dir + os.pathsep + self.env.get("PATH", "")
        self.workers: list[tuple[subprocess.Popen, Path]] = []
        self.tests_defined = 0
        self.last_output: str | None = None
        self.commands_run: list[str] = []

    def write(self, text: str) -> None:
        name = FILE_NAME.match(text)
        assert name, f"a python block of the quick start names no file: {text[:60]!r}"
        (self.folder / name.group(1)).write_text(text, encoding="utf-8")
        self.tests_defined += len(re.findall(r"^def test_", text, re.MULTILINE))

    def run_line(self, line: str) -> None:
        words = shlex.split(line, comments=True)
        if not words or line.startswith(SETUP):
            return
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            self.env[name] = self.database_url if value.startswith("postgresql://") else value
        elif words[:2] == ["fenceq", "worker"]:
            self.start_worker([word for word in words if word != "&"])
        else:
            self.run(line)
        self.commands_run.append(line)

    def start_worker(self, command: list[str]) -> None:
        log = self.folder / f"worker-{len(self.workers)}.log"
        with open(log, "wb") as output:
            process = subprocess.Popen(command, cwd=self.folder, env=dict(self.env), stdout=output,
                                       stderr=subprocess.STDOUT)
        self.workers.append((process, log))

    def run(self, line: str) -> None:
        done = subprocess.run(line, shell=True, cwd=self.folder, env=self.env, capture_output=True, text=True,
                              timeout=PATIENCE)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}\n{self.worker_logs()}"
        if "pytest" in line:
            assert f"{self.tests_defined} passed" in done.stdout, done.stdout
        self.last_output = done.stdout

    def compare(self, expected: str) -> None:
        assert self.last_output is not None, "an output block follows no command"
        assert self.last_output == expected, f"{self.last_output!r} != {expected!r}"
        self.last_output = None

    def stop_workers(self) -> list[int]:
        for process, _ in self.workers:
            process.terminate()
        return [process.wait(timeout=PATIENCE) for process, _ in self.workers]

    def worker_logs(self) -> str:
        return "\n".join(log.read_text(errors="replace") for _, log in self.workers if log.exists())


def test_the_quick_start_runs_as_written(tmp_path, pg):
    database = "fenceq_quickstart_" + uuid.uuid4().hex[:12]
    pg.sql(f"CREATE DATABASE {database}")
    run = PageRun(tmp_path, pg_url(database))
    try:
        for language, text in page_blocks():
            if language == "python":
                run.write(text)
            elif language == "sh":
                for line in text.splitlines():
                    run.run_line(line)
            elif language == "text":
                run.compare(text)
    finally:
        exits = run.stop_workers()
        pg.sql(f"DROP DATABASE {database} WITH (FORCE)")
    assert exits == [0, 0], run.worker_logs()
    # What the run covered: both engines, a file each, the test run, both result lines.
    assert {"fenceq migrate", "python submit.py", "python -m pytest -q test_tasks.py"} <= set(run.commands_run)
    assert run.commands_run.count("python submit.py") == 2
    assert sorted(path.name for path in tmp_path.glob("*.py")) == ["submit.py", "tasks.py", "test_tasks.py"]
    assert (tmp_path / "fenceq.db").exists() and run.tests_defined == 3
