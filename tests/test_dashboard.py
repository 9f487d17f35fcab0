"""The dashboard's pages and actions over a live database, on both engines
(Werkzeug's test client; tests/test_dashboard_browser.py drives a real
browser). Escaping, clipping, no claim token anywhere, read-only by
default, CSRF on every action, keyset pages, and the pages that appear
once the schema has their views."""

from __future__ import annotations

import json
import re
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from werkzeug.test import Client as WebClient

import fenceq
from activity_rows import record_activity
from fenceq.cli import main
from fenceq.dashboard import Dashboard, charts
from fenceq.migrate import rollback
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
                 "/jobs?status=finished&window=1h", "/jobs?status=pending&queue=work", "/activity?range=7d",
                 "/activity?queue=work", "/search?status=failed&window=1h&queue=work"):
        page(web, path)
    token = csrf_of(page(web, "/dead-letters"))
    response = web.post("/actions/replay", data={"dlq_id": dlq_id, "csrf": token})
    assert response.status_code == 403 and "fenceq_admin" in response.get_data(as_text=True)
    failed = result_ids(page(web, "/search?status=failed&window=1h&queue=work"))
    response = web.post("/actions/replay_dead_letters", data={"queue": "work", "scope": "selected",
                                                              "job_id": failed, "csrf": token})
    assert response.status_code == 403 and "fenceq_admin" in response.get_data(as_text=True)


# Version 7: search and bulk actions (docs/design-v7.md §3, §4) -------------------------------

RETRY_LATER = dict(lease=timedelta(seconds=60), backoff_base=timedelta(hours=1), backoff_max=timedelta(hours=1))


def waiting_for_retry(client, queue: str, count: int, error: str = "TimeoutError: upstream") -> list[str]:
    """count jobs that failed once and wait an hour for their retry (pending, run_at ahead)."""
    ids = client.submit_batch(queue, [{"task": "sync", "payload": {"customer": n % 2}} for n in range(count)])
    for claim in client.claim_batch([queue], "w", [fenceq.new_claim_token() for _ in ids]):
        assert client.fail(claim.fence, error)
    return ids


def due_now(client, job_ids) -> set[str]:
    """Of job_ids, the pending jobs whose run_at has come, as the database says."""
    now = datetime.now(timezone.utc)
    return {j for j in job_ids if (job := client.get_job(j)).status == "pending" and job.run_at <= now}


def result_ids(html: str) -> list[str]:
    return re.findall(r'<td><a class="id" href="/jobs/([^"]+)">', html)


def test_search_filters_by_payload_and_error_and_pages_newest_first(client, web):
    client.create_queue("work", **RETRY_LATER)
    waiting_for_retry(client, "work", 4, error="KeyError: 'sku'")
    matching = client.submit_batch("work", [{"task": "t", "payload": {"customer": 42, "n": n}} for n in range(120)])
    client.submit_batch("work", [{"task": "t", "payload": {"customer": 7}} for _ in range(5)])
    path = "/search?" + urllib.parse.urlencode({"queue": "work", "status": "pending", "payload": '{"customer": 42}'})
    walked: list[str] = []
    while path:
        html = page(web, path)
        walked += result_ids(html)
        found = re.search(r'<a href="(/search\?[^"]+)" rel="next">', html)
        path = found.group(1).replace("&amp;", "&") if found else None
    assert walked == matching[::-1], "every match once, newest (highest seq) first"
    html = page(web, "/search?status=pending&queue=work&error=keyerror")
    assert len(result_ids(html)) == 4 and "/actions/" not in html, "read-only: no checkbox, no bulk form"


def test_a_search_the_sql_refuses_says_why_beside_the_form(client, queue, web):
    html = page(web, "/search?task=t")
    assert "search needs a submission prefix, a status or a time window" in html and 'name="payload"' in html
    assert "not valid JSON" in page(web, "/search?status=pending&queue=work&payload=%7Bnope")


def test_bulk_retry_of_checked_jobs_changes_what_the_sql_counts(client, admin_web):
    client.create_queue("work", **RETRY_LATER)
    ids = waiting_for_retry(client, "work", 5)
    html = page(admin_web, "/search?status=pending&queue=work")
    assert sorted(re.findall(r'name="job_id" value="([^"]+)"', html)) == sorted(ids)
    response = admin_web.post("/actions/retry_jobs", data={
        "csrf": csrf_of(html), "queue": "work", "scope": "selected", "job_id": ids[:2],
        "back_queue": "work", "back_status": "pending"})
    assert response.status_code == 303
    assert response.headers["Location"] == "/search?queue=work&status=pending&notice=retried&changed=2"
    assert due_now(client, ids) == set(ids[:2])
    assert "2 jobs waiting for a retry made due now." in page(admin_web, response.headers["Location"])
    events = [e for e in client.get_job_events(ids[0]) if e.event == "retry_forced"]
    assert len(events) == 1 and events[0].detail["action"] == "retry_jobs"


def test_bulk_actions_on_everything_the_filter_matches(client, admin_web):
    client.create_queue("work", **RETRY_LATER)
    ids = waiting_for_retry(client, "work", 6)
    customer_1 = [j for j in ids if client.get_job(j).payload == {"customer": 1}]
    html = page(admin_web, '/search?status=pending&queue=work&payload={"customer":1}')
    assert "Everything this filter matches in queue work" in html
    assert '<input type="hidden" name="payload_contains" value="{&#34;customer&#34;:1}">' in html
    token = csrf_of(html)
    filter_form = {"csrf": token, "queue": "work", "scope": "filter", "payload_contains": '{"customer":1}'}
    response = admin_web.post("/actions/retry_jobs", data=filter_form)
    assert response.headers["Location"].endswith("notice=retried&changed=3")
    assert due_now(client, ids) == set(customer_1)
    response = admin_web.post("/actions/cancel_jobs", data={**filter_form, "max_rows": "2"})
    assert response.headers["Location"].endswith("notice=cancelled-jobs&changed=2"), "at most max_rows"
    assert sum(client.get_job(j).status == "cancelled" for j in ids) == 2
    refused = admin_web.post("/actions/cancel_jobs", data={**filter_form, "error_contains": "Timeout"})
    assert refused.status_code == 400, "cancel cannot narrow by error text: it would cancel more than matched"
    assert sum(client.get_job(j).status == "cancelled" for j in ids) == 2


def test_bulk_replay_of_dead_letters(client, admin_web):
    client.create_queue("doomed", max_attempts=1)
    letters = [dead_letter(client, "doomed") for _ in range(3)]
    failed = [client.dead_letters(include_handled=True)[n].job_id for n in range(3)]
    html = page(admin_web, "/search?status=failed&queue=doomed&window=1h")
    assert sorted(result_ids(html)) == sorted(failed)
    response = admin_web.post("/actions/replay_dead_letters", data={
        "csrf": csrf_of(html), "queue": "doomed", "scope": "selected", "job_id": failed[:2]})
    assert response.headers["Location"].endswith("notice=replayed-letters&changed=2")
    assert sorted(j for j in failed if client.get_job(j).status == "pending") == sorted(failed[:2])
    assert len(client.dead_letters()) == 1 and len(letters) == 3


def test_bulk_actions_are_refused_read_only_and_without_the_token(client, web, admin_web):
    client.create_queue("work", **RETRY_LATER)
    ids = waiting_for_retry(client, "work", 2)
    form = {"queue": "work", "scope": "selected", "job_id": ids, "csrf": "0" * 64}
    for action in ("retry_jobs", "cancel_jobs", "replay_dead_letters"):
        response = web.post(f"/actions/{action}", data=form)
        assert response.status_code == 403 and "read-only" in response.get_data(as_text=True)
        assert admin_web.post(f"/actions/{action}", data=form).status_code == 403, "a token not of this browser"
    assert due_now(client, ids) == set() and all(client.get_job(j).status == "pending" for j in ids)
    token = csrf_of(page(admin_web, "/search?status=pending&queue=work"))
    nothing_checked = admin_web.post("/actions/retry_jobs", data={"csrf": token, "queue": "work", "scope": "selected"})
    assert nothing_checked.status_code == 400 and due_now(client, ids) == set()


# Version 7: the activity charts (docs/design-v7.md §1, §2) ----------------------------------

def chart_tables(html: str) -> dict[str, list[list[str]]]:
    """Each chart's table of figures, by chart name: its rows of cells, newest first."""
    tables = {}
    for name, body in re.findall(r'<section class="chart" aria-labelledby="heading-(\w+)">(.*?)</section>', html,
                                 re.S):
        rows = re.findall(r"<tr><th scope=\"row\">(.*?)</th>(.*?)</tr>", body, re.S)
        tables[name] = [[start] + re.findall(r'<td class="n">(.*?)</td>', cells) for start, cells in rows]
    return tables


def test_activity_page_draws_what_activity_answers(db, client, web, capsys):
    client.create_queue("work")
    client.create_queue("other")
    one_second = 40  # the histogram bucket of 2^10 ms ≈ 1 s: read back as 2^10.125 ms
    record_activity(db.url, "work", [dict(submitted=5, claimed=4, completed=3, failed=1, retried=2, pending=9, due=4,
                                      running=1, wait={one_second: 3}, run={one_second + 8: 4}),
                                 dict(submitted=2, completed=2, wait={0: 2}, run={0: 2}),
                                 dict()])
    record_activity(db.url, "other", [dict(submitted=10, pending=1, due=1), dict(), dict(completed=7, pending=0)])
    html = page(web, "/activity?queue=work")
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 4
    tables = chart_tables(html)
    assert set(tables) == {"throughput", "depth", "wait", "run"}
    figures = {row[0]: row for row in tables["throughput"]}
    expected = client.activity(queue="work", since=timedelta(hours=1))
    assert len(tables["throughput"]) == len(expected) == 60
    for bucket in expected:  # the page's figures are activity()'s, bucket by bucket
        start = bucket.bucket_start.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
        if start in figures:
            assert figures[start][1:] == [f"{bucket.submitted:,}", f"{bucket.completed:,}", f"{bucket.failed:,}",
                                          f"{bucket.retried:,}"]
    assert sum(int(row[1]) for row in tables["throughput"]) == 7
    busy = next(b for b in expected if b.submitted == 5)
    busy_start = busy.bucket_start.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
    assert {row[0]: row[1:] for row in tables["wait"]}[busy_start] == ["1.12 s", "1.12 s"], "2^10.125 ms"
    assert {row[0]: row[1:] for row in tables["run"]}[busy_start] == ["4.47 s", "4.47 s"], "2^12.125 ms"
    assert {row[0]: row[1:] for row in tables["depth"]}[busy_start] == ["9", "4"]
    assert sum(row[1] != "—" for row in tables["depth"]) == 1, "depth only where a sample has it: a gap elsewhere"
    everything = chart_tables(page(web, "/activity"))
    assert sum(int(row[1]) for row in everything["throughput"]) == 17, "all queues: summed"
    assert main(["stats", "--url", db.url, "--since", "1h", "--queue", "work", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [row["submitted"] for row in printed] == [b.submitted for b in expected]


def test_activity_ranges_and_an_empty_queue(db, client, web):
    client.create_queue("quiet")
    html = page(web, "/activity?queue=quiet&range=7d")
    assert "Jobs per hour" in html and "No depth was sampled in this range" in html
    assert len(chart_tables(html)["throughput"]) == 168 and 'aria-current="page">last week' in html
    assert "Jobs per 15 minutes" in page(web, "/activity?range=1d")
    assert page(web, "/activity?range=1y", 400)
    assert "unknown" in page(web, "/activity?queue=nope", 400).lower()
    assert 'href="/activity?queue=quiet"' in page(web, "/queues")
    assert 'href="/search"' in page(web, f"/jobs/{client.submit('quiet', 't')}"), "every page's header links them"


def test_a_schema_before_version_7_shows_no_activity_or_search(sqlite_db):
    rollback(sqlite_db.url, to_version=6)
    web = WebClient(Dashboard(sqlite_db.url))
    assert 'href="/activity"' not in page(web, "/queues") and 'href="/search"' not in page(web, "/queues")
    assert "schema version 7" in page(web, "/activity", 404) and "schema version 7" in page(web, "/search", 404)


def test_stats_since_prints_a_line_per_bucket(db, client, capsys):
    client.create_queue("work")
    record_activity(db.url, "work", [dict(submitted=3, completed=3, wait={40: 3}, run={0: 3})])
    assert main(["stats", "--url", db.url, "--since", "10m", "--queue", "work"]) == 0
    header, rule, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["bucket_start", "submitted", "claimed", "retried", "completed", "failed", "cancelled",
                              "expired", "pending", "due", "running", "wait_p50", "wait_p95", "run_p50", "run_p95"]
    assert len(rows) == 10
    busy = [row.split() for row in rows if row.split()[2] == "3"]
    assert len(busy) == 1 and busy[0][-8:] == ["1.12", "s", "1.12", "s", "1.09", "ms", "1.09", "ms"]
    assert main(["stats", "--url", db.url, "--bucket", "5m"]) == 2
    assert "--bucket needs --since" in capsys.readouterr().err
    assert main(["stats", "--url", db.url, "--since", "1h", "--queue", "nope"]) == 2
    assert "unknown_queue" in capsys.readouterr().err
