"""Limits where operators look: ``limit_stats``, ``dbqueue_stats`` (table and ``--json``),
the ``dbqueue_limit_*`` gauges, and the admin's "Limits" table.

Why a ready job waits: its limit's running jobs fill its size. Each place shows, per limit
with ready or running jobs, the size, the rate, the running jobs and the ready ones.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from django_dbqueue.management.commands.dbqueue_stats import LIMIT_COLUMNS
from django_dbqueue.models import Job, JobState
from django_dbqueue.stats import LimitStats, as_json, limit_stats, queue_stats
from tests.factories import JobFactory
from tests.scraping import scrape
from tests.stats_sections import gauge_read_queries, without_table_section

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_dbqueue/job/"
SEND = "task:tests.jobs.tasks.send"
MAIL = "queue:mail"
TENANT = 'key:tenant "7"\\x'  # a quote and a backslash: the gauges must escape them
API = "key:api"  # paced, with no size
#: What ``limited_jobs`` creates, by limit name.
EXPECTED = [
    LimitStats(API, size=None, rate=20.0, running=0, waiting=1),
    LimitStats(TENANT, size=1, rate=None, running=0, waiting=1),
    LimitStats(MAIL, size=5, rate=0.5, running=1, waiting=0),
    LimitStats(SEND, size=2, rate=None, running=2, waiting=3),
]


# --- helpers ---------------------------------------------------------------------------------


def limited(limit: str, size: int | None, rate: float | None = None, **fields: Any) -> Job:
    """A job counted against ``limit`` (no ``serial_key``, as ``dbqueue_job_limit_shape`` wants)."""
    job: Job = JobFactory(limit_key=limit, limit_size=size, limit_rate=rate, **fields)
    return job


@pytest.fixture
def limited_jobs() -> None:
    """Ready, scheduled, running and finished jobs of three limits; the numbers are
    ``EXPECTED``. Finished, dead and waiting jobs count nowhere, nor do unlimited ones."""
    now = timezone.now()
    limited(SEND, 2, running=True)
    limited(SEND, 2, running=True, worker_id="w2")
    limited(SEND, 2)
    limited(SEND, 2, run_at=now - timedelta(minutes=5))
    limited(SEND, 2, run_at=now + timedelta(hours=1))  # scheduled: ready, not yet due
    limited(SEND, 2, succeeded=True)
    limited(SEND, 2, dead=True)
    limited(SEND, 2, cancelled=True)
    limited(MAIL, 5, 0.5, queue="mail", running=True)
    limited(MAIL, 4, queue="mail", succeeded=True)  # an old size, on a finished job
    limited(TENANT, 1)
    limited(API, None, 20.0)
    limited("key:done", 3, succeeded=True)  # every job finished: not listed
    limited("key:later", 3, state=JobState.WAITING, pending_dependencies=1)  # not ready yet
    JobFactory()
    JobFactory(running=True)


def stats_output(*args: str) -> str:
    """``dbqueue_stats``' queues and limits (the job table's section, where shown, left out)."""
    out = StringIO()
    call_command("dbqueue_stats", *args, stdout=out)
    return out.getvalue() if "--json" in args else without_table_section(out.getvalue())


def limits_section(output: str) -> list[list[str]]:
    """The rows of the text output's limits table, header first, as cells."""
    blocks = output.strip().split("\n\n")
    (section,) = [block for block in blocks if block.split()[:1] == ["limit"]]
    return [re.split(r"\s{2,}", line.strip()) for line in section.splitlines()]


def limits_table(html: str) -> list[list[str]] | None:
    """The admin's limits table as rows of cell texts, header first; ``None`` when absent."""
    found = re.search(r'<table id="dbqueue-limits">.*?</table>', html, re.S)
    if found is None:
        return None
    return [
        [unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in cells]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(), re.S)
        for cells in [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
    ]


@pytest.fixture
def viewer(client: Client, django_user_model: type[User]) -> Client:
    """Staff who may only view jobs: the limits are for everyone who sees the job list."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_dbqueue", codename="view_job")
    )
    client.force_login(user)
    return client


# --- limit_stats -----------------------------------------------------------------------------


@pytest.mark.usefixtures("limited_jobs")
class TestLimitStats:
    def test_counts_running_and_ready_jobs_per_limit_by_name(self) -> None:
        assert limit_stats() == EXPECTED

    def test_size_is_the_largest_among_ready_and_running_jobs(self) -> None:
        limited(SEND, 3)  # enqueued after the limit was raised
        send = {limit.limit: limit for limit in limit_stats()}[SEND]
        assert (send.size, send.waiting) == (3, 4)

    def test_json_lists_the_limits_beside_the_queues(self) -> None:
        found = json.loads(json.dumps(as_json(queue_stats(), limit_stats())))
        assert found["limits"] == [
            {"limit": API, "size": None, "rate": 20.0, "running": 0, "waiting": 1},
            {"limit": TENANT, "size": 1, "rate": None, "running": 0, "waiting": 1},
            {"limit": MAIL, "size": 5, "rate": 0.5, "running": 1, "waiting": 0},
            {"limit": SEND, "size": 2, "rate": None, "running": 2, "waiting": 3},
        ]
        assert sorted(found["queues"]) == ["default", "mail"]

    def test_one_query(self, django_assert_num_queries: DjangoAssertNumQueries) -> None:
        with django_assert_num_queries(1):
            limit_stats()

    @pytest.mark.postgresql
    def test_postgresql_reads_only_the_partial_indexes_of_limited_jobs(self) -> None:
        """Among thousands of unlimited and finished jobs, the plan reads the limited ones
        alone: through ``dbqueue_job_ready_limited`` and ``dbqueue_job_running_limited``."""
        Job.objects.bulk_create(
            [
                *JobFactory.build_batch(3000),
                *JobFactory.build_batch(300, running=True),
                *JobFactory.build_batch(3000, succeeded=True),
            ]
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE dbqueue_job")
            with CaptureQueriesContext(connection) as queries:
                limit_stats()
            (query,) = queries.captured_queries
            cursor.execute(f"EXPLAIN {query['sql']}")
            plan = "\n".join(line for (line,) in cursor.fetchall())
        assert "dbqueue_job_ready_limited" in plan
        assert "dbqueue_job_running_limited" in plan
        assert "Seq Scan" not in plan


def test_no_limited_jobs_no_limits() -> None:
    JobFactory()
    JobFactory(running=True)
    limited(SEND, 2, succeeded=True)
    assert limit_stats() == []
    assert as_json(queue_stats(), limit_stats())["limits"] == []


# --- dbqueue_stats ---------------------------------------------------------------------------


class TestStatsCommand:
    @pytest.mark.usefixtures("limited_jobs")
    def test_json_has_the_limits(self) -> None:
        found = json.loads(stats_output("--json"))
        assert found["limits"] == as_json(queue_stats(), limit_stats())["limits"]
        assert [limit["limit"] for limit in found["limits"]] == [API, TENANT, MAIL, SEND]
        assert found["limits"][3] == {
            "limit": SEND,
            "size": 2,
            "rate": None,
            "running": 2,
            "waiting": 3,
        }

    def test_json_has_an_empty_limits_list_without_limited_jobs(self) -> None:
        JobFactory()
        assert json.loads(stats_output("--json"))["limits"] == []
        assert json.loads(stats_output("--json"))["queues"]["default"]["ready"] == 1

    @pytest.mark.usefixtures("limited_jobs")
    def test_table_has_a_limits_section_below_the_queues(self) -> None:
        output = stats_output()
        assert output.startswith("queue ")
        assert limits_section(output) == [
            list(LIMIT_COLUMNS),
            [API, "-", "20/s", "0", "1"],
            [TENANT, "1", "-", "0", "1"],
            [MAIL, "5", "0.5/s", "1", "0"],
            [SEND, "2", "-", "2", "3"],
        ]

    def test_table_numbers_are_right_aligned_under_their_heading(self) -> None:
        limited("key:a", 12, running=True)
        header, row = stats_output().strip().split("\n\n")[-1].splitlines()
        assert header.split() == ["limit", "size", "rate", "running", "waiting"]
        assert header.index("size") + len("size") == row.index("12") + len("12")
        assert row.endswith("0")
        assert len(header) == len(row)

    def test_no_limits_section_without_limited_jobs(self) -> None:
        JobFactory()
        limited(SEND, 2, succeeded=True)
        output = stats_output()
        assert "\n\n" not in output.strip()
        assert not any(line.startswith("limit") for line in output.splitlines())


# --- the dbqueue_limit_* gauges --------------------------------------------------------------


@pytest.mark.urls("tests.metrics_urls")
@pytest.mark.usefixtures("fresh_view_cache")
class TestLimitGauges:
    @pytest.mark.usefixtures("limited_jobs")
    def test_running_waiting_and_size_per_limit(self, client: Client) -> None:
        samples = scrape(client, "limit")
        assert samples == {
            **{("dbqueue_limit_running", each.limit): each.running for each in EXPECTED},
            **{("dbqueue_limit_waiting", each.limit): each.waiting for each in EXPECTED},
            **{("dbqueue_limit_size", each.limit): each.size or 0 for each in EXPECTED},
            **{("dbqueue_limit_rate", each.limit): each.rate or 0 for each in EXPECTED},
        }

    @pytest.mark.usefixtures("limited_jobs")
    def test_are_gauges_with_help_and_an_escaped_limit_label(self, client: Client) -> None:
        text = client.get("/metrics").content.decode()
        names = ("running", "waiting", "size", "rate")
        for name in (f"dbqueue_limit_{name}" for name in names):
            assert f"# TYPE {name} gauge" in text
            assert f"# HELP {name} " in text
        assert f'dbqueue_limit_running{{limit="{SEND}"}} 2.0' in text
        assert f'dbqueue_limit_waiting{{limit="{SEND}"}} 3.0' in text
        assert f'dbqueue_limit_size{{limit="{SEND}"}} 2.0' in text
        assert 'dbqueue_limit_waiting{limit="key:tenant \\"7\\"\\\\x"} 1.0' in text

    def test_an_idle_limit_has_no_series_and_no_limit_leaves_the_gauges_out(
        self, client: Client
    ) -> None:
        limited(SEND, 2, succeeded=True)
        JobFactory()
        text = client.get("/metrics").content.decode()
        assert "dbqueue_limit_" not in text
        assert "dbqueue_queue_ready_jobs" in text

    def test_are_read_with_the_queue_gauges_once_per_interval(
        self, client: Client, django_assert_num_queries: DjangoAssertNumQueries
    ) -> None:
        limited(SEND, 2)
        with django_assert_num_queries(gauge_read_queries()):
            pages = [client.get("/metrics").content for _ in range(5)]
        assert len(set(pages)) == 1
        assert scrape(client, "limit")[("dbqueue_limit_waiting", SEND)] == 1


# --- the admin's "Limits" table --------------------------------------------------------------


class TestAdminLimitsTable:
    @pytest.mark.usefixtures("limited_jobs")
    def test_shows_each_limit_below_the_queues(self, admin_client: Client) -> None:
        html = admin_client.get(CHANGELIST).content.decode()
        assert "<h3>Limits</h3>" in html
        assert html.index('id="dbqueue-limits"') > html.index('class="dbqueue-queue')
        assert limits_table(html) == [
            ["limit", "size", "rate", "running", "waiting"],
            [API, "-", "20/s", "0", "1"],
            [TENANT, "1", "-", "0", "1"],
            [MAIL, "5", "0.5/s", "1", "0"],
            [SEND, "2", "-", "2", "3"],
        ]

    @pytest.mark.usefixtures("limited_jobs")
    def test_a_full_limit_is_marked(self, admin_client: Client) -> None:
        html = admin_client.get(CHANGELIST).content.decode()
        rows = re.findall(r'<tr class="dbqueue-limit[^"]*">.*?</tr>', html, re.S)
        full = [row for row in rows if "dbqueue-full" in row]
        assert len(full) == 1
        assert f"<td>{SEND}</td>" in full[0]

    @pytest.mark.usefixtures("limited_jobs")
    def test_the_counts_link_to_the_jobs_they_count(self, admin_client: Client) -> None:
        html = admin_client.get(CHANGELIST).content.decode()
        link = re.search(r'href="([^"]*state__exact=ready&amp;limit_key__exact=task[^"]*)"', html)
        assert link is not None
        response = admin_client.get(unescape(link.group(1)))
        assert response.status_code == 200
        assert response.context["cl"].result_count == 3

    @pytest.mark.usefixtures("limited_jobs")
    def test_view_only_staff_see_it(self, viewer: Client) -> None:
        response = viewer.get(CHANGELIST)
        assert response.status_code == 200
        assert limits_table(response.content.decode()) is not None

    def test_absent_without_limited_jobs(self, admin_client: Client) -> None:
        JobFactory()
        JobFactory(running=True)
        limited(SEND, 2, succeeded=True)
        html = admin_client.get(CHANGELIST).content.decode()
        assert 'class="dbqueue-queue' in html
        assert limits_table(html) is None
        assert "<h3>Limits</h3>" not in html
