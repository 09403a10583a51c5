"""Jobs run on time: an idle worker wakes when the next job is due, not at its next poll.

The worker polls only every 30 s here, so a job that starts within 1.5 s of
being due was woken for, not found by a poll.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs.e2e_tasks import recorded, retried_once
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]
SLOW_POLL = {"POLL_INTERVAL": 30}
ON_TIME = timedelta(seconds=1.5)


def idle_worker(start_worker: StartWorker) -> WorkerProcess:
    worker = start_worker("--no-reaper", settings=SLOW_POLL)
    worker.wait_for_log("worker started")
    return worker


@pytest.mark.django_db(transaction=True)
def test_a_job_with_delay_1_starts_within_1_5_seconds(start_worker: StartWorker) -> None:
    idle_worker(start_worker)

    job = recorded.using(delay=1).enqueue("delayed")

    wait_until(lambda: Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED, 10, "the job")
    job.refresh_from_db()
    assert job.started_at is not None
    assert job.started_at - job.created_at >= timedelta(seconds=1)
    assert job.started_at - job.created_at < ON_TIME


@pytest.mark.django_db(transaction=True)
def test_a_retry_with_delay_1_reruns_within_1_5_seconds(start_worker: StartWorker) -> None:
    idle_worker(start_worker)

    job = retried_once.enqueue(1)

    wait_until(lambda: Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED, 10, "the retry")
    first, second = Execution.objects.filter(job_id=job.pk).order_by("attempt")
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.finished_at is not None
    assert second.started_at - first.finished_at >= timedelta(seconds=1)
    assert second.started_at - first.started_at < ON_TIME
