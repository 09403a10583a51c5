"""The job admin shows the latest attempt's progress on its list and its page."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from django_dbqueue import leases, progress
from django_dbqueue.models import Job
from tests.factories import JobFactory
from tests.integration.test_admin import CHANGELIST, change_url, job, listed
from tests.jobs import tasks

logger = logging.getLogger(__name__)

pytestmark = pytest.mark.django_db


def reported(done: float, total: float | None, message: str = "", **fields: Any) -> Job:
    """A running job whose attempt reported ``done`` of ``total`` five seconds ago."""
    at = (timezone.now() - timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    fields.setdefault("attempts", 1)
    report = {"done": done, "total": total, "message": message, "attempt": fields["attempts"]}
    return job(running=True, progress={**report, "at": at}, **fields)


def test_the_list_shows_done_of_total_with_the_message_on_hover(admin_client: Client) -> None:
    reported(45, 200, "importing <rows>")
    reported(1234, None)
    reported(2.5, 10)
    job(running=True)
    html = admin_client.get(CHANGELIST).content.decode()
    assert (
        '<td class="field-progress_summary">'
        '<span title="importing &lt;rows&gt;">45/200 (22%)</span></td>'
    ) in html
    assert '<span title="">1234</span>' in html
    assert '<span title="">2.5/10 (25%)</span>' in html
    assert '<td class="field-progress_summary">-</td>' in html


def test_an_earlier_attempts_progress_is_not_shown(admin_client: Client) -> None:
    stale = reported(9, 10, attempts=2)
    Job.objects.filter(pk=stale.pk).update(progress={**stale.progress, "attempt": 1})
    html = admin_client.get(CHANGELIST).content.decode()
    assert '<td class="field-progress_summary">-</td>' in html
    assert "9/10" not in admin_client.get(change_url(stale)).content.decode()


def test_the_job_page_shows_progress_message_attempt_and_when(admin_client: Client) -> None:
    shown = reported(3, 4, "chunk <3>")
    html = admin_client.get(change_url(shown)).content.decode()
    assert "3/4 (75%)<br>chunk &lt;3&gt;<br>" in html
    assert "attempt 1, reported 5 s ago</small>" in html


def test_the_job_page_shows_what_a_worker_wrote(admin_client: Client) -> None:
    tasks.noop.enqueue()
    (lease,) = leases.claim(None, "w1", 1)
    progress.write([(lease, progress.Progress(7, 70, "written"))])
    html = admin_client.get(change_url(Job.objects.get(pk=lease.job_id))).content.decode()
    assert "7/70 (10%)<br>written<br>" in html
    assert "attempt 1, reported 0 s ago</small>" in html


def test_progress_costs_the_list_no_query_per_row(
    admin_client: Client, django_assert_max_num_queries: DjangoAssertNumQueries
) -> None:
    admin_client.get(CHANGELIST)  # warm per-process caches (content types, templates)
    for done in range(3):
        reported(done, 100, f"row {done}")
    with CaptureQueriesContext(connection) as small:
        assert len(listed(admin_client.get(CHANGELIST))) == 3
    for done in range(97):
        reported(done, 100, f"row {done}")
    JobFactory.create_batch(3, dead=True)
    with django_assert_max_num_queries(len(small)) as big:
        assert len(listed(admin_client.get(CHANGELIST))) == 100
    logger.info(f"job list with progress: {len(small)} queries for 3 jobs, {len(big)} for 100")
    assert len(big) == len(small)
