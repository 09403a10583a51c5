"""``worker.leftovers``: what task code leaves open is rolled back, reported, and gone.

Vendor-neutral: run on PostgreSQL, MariaDB and SQLite alike.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from pytest_django.fixtures import Settings

from django_dbqueue import leases
from django_dbqueue.errors import TRANSACTION_LEFT_OPEN
from django_dbqueue.models import Job, JobState
from django_dbqueue.worker import leftovers
from django_dbqueue.worker.execute import execute
from django_dbqueue.worker.outcome import Outcome
from tests.jobs.hygiene_tasks import ADVISORY_KEY, misbehave
from tests.testapp.models import Execution

LEFT_OPEN = ["atomic", "begin", "autocommit_off", "atomic_closed"]


def run(job: Job) -> Outcome:
    """Claim exactly ``job`` and execute it on this thread, its outcome written here."""
    claimed = leases.claim([job.queue], "worker-a", 1)
    assert [lease.job_id for lease in claimed] == [job.pk]
    return execute(claimed[0])


def committed(job_id: int) -> tuple[str, str, bool]:
    """The job's state and error code, and whether its ``Execution`` row exists, as another
    connection sees them: only what committed."""
    seen: list[tuple[str, str, bool]] = []

    def read() -> None:
        try:
            state, code = Job.objects.values_list("state", "last_error_code").get(pk=job_id)
            seen.append((state, code, Execution.objects.filter(job_id=job_id).exists()))
        finally:
            connections.close_all()

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(30)
    assert seen, "the reading thread failed or timed out"
    return seen[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", LEFT_OPEN)
def test_a_transaction_left_open_is_rolled_back_and_fails_the_attempt(kind: str) -> None:
    job = misbehave.enqueue(kind)
    assert run(job) is Outcome.DEAD
    assert committed(job.pk) == (JobState.DEAD, TRANSACTION_LEFT_OPEN, False)
    assert not connection.in_atomic_block
    assert connection.get_autocommit()
    follower = misbehave.enqueue("atomic")  # the connection takes the next job as new
    assert run(follower) is Outcome.DEAD
    assert committed(follower.pk) == (JobState.DEAD, TRANSACTION_LEFT_OPEN, False)


@pytest.mark.django_db(transaction=True)
def test_a_task_that_raises_with_a_transaction_open_keeps_its_own_error() -> None:
    job = misbehave.enqueue("atomic_raises")
    assert run(job) is Outcome.DEAD
    assert committed(job.pk) == (JobState.DEAD, "ValueError", False)
    assert not connection.in_atomic_block


@pytest.mark.django_db
def test_inside_the_callers_transaction_only_what_the_task_opened_is_undone() -> None:
    depth = len(connection.atomic_blocks)
    job = misbehave.enqueue("atomic")
    assert run(job) is Outcome.DEAD
    assert len(connection.atomic_blocks) == depth
    assert not connection.needs_rollback
    job.refresh_from_db()
    assert (job.state, job.last_error_code) == (JobState.DEAD, TRANSACTION_LEFT_OPEN)
    assert not Execution.objects.filter(job_id=job.pk).exists()


def session_state() -> tuple[int, str, str, int]:
    """This connection's backend pid, search_path, time zone and advisory locks held."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_backend_pid(), current_setting('search_path'), "
            "current_setting('TimeZone'), (SELECT count(*) FROM pg_locks "
            "WHERE locktype = 'advisory' AND pid = pg_backend_pid())"
        )
        return cursor.fetchone()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_reset_session_gives_a_kept_connection_the_session_its_settings_make() -> None:
    pid, search_path, time_zone, locks = session_state()
    with connection.cursor() as cursor:
        cursor.execute("SET search_path TO pg_catalog")
        cursor.execute("SET TIME ZONE 'America/New_York'")
        cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_KEY])
    leftovers.reset_session(connection)
    assert session_state() == (pid, search_path, time_zone, locks)  # same session, as new


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_mode_pool_reset_session_closes_instead(settings: Settings) -> None:
    settings.DBQUEUE = {"POOLER": "transaction"}
    connection.ensure_connection()
    leftovers.reset_session(connection)
    assert connection.connection is None


@pytest.mark.django_db(transaction=True)
def test_the_guard_takes_off_its_own_execute_wrappers_and_leaves_the_tasks() -> None:
    def own(execute, *args):  # type: ignore[no-untyped-def]
        return execute(*args)

    def task() -> str:
        connection.execute_wrappers.append(own)  # installed by the task, never taken off
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "done"

    before = list(connection.execute_wrappers)
    try:
        assert leftovers.guarded(task) == "done"
        assert connection.execute_wrappers == [*before, own]
    finally:
        connection.execute_wrappers[:] = before
