"""The backend boundary: answers decode by each operation's declared result
type on both engines, drivers are imported only under fenceq/backends/, and
the package's modules import without cycles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fenceq
from helpers import claim

PACKAGE = Path(fenceq.__file__).resolve().parent
DRIVERS = {"psycopg", "psycopg_pool", "sqlite3", "sqlite_utils", "yoyo"}


def test_stats_counts_cancel_requests_while_a_job_says_yes_or_no(client, queue):
    """A column called cancel_requested is a count in QueueStats and a flag in
    Job: each decodes as its record declares it."""
    job_ids = [client.submit(queue, "t") for _ in range(4)]
    for _ in job_ids:
        claim(client, queue)
    for job_id in job_ids[:3]:
        assert client.cancel(job_id) == "cancel_requested"
    [stats] = client.stats()
    assert stats.cancel_requested == 3 and type(stats.cancel_requested) is int
    assert stats.claimed == 4 and stats.paused is False
    assert client.get_job(job_ids[0]).cancel_requested is True
    assert client.get_job(job_ids[3]).cancel_requested is False


# Texts that array input reads specially unless quoted and escaped.
AWKWARD = ['q"uote', "back\\slash", "{brace,comma}", " spaced ", "NULL", "tab\tnew\nline", "\\\"", "é✓😀"]


def test_array_arguments_carry_any_text_and_json(client):
    """The batch calls' text[], bigint[] and jsonb[] arguments arrive as
    sent, whatever characters their elements hold."""
    queue = 'q "{a,b}" \\ NULL'
    client.create_queue(queue)
    job_ids = [client.submit(queue, "t", {"n": i}) for i in range(len(AWKWARD))]
    owner = 'owner "\\{}'
    claims = client.claim_batch([queue], owner, AWKWARD)
    assert sorted(c.claim_token for c in claims) == sorted(AWKWARD)
    assert all(c.owner_id == owner for c in claims)
    assert client.recover_claim(owner, AWKWARD[0]).claim_token == AWKWARD[0]
    fences = [c.fence for c in claims]
    assert client.heartbeat_batch(fences) == [True] * len(fences)
    results = [{"text": text, "list": [text, None]} for text in AWKWARD[:-2]] + ["NULL", None]
    assert client.complete_batch(fences, results) == [True] * len(fences)
    for claim_, result in zip(claims, results):
        assert client.get_job(claim_.job_id).result == result
    assert sorted(c.job_id for c in claims) == sorted(job_ids)


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_data" in path.relative_to(PACKAGE).parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module an import statement in the file names, lazy ones
    included: ``from package import x`` names ``package.x`` when that is a
    module, else ``package`` itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                named.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return named


def test_no_driver_is_imported_outside_the_backends_package():
    known = modules()
    offenders = {name: sorted(imported.split(".")[0] for imported in imports(name, path, known)
                              if imported.split(".")[0] in DRIVERS)
                 for name, path in known.items() if not name.startswith("fenceq.backends")}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_package_has_no_import_cycle():
    known = modules()
    graph = {name: {m for m in imports(name, path, known) if m in known and m != name}
             for name, path in known.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_every_module_imports_on_its_own():
    script = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m == 'fenceq' or m.startswith('fenceq.')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n")
    done = subprocess.run([sys.executable, "-c", script, *modules()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
