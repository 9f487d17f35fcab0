"""Migrations and install scripts: the public face of
``fenceq/backends/migrations.py``, where both engines' code lives."""

from .backends.migrations import check, install_script, migrate, rollback, schema_dump_pg

__all__ = ["check", "install_script", "migrate", "rollback", "schema_dump_pg"]
