"""fenceq's schema through Django's ``migrate`` (docs/integrations.md#django).

Each Django migration of the app ``fenceq`` runs fenceq's own migrate on the
PostgreSQL database Django is migrating (routers decide which, as for any
app): fenceq's frozen steps, under its lock, recorded where ``fenceq
migrate`` records them, then ``verify_schema``. So ``manage.py migrate``,
and Django's test runner with it, installs fenceq where Django's tables
are, and ``fenceq migrate`` on that database afterwards finds nothing to
do. A fenceq release with a new schema version brings a new Django
migration; migrating back undoes what it brought with ``fenceq rollback``.
On another engine the migrations do nothing (keep a SQLite fenceq database
in a file of its own: ``fenceq migrate``).
"""

from __future__ import annotations

from typing import Any

from django.db import connections, router
from django.db.migrations.operations.base import Operation
from django.db.migrations.recorder import MigrationRecorder

from ...client import connect
from ...migrate import migrate, rollback
from .databases import database_url


class InstallFenceq(Operation):
    """Bring fenceq's schema to ``version`` at least (the newest the
    installed fenceq has); backwards, roll it back to ``previous``."""

    reduces_to_sql = False
    reversible = True

    def __init__(self, version: int, previous: int):
        self.version = version
        self.previous = previous

    def deconstruct(self) -> tuple:
        return (self.__class__.__qualname__, [], {"version": self.version, "previous": self.previous})

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # no models

    def _url(self, app_label: str, schema_editor: Any) -> str | None:
        connection = schema_editor.connection
        if connection.vendor != "postgresql" or not router.allow_migrate(connection.alias, app_label):
            return None
        return database_url(connection.settings_dict)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        url = self._url(app_label, schema_editor)
        if url is not None:
            migrate(url)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        url = self._url(app_label, schema_editor)
        if url is not None:
            rollback(url, to_version=self.previous)

    def describe(self) -> str:
        return f"Apply fenceq's migrations (schema version {self.version} or newer), as `fenceq migrate` does"

    @property
    def migration_name_fragment(self) -> str:
        return f"fenceq_v{self.version}"


def create_queues(sender: Any, using: str, verbosity: int = 1, **kwargs: Any) -> None:
    """After ``migrate`` (post_migrate): the queues of each fenceq backend
    whose enqueues join this database's transactions, where fenceq's schema
    is installed. Existing queues are left as they are."""
    from . import FenceqBackend, task_backends

    connection = connections[using]
    if connection.vendor != "postgresql" or not router.allow_migrate(using, sender.label):
        return
    if not any(app == sender.label for app, _ in MigrationRecorder(connection).applied_migrations()):
        return  # not installed here, or migrated back to zero
    queues = sorted({queue for backend in task_backends.all()
                     if isinstance(backend, FenceqBackend) and backend.transaction_database == using
                     for queue in backend.queue_names()})
    if not queues:
        return
    with connect(database_url(connection.settings_dict)) as client:
        for queue in queues:
            if client.create_queue(queue) and verbosity >= 2:
                print(f"Created the fenceq queue {queue!r}")
