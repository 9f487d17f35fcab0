#!/usr/bin/env python
"""Start the example: its database (created when missing), `migrate`
(Django's tables, fenceq's schema and queue), a fenceq worker
(`manage.py fenceq_worker`) and Django's development server (arguments go
to `runserver`: an address, --noreload, ...). Ctrl-C stops both."""

import os
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
MANAGE = [sys.executable, str(HERE / "manage.py")]


def create_database() -> None:
    """The settings' database, made on the server libpq reaches ($PGHOST, ...)."""
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings

    name = settings.DATABASES["default"]["NAME"]
    with psycopg.connect(dbname="postgres", autocommit=True) as server:
        if server.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            server.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"Created the database {name}")


def main() -> int:
    create_database()
    subprocess.run([*MANAGE, "migrate"], check=True)
    worker = subprocess.Popen([*MANAGE, "fenceq_worker"])
    try:
        server = subprocess.run([*MANAGE, "runserver", *sys.argv[1:]])
    except KeyboardInterrupt:  # Ctrl-C reached the worker too: it finishes its jobs and stops
        worker.wait()
        return 0
    worker.terminate()  # the server stopped by itself
    worker.wait()
    return server.returncode


if __name__ == "__main__":
    sys.exit(main())
