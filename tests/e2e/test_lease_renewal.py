"""One locked job row delays that job's renewal and completion only, never the worker's others.

A task that calls ``context.heartbeat()`` inside its own transaction, or an
operator holding ``SELECT ... FOR UPDATE`` on one running job, used to make
the heartbeat's one batched renewal wait for that row lock: every lease of the
worker lapsed, the reaper requeued the other jobs, and a second worker ran
them while the first still did. Leases here are 2 s and each lock is held
about three lease lengths; a second worker stands by to take whatever is
reaped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from django_dbqueue.errors import LEASE_EXPIRED
from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess, open_gate
from tests.integration.test_leases import row_locked_elsewhere
from tests.jobs.e2e_tasks import gated, heartbeats_in_a_transaction
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

e2e_db = pytest.mark.django_db(transaction=True)

#: How long the jobs are held running, under the lock: three leases of the tasks used here
#: (2 s each), and more.
HOLD = 7.0
#: Fast retries, so a job the reaper requeues would run again well within ``HOLD``.
SETTINGS = {"RETRY_BASE": 0.1, "RETRY_CAP": 0.2, "REAPER_INTERVAL": 0.5}


def executions(job: Job) -> int:
    return Execution.objects.filter(job_id=job.pk).count()


def all_started(jobs: list[Job]) -> bool:
    return all(executions(job) for job in jobs)


def ran_once_and_succeeded(job: Job) -> None:
    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.attempts, executions(job)) == (JobState.SUCCEEDED, 1, 1)
    assert LEASE_EXPIRED not in [entry["code"] for entry in row.errors]


def each_ran_once_through_the_hold(jobs: list[Job], worker: WorkerProcess) -> None:
    """For ``HOLD`` seconds (three leases), no job of ``jobs`` runs a second time."""
    deadline = time.monotonic() + HOLD
    while time.monotonic() < deadline:
        assert [executions(job) for job in jobs] == [1] * len(jobs), worker.log()
        time.sleep(0.2)


def successes_written(jobs: list[Job]) -> None:
    """Wait (5 s at most) until every job of ``jobs`` has succeeded."""
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=[job.pk for job in jobs]).succeeded().count() == len(jobs)
        ),
        timeout=5,
        what=f"the {len(jobs)} jobs' successes to be written",
    )


@e2e_db
def test_a_heartbeat_inside_the_task_transaction_stalls_no_other_lease(
    start_worker: StartWorker,
) -> None:
    in_transaction = heartbeats_in_a_transaction.enqueue("go")
    others = [gated.enqueue("go") for _ in range(3)]
    jobs = [in_transaction, *others]
    first = start_worker("--concurrency", "4", "--worker-id", "first", settings=SETTINGS)
    wait_until(lambda: all_started(jobs), what="all four jobs to start on the first worker")
    start_worker("--concurrency", "4", "--worker-id", "second", settings=SETTINGS)
    # Three leases long: on main every lease of the first worker lapsed here, and the second
    # worker ran the three gated jobs again.
    each_ran_once_through_the_hold(jobs, first)
    open_gate("go")
    wait_until(
        lambda: Job.objects.filter(pk__in=[job.pk for job in jobs]).succeeded().count() == 4,
        what="all four jobs to succeed",
    )
    for job in jobs:
        ran_once_and_succeeded(job)
    assert "lease lost" not in first.log()


@pytest.mark.locking
@e2e_db
def test_a_row_locked_by_an_operator_stalls_no_other_lease_or_completion(
    start_worker: StartWorker,
) -> None:
    locked, *others = [gated.enqueue("go") for _ in range(4)]
    first = start_worker("--concurrency", "4", "--worker-id", "first", settings=SETTINGS)
    wait_until(lambda: all_started([locked, *others]), what="all four jobs to start")
    start_worker("--concurrency", "4", "--worker-id", "second", settings=SETTINGS)
    with row_locked_elsewhere(locked.pk):
        # On main every lease of the first worker lapsed here, and the second worker ran the
        # three others again.
        each_ran_once_through_the_hold(others, first)
        # The locked job's own lease ran out meanwhile; its task is told.
        assert f"job id={locked.pk} lease ran out while its row was locked" in first.log()
        # The others' successes are written while the locked row is still held.
        open_gate("go")
        successes_written(others)
    for job in others:
        ran_once_and_succeeded(job)
    # The locked job's own lease ran out: the reaper requeues it once the lock is gone.
    wait_until(
        lambda: Job.objects.filter(pk=locked.pk, state=JobState.SUCCEEDED).exists(),
        what="the locked job to be retried and succeed",
    )
    assert Job.objects.get(pk=locked.pk).errors[0]["code"] == LEASE_EXPIRED
