"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven
by Playwright with ``executable_path``: nothing is downloaded at test
time), against a live database on both engines: find a job by submission
id, see its two generations after a takeover (a screenshot of the page is
written to the test's folder), replay a dead letter with actions on, and
be refused with actions off; every activity chart drawn for an empty
queue, one job and a 100,000-job week; a bulk retry of checked jobs that
changes what the SQL counts; a page reached through a rebound DNS name
refused. Playwright's waits are bounded by PATIENCE and only wait for what
the page shows. (scripts/dashboard-screenshots takes the docs' pictures.)"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from fenceq.dashboard import start_dashboard
from fenceq.observability.endpoints import stop
from observed import PATIENCE, dead_letter, taken_over_job
from activity_rows import record_activity
from test_dashboard import RETRY_LATER, chart_tables, due_now, waiting_for_retry

CHROMIUM = "/usr/bin/chromium"
# A name that resolves to loopback in this browser only: a web page whose DNS
# answer was rebound to the dashboard's address.
REBOUND = "rebound.example"
NO_BACKOFF = dict(lease=timedelta(seconds=60), backoff_base=timedelta(0), backoff_max=timedelta(0))


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root, where Chromium's sandbox cannot start.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"])
        yield browser
        browser.close()


@pytest.fixture
def serve(db):
    """Start dashboards on free loopback ports; each is stopped after the test."""
    started = []

    def start(allow_actions: bool) -> str:
        dashboard, server, thread = start_dashboard(db.url, "127.0.0.1", 0, allow_actions=allow_actions)
        started.append((dashboard, server, thread))
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for dashboard, server, thread in started:
        stop(server, thread)
        dashboard.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(PATIENCE * 1000)
    page = context.new_page()
    yield page
    context.close()


def test_find_a_job_by_submission_id_and_see_its_two_generations(client, serve, page, tmp_path):
    client.create_queue("work", **NO_BACKOFF)
    job_id = taken_over_job(client, "work", "order-17")
    base = serve(allow_actions=False)
    page.goto(f"{base}/jobs")
    page.fill("input[name=submission_id]", "order-17")
    page.click("text=Find")
    page.click(f"a[href='/jobs/{job_id}']")
    page.wait_for_url(f"{base}/jobs/{job_id}")
    fences = page.locator("table.fences tbody tr")
    assert fences.count() == 2
    assert fences.nth(0).locator("td").all_inner_texts()[:2] == ["1", "worker-a"]
    assert fences.nth(1).locator("td").all_inner_texts()[:2] == ["2", "worker-b"]
    assert "superseded by generation 2" in fences.nth(0).inner_text()
    assert "completed by generation 2" in fences.nth(1).inner_text()
    assert page.locator("h1 .status").inner_text() == "completed"
    shot = tmp_path / "job-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000  # scripts/dashboard-screenshots makes docs/img/job-page.png


def test_replay_a_dead_letter_with_actions_on_and_be_refused_with_them_off(client, serve, page):
    client.create_queue("work", **NO_BACKOFF)
    dlq_id = dead_letter(client, "work")
    job_id = client.dead_letters()[0].job_id

    read_only = serve(allow_actions=False)
    page.goto(f"{read_only}/dead-letters")
    assert page.locator(f"td:text-is('{dlq_id}')").count() == 1
    assert page.locator("button:text-is('Replay')").count() == 0
    refused = page.request.post(f"{read_only}/actions/replay", form={"dlq_id": dlq_id, "csrf": "0" * 64})
    assert refused.status == 403 and "read-only" in refused.text()
    assert client.get_job(job_id).status == "failed" and client.dead_letters() != []

    with_actions = serve(allow_actions=True)
    page.goto(f"{with_actions}/dead-letters")
    page.locator("tr", has=page.locator(f"td:text-is('{dlq_id}')")).locator("button:text-is('Replay')").click()
    page.wait_for_url(f"{with_actions}/jobs/{job_id}?notice=replayed")
    assert "Dead letter replayed" in page.locator(".notice").inner_text()
    assert page.locator("h1 .status").inner_text() == "pending"
    assert client.get_job(job_id).status == "pending"
    assert client.dead_letters() == [] and client.dead_letters(include_handled=True)[0].replayed_at is not None


def test_every_chart_renders_for_an_empty_queue_one_job_and_a_100k_job_week(db, client, serve, page):
    for queue in ("empty", "one", "busy"):
        client.create_queue(queue)
    record_activity(db.url, "one", [dict(submitted=1, claimed=1, completed=1, pending=0, due=0, running=0,
                                     wait={20: 1}, run={36: 1})])
    week = 7 * 24 * 60
    record_activity(db.url, "busy", [dict(submitted=10, claimed=11, retried=1, completed=9, failed=1,
                                      pending=None if minute % 97 == 0 else minute % 500, due=minute % 50,
                                      running=4, wait={24 + minute % 12: 9}, run={40 + minute % 9: 10})
                                 for minute in range(week)])  # 100,800 jobs
    base = serve(allow_actions=False)
    for queue, span, buckets in (("empty", "1h", 60), ("one", "1h", 60), ("busy", "7d", 168), ("busy", "1d", 96),
                                 ("busy", "1h", 60)):
        page.goto(f"{base}/activity?queue={queue}&range={span}")
        charts = page.locator("svg.chart")
        assert charts.count() == 4
        for index in range(4):
            box = charts.nth(index).bounding_box()
            assert box is not None and box["width"] > 600 and box["height"] > 200, (queue, span, index)
        # Chromium's accessibility tree names each chart by its <title>.
        assert page.get_by_role("img", name=re.compile(f"^Jobs per .*, queue {queue}$")).count() == 1
        lines = page.locator("svg.chart[data-chart=throughput] path.line")
        tables = chart_tables(page.content())
        assert len(tables["throughput"]) == buckets
        if queue == "empty":
            assert page.locator("svg.chart text.no-data").count() == 3  # depth, wait, run; zeros are drawn
            assert lines.count() == 4
        elif queue == "one":
            assert [row[1] for row in tables["throughput"] if row[1] != "0"] == ["1"]
            assert page.locator("svg.chart[data-chart=run] .marker").count() == 2  # p50 and p95, one point each
        else:
            points = lines.first.get_attribute("d").count(" L") + 1
            assert points == buckets
            if span == "7d":
                assert sum(int(row[1].replace(",", "")) for row in tables["throughput"]) >= 100_000
            assert page.locator("svg.chart[data-chart=depth] path.line").first.get_attribute("d").count("M") >= 1


def test_a_bulk_retry_in_the_browser_changes_what_the_sql_counts(client, serve, page):
    client.create_queue("work", **RETRY_LATER)
    ids = waiting_for_retry(client, "work", 5)
    base = serve(allow_actions=True)
    page.goto(f"{base}/search?queue=work&status=pending")
    boxes = page.locator("input[name=job_id]")
    assert boxes.count() == 5
    checked = [boxes.nth(n).get_attribute("value") for n in (0, 3)]
    for n in (0, 3):
        boxes.nth(n).check()
    page.locator("fieldset.bulk-actions").get_by_role("button", name="Retry now").click()
    page.wait_for_url(re.compile(r"notice=retried&changed=2$"))
    assert page.locator(".notice").inner_text() == "2 jobs waiting for a retry made due now."
    assert due_now(client, ids) == set(checked)
    assert all(e.detail["action"] == "retry_jobs" for j in checked
               for e in client.get_job_events(j) if e.event == "retry_forced")


def test_a_rebound_host_and_a_read_only_bulk_action_are_refused(client, serve, page):
    client.create_queue("work", **RETRY_LATER)
    ids = waiting_for_retry(client, "work", 2)
    read_only = serve(allow_actions=False)
    port = read_only.rsplit(":", 1)[1]
    response = page.goto(f"http://{REBOUND}:{port}/search?queue=work&status=pending")
    assert response.status == 400 and "answers only to the address it serves" in page.content()
    page.goto(f"{read_only}/search?queue=work&status=pending")
    assert page.locator("input[name=job_id]").count() == 0 and page.locator("text=Retry now").count() == 0
    refused = page.request.post(f"{read_only}/actions/retry_jobs",
                                form={"queue": "work", "scope": "selected", "job_id": ids[0], "csrf": "0" * 64})
    assert refused.status == 403 and "read-only" in refused.text()
    with_actions = serve(allow_actions=True)
    port = with_actions.rsplit(":", 1)[1]
    page.goto(f"{with_actions}/search?queue=work&status=pending")  # a token for this browser
    token = page.locator("input[name=csrf]").first.get_attribute("value")
    foreign = page.request.post(f"{with_actions}/actions/retry_jobs", headers={"Host": f"{REBOUND}:{port}"},
                                form={"queue": "work", "scope": "selected", "job_id": ids[0], "csrf": token})
    assert foreign.status == 400, "a foreign Host header, whatever the token"
    assert due_now(client, ids) == set()
