"""The ``Job`` model: database constraints, partial indexes, queryset filters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils.timezone import now

from django_dbqueue.models import Job, JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

TRAITS = ("running", "succeeded", "dead", "cancelled")


@contextmanager
def rejected(constraint: str) -> Iterator[None]:
    """Expect the database to refuse the write, naming ``constraint``.

    The savepoint keeps the test's transaction usable after the error.
    """
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        yield


def update(job: Job, **values: Any) -> None:
    Job.objects.filter(pk=job.pk).update(**values)


def test_invalid_state_is_rejected() -> None:
    job = JobFactory()

    # The finish shape also rejects a state outside both of its lists; either may report first.
    with rejected("dbqueue_job_state_valid|dbqueue_job_finish_shape"):
        update(job, state="paused")


def test_attempts_above_max_attempts_are_rejected() -> None:
    job = JobFactory(max_attempts=3)

    with rejected("dbqueue_job_attempts_within_budget"):
        update(job, attempts=4)
    update(job, attempts=3)


def test_zero_max_attempts_is_rejected() -> None:
    job = JobFactory()

    with rejected("dbqueue_job_max_attempts_positive"):
        update(job, max_attempts=0)


@pytest.mark.parametrize("missing", ["worker_id", "lease_until"])
def test_running_job_needs_worker_id_and_lease_until(missing: str) -> None:
    job = JobFactory(running=True)

    with rejected("dbqueue_job_claim_shape"):
        update(job, **{missing: None})


@pytest.mark.parametrize("field", ["worker_id", "lease_until"])
@pytest.mark.parametrize("trait", [None, "succeeded", "dead"])
def test_job_that_is_not_running_holds_no_lease(trait: str | None, field: str) -> None:
    job = JobFactory(**({trait: True} if trait else {}))
    value = {"worker_id": "w1", "lease_until": now() + timedelta(minutes=1)}[field]

    with rejected("dbqueue_job_claim_shape"):
        update(job, **{field: value})


@pytest.mark.parametrize("trait", ["succeeded", "dead", "cancelled"])
def test_terminal_job_needs_finished_at(trait: str) -> None:
    job = JobFactory(**{trait: True})

    with rejected("dbqueue_job_finish_shape"):
        update(job, finished_at=None)


@pytest.mark.parametrize("trait", [None, "running"])
def test_active_job_has_no_finished_at(trait: str | None) -> None:
    job = JobFactory(**({trait: True} if trait else {}))

    with rejected("dbqueue_job_finish_shape"):
        update(job, finished_at=now())


# PostgreSQL names the index; SQLite names the columns.
DEDUPE = "dbqueue_job_active_dedupe|dbqueue_job.task, dbqueue_job.dedupe_key"


@pytest.mark.parametrize("second", [{}, {"running": True}])
def test_two_active_jobs_cannot_share_task_and_dedupe_key(second: dict[str, Any]) -> None:
    JobFactory(dedupe_key="invoice:1")

    with rejected(DEDUPE):
        JobFactory(dedupe_key="invoice:1", **second)


def test_dedupe_key_cannot_be_reused_by_moving_a_job_back_to_ready() -> None:
    JobFactory(dedupe_key="invoice:1")
    dead = JobFactory(dead=True, dedupe_key="invoice:1")

    with rejected(DEDUPE):
        update(dead, state=JobState.READY, finished_at=None)


def test_finished_jobs_do_not_hold_their_dedupe_key() -> None:
    for trait in ("succeeded", "dead", "cancelled"):
        JobFactory(dedupe_key="invoice:1", **{trait: True})

    active = JobFactory(dedupe_key="invoice:1")

    assert Job.objects.filter(dedupe_key="invoice:1").count() == 4
    assert list(Job.objects.active().filter(dedupe_key="invoice:1")) == [active]


def test_same_dedupe_key_on_different_tasks_does_not_conflict() -> None:
    JobFactory(task="tests.jobs.tasks.noop", dedupe_key="order:1")
    JobFactory(task="tests.jobs.tasks.send_invoice", dedupe_key="order:1", running=True)

    assert Job.objects.active().filter(dedupe_key="order:1").count() == 2


def test_null_dedupe_keys_never_conflict() -> None:
    JobFactory(dedupe_key=None)
    JobFactory(dedupe_key=None)
    JobFactory(dedupe_key=None, running=True)

    assert Job.objects.active().filter(task="tests.jobs.tasks.noop").count() == 3


@pytest.mark.parametrize("trait", [None, *TRAITS])
def test_every_factory_trait_builds_a_valid_row(trait: str | None) -> None:
    job = JobFactory(**({trait: True} if trait else {}))
    job.refresh_from_db()

    job.full_clean()
    assert job.state == (trait or JobState.READY)
    assert job.attempts <= job.max_attempts


def test_idempotency_key_is_derived_from_the_id() -> None:
    job = JobFactory()

    assert job.idempotency_key == f"dbqueue-job-{job.pk}"
    assert Job.objects.get(pk=job.pk).idempotency_key == job.idempotency_key


def test_queryset_filters_select_each_lifecycle_state() -> None:
    past, future = now() - timedelta(minutes=5), now() + timedelta(hours=1)
    due = JobFactory(run_at=past)
    scheduled = JobFactory(run_at=future)
    running = JobFactory(running=True)
    expired = JobFactory(running=True, lease_until=past)
    succeeded = JobFactory(succeeded=True)
    dead = JobFactory(dead=True)
    cancelled = JobFactory(cancelled=True)

    def ids(queryset: Any) -> set[int]:
        return set(queryset.values_list("pk", flat=True))

    objects = Job.objects
    assert ids(objects.ready()) == {due.pk, scheduled.pk}
    assert ids(objects.due()) == {due.pk}
    assert ids(objects.scheduled()) == {scheduled.pk}
    assert ids(objects.running()) == {running.pk, expired.pk}
    assert ids(objects.expired()) == {expired.pk}
    assert ids(objects.succeeded()) == {succeeded.pk}
    assert ids(objects.dead()) == {dead.pk}
    assert ids(objects.cancelled()) == {cancelled.pk}
    assert ids(objects.active()) == {due.pk, scheduled.pk, running.pk, expired.pk}
    assert ids(objects.finished()) == {succeeded.pk, dead.pk, cancelled.pk}


#: How each database sets a connection's session time zone ahead of (+5 h) or behind UTC.
SESSION_ZONES = {
    "mysql": ("SET time_zone = '{:+03d}:00'", "SELECT @@session.time_zone", "SET time_zone = '{}'"),
    "postgresql": (
        "SET TIME ZONE INTERVAL '{:+03d}:00' HOUR TO MINUTE",
        "SHOW TIME ZONE",
        "SET TIME ZONE '{}'",
    ),
}


@pytest.fixture(params=[5, -5], ids=["utc+5", "utc-5"])
def session_time_zone(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test's connection in a session time zone hours off UTC, put back after.

    SQLite has no session time zone: there the test runs as it is.
    """
    if connection.vendor not in SESSION_ZONES:
        yield
        return
    set_zone, read_zone, restore_zone = SESSION_ZONES[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(read_zone)
        (previous,) = cursor.fetchone()
        cursor.execute(set_zone.format(request.param))
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(restore_zone.format(previous))


def test_lifecycle_filters_read_the_utc_clock_in_any_session_time_zone(
    session_time_zone: None,
) -> None:
    hour_ago, in_an_hour = now() - timedelta(hours=1), now() + timedelta(hours=1)
    due = JobFactory(run_at=hour_ago)
    scheduled = JobFactory(run_at=in_an_hour)
    JobFactory(running=True, lease_until=in_an_hour)
    expired = JobFactory(running=True, lease_until=hour_ago)

    assert list(Job.objects.due().values_list("pk", flat=True)) == [due.pk]
    assert list(Job.objects.scheduled().values_list("pk", flat=True)) == [scheduled.pk]
    assert list(Job.objects.expired().values_list("pk", flat=True)) == [expired.pk]


def test_a_job_created_without_times_is_due_now_in_any_session_time_zone(
    session_time_zone: None,
) -> None:
    job = Job.objects.create(task="tests.jobs.tasks.noop")
    job.refresh_from_db()

    assert abs(job.run_at - now()) < timedelta(minutes=1)
    assert abs(job.created_at - now()) < timedelta(minutes=1)
    assert list(Job.objects.due().values_list("pk", flat=True)) == [job.pk]


def test_filters_chain_with_other_lookups() -> None:
    JobFactory(queue="mail", run_at=now() - timedelta(seconds=1))
    JobFactory(queue="default", run_at=now() - timedelta(seconds=1))

    assert list(Job.objects.filter(queue="mail").due().values_list("queue", flat=True)) == ["mail"]


#: The databases page's table (docs/howto/databases.md): its columns, and the row naming
#: the notices to silence.
DOCS_VENDOR_COLUMNS = {"postgresql": 1, "mysql": 2, "sqlite": 3}
DOCS_NOTICES_ROW = "| Django notices to silence"


def test_the_docs_silence_exactly_the_model_notices_this_database_raises() -> None:
    page = (Path(__file__).parents[2] / "docs" / "howto" / "databases.md").read_text()
    (row,) = [line for line in page.splitlines() if line.startswith(DOCS_NOTICES_ROW)]
    cell = row.split("|")[1 + DOCS_VENDOR_COLUMNS[connection.vendor]]

    raised = {message.id for message in Job.check(databases=["default"])}

    assert sorted(raised) == re.findall(r"models\.W\d+", cell)


def index_sql() -> dict[str, str]:
    """Index name -> its definition, as the database reports it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'dbqueue_job'"
            )
        else:
            cursor.execute(
                "SELECT name, sql FROM sqlite_master "
                "WHERE type = 'index' AND tbl_name = 'dbqueue_job' AND sql IS NOT NULL"
            )
        return dict(cursor.fetchall())


@pytest.mark.postgresql
def test_partial_indexes_exist_with_their_predicates_on_postgresql() -> None:
    indexes = index_sql()

    ready = indexes["dbqueue_job_ready"]
    assert "(queue, priority DESC, run_at, id)" in ready
    assert "WHERE ((state)::text = 'ready'::text)" in ready
    keyless = indexes["dbqueue_job_ready_keyless"]
    assert "(queue, priority DESC, run_at, id)" in keyless
    assert keyless.endswith(
        "WHERE (((state)::text = 'ready'::text) AND (serial_key IS NULL) AND (limit_key IS NULL))"
    )
    # The jobs under a limit (limits.py): ready ones per limit in claim order, running ones.
    limited = indexes["dbqueue_job_ready_limited"]
    assert "(limit_key, priority DESC, run_at, id) INCLUDE (queue, limit_size)" in limited
    assert limited.endswith("WHERE (((state)::text = 'ready'::text) AND (limit_key IS NOT NULL))")
    assert indexes["dbqueue_job_running_limited"].endswith(
        "(limit_key) WHERE (((state)::text = 'running'::text) AND (limit_key IS NOT NULL))"
    )

    lease = indexes["dbqueue_job_running_lease"]
    assert "(lease_until)" in lease
    assert "WHERE ((state)::text = 'running'::text)" in lease

    dedupe = indexes["dbqueue_job_active_dedupe"]
    assert dedupe.startswith("CREATE UNIQUE INDEX")
    assert "(task, dedupe_key)" in dedupe
    assert "'ready'" in dedupe
    assert "'running'" in dedupe
    assert "dedupe_key IS NOT NULL" in dedupe

    # Rows get entries only once they have a finish time or a subject; subject_type_id has
    # no index of its own (the subject index leads with it).
    assert indexes["dbqueue_job_finished"].endswith("(finished_at) WHERE (finished_at IS NOT NULL)")
    assert indexes["dbqueue_job_subject"].endswith(
        "(subject_type_id, subject_id) WHERE (subject_type_id IS NOT NULL)"
    )
    assert not [sql for sql in indexes.values() if sql.endswith("(subject_type_id)")]


def test_partial_indexes_exist_on_sqlite() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("reads sqlite_master")
    indexes = index_sql()

    assert indexes["dbqueue_job_ready"].endswith("""WHERE "state" = 'ready'""")
    assert indexes["dbqueue_job_running_lease"].endswith("""WHERE "state" = 'running'""")
    dedupe = indexes["dbqueue_job_active_dedupe"]
    assert dedupe.startswith("CREATE UNIQUE INDEX")
    assert """"dedupe_key" IS NOT NULL""" in dedupe
    assert indexes["dbqueue_job_finished"].endswith("""WHERE "finished_at" IS NOT NULL""")
    assert indexes["dbqueue_job_subject"].endswith("""WHERE "subject_type_id" IS NOT NULL""")
