"""The dashboard's WSGI application: routes, the pages' data, actions.

Every read goes through the client (``fenceq.Client``) and the backend
reads of ``backends/protocol.py``: keyset pages, each driven by an index,
on PostgreSQL and SQLite alike. Nothing is cached: a page shows the
database as it is when loaded.

Version 7's operator's view (docs/design-v7.md) adds, where the schema has
it, charts of ``activity()`` drawn as SVG on the server (``charts.py``), a
bounded ``search_jobs`` with paging, and bulk retry, cancel and replay of
dead letters for a selection or for everything a filter matches.

Safety: pages are escaped by Jinja2's autoescape, payloads and errors are
clipped, and no page shows a claim token (no view the dashboard reads has
one). Actions exist only with ``allow_actions``, as POST forms whose CSRF
token is an HMAC of a per-browser cookie (SameSite=Strict) under a
per-process secret. With ``allowed_hosts`` (the command line sets it) a
request naming another Host is refused, so that a web page cannot reach a
dashboard on loopback through DNS rebinding.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import threading
import urllib.parse
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Iterator

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from werkzeug.exceptions import BadRequest, Forbidden, HTTPException, NotFound
from werkzeug.middleware.shared_data import SharedDataMiddleware
from werkzeug.routing import Map, Rule
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from ..backends.protocol import FINISHED_STATUSES, OPTIONAL_VIEWS
from ..client import Client, connect, resolve_url
from ..ops import MAX_BULK_ROWS
from ..errors import ConfigError, FenceqError, PersistenceFailed
from ..observability.endpoints import serve, stop
from ..types import Job
from . import charts
from .format import FILTERS

PAGE = 50
CSRF_COOKIE = "fenceq_csrf"
# How far back a search of finished jobs walks the finished_at index.
WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
STATUSES = ("claimed", "pending", "finished") + FINISHED_STATUSES
# The activity page's ranges: activity() picks the bucket (1 minute, 15 minutes, 1 hour).
RANGES = {"1h": ("last hour", timedelta(hours=1)), "1d": ("last day", timedelta(days=1)),
          "7d": ("last week", timedelta(days=7))}
SEARCH_STATUSES = ("pending", "claimed") + FINISHED_STATUSES
SEARCH_WINDOWS = {"": None, **WINDOWS}
SEARCH_FIELDS = ("queue", "status", "task", "payload", "error", "prefix", "window")
BULK_ROWS = 1000          # a bulk action's default max_rows
# What an action's redirect says (chosen by key: no text of the request is echoed).
NOTICES = {
    "replayed": "Dead letter replayed: the job is pending again, with a fresh attempt budget.",
    "discarded": "Dead letter discarded.",
    "not-open": "That dead letter was unknown or already handled; nothing changed.",
    "paused": "Queue paused: no claims until it is resumed (it keeps accepting jobs).",
    "resumed": "Queue resumed.",
    "unchanged": "Nothing to change: the queue was already in that state.",
    "cancel_requested": "Cancel requested: the running handler is told and the worker acknowledges it.",
    "cancelled": "Job cancelled.",
    "cancel-refused": "The job is not pending or running: nothing to cancel.",
    # Bulk actions: {changed} is the count the SQL answered (a number read back from the redirect).
    "retried": "{changed} waiting for a retry made due now.",
    "cancelled-jobs": "{changed} cancelled (a running one is asked to stop, or stopped with force).",
    "replayed-letters": "{changed} replayed from their dead letters: pending again, with a fresh attempt budget.",
}
# A bulk action: the client method, the notice, and the filters it takes besides the queue.
BULK_ACTIONS = {
    "retry_jobs": ("retried", ("task", "payload_contains", "error_contains")),
    "cancel_jobs": ("cancelled-jobs", ("task", "payload_contains")),
    "replay_dead_letters": ("replayed-letters", ("task", "payload_contains", "error_contains")),
}
BULK_LABELS = {"retry_jobs": "Retry now", "cancel_jobs": "Cancel", "replay_dead_letters": "Replay dead letters"}
HEADERS = {
    # No script at all, assets from here only, no framing.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Dashboard:
    """``Dashboard(url)`` is a WSGI application; ``serve_dashboard`` runs one."""

    def __init__(self, url: str | None = None, *, allow_actions: bool = False,
                 allowed_hosts: Iterable[str] | None = None, secret: bytes | None = None,
                 open_client: Callable[[str], Client] = connect, read_url: str | None = None):
        self.url = resolve_url(url)
        # Pages may read from a standby; actions always write through url.
        self.read_url = read_url
        self.allow_actions = allow_actions
        self.allowed_hosts = None if allowed_hosts is None else frozenset(allowed_hosts)
        self._secret = secret or secrets.token_bytes(32)
        self._open_client = open_client
        self._client: Client | None = None
        self._reader: Client | None = None
        self._client_lock = threading.Lock()
        self.templates = Environment(loader=PackageLoader("fenceq.dashboard", "templates"), autoescape=True,
                                     undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.templates.filters.update(FILTERS)
        self.routes = Map([
            Rule("/", endpoint="home"),
            Rule("/queues", endpoint="queues"),
            Rule("/jobs", endpoint="jobs"),
            Rule("/jobs/<path:job_id>", endpoint="job"),  # a job id may hold a slash
            Rule("/dead-letters", endpoint="dead_letters"),
            Rule("/schedules", endpoint="schedules"),
            Rule("/locks", endpoint="locks"),
            Rule("/activity", endpoint="activity"),
            Rule("/search", endpoint="search"),
            # Actions name their target in the form, beside the CSRF token.
            *(Rule(f"/actions/{name}", endpoint=name, methods=["POST"])
              for name in ("replay", "discard", "cancel", "pause", "resume")),
            *(Rule(f"/actions/{name}", endpoint="bulk", defaults={"action": name}, methods=["POST"])
              for name in BULK_ACTIONS),
        ])
        self._wsgi = SharedDataMiddleware(self._respond, {"/static": ("fenceq.dashboard", "static")},
                                          cache_timeout=3600)

    def __call__(self, environ: dict, start_response: Any) -> Iterable[bytes]:
        return self._wsgi(environ, start_response)

    def close(self) -> None:
        with self._client_lock:
            for client in (self._client, self._reader):
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.close()
            self._client = self._reader = None

    # Plumbing -----------------------------------------------------------------------

    def _respond(self, environ: dict, start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        try:
            if self.allowed_hosts is not None and request.host not in self.allowed_hosts:
                raise BadRequest("this dashboard answers only to the address it serves")
            endpoint, values = self.routes.bind_to_environ(environ).match()
            response = getattr(self, "page_" + endpoint)(request, **values)
        except HTTPException as error:
            response = self._error(request, error.code or 500, error.description or error.name)
        except PersistenceFailed:
            self._drop_client()
            response = self._error(request, 503, "The database could not be reached; try again.")
        except FenceqError as error:
            if error.reason == "permission_denied":
                response = self._error(request, 403, "The database refused: this role may not do that "
                                       "(reading needs fenceq_worker's views, actions need fenceq_admin).")
            else:
                response = self._error(request, 400, str(error))
        response.headers.extend(HEADERS)
        return response(environ, start_response)

    @contextlib.contextmanager
    def _db(self) -> Iterator[Client]:
        """The client of the pages' reads: on read_url when given."""
        if self.read_url is None:
            with self._writer() as client:
                yield client
            return
        with self._client_lock:
            if self._reader is None:
                self._reader = self._open_client(self.read_url)
            client = self._reader
        yield client

    @contextlib.contextmanager
    def _writer(self) -> Iterator[Client]:
        """The client of the actions (and of the reads without read_url)."""
        with self._client_lock:
            if self._client is None:
                self._client = self._open_client(self.url)
            client = self._client
        yield client

    def _drop_client(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def _render(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        views = context.pop("views", None)
        operator_view = context.pop("operator_view", None)
        if views is None or operator_view is None:
            with contextlib.suppress(FenceqError):
                with self._db() as client:
                    views = set(client.present_views()) if views is None else views
                    operator_view = _has_operator_view(client) if operator_view is None else operator_view
        lag = None  # how far behind the replica the pages read from is
        if self.read_url is not None:
            with contextlib.suppress(FenceqError):
                with self._db() as client:
                    lag = client.replica_lag()
        response = Response(mimetype="text/html")
        token = self._csrf_token(request, response) if self.allow_actions else ""
        response.set_data(self.templates.get_template(template).render(
            request=request, actions=self.allow_actions, csrf=token, views=views or set(),
            replica=self.read_url is not None, replica_lag=lag, operator_view=bool(operator_view),
            optional_views=OPTIONAL_VIEWS, notice=_notice(request.args), **context))
        response.status_code = status
        return response

    def _error(self, request: Request, status: int, message: str) -> Response:
        return self._render(request, "error.html", status, views=set(), operator_view=False, status_code=status,
                            message=message)

    # CSRF: the form carries HMAC(secret, cookie); a cross-site page can send
    # neither the cookie (SameSite=Strict) nor read the token.

    def _csrf_token(self, request: Request, response: Response) -> str:
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if len(cookie) != 43:
            cookie = secrets.token_urlsafe(32)
            response.set_cookie(CSRF_COOKIE, cookie, httponly=True, samesite="Strict", path="/")
        return hmac.new(self._secret, cookie.encode(), hashlib.sha256).hexdigest()

    def _check_action(self, request: Request, target: str) -> str:
        """The action's target (a form field), once the action is allowed and its token is good."""
        if not self.allow_actions:
            raise Forbidden("This dashboard is read-only: start it with --allow-actions (and a role granted "
                            "fenceq_admin) to replay, discard, cancel, retry, pause or resume.")
        cookie = request.cookies.get(CSRF_COOKIE, "")
        expected = hmac.new(self._secret, cookie.encode(), hashlib.sha256).hexdigest()
        if not cookie or not hmac.compare_digest(expected, request.form.get("csrf", "")):
            raise Forbidden("The form's CSRF token is missing or stale: reload the page and try again.")
        value = request.form.get(target, "")
        if not value:
            raise BadRequest(f"the form names no {target}")
        return value

    # Pages ----------------------------------------------------------------------------

    def page_home(self, request: Request) -> Response:
        return redirect("/queues")

    def page_queues(self, request: Request) -> Response:
        with self._db() as client:
            rows = client.queue_overview()
        extra = list(dict.fromkeys(column for row in rows for column in row.extra))
        return self._render(request, "queues.html", queues=rows, extra_columns=extra)

    def page_jobs(self, request: Request) -> Response:
        args = request.args
        form = {name: args.get(name, "").strip() for name in ("job_id", "submission_id", "queue", "task")}
        form["status"] = args.get("status", "claimed")
        form["window"] = args.get("window", "24h")
        if form["status"] not in STATUSES or form["window"] not in WINDOWS:
            raise BadRequest("unknown status or window")
        jobs: list[Job] = []
        after = None
        message = None
        with self._db() as client:
            queues = [row.queue for row in client.queue_overview()]
            if form["job_id"]:
                if client.get_job(form["job_id"]) is not None:
                    return redirect(job_path(form["job_id"]))
                message = "No job has this id (it may have been purged)."
            elif form["submission_id"]:
                jobs = client.jobs_by_submission(form["submission_id"])
                message = None if jobs else "No job has this submission id."
            elif form["status"] == "pending" and not form["queue"]:
                message = "Pending jobs are listed per queue, in claim order: pick a queue."
            else:
                jobs, after = self._job_page(client, form, _cursor(args.get("after")))
        return self._render(request, "jobs.html", form=form, jobs=jobs, next_after=after, message=message,
                            queues=queues, statuses=STATUSES, windows=list(WINDOWS))

    def _job_page(self, client: Client, form: dict[str, str], cursor: Any) -> tuple[list[Job], str | None]:
        queue, task = form["queue"] or None, form["task"] or None
        status = form["status"]
        if status == "pending":
            after = None if cursor is None else (int(cursor[0]), _moment(cursor[1]), str(cursor[2]))
            rows = client.pending_jobs(queue, task=task, after=after, limit=PAGE + 1)
            key: Callable[[Job], list] = lambda j: [j.priority, j.run_at.isoformat(), j.job_id]
        elif status == "claimed":
            rows = client.claimed_jobs(queue=queue, task=task, after=None if cursor is None else str(cursor[0]),
                                       limit=PAGE + 1)
            key = lambda j: [j.job_id]
        else:
            since = datetime.now(timezone.utc) - WINDOWS[form["window"]]
            after = None if cursor is None else (_moment(cursor[0]), str(cursor[1]))
            rows = client.finished_jobs(since, status=None if status == "finished" else status, queue=queue,
                                        task=task, after=after, limit=PAGE + 1)
            key = lambda j: [j.finished_at.isoformat(), j.job_id]
        return rows[:PAGE], (_encode_cursor(key(rows[PAGE - 1])) if len(rows) > PAGE else None)

    def page_job(self, request: Request, job_id: str) -> Response:
        with self._db() as client:
            job = client.get_job(job_id)
            if job is None:
                raise NotFound("No job has this id (it may have been purged).")
            attempts = client.attempts(job_id)
            letters = client.dead_letters_of(job_id)
            views = set(client.present_views())
            checkpoints = client.checkpoints(job_id) if "checkpoints" in views else None
            # Version 6's history: none before it, and none where the queue keeps none.
            events = client.get_job_events(job_id) if "job_events" in views else None
        return self._render(request, "job.html", job=job, attempts=attempts, letters=letters,
                            checkpoints=checkpoints, views=views, events=events)

    def page_dead_letters(self, request: Request) -> Response:
        queue = request.args.get("queue", "").strip() or None
        handled = request.args.get("handled") == "1"
        cursor = _cursor(request.args.get("after"))
        after = None if cursor is None else (str(cursor[0]), str(cursor[1]))
        with self._db() as client:
            rows = client.dead_letter_page(queue=queue, include_handled=handled, after=after, limit=PAGE + 1)
            queues = [row.queue for row in client.queue_overview()]
        next_after = _encode_cursor([rows[PAGE - 1].job_id, rows[PAGE - 1].dlq_id]) if len(rows) > PAGE else None
        return self._render(request, "dead_letters.html", letters=rows[:PAGE], queue=queue or "", handled=handled,
                            queues=queues, next_after=next_after)

    def page_schedules(self, request: Request) -> Response:
        return self._named_page(request, "schedules", lambda client, after: client.schedules(
            after=after, limit=PAGE + 1), lambda row: row.schedule)

    def page_locks(self, request: Request) -> Response:
        return self._named_page(request, "locks", lambda client, after: client.locks(after=after, limit=PAGE + 1),
                                lambda row: row.lock)

    def _named_page(self, request: Request, view: str, read: Callable[[Client, str | None], list],
                    name: Callable[[Any], str]) -> Response:
        """A page of a view keyed by name, shown only where the schema has the view."""
        cursor = _cursor(request.args.get("after"))
        with self._db() as client:
            views = set(client.present_views())
            if view not in views:
                raise NotFound(f"This database has no {view} (its schema predates them, or this role may not "
                               "read them).")
            rows = read(client, None if cursor is None else str(cursor[0]))
        next_after = _encode_cursor([name(rows[PAGE - 1])]) if len(rows) > PAGE else None
        return self._render(request, f"{view}.html", rows=rows[:PAGE], next_after=next_after, views=views)

    def page_activity(self, request: Request) -> Response:
        queue = request.args.get("queue", "").strip() or None
        span = request.args.get("range", "1h")
        if span not in RANGES:
            raise BadRequest("unknown range")
        with self._db() as client:
            _require_operator_view(client)
            queues = [row.queue for row in client.queue_overview()]
            buckets = client.activity(queue=queue, since=RANGES[span][1])
        subject = f"queue {queue}" if queue else "all queues"
        panels = [(chart, charts.title(chart, buckets),
                   Markup(charts.svg(chart, buckets, chart_id=f"chart-{chart.name}", subject=subject)),
                   charts.figures(chart, buckets, subject=subject)) for chart in charts.CHARTS]
        return self._render(request, "activity.html", queue=queue or "", queues=queues, span=span, ranges=RANGES,
                            panels=panels, operator_view=True)

    def page_search(self, request: Request) -> Response:
        form = {name: request.args.get(name, "").strip() for name in SEARCH_FIELDS}
        if form["status"] not in ("",) + SEARCH_STATUSES or form["window"] not in SEARCH_WINDOWS:
            raise BadRequest("unknown status or window")
        before = request.args.get("before", "")
        if before and not before.isdigit():
            raise BadRequest("the page cursor is malformed")
        searched = any(form.values())
        jobs: list = []
        next_before = None
        message = None
        with self._db() as client:
            _require_operator_view(client)
            queues = [row.queue for row in client.queue_overview()]
            if searched:
                try:
                    page = client.search_jobs(**search_arguments(form, int(before) if before else None))
                    jobs, next_before = page.jobs, page.next_before_seq
                except BadRequest as error:
                    message = error.description
                except ConfigError as error:  # a search the SQL refuses: say why beside the form
                    message = str(error)
        bulk = self._bulk_filter(form) if self.allow_actions and form["queue"] else None
        return self._render(request, "search.html", form=form, jobs=jobs, next_before=next_before,
                            searched=searched, message=message, queues=queues, statuses=SEARCH_STATUSES,
                            windows=list(SEARCH_WINDOWS), bulk=bulk, back=_search_query(form),
                            max_bulk_rows=MAX_BULK_ROWS, bulk_rows=BULK_ROWS, bulk_labels=BULK_LABELS,
                            page_size=PAGE, operator_view=True)

    @staticmethod
    def _bulk_filter(form: dict[str, str]) -> dict[str, Any]:
        """What "everything this filter matches" sends, per action: the
        search's task, payload and error filters that the action takes (the
        action's own rule picks the states; status, window and submission
        prefix are the search's only). An action is offered only when it
        would apply every filter of the search that it could narrow by."""
        filters = {"task": form["task"], "payload_contains": form["payload"], "error_contains": form["error"]}
        given = {name for name, value in filters.items() if value}
        return {"filters": {name: filters[name] for name in sorted(given)},
                "actions": [name for name, (_, takes) in BULK_ACTIONS.items() if given and given <= set(takes)]}

    # Actions (POST, CSRF-checked, then redirect: reloading the result repeats nothing)

    def page_replay(self, request: Request) -> Response:
        dlq_id = self._check_action(request, "dlq_id")
        with self._writer() as client:
            job_id = client.replay_dead_letter(dlq_id)
        return redirect(f"{job_path(job_id)}?notice=replayed" if job_id else "/dead-letters?notice=not-open", 303)

    def page_discard(self, request: Request) -> Response:
        dlq_id = self._check_action(request, "dlq_id")
        with self._writer() as client:
            done = client.discard_dead_letter(dlq_id)
        return redirect("/dead-letters?notice=" + ("discarded" if done else "not-open"), 303)

    def page_cancel(self, request: Request) -> Response:
        job_id = self._check_action(request, "job_id")
        with self._writer() as client:
            outcome = client.cancel(job_id)
        notice = outcome if outcome in NOTICES else "cancel-refused"
        return redirect(f"{job_path(job_id)}?notice={notice}", 303)

    def page_pause(self, request: Request) -> Response:
        return self._pause(request, True)

    def page_resume(self, request: Request) -> Response:
        return self._pause(request, False)

    def _pause(self, request: Request, pause: bool) -> Response:
        queue = self._check_action(request, "queue")
        with self._writer() as client:
            changed = client.pause_queue(queue) if pause else client.resume_queue(queue)
        return redirect("/queues?notice=" + (("paused" if pause else "resumed") if changed else "unchanged"), 303)

    def page_bulk(self, request: Request, action: str) -> Response:
        """A bulk action on one queue: the checked jobs (scope=selected) or
        everything its filter matches (scope=filter); one SQL call, which
        answers how many jobs it changed."""
        queue = self._check_action(request, "queue")
        form = request.form
        notice, takes = BULK_ACTIONS[action]
        arguments: dict[str, Any] = {"max_rows": _bulk_rows(form.get("max_rows", ""))}
        if form.get("scope") == "selected":
            arguments["job_ids"] = form.getlist("job_id")
            if not arguments["job_ids"]:
                raise BadRequest("no job is selected: tick the jobs to act on")
        elif form.get("scope") == "filter":
            filters = {"task": form.get("task", "").strip() or None,
                       "payload_contains": _json_filter(form.get("payload_contains", "").strip()),
                       "error_contains": form.get("error_contains", "").strip() or None}
            if any(value is not None for name, value in filters.items() if name not in takes):
                raise BadRequest("this action cannot narrow by every filter given: it would do more than asked")
            arguments.update({name: filters[name] for name in takes})
        else:
            raise BadRequest("the form names no scope (selected or filter)")
        if action == "cancel_jobs":
            arguments["include_claimed"] = form.get("include_claimed") == "1"
            arguments["force"] = form.get("force") == "1"
        with self._writer() as client:
            changed = getattr(client, action)(queue, **arguments)
        back = _search_query({name: form.get("back_" + name, "") for name in SEARCH_FIELDS})
        return redirect(f"/search?{back}notice={notice}&changed={int(changed)}", 303)


def job_path(job_id: str) -> str:
    return "/jobs/" + urllib.parse.quote(job_id)


def search_arguments(form: dict[str, str], before_seq: int | None = None) -> dict[str, Any]:
    """search_jobs' arguments for the search form's fields (empty: not given);
    the window bounds when a job finished."""
    window = SEARCH_WINDOWS[form["window"]]
    return dict(queue=form["queue"] or None, status=form["status"] or None, task=form["task"] or None,
                payload_contains=_json_filter(form["payload"]), error_contains=form["error"] or None,
                submission_prefix=form["prefix"] or None,
                since=None if window is None else datetime.now(timezone.utc) - window,
                before_seq=before_seq, max_rows=PAGE)


def _has_operator_view(client: Client) -> bool:
    """Whether the schema has version 7's activity, search and bulk actions."""
    return int(client.version()) >= 7


def _require_operator_view(client: Client) -> None:
    if not _has_operator_view(client):
        raise NotFound("This database's schema predates the activity charts and the search (schema version 7 "
                       "adds them: fenceq migrate).")


def _notice(args: Any) -> str | None:
    """The notice a redirect names by key; a bulk action's count is read back as a number, nothing else."""
    text = NOTICES.get(args.get("notice", ""))
    if text is None or "{changed}" not in text:
        return text
    changed = args.get("changed", "")
    if not changed.isdigit():
        return None
    return text.format(changed=f"{int(changed):,} job" + ("" if int(changed) == 1 else "s"))


def _json_filter(text: str) -> Any:
    """A payload filter typed into a form: JSON, or None when empty."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise BadRequest("the payload filter is not valid JSON (e.g. {\"customer\": 42})") from None


def _bulk_rows(text: str) -> int:
    """The form's "at most": the action's max_rows, whose range the client and the SQL check."""
    if not text:
        return BULK_ROWS
    if not text.isdigit():
        raise BadRequest("at most must be a whole number of jobs")
    return int(text)


def _search_query(form: dict[str, str]) -> str:
    """The search's own fields as a query string, ending in "&" when there is
    one (a bulk action returns to it)."""
    query = urllib.parse.urlencode({name: form[name] for name in SEARCH_FIELDS if form.get(name)})
    return query + "&" if query else ""


# Keyset cursors travel as base64url JSON lists of the last row's sort key.

def _encode_cursor(key: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def _cursor(text: str | None) -> list | None:
    if not text:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        raise BadRequest("the page cursor is malformed") from None
    if not isinstance(value, list) or not value or not all(isinstance(v, (str, int)) for v in value):
        raise BadRequest("the page cursor is malformed")
    return value


def _moment(text: Any) -> datetime:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        raise BadRequest("the page cursor is malformed") from None


def start_dashboard(url: str | None, host: str, port: int, *, allow_actions: bool = False,
                    read_url: str | None = None) -> tuple[Any, ...]:
    """A dashboard served from a thread on (host, port) (0: any free port),
    answering only to that address: (dashboard, server, thread)."""
    dashboard = Dashboard(url, allow_actions=allow_actions, allowed_hosts=(), read_url=read_url)
    server, thread = serve(dashboard, host, port, "fenceq-dashboard")
    bound = server.server_port
    if host in ("0.0.0.0", "::"):
        dashboard.allowed_hosts = None  # any address of the machine: no Host to hold requests to
    else:
        names = {host} | ({"localhost"} if host in ("127.0.0.1", "::1") else set())
        dashboard.allowed_hosts = frozenset(f"[{n}]:{bound}" if ":" in n else f"{n}:{bound}" for n in names)
    return dashboard, server, thread


def serve_dashboard(url: str | None, host: str, port: int, *, allow_actions: bool = False,
                    started: Callable[[str], None] = print, read_url: str | None = None) -> None:
    """Serve until interrupted (KeyboardInterrupt, or SystemExit from a
    SIGTERM handler); ``started`` is told the address."""
    dashboard, server, thread = start_dashboard(url, host, port, allow_actions=allow_actions, read_url=read_url)
    try:
        started(f"http://{host}:{server.server_port}/")
        thread.join()
    finally:
        stop(server, thread)
        dashboard.close()
