"""Every job starts on a clean connection, and every outcome reflects what committed.

A task that leaves a transaction open (an ``atomic`` block never exited, a raw
``BEGIN``) or changes its session (``SET ROLE``, ``SET search_path``, an
advisory lock) runs first on a one-slot worker; five well-behaved jobs follow
on the same slot. With ``CONN_MAX_AGE`` 0 and 60 alike, each of the five
commits its write and finds the session as configured, and the misbehaving job
is never ``succeeded`` with its writes rolled back. The open-transaction cases
run on MariaDB too (``locking``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from django_dbqueue.errors import TRANSACTION_LEFT_OPEN
from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs.hygiene_tasks import misbehave, write_and_report, write_row
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

FOLLOWERS = 5
LEFT_OPEN = {"atomic", "begin"}


@pytest.fixture
def bare_role() -> Iterator[str]:
    """A role with no privileges at all, for ``SET ROLE`` (dropped at teardown)."""
    if connection.vendor != "postgresql":
        pytest.skip("roles, search_path and advisory locks are PostgreSQL's")
    role = f"dbqueue_bare_{connection.settings_dict['NAME']}"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP ROLE IF EXISTS "{role}"')
        cursor.execute(f'CREATE ROLE "{role}"')
    yield role
    with connection.cursor() as cursor:
        cursor.execute(f'DROP ROLE IF EXISTS "{role}"')


def clean_label() -> str:
    """What ``write_and_report`` records on a connection as the settings make it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user, current_setting('search_path')")
        user, search_path = cursor.fetchone()
    return f"{user}|{search_path}|0"


@pytest.mark.parametrize("conn_max_age", [0, 60])
@pytest.mark.parametrize("kind", ["atomic", "begin", "set_role", "search_path", "advisory_lock"])
def test_the_jobs_after_a_misbehaving_one_commit_on_a_clean_session(
    start_worker: Callable[..., WorkerProcess],
    worker_env: dict[str, str],
    bare_role: str,
    kind: str,
    conn_max_age: int,
) -> None:
    bad = misbehave.enqueue(kind, bare_role)
    followers = [write_and_report.enqueue() for _ in range(FOLLOWERS)]
    url = f"{worker_env['DATABASE_URL']}?conn_max_age={conn_max_age}"
    worker = start_worker("--burst", "--concurrency", "1", env={"DATABASE_URL": url})
    assert worker.wait() == 0, worker.log()

    done = {job.pk: job for job in Job.objects.filter(pk__in=[j.pk for j in followers])}
    labels = dict(Execution.objects.values_list("job_id", "label"))
    assert {job.state for job in done.values()} == {JobState.SUCCEEDED}, worker.log()
    assert [labels.get(pk) for pk in done] == [clean_label()] * FOLLOWERS, worker.log()
    bad.refresh_from_db()
    if kind in LEFT_OPEN:
        assert (bad.state, bad.last_error_code) == (JobState.DEAD, TRANSACTION_LEFT_OPEN)
        assert bad.pk not in labels  # its write was rolled back, and it says so
    else:
        assert bad.state == JobState.SUCCEEDED, bad.last_error


@pytest.mark.locking
@pytest.mark.parametrize("conn_max_age", [0, 60])
@pytest.mark.parametrize("kind", ["atomic", "begin", "autocommit_off"])
def test_a_transaction_left_open_fails_its_job_and_the_next_jobs_commit_on_any_server(
    start_worker: Callable[..., WorkerProcess],
    worker_env: dict[str, str],
    kind: str,
    conn_max_age: int,
) -> None:
    bad = misbehave.enqueue(kind)
    followers = [write_row.enqueue() for _ in range(FOLLOWERS)]
    url = f"{worker_env['DATABASE_URL']}?conn_max_age={conn_max_age}"
    worker = start_worker("--burst", "--concurrency", "1", env={"DATABASE_URL": url})
    assert worker.wait() == 0, worker.log()

    ids = [job.pk for job in followers]
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {
        JobState.SUCCEEDED
    }, worker.log()
    assert sorted(Execution.objects.values_list("job_id", flat=True)) == ids, worker.log()
    bad.refresh_from_db()
    assert (bad.state, bad.last_error_code) == (JobState.DEAD, TRANSACTION_LEFT_OPEN)
