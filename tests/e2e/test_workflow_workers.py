"""Workflows run by real ``runworkers`` processes: order across processes, and a crash mid-step.

Times are the jobs' own ``started_at``/``finished_at``, written by the database clock,
the one clock every worker process shares.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import pytest
from django.db import transaction

from django_dbqueue import Job, JobState, chain
from tests.e2e.conftest import WorkerProcess, open_gate
from tests.e2e.test_crashes import FAST_POLL, QUICK_RETRY_SETTINGS, execution_of, kill, stop
from tests.jobs.e2e_tasks import gated, recorded
from tests.jobs.serial_e2e_tasks import serial_step
from tests.testapp.models import Execution, Order
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_chain_runs_its_steps_strictly_in_order_across_two_workers(
    start_worker: StartWorker,
) -> None:
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    for worker in workers:
        worker.wait_for_log("worker started")
    with transaction.atomic():
        Order.objects.create(total=3)
        steps = [serial_step.step(f"step-{n}", 0.05) for n in range(6)]
        workflow = chain(*steps).enqueue()

    wait_until(
        lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() == 6,
        what="every step of the chain to succeed",
    )
    stop(*workers)

    done = list(Job.objects.filter(pk__in=[job.pk for job in workflow.jobs]).order_by("pk"))
    for earlier, later in pairwise(done):
        assert earlier.finished_at is not None
        assert later.started_at is not None
        assert later.started_at >= earlier.finished_at, f"{later} started before {earlier} ended"
    assert all(job.attempts == 1 for job in done)


def test_a_dependency_killed_mid_run_is_retried_and_its_dependent_runs_once(
    start_worker: StartWorker,
) -> None:
    workflow = chain(gated.step("workflow"), recorded.step("then")).enqueue()
    dependency, dependent = workflow.jobs
    a = start_worker("--worker-id", "A")
    wait_until(lambda: execution_of(dependency, 1), what="the dependency to start on A")

    kill(a)
    open_gate("workflow")
    b = start_worker("--worker-id", "B", *FAST_POLL, settings=QUICK_RETRY_SETTINGS)
    wait_until(
        lambda: Job.objects.get(pk=dependent.pk).state == JobState.SUCCEEDED,
        20,
        "the dependent to succeed after the dependency's retry",
    )
    stop(b)

    first = Job.objects.get(pk=dependency.pk)
    assert (first.state, first.attempts) == (JobState.SUCCEEDED, 2)
    ran = Execution.objects.filter(job_id=dependent.pk)
    assert [(e.attempt, e.worker_id) for e in ran] == [(1, "B")]
    then = Job.objects.get(pk=dependent.pk)
    assert then.started_at is not None
    assert first.finished_at is not None
    assert then.started_at >= first.finished_at
