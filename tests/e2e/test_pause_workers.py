"""Pausing a queue while real ``runworkers`` processes drain it.

Two workers drain queues ``a`` and ``b``. Once ``dbqueue_pause a`` has
returned, no job of ``a`` starts (``started_at``, the database clock, is
before the moment read just after the command returned), while ``b`` drains
on; running jobs finish. ``dbqueue_resume a`` lets the workers take ``a``
again, and a pause ``--for`` a while ends by itself, with no job started
before its end.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Min

from django_dbqueue import Job, clock, pauses
from django_dbqueue.models import JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs.faults_tasks import paced
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

#: Jobs per queue, and how long each works: the drain lasts a few seconds on 2 x 4 slots.
JOBS = 300
MILLISECONDS = 40

pytestmark = pytest.mark.django_db(transaction=True)


def enqueue(queue: str, jobs: int = JOBS) -> None:
    with transaction.atomic():
        for _ in range(jobs):
            paced.using(queue=queue).enqueue(queue, MILLISECONDS)


def started(queue: str) -> int:
    return Job.objects.filter(queue=queue, started_at__isnull=False).count()


def succeeded(queue: str) -> int:
    return Job.objects.filter(queue=queue, state=JobState.SUCCEEDED).count()


def pause_command(*args: str) -> str:
    out = StringIO()
    call_command("dbqueue_pause", *args, stdout=out)
    return out.getvalue()


def test_no_job_of_a_paused_queue_starts_after_the_pause_and_resuming_drains_it(
    start_worker: StartWorker,
) -> None:
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    for worker in workers:
        worker.wait_for_log("worker started")
    enqueue("a")
    enqueue("b")
    wait_until(lambda: started("a") >= 20, what="the workers to be draining a")

    pause_command("a")
    paused = clock.database_now(connection)
    wait_until(lambda: succeeded("b") == JOBS, what="b to drain while a is paused")
    a_jobs = Job.objects.filter(queue="a")
    assert not a_jobs.filter(started_at__gte=paused).exists()
    left = a_jobs.filter(state=JobState.READY).count()
    assert left > 0, "a drained before the pause: nothing was tested"
    # b went on after the pause (it was not paused with a).
    assert Job.objects.filter(queue="b", started_at__gte=paused).exists()
    # Every job of a that had started finished: running jobs are not stopped.
    wait_until(
        lambda: not a_jobs.filter(state=JobState.RUNNING).exists(),
        what="a's running jobs to finish",
    )
    assert a_jobs.filter(state=JobState.SUCCEEDED).count() == JOBS - left

    assert pauses.resume(["a"]) == ["a"]
    wait_until(lambda: succeeded("a") == JOBS, what="a to drain once resumed")
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.log()


def test_a_pause_for_a_while_ends_by_itself(start_worker: StartWorker) -> None:
    pause_command("a", "--for", "2s")
    (pause,) = pauses.in_force()
    assert pause.until is not None
    worker = start_worker("--concurrency", "4")
    worker.wait_for_log("worker started")
    enqueue("a", 20)
    wait_until(lambda: succeeded("a") == 20, what="a to drain once its pause ended")
    first = Job.objects.filter(queue="a").aggregate(first=Min("started_at"))["first"]
    assert first >= pause.until
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()
