"""The ``fenceq`` command line.

Every command takes ``--url`` (default $FENCEQ_DATABASE_URL, else the embedded
SQLite file ./fenceq.db). A user mistake or a refused operation prints one
line on stderr and exits non-zero; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from .client import connect, resolve_url
from .errors import FenceqError
from .migrate import install_script, migrate


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[("" if row[c] is None else str(row[c])) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def cmd_migrate(args: argparse.Namespace) -> int:
    url = resolve_url(args.url)
    checks = migrate(url)
    print(f"fenceq: schema is current and verified ({len(checks)} checks passed)")
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
    with connect(args.url) as client:
        stats = client.stats()
    columns = ["queue", "pending", "due", "claimed", "cancel_requested", "oldest_due_age", "paused", "notify"]
    print(_table([{c: getattr(s, c) for c in columns} for s in stats], columns))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fenceq", description="A fenced, owned work queue in the database.")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        sub.set_defaults(handler=handler)
        return sub

    def with_url(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--url", help="database URL (default: $FENCEQ_DATABASE_URL, else sqlite:///fenceq.db)")
        return sub

    with_url(command("migrate", cmd_migrate, "apply migrations, then verify the schema"))
    sql = command("sql", cmd_sql, "print the complete install script")
    sql.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    with_url(command("verify", cmd_verify, "run verify_schema; exit 1 when a check fails"))
    with_url(command("stats", cmd_stats, "per-queue counts"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except FenceqError as error:
        print(f"{error} [{error.reason}]", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
