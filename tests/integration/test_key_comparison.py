"""Keys and names compare exactly on every database: case, accents and trailing spaces count.

On MySQL/MariaDB this holds under the server's default collation (the suite's test
database is created with it) because migration ``mysql_exact_key_collation`` converts
the app's tables to a binary NO PAD collation; ``dbqueue.E019`` refuses a table that
compares loosely.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from django_dbqueue import Job, JobState, checks, leases
from django_dbqueue.collation import exact_collation
from django_dbqueue.models import PeriodicSlot
from tests.factories import JobFactory
from tests.jobs.tasks import noop

pytestmark = pytest.mark.django_db

#: Seven distinct keys that a case-, accent- or pad-insensitive comparison merges into four.
DISTINCT_KEYS = ("invoice:ABC", "invoice:abc", "invoice:abc ", "café", "cafe", "CAFE", "straße")


def test_dedupe_keys_differing_in_case_accents_or_trailing_spaces_are_distinct_jobs() -> None:
    jobs = [noop.using(dedupe_key=key).enqueue() for key in DISTINCT_KEYS]
    again = noop.using(dedupe_key="invoice:abc").enqueue()

    assert [job.deduplicated for job in jobs] == [False] * len(DISTINCT_KEYS)
    assert sorted(Job.objects.values_list("dedupe_key", flat=True)) == sorted(DISTINCT_KEYS)
    assert (again.deduplicated, again.pk) == (True, jobs[1].pk)


def test_requeue_revives_a_dead_job_whose_key_differs_from_an_active_ones_only_in_case() -> None:
    noop.using(dedupe_key="event:A1").enqueue()
    dead = JobFactory(dead=True, dedupe_key="event:a1")

    assert leases.requeue([dead.pk], extra_attempts=1, actor="test") == [dead.pk]


def test_a_worker_claims_only_the_queue_it_names_exactly() -> None:
    job = noop.using(queue="Reports").enqueue()

    assert leases.claim(["reports"], "w1", 5) == []
    assert [lease.job_id for lease in leases.claim(["Reports"], "w1", 5)] == [job.pk]


def test_a_serial_key_differing_only_in_case_does_not_hold_a_job_back() -> None:
    JobFactory(running=True, serial_key="account:X")
    job = noop.using(serial_key="account:x").enqueue()

    assert [lease.job_id for lease in leases.claim(None, "w2", 5)] == [job.pk]


def test_periodic_slots_of_task_names_differing_only_in_case_are_two_slots() -> None:
    PeriodicSlot.objects.create(task="reports.Nightly", last_slot=1_767_225_600)
    PeriodicSlot.objects.create(task="reports.nightly", last_slot=1_767_225_600)

    assert PeriodicSlot.objects.filter(task="reports.nightly").count() == 1


def test_jobs_are_found_by_their_exact_task_name() -> None:
    noop.enqueue()

    assert Job.objects.filter(task=noop.name.upper(), state=JobState.READY).count() == 0
    assert Job.objects.filter(task=noop.name, state=JobState.READY).count() == 1


@pytest.fixture
def loose_queue_column() -> Iterator[None]:
    """``dbqueue_job.queue`` under the server's case-insensitive default, restored after."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE dbqueue_job MODIFY queue varchar(100) "
            "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "ALTER TABLE dbqueue_job MODIFY queue varchar(100) "
                f"CHARACTER SET utf8mb4 COLLATE {exact_collation(connection)} NOT NULL"
            )


@pytest.mark.mysql
@pytest.mark.django_db(transaction=True)
def test_e019_passes_the_migrated_tables() -> None:
    assert checks.check_mysql_key_collation(databases=["default"]) == []


@pytest.mark.mysql
@pytest.mark.django_db(transaction=True)
def test_e019_refuses_a_table_whose_key_column_compares_loosely(loose_queue_column: None) -> None:
    (message,) = checks.check_mysql_key_collation(databases=["default"])

    assert message.id == "dbqueue.E019"
    assert "dbqueue_job.queue (utf8mb4_general_ci)" in message.msg
    assert message.hint.endswith(
        f"ALTER TABLE dbqueue_job CONVERT TO CHARACTER SET utf8mb4 COLLATE "
        f"{exact_collation(connection)}."
    )
