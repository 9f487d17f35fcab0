"""Least privilege with real login roles (docs/guarantees.md §10)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Iterator

import psycopg
import pytest

import fenceq
import fenceq.migrate
from helpers import schema_version


@pytest.fixture
def login(pg) -> Iterator:
    """Create login roles that are members of a fenceq group role."""
    created = []

    def make(group: str) -> str:
        name = f"app_{group.split('_')[1]}_{uuid.uuid4().hex[:8]}"
        pg.sql(f"CREATE ROLE {name} LOGIN IN ROLE {group}")
        created.append(name)
        return pg.url.replace("postgres@", f"{name}@", 1)

    yield make
    for name in created:
        pg.sql(f"DROP OWNED BY {name} CASCADE")
        pg.sql(f"DROP ROLE {name}")


@pytest.fixture
def seeded(pg):
    with pg.connect() as admin:
        admin.create_queue("q")
        admin.submit("q", "t")
    return pg


def _sqlstate(url: str, statement: str) -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(statement)
        except psycopg.Error as error:
            return error.sqlstate
    return None


def test_group_roles_exist_without_login(pg):
    rows = pg.sql("SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname LIKE 'fenceq\\_%' ORDER BY 1")
    assert rows == [("fenceq_admin", False, False), ("fenceq_owner", False, False),
                    ("fenceq_producer", False, False), ("fenceq_worker", False, False)]


def test_producer_submits_but_cannot_claim_or_administer(seeded, login):
    url = login("fenceq_producer")
    with fenceq.connect(url) as producer:
        job_id = producer.submit("q", "t", {"n": 1}, submission_id="s")
        assert producer.get_job(job_id).status == "pending"
        assert producer.version() == schema_version("postgres")
        with pytest.raises(fenceq.ConfigError) as info:
            producer.claim_next(["q"], "w", fenceq.new_claim_token())
        assert (info.value.sqlstate, info.value.reason) == ("42501", "permission_denied")
        for forbidden in (lambda: producer.cancel(job_id), lambda: producer.create_queue("other"),
                          lambda: producer.purge(__import__("datetime").timedelta(0)),
                          lambda: producer.stats(), lambda: producer.verify_schema()):
            with pytest.raises(fenceq.ConfigError) as info:
                forbidden()
            assert info.value.sqlstate == "42501"


def test_worker_works_but_cannot_read_private_tables_or_tokens(seeded, login):
    url = login("fenceq_worker")
    with fenceq.connect(url) as worker:
        claim = worker.claim_next(["q"], "w", fenceq.new_claim_token())
        assert worker.heartbeat(claim.fence) and worker.complete(claim.fence)
        assert worker.reap().requeued == 0
        assert [s.queue for s in worker.stats()] == ["q"]
        assert worker.attempts(claim.job_id)[0].owner_id == "w"
        with pytest.raises(fenceq.ConfigError):
            worker.cancel(claim.job_id)
    for table in ("_jobs", "_claims", "_submissions", "_queues", "_checkpoints", "_dead_letters",
                  "_dispatches", "_events"):
        assert _sqlstate(url, f"SELECT * FROM fenceq.{table}") == "42501", table
    assert _sqlstate(url, "SELECT fenceq._canonical_json('{}')") == "42501"
    with psycopg.connect(url) as conn:
        views = conn.execute("SELECT table_name, column_name FROM information_schema.columns"
                             " WHERE table_schema = 'fenceq'").fetchall()
    assert views and not any(column == "claim_token" for _, column in views)


def test_worker_dispatches_adopts_and_reads_history_but_cannot_set_it(seeded, login):
    """Version 6 (docs/design-v6.md "Roles"): a worker may call the five
    dispatch functions and dispatch_repair_candidates, and read dispatches
    and job_events (get_job_events too); set_queue_history is an admin's."""
    with seeded.connect() as owner:
        assert owner.set_queue_history("q", True) is True
    url = login("fenceq_worker")
    with fenceq.connect(url) as worker:
        c = worker.claim_next(["q"], "w", fenceq.new_claim_token())
        assert worker.reserve_dispatch(c.fence, "ext", "r1") is True
        assert worker.finalize_dispatch(c.fence, "r1", "x1") is True
        assert worker.replace_dispatch_ref(c.fence, "x1", "x2") is True
        assert worker.release_dispatch(c.fence, "r1") is False          # running: refused, not forbidden
        assert [(d.job_id, d.state, d.execution_ref) for d in worker.dispatches()] == [(c.job_id, "running", "x2")]
        assert worker.dispatch_repair_candidates("ext") == []
        assert worker.adopt_dispatch(c.job_id, "ext", "x2", "reconciler", fenceq.new_claim_token()) is None
        assert [e.event for e in worker.get_job_events(c.job_id)] == [   # submitted before history was on
            "claimed", "dispatch_reserved", "dispatch_finalized", "dispatch_replaced"]
        assert worker.complete(c.fence) is True
        with pytest.raises(fenceq.ConfigError) as info:
            worker.set_queue_history("q", False)
        assert info.value.sqlstate == "42501"
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM fenceq.job_events").fetchone()[0] == 5
        assert conn.execute("SELECT count(*) FROM fenceq.dispatches").fetchone()[0] == 0
    assert _sqlstate(url, "SELECT fenceq.set_queue_history('q', false)") == "42501"


def test_producer_may_neither_dispatch_nor_read_dispatches_or_history(seeded, login):
    url = login("fenceq_producer")
    fence = fenceq.Fence("some-job", "w", 1, "some-token")
    with fenceq.connect(url) as producer:
        for name, forbidden in {
            "reserve_dispatch": lambda: producer.reserve_dispatch(fence, "ext", "r1"),
            "finalize_dispatch": lambda: producer.finalize_dispatch(fence, "r1", "x1"),
            "release_dispatch": lambda: producer.release_dispatch(fence, "r1"),
            "replace_dispatch_ref": lambda: producer.replace_dispatch_ref(fence, "x1", "x2"),
            "adopt_dispatch": lambda: producer.adopt_dispatch("some-job", "ext", "r1", "w", "some-token"),
            "dispatch_repair_candidates": lambda: producer.dispatch_repair_candidates("ext"),
            "dispatches": lambda: producer.dispatches(),
            "get_job_events": lambda: producer.get_job_events("some-job"),
            "set_queue_history": lambda: producer.set_queue_history("q", True),
        }.items():
            with pytest.raises(fenceq.ConfigError) as info:
                forbidden()
            assert info.value.sqlstate == "42501", name
    for view in ("dispatches", "job_events"):
        assert _sqlstate(url, f"SELECT * FROM fenceq.{view}") == "42501", view
    for call in ("fenceq.reserve_dispatch('j', 'w', 1, 't', 'ext', 'r1')",
                 "fenceq.finalize_dispatch('j', 'w', 1, 't', 'r1', 'x1')",
                 "fenceq.release_dispatch('j', 'w', 1, 't', 'r1')",
                 "fenceq.replace_dispatch_ref('j', 'w', 1, 't', 'x1', 'x2')",
                 "fenceq.adopt_dispatch('j', 'ext', 'r1', 'w', 't')",
                 "fenceq.dispatch_repair_candidates('ext')",
                 "fenceq.get_job_events('j')",
                 "fenceq.set_queue_history('q', true)"):
        assert _sqlstate(url, f"SELECT * FROM {call}") == "42501", call


def test_admin_has_everything(seeded, login):
    with fenceq.connect(login("fenceq_admin")) as admin:
        assert admin.create_queue("other") is True
        assert admin.pause_queue("other") is True
        assert all(c.ok for c in admin.verify_schema())
        job_id = admin.submit("q", "t2")
        assert admin.cancel(job_id) == "cancelled"
        assert admin.set_queue_history("q", True, retention=timedelta(hours=1)) is True
        assert admin.get_job_events(job_id) == []            # written before history was on
        assert admin.dispatches() == [] and admin.dispatch_repair_candidates("ext") == []


def test_public_has_no_rights(seeded):
    name = f"app_nobody_{uuid.uuid4().hex[:8]}"
    seeded.sql(f"CREATE ROLE {name} LOGIN")
    try:
        url = seeded.url.replace("postgres@", f"{name}@", 1)
        assert _sqlstate(url, "SELECT fenceq.version()") == "42501"
        assert _sqlstate(url, "SELECT * FROM fenceq.jobs") == "42501"
    finally:
        seeded.sql(f"DROP ROLE {name}")
    # Nor a right that schema USAGE alone would open: no PUBLIC entry in any ACL.
    granted = seeded.sql("""
        SELECT p.oid::regprocedure::text FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace,
               aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
         WHERE n.nspname = 'fenceq' AND a.grantee = 0
        UNION ALL
        SELECT c.oid::regclass::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace,
               aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) AS a
         WHERE n.nspname = 'fenceq' AND c.relkind IN ('r', 'v', 'S') AND a.grantee = 0""")
    assert granted == []


def test_objects_planted_on_the_callers_search_path_change_nothing(seeded, login):
    url = login("fenceq_worker")
    name = url.split("//", 1)[1].split("@", 1)[0]
    seeded.sql(f"CREATE SCHEMA trap AUTHORIZATION {name}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION trap.gen_random_uuid() RETURNS uuid LANGUAGE sql"
                     " AS $$ SELECT '00000000-0000-0000-0000-000000000000'::uuid $$")
        conn.execute("CREATE FUNCTION trap.clock_timestamp() RETURNS timestamptz LANGUAGE sql"
                     " AS $$ SELECT '2000-01-01'::timestamptz $$")
        conn.execute("CREATE TABLE trap._jobs (job_id text)")
        conn.execute("SET search_path = trap, fenceq, public")
        job_id = conn.execute("SELECT fenceq.submit('q', 'planted')").fetchone()[0]
        assert job_id != "00000000-0000-0000-0000-000000000000"
        conn.execute("SELECT * FROM fenceq.claim_next('{q}', 'w', 'nonce-planted')")
        assert conn.execute("SELECT count(*) FROM trap._jobs").fetchone()[0] == 0
    seeded.sql("DROP SCHEMA trap CASCADE")


def test_an_installer_that_may_not_create_roles_still_installs(pg):
    name = f"app_installer_{uuid.uuid4().hex[:8]}"
    database = f"fenceq_by_{name}"
    pg.sql(f"CREATE ROLE {name} LOGIN NOCREATEROLE")
    pg.sql(f"CREATE DATABASE {database} OWNER {name}")
    try:
        url = pg.url.rsplit("/", 1)[0].replace("postgres@", f"{name}@", 1) + "/" + database
        notices = []
        with psycopg.connect(url, autocommit=True) as conn:
            conn.add_notice_handler(lambda diag: notices.append(diag.message_primary))
            conn.execute(fenceq.migrate.install_script("postgres"))
        assert any("objects stay owned by" in n for n in notices)
        with fenceq.connect(url) as client:
            assert all(c.ok for c in client.verify_schema())
            client.create_queue("q")
            assert client.submit("q", "t")
    finally:
        pg.sql(f"DROP DATABASE {database} WITH (FORCE)")
        pg.sql(f"DROP ROLE {name}")
