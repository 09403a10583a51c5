"""``DBQUEUE["MIDDLEWARE"]`` in a real ``runworkers`` process: the order in which it wraps
the attempt, a middleware that raises, and one that cannot be built at start."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_dbqueue.errors import MIDDLEWARE_FAILED
from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs import tasks

StartWorker = Callable[..., WorkerProcess]
M = "tests.jobs.middleware."

e2e_db = pytest.mark.django_db(transaction=True)


@e2e_db
def test_the_worker_runs_every_attempt_inside_the_middleware_in_order(
    start_worker: StartWorker,
) -> None:
    job = tasks.send_invoice.enqueue(7)
    worker = start_worker(
        "--burst", "--queue", "mail", settings={"MIDDLEWARE": [M + "labels", M + "swallows"]}
    )
    assert worker.wait() == 0
    job = Job.objects.get(pk=job.pk)
    assert job.state == JobState.SUCCEEDED
    # ``labels`` is outermost: it wraps what ``swallows`` passed on from the task.
    assert job.result == {
        "result": {"order": 7, "copy": False},
        "task": "tests.jobs.tasks.send_invoice",
        "queue": "mail",
        "meta": {},
    }


@e2e_db
def test_a_middleware_that_raises_fails_each_attempt_and_the_worker_goes_on(
    start_worker: StartWorker,
) -> None:
    first, second = tasks.noop.enqueue(), tasks.noop.enqueue()
    Job.objects.filter(pk__in=[first.pk, second.pk]).update(max_attempts=1)
    worker = start_worker(
        "--burst", "--concurrency", "1", settings={"MIDDLEWARE": [M + "exits", M + "labels"]}
    )
    assert worker.wait() == 0
    for job in Job.objects.filter(pk__in=[first.pk, second.pk]):
        assert (job.state, job.last_error_code) == (JobState.DEAD, MIDDLEWARE_FAILED)
        assert job.errors[0]["message"].startswith("SystemExit")
    assert "outcome=dead code=MIDDLEWARE_FAILED" in worker.log()


@e2e_db
def test_a_middleware_that_cannot_be_built_stops_the_worker_before_any_claim(
    start_worker: StartWorker,
) -> None:
    job = tasks.noop.enqueue()
    worker = start_worker("--burst", settings={"MIDDLEWARE": [M + "breaks_at_start"]})
    assert worker.wait() != 0
    assert "the middleware cannot start: no collector configured" in worker.log()
    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.attempts) == (JobState.READY, 0)
