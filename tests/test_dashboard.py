"""The dashboard's pages and actions over a live database, on both engines
(Werkzeug's test client; tests/test_dashboard_browser.py drives a real
browser). Escaping, clipping, no claim token anywhere, read-only by
default, CSRF on every action, keyset pages, and the pages that appear
once the schema has their views."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from werkzeug.test import Client as WebClient

import fenceq
from fenceq.dashboard import Dashboard
from observed import dead_letter, taken_over_job

NO_BACKOFF = dict(lease=timedelta(seconds=60), backoff_base=timedelta(0), backoff_max=timedelta(0))


@pytest.fixture
def queue(client):
    client.create_queue("work", **NO_BACKOFF)
    return "work"


@pytest.fixture
def web(db):
    dashboard = Dashboard(db.url)
    yield WebClient(dashboard)
    dashboard.close()


@pytest.fixture
def admin_web(db):
    dashboard = Dashboard(db.url, allow_actions=True)
    yield WebClient(dashboard)
    dashboard.close()


def page(web: WebClient, path: str, status: int = 200) -> str:
    response = web.get(path)
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_data(as_text=True)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]{64})"', html).group(1)


def test_queues_show_their_counts_and_actions_only_when_allowed(client, queue, web, admin_web):
    client.submit(queue, "t")
    html = page(web, "/queues")
    assert "<td>" in html and ">work</a>" in html and 'class="n">1</td>' in html
    assert "read-only" in html and "/actions/" not in html
    assert 'action="/actions/pause"' in page(admin_web, "/queues")


def test_a_job_is_found_by_submission_id_with_both_generations(client, queue, web):
    job_id = taken_over_job(client, queue, "order-17")
    html = page(web, "/jobs?submission_id=order-17")
    assert f'href="/jobs/{job_id}"' in html
    html = page(web, f"/jobs/{job_id}")
    rows = re.findall(r'<tr class="(current|superseded)">\s*<td class="n">(\d)</td><td>([\w-]+)</td>', html)
    assert rows == [("superseded", "1", "worker-a"), ("current", "2", "worker-b")]
    assert "completed by generation 2" in html and "superseded by generation 2" in html
    assert page(web, f"/jobs?job_id={job_id}", 302) and "No job has this id" in page(web, "/jobs?job_id=nope")


def test_a_job_page_shows_its_timeline_where_the_queue_keeps_history(client, queue, web):
    quiet = client.submit(queue, "t")
    assert "keeps no history" in page(web, f"/jobs/{quiet}")
    client.create_queue("kept", **NO_BACKOFF)
    assert client.set_queue_history("kept", True)
    job_id = taken_over_job(client, "kept", "order-18")
    html = page(web, f"/jobs/{job_id}")
    timeline = html[html.index("<h2>Timeline</h2>"):html.index("<h2>Payload</h2>")]
    events = re.findall(r"<td>(submitted|claimed|reaped|retried|completed)</td>", timeline)
    assert events == [e.event for e in client.get_job_events(job_id)] and events[0] == "submitted"
    assert events[-1] == "completed" and "worker-b" in timeline


def test_payloads_are_escaped_and_clipped_and_claim_tokens_never_shown(client, queue, web):
    job_id = client.submit(queue, "t", {"html": "<script>alert(1)</script>", "tail": "x" * 10_000})
    token = fenceq.new_claim_token()
    client.claim_next([queue], "worker-a", token)
    html = page(web, f"/jobs/{job_id}")
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "more characters)" in html and "x" * 4500 not in html
    for path in (f"/jobs/{job_id}", "/jobs?status=claimed", "/queues", f"/jobs?status=claimed&queue={queue}"):
        assert token not in page(web, path)


def test_read_only_refuses_every_action(client, queue, web):
    dlq_id = dead_letter(client, queue)
    assert "Replay" not in page(web, "/dead-letters")
    for action, field, target in (("replay", "dlq_id", dlq_id), ("discard", "dlq_id", dlq_id),
                                  ("pause", "queue", queue), ("cancel", "job_id", "x")):
        response = web.post(f"/actions/{action}", data={field: target, "csrf": "0" * 64})
        assert response.status_code == 403 and "read-only" in response.get_data(as_text=True)
    assert [d.dlq_id for d in client.dead_letters()] == [dlq_id]
    assert not client.stats()[0].paused


def test_actions_need_the_csrf_token_of_this_browser(db, client, queue, admin_web):
    dlq_id = dead_letter(client, queue)
    token = csrf_of(page(admin_web, "/dead-letters"))
    assert admin_web.post("/actions/replay", data={"dlq_id": dlq_id}).status_code == 403
    stranger = WebClient(Dashboard(db.url, allow_actions=True))  # another browser, its own cookie
    page(stranger, "/dead-letters")
    assert stranger.post("/actions/replay", data={"dlq_id": dlq_id, "csrf": token}).status_code == 403
    assert client.dead_letters() != []
    response = admin_web.post("/actions/replay", data={"dlq_id": dlq_id, "csrf": token})
    assert response.status_code == 303
    job_id = client.dead_letters(include_handled=True)[0].job_id
    assert response.headers["Location"].endswith(f"/jobs/{job_id}?notice=replayed")
    assert client.get_job(job_id).status == "pending" and client.dead_letters() == []
    assert "Dead letter replayed" in page(admin_web, response.headers["Location"])


def test_queue_pause_resume_and_cancel_as_actions(client, queue, admin_web):
    token = csrf_of(page(admin_web, "/queues"))
    assert admin_web.post("/actions/pause", data={"queue": queue, "csrf": token}).status_code == 303
    assert client.stats()[0].paused
    assert 'action="/actions/resume"' in page(admin_web, "/queues?notice=paused")
    admin_web.post("/actions/resume", data={"queue": queue, "csrf": token})
    assert not client.stats()[0].paused
    job_id = client.submit(queue, "t")
    assert admin_web.post("/actions/cancel", data={"job_id": job_id, "csrf": token}).status_code == 303
    assert client.get_job(job_id).status == "cancelled"


def test_lists_page_by_keyset_in_their_order(client, queue, web):
    client.submit_batch(queue, [{"task": "t", "priority": n % 3} for n in range(120)])
    pending = _walk(web, f"/jobs?status=pending&queue={queue}")
    expected = sorted(client.pending_jobs(queue, limit=500), key=lambda j: (-j.priority, j.run_at, j.job_id))
    assert pending == [j.job_id for j in expected] and len(pending) == 120
    claims = client.claim_batch([queue], "w", [fenceq.new_claim_token() for _ in range(70)])
    assert sorted(_walk(web, "/jobs?status=claimed")) == sorted(c.job_id for c in claims)
    client.complete_batch([c.fence for c in claims[:60]])
    finished = _walk(web, "/jobs?status=completed&window=1h")
    assert sorted(finished) == sorted(c.job_id for c in claims[:60]) and len(set(finished)) == 60
    assert page(web, f"/jobs?status=pending&queue={queue}&after=not-a-cursor", 400)


def _walk(web: WebClient, path: str) -> list[str]:
    """Every job id of a listing, following its next-page links."""
    ids: list[str] = []
    while path:
        html = page(web, path)
        ids += re.findall(r'<td><a class="id" href="/jobs/([^"]+)">', html)
        found = re.search(r'<a href="(\?[^"]+)" rel="next">', html)
        path = "/jobs" + found.group(1).replace("&amp;", "&") if found else None
    return ids


def test_dead_letters_page_by_keyset(client, queue, web):
    client.create_queue("doomed", max_attempts=1)
    letters = {dead_letter(client, "doomed") for _ in range(55)}
    html = page(web, "/dead-letters")
    first = set(re.findall(r'<td class="id">([0-9a-f]{32})</td>', html))
    after = re.search(r'<a href="\?([^"]+)" rel="next">', html).group(1).replace("&amp;", "&")
    second = set(re.findall(r'<td class="id">([0-9a-f]{32})</td>', page(web, f"/dead-letters?{after}")))
    assert len(first) == 50 and first | second == letters and not first & second


def test_a_foreign_host_is_refused(db):
    web = WebClient(Dashboard(db.url, allowed_hosts={"127.0.0.1:8080"}))
    assert web.get("/queues", headers={"Host": "127.0.0.1:8080"}).status_code == 200
    assert web.get("/queues", headers={"Host": "attacker.example:8080"}).status_code == 400


def test_schedules_locks_and_checkpoints_are_shown(db, client, queue, web):
    job_id = client.submit(queue, "t")
    claim = client.claim_next([queue], "w", fenceq.new_claim_token())
    client.checkpoint(claim.fence, "download", {"bytes": 512})
    client.set_schedule("nightly", queue, "report", "0 3 * * *", time_zone="Europe/Paris")
    token = client.acquire_lock("ledger", "worker-a", timedelta(minutes=5))
    html = page(web, "/queues")
    assert 'href="/schedules"' in html and 'href="/locks"' in html
    html = page(web, "/schedules")
    assert "nightly" in html and "0 3 * * *" in html and "Europe/Paris" in html
    html = page(web, "/locks")
    assert "ledger" in html and "worker-a" in html
    html = page(web, f"/jobs/{job_id}")
    assert "<td>download</td>" in html and "{&#34;bytes&#34;: 512}" in html
    assert token >= 1 and claim.claim_token not in html


def test_queue_stats_columns_of_a_newer_schema_are_shown(sqlite_db):
    """A later schema may add limit columns to queue_stats: they show as they come."""
    with sqlite_db.connect() as client:
        client.create_queue("work")
        original = sqlite_db.sql("SELECT sql FROM sqlite_master WHERE name = 'fenceq_queue_stats'")[0][0]
        sqlite_db.sql(original.replace("fenceq_queue_stats", "fenceq_queue_stats_before", 1))
        sqlite_db.sql("DROP VIEW fenceq_queue_stats")
        sqlite_db.sql("CREATE VIEW fenceq_queue_stats AS SELECT *, 4 AS concurrency_limit, 1 AS concurrency_used"
                      " FROM fenceq_queue_stats_before")
        assert client.queue_overview()[0].extra == {"concurrency_limit": 4, "concurrency_used": 1}
    html = page(WebClient(Dashboard(sqlite_db.url)), "/queues")
    assert "<th class=\"n\">concurrency limit</th>" in html and '<td class="n">4</td>' in html


@pytest.fixture
def worker_role_url(pg):
    """A login role granted fenceq_worker only (what a read-only dashboard needs)."""
    name = f"app_dashboard_{uuid.uuid4().hex[:8]}"
    pg.sql(f"CREATE ROLE {name} LOGIN IN ROLE fenceq_worker")
    yield pg.url.replace("postgres@", f"{name}@", 1)
    pg.sql(f"DROP OWNED BY {name} CASCADE")
    pg.sql(f"DROP ROLE {name}")


def test_a_fenceq_worker_role_reads_every_page_and_may_not_act(pg, worker_role_url):
    with pg.connect() as admin:
        admin.create_queue("work", **NO_BACKOFF)
        job_id = taken_over_job(admin, "work", "order-17")
        dlq_id = dead_letter(admin, "work")
    web = WebClient(Dashboard(worker_role_url, allow_actions=True))
    for path in ("/queues", "/jobs", "/jobs?submission_id=order-17", f"/jobs/{job_id}", "/dead-letters",
                 "/jobs?status=finished&window=1h", "/jobs?status=pending&queue=work"):
        page(web, path)
    token = csrf_of(page(web, "/dead-letters"))
    response = web.post("/actions/replay", data={"dlq_id": dlq_id, "csrf": token})
    assert response.status_code == 403 and "fenceq_admin" in response.get_data(as_text=True)
