"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven
by Playwright with ``executable_path``: nothing is downloaded at test
time), against a live database on both engines: find a job by submission
id, see its two generations after a takeover (a screenshot of the page is
written to the test's folder), replay a dead letter with actions on, and
be refused with actions off. Playwright's waits are bounded by PATIENCE and
only wait for what the page shows."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from fenceq.dashboard import start_dashboard
from fenceq.observability.endpoints import stop
from observed import PATIENCE, dead_letter, taken_over_job

CHROMIUM = "/usr/bin/chromium"
NO_BACKOFF = dict(lease=timedelta(seconds=60), backoff_base=timedelta(0), backoff_max=timedelta(0))


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root, where Chromium's sandbox cannot start.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
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
    assert shot.stat().st_size > 10_000  # docs/img/job-page.png is one of these


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
