"""Django's databases as fenceq sees them: the URL of a PostgreSQL database
of ``DATABASES`` (for fenceq's own connections to it), which of them a
fenceq URL names, and the connection whose transaction an enqueue joins."""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlencode

from django.db import connections

from ...backends.postgres import libpq_keywords, url_parameters

# Where a setting leaves them empty, libpq's own defaults ($PGHOST, …) apply.
IDENTITY_DEFAULTS = {"host": "", "port": "5432", "dbname": "", "user": ""}


def joinable(alias: str) -> bool:
    """Whether enqueues can join the transactions of the Django database
    ``alias``: PostgreSQL through psycopg 3 (Django's choice whenever
    psycopg 3 is installed, as it is with fenceq)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3


def database_url(settings: Mapping[str, Any]) -> str:
    """A postgresql:// URL of a Django PostgreSQL database's settings: its
    NAME, USER, PASSWORD, HOST and PORT, and those of its OPTIONS that are
    libpq's (sslmode, service, passfile, …). Under Django's test runner,
    NAME is the test database's."""
    libpq = libpq_keywords()
    params = {key: value for key, value in settings.get("OPTIONS", {}).items()
              if key in libpq and isinstance(value, (str, int))}
    params.update({key: settings.get(setting) for key, setting in
                   (("dbname", "NAME"), ("user", "USER"), ("password", "PASSWORD"), ("host", "HOST"),
                    ("port", "PORT")) if settings.get(setting)})
    return "postgresql://?" + urlencode(params)


def _identity(url: str) -> tuple[str, ...]:
    info = url_parameters(url)
    if info is None:
        return ()
    return tuple(str(info.get(key) or default) for key, default in IDENTITY_DEFAULTS.items())


def database_named_by(url: str) -> str | None:
    """The alias of the joinable Django database that ``url`` names by the
    same host, port, database name and user (as spelled: localhost is not
    127.0.0.1), if one does."""
    if not url.startswith(("postgresql:", "postgres:")):
        return None
    wanted = _identity(url)
    for alias in connections:
        if joinable(alias) and _identity(database_url(connections[alias].settings_dict)) == wanted:
            return alias
    return None


def connection_in_transaction(alias: str) -> Any:
    """This thread's psycopg connection of the Django database ``alias``,
    open: inside the atomic block that is open there, else in autocommit.
    A transaction broken by an earlier error is refused as Django refuses a
    query in it (TransactionManagementError)."""
    connection = connections[alias]
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    return connection.connection
