"""Progress reported inside the task's transaction, through a real ``runworkers``.

The reports are written by the worker's heartbeat thread on its own connection:
they are visible while the task's transaction is still open, and a row an
operator holds ``SELECT ... FOR UPDATE`` on holds back that job's reports only,
never the other jobs' renewals (leases here are 2 s; the lock is held over
three lease lengths, with a second worker standing by to take whatever is reaped).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess, open_gate
from tests.e2e.test_lease_renewal import (
    SETTINGS,
    all_started,
    each_ran_once_through_the_hold,
    ran_once_and_succeeded,
    successes_written,
)
from tests.integration.test_leases import row_locked_elsewhere
from tests.jobs.e2e_tasks import gated, reports_progress_in_a_transaction
from tests.jobs.tasks import reports_a_burst
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

e2e_db = pytest.mark.django_db(transaction=True)


def reported(job: Job) -> dict[str, object] | None:
    return Job.objects.get(pk=job.pk).current_progress


@pytest.mark.locking
@e2e_db
def test_progress_in_a_transaction_under_an_operators_row_lock_stalls_nothing(
    start_worker: StartWorker,
) -> None:
    reporting = reports_progress_in_a_transaction.enqueue("go")
    others = [gated.enqueue("go") for _ in range(3)]
    first = start_worker("--concurrency", "4", "--worker-id", "first", settings=SETTINGS)
    wait_until(lambda: all_started([reporting, *others]), what="all four jobs to start")
    # Written while the task's transaction is open: not on the task's connection.
    seen = wait_until(lambda: reported(reporting), 10, "the first progress report")
    assert seen["message"] == "attempt 1"
    assert "in a transaction" not in Execution.objects.get(job_id=reporting.pk).label
    wait_until(
        lambda: reported(reporting)["done"] > seen["done"],  # type: ignore[index]
        5,
        "a later report, about a second on",
    )
    start_worker("--concurrency", "4", "--worker-id", "second", settings=SETTINGS)
    with row_locked_elsewhere(reporting.pk):
        frozen = Job.objects.get(pk=reporting.pk).progress
        each_ran_once_through_the_hold(others, first)
        assert Job.objects.get(pk=reporting.pk).progress == frozen
        open_gate("go")
        successes_written(others)
    for job in others:
        ran_once_and_succeeded(job)
    # The locked job's lease ran out under the lock, and the reaper handed the job to a new
    # attempt once the lock was gone.
    wait_until(
        lambda: Job.objects.filter(pk=reporting.pk, state=JobState.SUCCEEDED).exists(),
        what="the reporting job to be retried and succeed",
    )
    final = Job.objects.get(pk=reporting.pk)
    assert final.attempts == 2
    assert f"job id={reporting.pk} lease ran out while its row was locked" in first.log()
    assert final.current_progress["message"].startswith("attempt 2")  # type: ignore[index]
    # The task learned it from set_progress (LeaseLost) and stopped within a lease or so.
    learned = rf"job id={reporting.pk} task=\S+ attempt=1/5 .* outcome=lease_lost"
    assert re.search(learned, first.log())


@e2e_db
def test_a_worker_writes_a_bursts_last_report_before_the_outcome(
    start_worker: StartWorker,
) -> None:
    succeeds = reports_a_burst.enqueue(1000)
    fails = reports_a_burst.enqueue(1000, then_fail=True)
    worker = start_worker("--concurrency", "2", "--burst")
    assert worker.wait() == 0, worker.log()
    for job, state in ((succeeds, JobState.SUCCEEDED), (fails, JobState.DEAD)):
        finished = Job.objects.get(pk=job.pk)
        assert finished.state == state
        # Reported well within one pacing interval: only the first report was written by the
        # heartbeat; the last one, with the outcome.
        assert finished.current_progress["done"] == 1000  # type: ignore[index]
        assert finished.current_progress["message"] == "row 1000"  # type: ignore[index]
