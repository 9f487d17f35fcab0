"""fenceq's pytest plugin (the ``pytest11`` entry point ``fenceq``):
fixtures that run an App's tasks in a test (docs/testing-your-tasks.md).

- ``fenceq_app``: your App. Override it in a conftest.py, or name it with
  the ini option ``fenceq_app = module:attribute``.
- ``fenceq_inline``, ``fenceq_memory``, ``fenceq_postgres``: the App in one
  mode for the test (``InlineMode``, ``MemoryMode``, ``DatabaseMode`` on a
  throwaway PostgreSQL database), the mode object as the value.
- ``fenceq``: the mode ``--fenceq-mode`` names (inline by default), so that
  a whole session runs in one.
- ``fenceq_postgresql_url``: the URL of a throwaway database with fenceq
  installed, made with pytest-postgresql from the server of the process
  fixture that the ini option ``fenceq_postgresql_server`` names
  (``postgresql_proc``, pytest-postgresql's own, by default: it starts a
  server from the PostgreSQL binaries; ``postgresql_noproc`` uses a running
  server at pytest-postgresql's host and port options).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Iterator
from urllib.parse import quote

import pytest

from ..worker.app import App, load_app
from .modes import DatabaseMode, InlineMode, MemoryMode

MODES = ("inline", "memory", "postgres")
_databases = itertools.count(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("fenceq_app", "the App the fenceq fixtures test, as module:attribute")
    parser.addini("fenceq_postgresql_server", "the pytest-postgresql process fixture whose server "
                  "fenceq_postgres makes its databases on", default="postgresql_proc")
    parser.addoption("--fenceq-mode", choices=MODES, default="inline",
                     help="the mode the fenceq fixture runs tasks in (default: inline)")


@pytest.fixture
def fenceq_app(request: pytest.FixtureRequest) -> App:
    spec = request.config.getini("fenceq_app")
    if not spec:
        raise pytest.UsageError("fenceq: override the fenceq_app fixture in a conftest.py to return your App, "
                                "or set fenceq_app = module:attribute in the pytest ini")
    return load_app(spec)


@pytest.fixture
def fenceq_inline(fenceq_app: App) -> Iterator[InlineMode]:
    with InlineMode(fenceq_app) as mode:
        yield mode


@pytest.fixture
def fenceq_memory(fenceq_app: App) -> Iterator[MemoryMode]:
    with MemoryMode(fenceq_app) as mode:
        yield mode


@pytest.fixture
def fenceq_postgres(fenceq_app: App, fenceq_postgresql_url: str) -> Iterator[DatabaseMode]:
    with DatabaseMode(fenceq_app, fenceq_postgresql_url) as mode:
        yield mode


@pytest.fixture
def fenceq(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"fenceq_{request.config.getoption('fenceq_mode')}")


def _url(server: Any, dbname: str) -> str:
    password = f":{quote(server.password, safe='')}" if server.password else ""
    return f"postgresql://{quote(server.user, safe='')}{password}@{server.host}:{server.port}/{dbname}"


def _janitor(server: Any, dbname: str, **options: Any) -> Any:
    from pytest_postgresql.janitor import DatabaseJanitor

    return DatabaseJanitor(user=server.user, host=server.host, port=server.port, password=server.password,
                           dbname=dbname, maintenance_dbname=getattr(server, "maintenance_dbname", "postgres"),
                           **options)


@pytest.fixture(scope="session")
def fenceq_postgresql_template(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """A database with fenceq installed, once per session, that each test's
    database is cloned from: the server's executor, and its name."""
    from ..migrate import migrate

    server = request.getfixturevalue(request.config.getini("fenceq_postgresql_server"))
    template = f"fenceq_template_{os.getpid()}"  # per process: concurrent runs never collide
    janitor = _janitor(server, template, as_template=True)
    janitor.drop()
    with janitor:
        migrate(_url(server, template))
        yield server, template


@pytest.fixture
def fenceq_postgresql_url(fenceq_postgresql_template: tuple[Any, str]) -> Iterator[str]:
    server, template = fenceq_postgresql_template
    dbname = f"{template}_{next(_databases)}"
    with _janitor(server, dbname, template_dbname=template):
        yield _url(server, dbname)
