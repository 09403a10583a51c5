"""An operator triages the dead-letter queue in the admin, in a real chromium."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import AbstractUser
from django.utils import timezone
from playwright.sync_api import Locator, Page, expect
from pytest_django.live_server_helper import LiveServer

from django_dbqueue.models import Job, JobState
from tests.browser.conftest import BrowserPage, save_screenshot
from tests.factories import JobFactory

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

USERNAME = "oncall"
PASSWORD = "correct horse battery staple"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "shop/payments.py", line 42, in charge\n'
    "    raise ValueError(msg)\n"
    "ValueError: card declined by the acquirer"
)


def dead_job_with_history() -> Job:
    """A dead job that used all five attempts, each failure recorded."""
    history = [
        {
            "attempt": attempt,
            "worker": "host-1:4242",
            "at": f"2024-05-01T03:0{attempt}:00+00:00",
            "code": "ValueError",
            "message": "card declined by the acquirer",
            "traceback": TRACEBACK,
        }
        for attempt in range(1, 6)
    ]
    return JobFactory(
        dead=True,
        task="tests.jobs.tasks.charge_card",
        queue="payments",
        last_error=TRACEBACK,
        errors=history,
    )


def log_in(page: Page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/"))
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("#login-form input[type=submit]")
    expect(page).to_have_url(f"{base_url}/admin/")


def state_filter(page: Page, state: str) -> Locator:
    """The sidebar link that filters the job list to ``state``."""
    return page.locator(
        f"#changelist-filter details[data-filter-title='state'] a[href$='state__exact={state}']"
    )


def job_row(page: Page, job: Job) -> Locator:
    return page.locator("#result_list tbody tr").filter(
        has=page.locator(f"input.action-select[value='{job.pk}']")
    )


def test_operator_requeues_a_dead_job_from_the_admin_in_a_real_browser(
    live_server: LiveServer,
    browser_page: BrowserPage,
    django_user_model: type[AbstractUser],
) -> None:
    operator = django_user_model.objects.create_superuser(USERNAME, "oncall@example.com", PASSWORD)
    dead = dead_job_with_history()
    others = {
        JobFactory(queue="payments").pk: JobState.READY,
        JobFactory(running=True, queue="emails").pk: JobState.RUNNING,
        JobFactory(succeeded=True, queue="emails").pk: JobState.SUCCEEDED,
    }
    shots: dict[str, Path] = {}

    with browser_page() as page:
        assert page.context.browser is not None
        logger.info(f"chromium {page.context.browser.version}")
        log_in(page, live_server.url)
        page.locator("#content-main").get_by_role("link", name="Jobs", exact=True).click()
        expect(page.locator("#dbqueue-health tr.dbqueue-queue")).to_have_count(2)
        expect(page.locator("#dbqueue-throughput")).to_be_visible()
        expect(page.locator("#result_list tbody tr")).to_have_count(4)
        shots["job-list"] = save_screenshot("job-list", page.screenshot(full_page=True))

        state_filter(page, JobState.DEAD).click()
        expect(page).to_have_url(re.compile(r"\?state__exact=dead$"))
        expect(page.locator("#result_list tbody tr")).to_have_count(1)
        job_row(page, dead).locator("input.action-select").check()
        page.select_option("select[name=action]", label="Requeue dead jobs with more attempts")
        page.click("button[name=index]")

        form = page.locator("#requeue-form")
        expect(form).to_contain_text("ValueError: card declined by the acquirer")
        expect(form).to_contain_text("5/5")
        expect(page.locator("#id_extra_attempts")).to_have_value("1")
        shots["requeue-form"] = save_screenshot("requeue-form", page.screenshot(full_page=True))
        page.fill("#id_extra_attempts", "2")
        form.locator("input[type=submit]").click()

        expect(page.locator("ul.messagelist li.success")).to_have_text(
            "Requeued with 2 more attempt(s): 1 job(s)."
        )
        shots["requeue"] = save_screenshot("requeue", page.screenshot(full_page=True))
        state_filter(page, JobState.READY).click()
        expect(job_row(page, dead).locator("td.field-state_badge")).to_have_text("ready")
        expect(job_row(page, dead).locator("td.field-attempts_used")).to_have_text("5/7")
        shots["job-ready"] = save_screenshot("job-ready", page.screenshot(full_page=True))
    for shot in shots.values():
        logger.info(f"screenshot: {shot}")

    dead.refresh_from_db()
    assert (dead.state, dead.attempts, dead.max_attempts, len(dead.errors)) == (
        JobState.READY,
        5,
        7,
        5,
    )
    assert dict(Job.objects.filter(pk__in=others).values_list("pk", "state")) == others
    entry = LogEntry.objects.get(object_id=str(dead.pk))
    assert (entry.user_id, entry.action_flag, entry.change_message) == (
        operator.pk,
        CHANGE,
        "Requeued with 2 more attempt(s) (admin action)",
    )


def test_operator_requeues_a_dead_job_from_its_own_page_in_a_real_browser(
    live_server: LiveServer,
    browser_page: BrowserPage,
    django_user_model: type[AbstractUser],
) -> None:
    operator = django_user_model.objects.create_superuser(USERNAME, "oncall@example.com", PASSWORD)
    dead = dead_job_with_history()
    Job.objects.filter(pk=dead.pk).update(
        task="shop.billing.payments.gateways.acquirer.tasks.charge_card_with_3ds_fallback"
    )
    now = timezone.now()
    for minutes, count in ((3, 4), (12, 7), (25, 2), (41, 5)):
        JobFactory.create_batch(
            count, succeeded=True, queue="emails", finished_at=now - timedelta(minutes=minutes)
        )
    JobFactory(cancelled=True, queue="emails", finished_at=now - timedelta(minutes=12))
    shots: dict[str, Path] = {}

    with browser_page() as page:
        log_in(page, live_server.url)
        page.goto(f"{live_server.url}/admin/django_dbqueue/job/")
        row = job_row(page, dead)
        expect(row.locator("td.field-task_name")).to_have_text("charge_card_with_3ds_fallback")
        error = row.locator("td.field-last_error_line")
        expect(error).to_have_text("ValueError: card declined by the acquirer")
        # At 1,400 px the whole row fits: the results table needs no horizontal scrolling.
        results = page.locator("#changelist .results")
        overflow = results.evaluate("node => node.scrollWidth - node.clientWidth")
        assert overflow <= 0, f"the job list is {overflow}px wider than its box"
        box, frame = error.bounding_box(), results.bounding_box()
        assert box is not None
        assert frame is not None
        assert box["x"] + box["width"] <= frame["x"] + frame["width"], (box, frame)
        shots["list"] = save_screenshot("list", page.screenshot(full_page=True))
        shots["chart"] = save_screenshot("chart", page.locator("#dbqueue-throughput").screenshot())
        expect(page.locator("#dbqueue-legend")).to_contain_text("Succeeded: 18")

        row.locator("th.field-id a").click()
        triage = page.locator("#dbqueue-triage")
        expect(triage.locator("input[type=submit]")).to_have_count(1)
        page.fill("#dbqueue-triage #id_extra_attempts", "3")
        shots["dead-job-page"] = save_screenshot("dead-job-page", page.screenshot(full_page=True))
        triage.locator("input[name=requeue_dead]").click()
        expect(page.locator("ul.messagelist li.success")).to_have_text(
            "Requeued with 3 more attempt(s): 1 job(s)."
        )
        expect(page.locator("div.field-state_badge div.readonly")).to_contain_text("ready")
    for name, shot in shots.items():
        logger.info(f"screenshot ({name}): {shot}")

    dead.refresh_from_db()
    assert (dead.state, dead.attempts, dead.max_attempts) == (JobState.READY, 5, 8)
    entry = LogEntry.objects.get(object_id=str(dead.pk))
    assert (entry.user_id, entry.action_flag, entry.change_message) == (
        operator.pk,
        CHANGE,
        "Requeued with 3 more attempt(s) (admin action)",
    )
