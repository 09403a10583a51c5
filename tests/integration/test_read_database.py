"""``READ_DATABASE``: operators' reads go to the replica alias, the protocol never does.

The suite's ``replica`` alias reaches the same test database (a mirror), so
each test tells the two apart by the queries each connection ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from pytest_django.fixtures import Settings

from django_dbqueue import leases, stats
from django_dbqueue.models import Job, JobState
from django_dbqueue.sql import statements
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "replica"])

CHANGELIST = reverse("admin:django_dbqueue_job_changelist")


def selection() -> str:
    """How the admin's read of the selected jobs filters them, quoted as the vendor quotes."""
    quote = connections["default"].ops.quote_name
    return f"{quote('dbqueue_job')}.{quote('id')} IN ("


@pytest.fixture(autouse=True)
def read_from_replica(settings: Settings) -> None:
    settings.DBQUEUE = {**settings.DBQUEUE, "READ_DATABASE": "replica"}


@contextmanager
def job_queries() -> Iterator[dict[str, list[str]]]:
    """The statements on ``dbqueue_job`` each alias ran within the block, by alias."""
    seen: dict[str, list[str]] = {}
    with (
        CaptureQueriesContext(connections["default"]) as primary,
        CaptureQueriesContext(connections["replica"]) as replica,
    ):
        yield seen
    for alias, captured in (("default", primary), ("replica", replica)):
        seen[alias] = [query["sql"] for query in captured if "dbqueue_job" in query["sql"]]


def test_queue_stats_read_from_the_replica() -> None:
    JobFactory.create_batch(2)

    with job_queries() as queries:
        summary = stats.queue_stats()
        stats.finished_per_minute()

    assert summary["default"].ready == 2
    assert queries["default"] == []
    assert len(queries["replica"]) == 3


def test_dbqueue_stats_reads_from_the_replica() -> None:
    JobFactory.create()
    out = StringIO()

    with job_queries() as queries:
        call_command("dbqueue_stats", "--json", stdout=out)

    assert json.loads(out.getvalue())["queues"]["default"]["ready"] == 1
    # The job table's statistics are the primary's (a replica's are its own): on PostgreSQL
    # that one read of the statistics views goes there, and nothing of the jobs.
    table_health = statements(connections["default"].vendor).get("table_health")
    assert queries["default"] == ([table_health] if table_health else [])
    assert queries["replica"]


def test_the_admin_list_reads_from_the_replica(admin_client: Client) -> None:
    job = JobFactory.create()

    with job_queries() as queries:
        response = admin_client.get(CHANGELIST)

    assert response.status_code == 200
    assert str(job.pk) in response.content.decode()
    assert queries["default"] == []
    assert any("ORDER BY" in sql for sql in queries["replica"])  # the list itself


def test_an_admin_action_reads_and_writes_its_selection_on_the_primary(
    admin_client: Client,
) -> None:
    job = JobFactory.create()

    with job_queries() as queries:
        admin_client.post(
            CHANGELIST, {"action": "cancel_ready", "_selected_action": [job.pk], "index": 0}
        )

    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    # The health view above the list reads the replica; the selection is read on the primary.
    assert any(selection() in sql for sql in queries["default"])
    assert not any(selection() in sql for sql in queries["replica"])


def test_the_protocol_never_reads_from_the_replica() -> None:
    JobFactory.create()

    with job_queries() as queries:
        (lease,) = leases.claim(None, "w1", 1)
        leases.renew([lease])
        assert leases.complete(lease, None)

    assert queries["replica"] == []
    assert queries["default"]
