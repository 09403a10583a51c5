"""The job table's bloat signals: dead rows and what holds back vacuum (PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from pytest_django import Settings

from django_dbqueue.models import Job
from django_dbqueue.table_health import TableHealth, table_health
from tests.factories import JobFactory
from tests.integration.test_history import (
    history_tables,
    moved_while_young,
    start_of_day,
    succeeded_at,
)
from tests.raw_session import raw_session
from tests.waiting import wait_until

APPLICATION = "dbqueue-test-holder"


def stats(*args: str) -> str:
    out = StringIO()
    call_command("dbqueue_stats", *args, stdout=out)
    return out.getvalue()


def measured() -> TableHealth:
    health = table_health()
    assert health is not None
    return health


@pytest.fixture
def idle_in_transaction(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """Another session of the test database, left idle in a transaction that holds a
    snapshot (as a forgotten ``transaction.atomic()`` in a shell would)."""
    holder = raw_session(application_name=APPLICATION)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM dbqueue_job")
    yield holder
    holder.close()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_dead_rows_of_the_job_table_are_counted_once_written() -> None:
    JobFactory.create_batch(50)
    assert Job.objects.all().delete()[0] == 50
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this session's counts, now

    health = wait_until(
        lambda: (found := measured()).dead_rows >= 50 and found, what="50 dead rows counted"
    )
    assert health.table == "dbqueue_job"
    assert health.dead_share > 0.9


@pytest.mark.postgresql
def test_a_session_idle_in_a_transaction_is_named_as_what_holds_back_vacuum(
    idle_in_transaction: psycopg.Connection[Any],
) -> None:
    horizon = measured().horizon
    assert horizon is not None
    assert (horizon.kind, horizon.holder, horizon.pid, horizon.state) == (
        "session",
        APPLICATION,
        idle_in_transaction.info.backend_pid,
        "idle in transaction",
    )
    assert horizon.transactions >= 0
    assert horizon.seconds is not None  # the same role: its transaction start is visible

    idle_in_transaction.rollback()
    assert measured().horizon is None


@pytest.mark.postgresql
def test_dbqueue_stats_shows_the_table_and_its_horizon(
    idle_in_transaction: psycopg.Connection[Any],
) -> None:
    shown = stats().splitlines()
    header, row, held, history = shown[-4:]
    assert header.split() == ["table", "live", "rows", "dead", "rows", "dead", "last", "vacuum"]
    assert row.split()[0] == "dbqueue_job"
    pid = idle_in_transaction.info.backend_pid
    assert held.startswith(
        f"vacuum held back by session pid {pid} ({APPLICATION}, idle in transaction), "
    )
    assert history.startswith("history: ")
    table = json.loads(stats("--json"))["table"]
    assert table["table"] == "dbqueue_job"
    assert table["horizon"]["pid"] == pid
    assert set(table) == {
        "table",
        "live_rows",
        "dead_rows",
        "last_vacuum_age_seconds",
        "horizon",
        "history",
    }


@pytest.mark.postgresql
@pytest.mark.urls("tests.metrics_urls")
@pytest.mark.usefixtures("fresh_view_cache")
def test_the_gauges_show_the_table_and_how_old_the_snapshot_holding_back_vacuum_is(
    client: Client, idle_in_transaction: psycopg.Connection[Any]
) -> None:
    health = measured()
    assert health.horizon is not None
    response = client.get("/metrics")
    assert response.status_code == 200
    samples = {
        (sample.name, sample.labels.get("table")): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert samples[("dbqueue_table_live_rows", "dbqueue_job")] >= 0
    assert samples[("dbqueue_table_dead_rows", "dbqueue_job")] >= 0
    assert samples[("dbqueue_vacuum_horizon_age_transactions", None)] >= 0
    assert samples[("dbqueue_vacuum_horizon_age_seconds", None)] > 0


@pytest.mark.django_db
def test_other_databases_measure_nothing() -> None:
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL measures the table (tests above)")
    assert table_health() is None
    assert json.loads(stats("--json"))["table"] is None
    assert "vacuum" not in stats()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.metrics_urls")
@pytest.mark.usefixtures("fresh_view_cache")
def test_the_history_tables_are_counted_sized_and_dated_in_stats_and_gauges(
    client: Client, settings: Settings
) -> None:
    succeeded_at(start_of_day(3))
    assert moved_while_young(settings) == 1
    tables = history_tables()
    oldest = min(name for name in tables if name.startswith("dbqueue_job_succeeded_"))

    health = table_health()

    assert health is not None
    assert health.history.tables == len(tables)
    assert health.history.bytes > 0
    assert health.history.oldest_day is not None
    assert f"{health.history.oldest_day:%Y%m%d}" == oldest[len("dbqueue_job_succeeded_") :][:8]
    out = StringIO()
    call_command("dbqueue_stats", stdout=out)
    assert f"history: {len(tables)} tables" in out.getvalue()
    out = StringIO()
    call_command("dbqueue_stats", "--json", stdout=out)
    assert json.loads(out.getvalue())["table"]["history"] == {
        "tables": len(tables),
        "bytes": health.history.bytes,
        "oldest_day": health.history.oldest_day.isoformat(),
    }
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(client.get("/metrics").content.decode())
        for sample in family.samples
    }
    assert samples["dbqueue_history_tables"] == len(tables)
    assert samples["dbqueue_history_bytes"] > 0
