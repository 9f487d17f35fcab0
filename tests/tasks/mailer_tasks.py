"""Django tasks, as a Django project declares them (tests/tasks/test_django_backend.py
configures Django before importing this module)."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


class Bounced(Exception):
    pass


@task(queue_name="emails", priority=10)
def send_welcome(address: str, *, greeting: str = "Hello") -> dict:
    return {"sent": f"{greeting}, {address}"}


@task(takes_context=True)
def attempts_so_far(context, label: str) -> list:
    return [label, context.attempt, context.task_result.id]


@task
async def shout(text: str) -> str:
    return text.upper()


@task(queue_name="emails")
def bounce(address: str) -> None:
    raise Bounced(address)


@task
def reuses_a_django_connection() -> bool:
    """Whether this thread's connection to Django's database was open before the task began."""
    from django.db import connection

    kept = connection.connection is not None
    connection.ensure_connection()
    return kept
