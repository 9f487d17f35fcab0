"""The ``fenceq`` command line.

Every command takes ``--url`` (default $FENCEQ_DATABASE_URL, else the embedded
SQLite file ./fenceq.db). Commands that act on something name it as a
subcommand and its argument (``fenceq queue pause NAME``, ``fenceq dlq replay
ID``). ``stats``, ``job`` and ``dlq list`` print JSON with ``--json``;
``stats --since 1h`` prints ``activity()``'s buckets instead of ``queue_stats``. A user
mistake or a refused operation prints one line on stderr and exits non-zero;
never a traceback. The guarantees behind each command are in
docs/guarantees.md.

Exit codes: 0 success; 1 the command ran and found a failure (a verify check,
a dead letter that could not be replayed, a demo step that did not happen);
2 a usage error or an operation fenceq refused (bad input, unknown queue,
conflict); 3 the database could not be reached or the outcome is unknown;
130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, Mapping

from .client import connect, resolve_url
from .errors import FenceqError, PersistenceFailed
from .migrate import install_script, migrate
from .ops import REQUEUE_PRIORITIES

EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 1, 2, 3, 130


class UserError(Exception):
    """A mistake in the command line or its inputs: one line, exit 2."""


def _json_value(value: Any) -> Any:
    """Machine-readable output: timestamps in ISO 8601 (UTC), intervals in
    seconds, records as objects with their fields in declaration order."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if dataclasses.is_dataclass(value):
        return {f.name: _json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    return value


def _print_json(value: Any) -> None:
    print(json.dumps(_json_value(value), indent=2, ensure_ascii=False))


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[("" if row[c] is None else str(row[c])) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def cmd_migrate(args: argparse.Namespace) -> int:
    url = resolve_url(args.url)
    checks = migrate(url, progress=lambda line: print(f"fenceq: {line}", file=sys.stderr, flush=True))
    print(f"fenceq: schema is current and verified ({len(checks)} checks passed)")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from .migrate import rollback

    undone = rollback(resolve_url(args.url), allow_data_loss=args.allow_data_loss, to_version=args.to)
    print("fenceq: rolled back " + (", ".join(undone) if undone else "nothing (no migration applied)"))
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    sys.stdout.write(install_script(args.backend))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        checks = client.verify_schema()
    print(_table([{"check": c.check_name, "ok": "ok" if c.ok else "FAILED", "detail": c.detail}
                  for c in checks], ["check", "ok", "detail"]))
    return 0 if all(c.ok for c in checks) else 1


def cmd_stats(args: argparse.Namespace) -> int:
    if args.since is None:
        if args.bucket is not None:
            raise UserError("--bucket needs --since")
        with connect(args.url) as client:
            stats = [s for s in client.stats() if args.queue in (None, s.queue)]
        if args.json:
            _print_json(stats)
            return 0
        columns = ["queue", "pending", "due", "claimed", "cancel_requested", "oldest_due_age", "paused", "notify"]
        print(_table([{c: getattr(s, c) for c in columns} for s in stats], columns))
        return 0
    with connect(args.url) as client:
        buckets = client.activity(queue=args.queue, since=args.since, bucket=args.bucket)
    if args.json:
        _print_json(buckets)
        return 0
    from .dashboard.charts import duration_text

    rows = []
    for bucket in buckets:
        row = {f.name: getattr(bucket, f.name) for f in dataclasses.fields(bucket)}
        row["bucket_start"] = bucket.bucket_start.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
        rows.append({name: duration_text(value.total_seconds()) if isinstance(value, timedelta) else value
                     for name, value in row.items()})
    columns = [f.name for f in dataclasses.fields(buckets[0])] if buckets else ["bucket_start"]
    print(_table(rows, columns))
    return 0


# Helpers ---------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> timedelta:
    """'30', '30s', '500ms', '5m', '2h', '7d' -> timedelta (argparse type)."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 500ms, 5m, 2h, 7d)")
    value = float(match.group(1)) * _UNITS[match.group(2)]
    if value <= 0:
        raise argparse.ArgumentTypeError("a duration must be positive")
    return timedelta(seconds=value)


def duration_text(value: timedelta) -> str:
    """A duration in the largest unit that `duration` reads back exactly."""
    milliseconds = round(value / timedelta(milliseconds=1))
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"


def moment(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError("a time needs an offset (e.g. 2030-01-01T09:00:00+00:00 or ...Z)")
    return value


def json_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"payload is not valid JSON ({error.msg} at column {error.colno})") from None


def process_count(text: str) -> int:
    """A number of processes, or 'auto' for the machine's cores."""
    if text.strip().lower() == "auto":
        return os.cpu_count() or 1
    return positive_int(text)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class Progress:
    """A one-line progress display on stderr (only when it is a terminal)."""

    def __init__(self, label: str, total: int | None, *, stream: Any = None, force: bool = False):
        self.label, self.total, self.done = label, total, 0
        self.stream = stream or sys.stderr
        self.enabled = force or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self.started = time.monotonic()
        self._last = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done == self.total):
            self._last = now
            self._draw()

    def _draw(self, final: bool = False) -> None:
        rate = self.done / max(time.monotonic() - self.started, 1e-6)
        if self.total:
            width = 30
            filled = int(width * self.done / self.total)
            bar = "#" * filled + "." * (width - filled)
            text = f"{self.label} [{bar}] {self.done}/{self.total} ({rate:,.0f}/s)"
        else:
            text = f"{self.label} {self.done} ({rate:,.0f}/s)"
        self.stream.write("\r" + text + ("\n" if final else ""))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(final=True)


def _jobs_from(path: str) -> Iterator[dict[str, Any]]:
    """JSON lines: each a request object ({"task": ..., "payload": ..., ...})."""
    handle = sys.stdin if path == "-" else open(path, encoding="utf-8")
    try:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError:
                raise UserError(f"{path}:{number}: not valid JSON") from None
            if not isinstance(request, dict):
                raise UserError(f"{path}:{number}: each line must be a JSON object")
            yield request
    finally:
        if handle is not sys.stdin:
            handle.close()


def _request_times(request: dict[str, Any], where: str) -> dict[str, Any]:
    for key in ("run_at", "expires_at"):
        if isinstance(request.get(key), str):
            try:
                request[key] = moment(request[key])
            except argparse.ArgumentTypeError as error:
                raise UserError(f"{where}: {key}: {error}") from None
    return request


# Producers -------------------------------------------------------------------------

# What one request sets on the command line (as spelled there); with --file
# each line sets it instead.
_REQUEST_OPTIONS = {"task": "TASK", "payload": "PAYLOAD", **{
    name: "--" + name.replace("_", "-") for name in ("submission_id", "job_id", "priority", "run_at", "delay",
                                                     "expires_in", "max_attempts", "active_key", "force")}}


def cmd_submit(args: argparse.Namespace) -> int:
    if args.file:
        given = [spelled for name, spelled in _REQUEST_OPTIONS.items() if getattr(args, name) not in (None, False)]
        if given:
            raise UserError("with --file each line is a whole request; drop " + ", ".join(given))
    elif args.task is None:
        raise UserError("submit needs a TASK (or --file)")
    with connect(args.url) as client:
        if args.file:
            return _submit_file(client, args)
        run_at = args.run_at
        if args.delay is not None:
            run_at = datetime.now(timezone.utc) + args.delay
        expires_at = datetime.now(timezone.utc) + args.expires_in if args.expires_in else None
        job_id = client.submit(args.queue, args.task, args.payload, submission_id=args.submission_id,
                               job_id=args.job_id, priority=args.priority, run_at=run_at,
                               expires_at=expires_at, max_attempts=args.max_attempts,
                               active_key=args.active_key, force=args.force)
    print(job_id)
    return 0


def _submit_file(client: Any, args: argparse.Namespace) -> int:
    chunk: list[dict[str, Any]] = []
    total = None
    if args.file != "-":
        with open(args.file, encoding="utf-8") as handle:
            total = sum(1 for line in handle if line.strip())
    progress = Progress(f"submitting to {args.queue}", total)
    out = sys.stdout

    def flush() -> None:
        ids = client.submit_batch(args.queue, chunk)
        for job_id in ids:
            out.write(job_id + "\n")
        progress.advance(len(chunk))
        chunk.clear()

    for index, request in enumerate(_jobs_from(args.file)):
        chunk.append(_request_times(request, f"{args.file}:{index + 1}"))
        if len(chunk) >= args.batch_size:
            flush()
    if chunk:
        flush()
    progress.close()
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        outcome = client.cancel(args.job_id, force=args.force)
    if outcome is None:
        print("fenceq: no such job", file=sys.stderr)
        return EXIT_FAILED
    print(outcome)
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        job = client.get_job(args.job_id)
        attempts = client.attempts(args.job_id) if job is not None else []
    if job is None:
        print("fenceq: no such job", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json({**_json_value(job), "claims": _json_value(attempts)})
        return 0
    fields = ["job_id", "queue", "task", "status", "attempts", "max_attempts", "generation", "owner_id",
              "lease_expires_at", "cancel_requested", "pid", "run_at", "created_at", "finished_at",
              "submission_id", "active_key", "dlq_id"]
    width = max(len(f) for f in fields + ["payload", "result", "last_error"])
    for name in fields:
        value = getattr(job, name)
        if value is not None:
            print(f"{name:<{width}}  {value}")
    for name in ("payload", "result"):
        value = getattr(job, name)
        if value is not None:
            print(f"{name:<{width}}  {json.dumps(value, ensure_ascii=False)}")
    if job.last_error:
        print(f"{'last_error':<{width}}  {job.last_error.splitlines()[0]}")
    if attempts:
        print()
        print(_table([{"generation": a.generation, "owner_id": a.owner_id, "claimed_at": a.claimed_at}
                      for a in attempts], ["generation", "owner_id", "claimed_at"]))
    return 0


# Queues ----------------------------------------------------------------------------

# A setting of `fenceq queue create` and `alter`: its flag, how argparse reads
# it, what it is, and the default a new queue gets.
QUEUE_SETTINGS: tuple[tuple[str, dict[str, Any], str, str], ...] = (
    ("--lease", {"type": duration}, "claim lease", "30s"),
    ("--max-attempts", {"type": positive_int}, "attempts before failing", "5"),
    ("--backoff-base", {"type": duration}, "first retry delay", "1s"),
    ("--backoff-factor", {"type": float}, "retry delay growth", "2"),
    ("--backoff-max", {"type": duration}, "longest retry delay", "1h"),
    ("--dead-letter", {"action": argparse.BooleanOptionalAction},
     "keep a dead letter of each failed job (--no-dead-letter: do not)", "on"),
    ("--requeue-priority", {"choices": REQUEUE_PRIORITIES},
     "where reap requeues a job whose lease lapsed: keep (due after the back-off), first (due at once, "
     "ahead of the pending jobs of its priority), last (behind them)", "keep"),
)


def _setting_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_queue_settings(parser: argparse.ArgumentParser, *, shown_defaults: bool) -> None:
    for flag, reading, text, default in QUEUE_SETTINGS:
        parser.add_argument(flag, **reading, help=f"{text} (default {default})" if shown_defaults else text)


def queue_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings named on the command line (None: not named)."""
    return {_setting_name(flag): getattr(args, _setting_name(flag)) for flag, *_ in QUEUE_SETTINGS}


def cmd_queue_create(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        created = client.create_queue(args.name, **queue_settings(args))
    print(f"queue {args.name}: " + ("created" if created else "already exists with these settings"))
    return 0


def cmd_queue_alter(args: argparse.Namespace) -> int:
    settings = queue_settings(args)
    if all(value is None for value in settings.values()):
        raise UserError("name a setting to change (see fenceq queue alter --help)")
    with connect(args.url) as client:
        client.alter_queue(args.name, **settings)
    print(f"queue {args.name}: altered")
    return 0


def cmd_queue_history(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        changed = client.set_queue_history(args.name, args.history, retention=args.retention)
    kept = (f"events purged after {duration_text(args.retention)}" if args.retention
            else "events kept as long as their job")
    state = ("on, " if args.history else "off, ") + kept
    print(f"queue {args.name}: history " + (state if changed else f"was already {state}"))
    return 0


def cmd_queue_pause(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        changed = client.pause_queue(args.name)
    print(f"queue {args.name}: " + ("paused" if changed else "was already paused"))
    return 0


def cmd_queue_resume(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        changed = client.resume_queue(args.name)
    print(f"queue {args.name}: " + ("resumed" if changed else "was not paused"))
    return 0


# Dead letters ----------------------------------------------------------------------

def cmd_dlq_list(args: argparse.Namespace) -> int:
    with connect(args.url) as client:
        letters = client.dead_letters(queue=args.queue, include_handled=args.include_handled,
                                      limit=args.limit)
    if args.json:
        _print_json(letters)
        return 0
    rows = [{"dlq_id": d.dlq_id, "job_id": d.job_id, "queue": d.queue, "task": d.task,
             "attempts": d.attempts, "failed_at": _short_time(d.failed_at),
             "state": "replayed" if d.replayed_at else "discarded" if d.discarded_at else "open",
             "error": _one_line(d.error, 60)} for d in letters]
    if not rows:
        print("no dead letters" + ("" if args.include_handled else
                                   " (open; --include-handled shows handled ones too)"))
    else:
        print(_table(rows, ["dlq_id", "job_id", "queue", "task", "attempts", "failed_at", "state", "error"]))
    return 0


def cmd_dlq_handle(args: argparse.Namespace) -> int:
    """``dlq replay`` and ``dlq discard``: the named letters, or --all open ones."""
    replay = args.action == "replay"
    ids = list(args.ids)
    if args.all and ids:
        raise UserError("give dead-letter ids or --all, not both")
    if args.queue is not None and not args.all:
        raise UserError("--queue goes with --all")
    if not args.all and not ids:
        raise UserError(f"dlq {args.action} needs dead-letter ids (or --all)")
    with connect(args.url) as client:
        if args.all:
            ids = _all_open_letters(client, args.queue)
        progress = Progress(f"{args.action}ing dead letters", len(ids))
        missed = 0
        for dlq_id in ids:
            job_id = client.replay_dead_letter(dlq_id) if replay else client.discard_dead_letter(dlq_id)
            if not job_id:
                missed += 1
                print(f"{dlq_id}: unknown or already handled", file=sys.stderr)
            elif not progress.enabled or len(ids) == 1:
                print(f"{dlq_id}: replayed job {job_id}" if replay else f"{dlq_id}: discarded")
            progress.advance()
        progress.close()
    if len(ids) != 1:
        print(f"{len(ids) - missed} of {len(ids)} dead letters " + ("replayed" if replay else "discarded"))
    return EXIT_FAILED if missed else 0


def _all_open_letters(client: Any, queue: str | None) -> list[str]:
    ids: list[str] = []
    while True:
        batch = client.dead_letters(queue=queue, limit=1000)
        fresh = [d.dlq_id for d in batch if d.dlq_id not in set(ids)]
        ids.extend(fresh)
        if len(batch) < 1000 or not fresh:
            return ids


def _short_time(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _one_line(text: str | None, width: int) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0]
    return line if len(line) <= width else line[: width - 1] + "…"


# Worker and demo -------------------------------------------------------------------

def port(text: str) -> int:
    """A TCP port, 0 for any free one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("a port is from 0 to 65535")
    return value


def boolean(text: str) -> bool:
    """1/true/yes/on or 0/false/no/off (an environment variable's switch)."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a switch: {text!r} (use 1 or 0)")


def queue_list(text: str) -> list[str]:
    """Queue names separated by commas (an environment variable's list)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no queue")
    return names


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}")
        return text
    return parse


@dataclasses.dataclass(frozen=True)
class WorkerOption:
    """A `fenceq worker` option. Its default can be set by the environment
    variable FENCEQ_WORKER_<NAME>, read with the same parser as the flag;
    a flag on the command line wins over the variable."""

    flags: tuple[str, ...]
    parse: Callable[[str], Any]
    default: Any
    shown: str
    help: str

    @property
    def dest(self) -> str:
        return self.flags[-1].lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        return "FENCEQ_WORKER_" + self.dest.upper()


WORKER_OPTIONS = (
    WorkerOption(("-q", "--queue"), queue_list, None, "the app's queues",
                 "queue to serve (repeatable; the variable takes names separated by commas)"),
    WorkerOption(("-c", "--concurrency"), positive_int, 1, "1", "jobs at once (in each process)"),
    WorkerOption(("-p", "--processes"), process_count, 1, "1",
                 "worker processes under one supervisor, each with its own connections and claim buffer "
                 "('auto': one per core)"),
    WorkerOption(("--lease",), duration, None, "the queue's", "lease per claim"),
    WorkerOption(("--budget",), duration, None, "none", "hard deadline per claim"),
    WorkerOption(("--drain-timeout",), duration, timedelta(seconds=30), "30s",
                 "on SIGINT/SIGTERM, wait this long before releasing unfinished jobs"),
    WorkerOption(("--poll-interval",), duration, None, "0.5s SQLite, 5s PostgreSQL",
                 "longest idle wait between claims"),
    WorkerOption(("--reap-interval",), duration, timedelta(seconds=2), "2s",
                 "how often to reap expired leases (one worker of the fleet at a time)"),
    WorkerOption(("--reap",), boolean, True, "on", "reap from this worker (--no-reap: leave it to others)"),
    WorkerOption(("--purge-after",), duration, None, "off", "retention: purge finished jobs older than this"),
    WorkerOption(("--purge-submissions-after",), duration, None, "off",
                 "with --purge-after: also forget submission ids older than this"),
    WorkerOption(("--complete-window",), duration, None, "0", "batch completions within this window"),
    WorkerOption(("--owner-id",), str, None, "host:pid:random", "worker identity"),
    WorkerOption(("--record-pid",), boolean, False, "off", "record this process id on each claim"),
    WorkerOption(("--listen-url",), str, None, "the --url",
                 "PostgreSQL URL to LISTEN on: a direct one where --url goes through PgBouncer"),
    WorkerOption(("--read-url",), str, None, "the --url",
                 "PostgreSQL URL to read the metrics' queue_stats from: a standby"),
    WorkerOption(("--metrics-port",), port, None, "off",
                 "serve /metrics, /healthz and /readyz on this port (0: any free one)"),
    WorkerOption(("--metrics-host",), str, "127.0.0.1", "127.0.0.1", "the address those endpoints bind"),
    WorkerOption(("--health-window",), duration, timedelta(seconds=30), "30s",
                 "/healthz fails once the database has not answered for this long"),
    WorkerOption(("--stats-interval",), duration, timedelta(seconds=5), "5s",
                 "read queue_stats for the metrics at most this often"),
    WorkerOption(("--log-format",), one_of("text", "json"), "text", "text", "text or json"),
    WorkerOption(("--log-level",), one_of("debug", "info", "warning", "error"), "info", "info",
                 "debug, info, warning or error"),
)


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    for option in WORKER_OPTIONS:
        text = f"{option.help} (default {option.shown}; ${option.env})"
        if option.parse is boolean:
            parser.add_argument(*option.flags, dest=option.dest, action=argparse.BooleanOptionalAction,
                                default=None, help=text)
        elif option.dest == "queue":
            parser.add_argument(*option.flags, dest=option.dest, action="append", help=text)
        else:
            parser.add_argument(*option.flags, dest=option.dest, type=option.parse, help=text)


def worker_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    """Each worker option from its flag, else its environment variable, else its default."""
    settings = {}
    for option in WORKER_OPTIONS:
        value = getattr(args, option.dest)
        text = environ.get(option.env, "").strip()
        if value is None and text:
            try:
                value = option.parse(text)
            except argparse.ArgumentTypeError as error:
                raise UserError(f"${option.env}: {error}") from None
        settings[option.dest] = option.default if value is None else value
    return settings


def cmd_worker(args: argparse.Namespace) -> int:
    from .worker import load_app
    from .worker.supervisor import Supervisor

    settings = worker_settings(args, os.environ)
    try:
        load_app(args.app)  # a bad app fails here, once, before any process starts
    except (ImportError, AttributeError, TypeError) as error:
        raise UserError(f"cannot load the app {args.app!r}: {type(error).__name__}: {error}") from None
    processes = settings["processes"]
    if processes == 1:
        run_worker(app=args.app, url=args.url, settings=settings)
        return 0
    if settings["metrics_port"]:
        raise UserError("--metrics-port: with --processes above 1 only 0 (any free port, one per process) "
                        "is possible")
    return Supervisor(processes, run_worker, {"app": args.app, "url": args.url, "settings": settings}).run()


def run_worker(*, app: str, url: str | None, settings: dict[str, Any], index: int | None = None) -> None:
    """One worker process until it is stopped (``index``: its number under a supervisor)."""
    from ._worker_log import configure
    from .worker import Worker, load_app

    configure(settings["log_format"], settings["log_level"])
    window = settings["complete_window"]
    owner_id = settings["owner_id"]
    if owner_id and index is not None:
        owner_id = f"{owner_id}:{index}"
    application = load_app(app)
    # --url, else the App's own url= (a Django backend's App carries its backend's URL).
    worker = Worker(
        application, url=url or getattr(application, "url", None), queues=settings["queue"], concurrency=settings["concurrency"],
        owner_id=owner_id, lease=settings["lease"], budget=settings["budget"],
        drain_timeout=settings["drain_timeout"], poll_interval=settings["poll_interval"],
        reap_interval=settings["reap_interval"] if settings["reap"] else None,
        purge_after=settings["purge_after"], purge_submissions_after=settings["purge_submissions_after"],
        complete_window=window.total_seconds() if window else 0.0, record_pid=settings["record_pid"],
        listen_url=settings["listen_url"], read_url=settings["read_url"],
        metrics_port=settings["metrics_port"], metrics_host=settings["metrics_host"],
        health_window=settings["health_window"], stats_interval=settings["stats_interval"])
    worker.run(install_signal_handlers=True)


def cmd_dashboard(args: argparse.Namespace) -> int:
    import signal

    from .dashboard import serve_dashboard

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    mode = "actions on: connect as a role granted fenceq_admin" if args.allow_actions else "read-only"
    serve_dashboard(args.url, args.host, args.port, allow_actions=args.allow_actions, read_url=args.read_url,
                    started=lambda address: print(f"fenceq dashboard on {address} ({mode}); Ctrl-C stops it",
                                                  flush=True))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(url=args.url, keep=args.keep, quiet=args.quiet)


def _could_not_connect(error: BaseException) -> bool:
    """Whether the driver error behind ``error`` says that no connection was
    ever opened (the server refused or rejected it, or the SQLite file could
    not be opened), so that nothing can have happened. Judged on the
    exception's attributes, never on driver text: psycopg's error from a
    connection attempt carries a ``pgconn`` that never had a server process;
    sqlite3 names SQLITE_CANTOPEN."""
    cause = error.__cause__
    while cause is not None:
        pgconn = getattr(cause, "pgconn", None)
        if pgconn is not None and getattr(pgconn, "backend_pid", None) == 0:
            return True
        if getattr(cause, "sqlite_errorname", None) == "SQLITE_CANTOPEN":
            return True
        cause = cause.__cause__
    return False


def _hint(error: BaseException) -> str:
    """A hint for a database that has no fenceq schema (without driver text)."""
    cause = error.__cause__
    state = getattr(cause, "sqlstate", None)
    if state in ("3F000", "42883", "42P01") or "no such table" in str(cause or ""):
        return " (is fenceq installed in this database? run `fenceq migrate`)"
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fenceq", description="A fenced, owned work queue in the database.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int] | None, help: str,
                parent: Any = commands, **extra: Any) -> argparse.ArgumentParser:
        sub = parent.add_parser(name, help=help, description=help, **extra)
        if handler is not None:
            sub.set_defaults(handler=handler)
            sub.add_argument("--url", help="database URL (default: $FENCEQ_DATABASE_URL, else sqlite:///fenceq.db)")
        return sub

    def with_json(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--json", action="store_true",
                         help="print JSON: timestamps in ISO 8601 (UTC), intervals in seconds")
        return sub

    command("migrate", cmd_migrate, "apply migrations, then verify the schema")
    rollback = command("rollback", cmd_rollback,
                       "undo migrations: down to --to VERSION, or every one (drops fenceq and all its data)")
    rollback.add_argument("--to", type=int, default=0, metavar="VERSION",
                          help="the schema version to stop at (default 0: undo every migration)")
    rollback.add_argument("--allow-data-loss", action="store_true",
                          help="proceed even though retained submission identities or live claims are lost")
    sql = commands.add_parser("sql", help="print the complete install script",
                              description="print the complete install script")
    sql.set_defaults(handler=cmd_sql)
    sql.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    command("verify", cmd_verify, "run verify_schema; exit 1 when a check fails")
    stats = with_json(command("stats", cmd_stats, "per-queue counts; with --since, activity over time per bucket"))
    stats.add_argument("--since", type=duration, help="activity over this last stretch (e.g. 1h, 2d, 7d) from "
                       "activity(): counts, depth, wait and run p50/p95 per bucket")
    stats.add_argument("--bucket", type=duration, help="with --since: bucket size, a whole number of minutes "
                       "(default: 1 minute up to 2 hours, 15 minutes up to 2 days, 1 hour beyond)")
    stats.add_argument("--queue", help="only this queue (with --since: unknown_queue when there is none)")

    queue = command("queue", None, "declare, alter, pause or resume a queue, or turn its history on or off")
    queue_commands = queue.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = command("create", cmd_queue_create, "declare a queue with its defaults", queue_commands)
    create.add_argument("name", help="queue name")
    add_queue_settings(create, shown_defaults=True)
    alter = command("alter", cmd_queue_alter, "change the settings named; the others stay as they are",
                    queue_commands)
    alter.add_argument("name", help="queue name")
    add_queue_settings(alter, shown_defaults=False)
    history = command("history", cmd_queue_history, "record each job's transitions (get_job_events, "
                      "the dashboard's timeline), or stop; the events recorded are kept", queue_commands)
    history.add_argument("name", help="queue name")
    switch = history.add_mutually_exclusive_group(required=True)
    switch.add_argument("--on", dest="history", action="store_const", const=True, help="record events")
    switch.add_argument("--off", dest="history", action="store_const", const=False, help="record no more")
    history.add_argument("--retention", type=duration,
                         help="purge removes events older than this (e.g. 30d; default: they live as long as "
                              "their job)")
    for action, handler, text in (("pause", cmd_queue_pause, "stop claims from a queue (it keeps accepting work)"),
                                  ("resume", cmd_queue_resume, "allow claims from a paused queue again")):
        command(action, handler, text, queue_commands).add_argument("name", help="queue name")

    submit = command("submit", cmd_submit, "submit a job (or a file of JSON lines); prints job ids")
    submit.add_argument("queue")
    submit.add_argument("task", nargs="?")
    submit.add_argument("payload", nargs="?", type=json_text, help="JSON payload (default null)")
    submit.add_argument("--submission-id", help="caller's identity for this request: a replay returns "
                        "the original job id")
    submit.add_argument("--job-id")
    submit.add_argument("--priority", type=int)
    when = submit.add_mutually_exclusive_group()
    when.add_argument("--run-at", type=moment, help="ISO 8601 time with offset")
    when.add_argument("--delay", type=duration, help="run after this long (e.g. 30s)")
    submit.add_argument("--expires-in", type=duration, help="expire if not started within this long")
    submit.add_argument("--max-attempts", type=positive_int)
    submit.add_argument("--active-key")
    submit.add_argument("--force", action="store_true", help="replace the active job holding --active-key")
    submit.add_argument("--file", help="submit every JSON line of FILE ('-' for stdin) as one request "
                        "({\"task\": ..., \"payload\": ..., \"submission_id\": ...})")
    submit.add_argument("--batch-size", type=positive_int, default=1000, help=argparse.SUPPRESS)

    cancel = command("cancel", cmd_cancel, "cancel a job (a running one is asked to stop)")
    cancel.add_argument("job_id")
    cancel.add_argument("--force", action="store_true", help="cancel a running job at once (kills its fence)")

    with_json(command("job", cmd_job, "show a job and its claims")).add_argument("job_id")

    worker = command("worker", cmd_worker, "run a worker for an app's tasks",
                     epilog="Every option's default can be set in the environment variable named after "
                            "it (FENCEQ_WORKER_CONCURRENCY=8, FENCEQ_WORKER_REAP=0, ...); a flag wins "
                            "over its variable.")
    worker.add_argument("app", help="the App to run, as module:attribute (e.g. myproject.tasks:app)")
    add_worker_options(worker)

    dlq = command("dlq", None, "list, replay or discard dead letters")
    dlq_commands = dlq.add_subparsers(dest="action", required=True, metavar="ACTION")
    dlq_list = with_json(command("list", cmd_dlq_list, "list dead letters", dlq_commands))
    dlq_list.add_argument("--queue", help="only this queue's")
    dlq_list.add_argument("--include-handled", action="store_true",
                          help="list replayed and discarded letters too")
    dlq_list.add_argument("--limit", type=positive_int, default=100)
    for action, text in (("replay", "put dead-lettered jobs back to pending with a fresh attempt budget"),
                         ("discard", "mark dead letters handled without replaying them")):
        sub = command(action, cmd_dlq_handle, text, dlq_commands)
        sub.add_argument("ids", nargs="*", metavar="DLQ_ID")
        sub.add_argument("--all", action="store_true", help="every open dead letter, instead of ids")
        sub.add_argument("--queue", help="with --all: only this queue's")

    dashboard = command("dashboard", cmd_dashboard, "a web UI: queues, jobs and their fences, dead letters")
    dashboard.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    dashboard.add_argument("--port", type=port, default=8080, help="port (default 8080; 0: any free one)")
    dashboard.add_argument("--allow-actions", action="store_true",
                           help="offer replay, discard, cancel, pause and resume, and bulk retry, cancel and "
                           "replay from the search (needs fenceq_admin)")
    dashboard.add_argument("--read-url", help="read the pages from this server (a standby), shown with how far "
                           "behind it is; actions still write through --url")

    demo = command("demo", cmd_demo, "a guided tour: two workers, a crash, a takeover, fences at work")
    demo.add_argument("--keep", action="store_true", help="keep the workers' logs (in a temporary folder)")
    demo.add_argument("--quiet", action="store_true", help="print only the summary")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except UserError as error:
        print(f"fenceq: {error}", file=sys.stderr)
        return EXIT_USAGE
    except PersistenceFailed as error:
        message = "fenceq: could not connect to the database" if _could_not_connect(error) else str(error)
        print(f"{message} [{error.reason}]{_hint(error)}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except FenceqError as error:
        print(f"{error} [{error.reason}]{_hint(error)}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as error:
        if error.name == "fenceq.backends.sqlite":
            print("fenceq: the embedded SQLite backend is not available in this build; "
                  "pass --url postgresql://… or set FENCEQ_DATABASE_URL", file=sys.stderr)
            return EXIT_USAGE
        raise
    except OSError as error:
        print(f"fenceq: {error.strerror or error}" + (f": {error.filename}" if error.filename else ""),
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
