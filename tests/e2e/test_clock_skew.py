"""A worker whose clock is 10 minutes off the database's runs retries on time by the database's.

The worker runs under libfaketime; the database server and this test keep the
true time. Attempts are stamped by the task with the worker's (shifted)
clock, so the gaps between them are true durations.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from itertools import pairwise

import pytest

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs.e2e_tasks import fails_with_backoff, retried_once
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]
#: The worker polls only every 30 s: a retry that starts on time was woken for.
SLOW_POLL = {"POLL_INTERVAL": 30}
#: How late an attempt may start after it is due.
ON_TIME = timedelta(seconds=1.5)
SKEWS = pytest.mark.parametrize("offset", ["-10m", "+10m"], ids=["behind", "ahead"])


def skewed_worker(
    start_worker: StartWorker, faketime_env: Callable[[str], dict[str, str]], offset: str
) -> WorkerProcess:
    worker = start_worker("--no-reaper", settings=SLOW_POLL, env=faketime_env(offset))
    worker.wait_for_log("worker started")
    return worker


def attempts(job: Job) -> list[Execution]:
    return list(Execution.objects.filter(job_id=job.pk).order_by("attempt"))


def assert_history_stamped_by_the_database(job: Job) -> None:
    job.refresh_from_db()
    assert job.finished_at is not None
    for entry in job.errors:
        stamped = datetime.fromisoformat(entry["at"])
        assert abs(stamped - datetime.now(dt_timezone.utc)) < timedelta(minutes=1), entry


@SKEWS
@pytest.mark.django_db(transaction=True)
def test_a_retry_delay_is_kept_by_the_database_clock(
    start_worker: StartWorker, faketime_env: Callable[[str], dict[str, str]], offset: str
) -> None:
    skewed_worker(start_worker, faketime_env, offset)

    job = retried_once.enqueue(2)

    wait_until(lambda: Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED, 15, "the retry")
    first, second = attempts(job)
    assert first.finished_at is not None
    assert second.started_at - first.finished_at >= timedelta(seconds=2)
    assert second.started_at - first.started_at < timedelta(seconds=2) + ON_TIME
    assert_history_stamped_by_the_database(job)


@SKEWS
@pytest.mark.django_db(transaction=True)
def test_backoff_is_kept_by_the_database_clock(
    start_worker: StartWorker, faketime_env: Callable[[str], dict[str, str]], offset: str
) -> None:
    skewed_worker(start_worker, faketime_env, offset)

    job = fails_with_backoff.enqueue()  # backoff 1-2 s after each attempt

    wait_until(lambda: Job.objects.get(pk=job.pk).state == JobState.DEAD, 20, "three attempts")
    runs = attempts(job)
    assert [run.attempt for run in runs] == [1, 2, 3]
    for before, after in pairwise(runs):
        assert before.finished_at is not None
        assert after.started_at - before.finished_at >= timedelta(seconds=1)
        assert after.started_at - before.started_at < timedelta(seconds=2) + ON_TIME
    assert_history_stamped_by_the_database(job)
