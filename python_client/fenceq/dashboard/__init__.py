"""The fenceq dashboard (``fenceq dashboard``): queues, jobs and their fence
history, dead letters, and schedules and locks where the schema has them;
from schema version 7, activity charts (``charts.py``) and a bounded search.
A WSGI application (Werkzeug) whose pages are rendered on the server from
Jinja2 templates, with no JavaScript and every asset in the package, so it
works offline; docs/observability.md says why this stack.

Read-only unless started with ``allow_actions``: then replay, discard,
cancel, pause and resume, and the search's bulk retry, cancel and replay,
are POST forms carrying a CSRF token."""

from .app import Dashboard, serve_dashboard, start_dashboard

__all__ = ["Dashboard", "serve_dashboard", "start_dashboard"]
