"""``django_dbqueue.testing``: run_jobs, eager mode and the pytest fixtures, in both test styles.

The test's own transaction is where the jobs live (pytest-django ``db``,
Django ``TestCase``); ``transactional_db`` tests commit for real.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models import QuerySet
from django.test import TestCase, override_settings
from django.utils import timezone

from django_dbqueue import Job, JobState
from django_dbqueue.testing import WORKER_ID, JobRun, run_jobs
from tests.jobs import tasks
from tests.jobs.tasks import asks_retry, flaky, noop, permanent, send_invoice

EAGER = {"LEASE_SECONDS": 30, "EAGER": True}


class Rollback(Exception):
    """Raised inside ``atomic()`` to roll it back on purpose."""


def states(*jobs: Job) -> list[str]:
    return [Job.objects.get(pk=job.pk).state for job in jobs]


@pytest.mark.django_db
def test_run_jobs_runs_jobs_enqueued_in_the_test_transaction_through_the_protocol() -> None:
    first = send_invoice.enqueue(42)
    low = noop.enqueue()
    high = noop.using(priority=5).enqueue()

    runs = run_jobs()

    # Within a queue the higher priority goes first, as with a worker.
    assert sorted(runs, key=lambda run: run.job_id) == [
        JobRun(first.pk, send_invoice.name, 1, "succeeded"),
        JobRun(low.pk, noop.name, 1, "succeeded"),
        JobRun(high.pk, noop.name, 1, "succeeded"),
    ]
    default_queue = [run.job_id for run in runs if run.task == noop.name]
    assert default_queue == [high.pk, low.pk]
    done = Job.objects.get(pk=first.pk)
    assert done.state == JobState.SUCCEEDED
    assert done.result == {"order": 42, "copy": False}
    assert done.last_worker_id == WORKER_ID
    assert done.finished_at is not None
    assert sorted(tasks.CALLS) == [("noop", None), ("noop", None), ("send_invoice", 42)]
    assert run_jobs() == []


@pytest.mark.django_db
def test_run_jobs_schedules_a_retry_with_backoff_and_leaves_it_ready() -> None:
    job = flaky.enqueue("down")

    runs = run_jobs()

    assert runs == [JobRun(job.pk, flaky.name, 1, "retried")]
    retried = Job.objects.get(pk=job.pk)
    assert retried.state == JobState.READY
    # flaky's backoff: base 10 s with equal jitter, so at least 5 s ahead.
    assert retried.run_at >= timezone.now() + timedelta(seconds=4)
    assert retried.errors[0]["code"] == "ConnectionError"
    assert run_jobs() == []


@pytest.mark.django_db
def test_run_jobs_reruns_a_retry_due_at_once_until_the_budget_is_spent() -> None:
    job = asks_retry.enqueue(0)

    runs = run_jobs()

    assert [(run.attempt, run.outcome) for run in runs] == [
        (1, "retried"),
        (2, "retried"),
        (3, "dead"),
    ]
    assert states(job) == [JobState.DEAD]


@pytest.mark.django_db
def test_run_jobs_leaves_jobs_that_are_not_due_and_other_queues_alone() -> None:
    later = noop.using(delay=60).enqueue()
    mail = send_invoice.enqueue(1)
    default = noop.enqueue()

    assert [run.job_id for run in run_jobs("default")] == [default.pk]
    assert states(later, mail) == [JobState.READY, JobState.READY]
    assert [run.job_id for run in run_jobs("mail")] == [mail.pk]


@pytest.mark.django_db
def test_run_jobs_stops_after_max_jobs() -> None:
    jobs = [noop.enqueue() for _ in range(3)]

    assert [run.job_id for run in run_jobs(max_jobs=2)] == [jobs[0].pk, jobs[1].pk]
    assert [run.job_id for run in run_jobs()] == [jobs[2].pk]


@pytest.mark.parametrize("max_jobs", [0, -1, True])
def test_run_jobs_refuses_a_max_jobs_below_one(max_jobs: int) -> None:
    with pytest.raises(ValueError, match="max_jobs must be 1 or more"):
        run_jobs(max_jobs=max_jobs)


@pytest.mark.django_db(transaction=True)
def test_run_jobs_runs_committed_jobs_in_transactional_tests() -> None:
    with transaction.atomic():
        job = send_invoice.enqueue(7)

    assert run_jobs() == [JobRun(job.pk, send_invoice.name, 1, "succeeded")]
    assert states(job) == [JobState.SUCCEEDED]


def test_dbqueue_jobs_lists_the_jobs_enqueued_during_the_test(
    dbqueue_jobs: QuerySet[Job],
) -> None:
    send_invoice.enqueue(42)
    noop.enqueue()

    enqueued = list(dbqueue_jobs.values_list("task", "args"))
    assert enqueued == [(send_invoice.name, [42]), (noop.name, [])]
    assert dbqueue_jobs.filter(task=send_invoice.name).get().args == [42]


def test_dbqueue_jobs_leaves_out_jobs_from_before_it_and_rolled_back_ones(
    db: None, request: pytest.FixtureRequest
) -> None:
    noop.enqueue()  # before the fixture starts counting
    dbqueue_jobs = request.getfixturevalue("dbqueue_jobs")
    kept = noop.enqueue()
    with suppress(Rollback), transaction.atomic():
        noop.enqueue()
        raise Rollback

    assert [job.pk for job in dbqueue_jobs] == [kept.pk]


def test_dbqueue_run_runs_the_due_jobs(dbqueue_jobs: QuerySet[Job], dbqueue_run: Any) -> None:
    send_invoice.enqueue(42)

    runs = dbqueue_run()

    assert [run.outcome for run in runs] == ["succeeded"]
    assert dbqueue_jobs.get().state == JobState.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_dbqueue_fixtures_work_in_transactional_tests(
    transactional_db: None, dbqueue_jobs: QuerySet[Job], dbqueue_run: Any
) -> None:
    send_invoice.enqueue(5)

    assert [run.outcome for run in dbqueue_run()] == ["succeeded"]
    assert [job.state for job in dbqueue_jobs] == [JobState.SUCCEEDED]


class RunJobsInTestCase(TestCase):
    """The same helpers from a Django ``TestCase``: the jobs never leave its transaction."""

    def test_run_jobs_sees_the_test_cases_uncommitted_jobs(self) -> None:
        job = send_invoice.enqueue(3)

        runs = run_jobs()

        assert runs == [JobRun(job.pk, send_invoice.name, 1, "succeeded")]
        assert Job.objects.get(pk=job.pk).result == {"order": 3, "copy": False}

    def test_a_failing_job_is_recorded_and_nothing_raises(self) -> None:
        job = permanent.enqueue()

        assert [run.outcome for run in run_jobs()] == ["dead"]
        assert Job.objects.get(pk=job.pk).last_error_code == "PERMANENT_ERROR"

    @override_settings(DBQUEUE=EAGER)
    def test_eager_jobs_run_when_the_captured_commit_callbacks_run(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            job = send_invoice.enqueue(9)
            assert states(job) == [JobState.READY]

        assert states(job) == [JobState.SUCCEEDED]
        assert tasks.CALLS == [("send_invoice", 9)]


@pytest.mark.django_db(transaction=True)
def test_eager_runs_the_job_at_commit_not_before(settings: Any) -> None:
    settings.DBQUEUE = EAGER
    with transaction.atomic():
        job = send_invoice.enqueue(11)
        assert tasks.CALLS == []

    assert tasks.CALLS == [("send_invoice", 11)]
    done = Job.objects.get(pk=job.pk)
    assert done.state == JobState.SUCCEEDED
    assert done.result == {"order": 11, "copy": False}


@pytest.mark.django_db(transaction=True)
def test_eager_runs_nothing_for_a_rolled_back_transaction(settings: Any) -> None:
    settings.DBQUEUE = EAGER
    with suppress(Rollback), transaction.atomic():
        send_invoice.enqueue(12)
        raise Rollback

    assert tasks.CALLS == []
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_eager_collapses_retries_into_immediate_reruns_up_to_max_attempts(settings: Any) -> None:
    settings.DBQUEUE = EAGER
    job = flaky.enqueue("still down")  # backoff of 10 s and more, max_attempts=3

    dead = Job.objects.get(pk=job.pk)
    assert dead.state == JobState.DEAD
    assert dead.attempts == 3
    assert [entry["code"] for entry in dead.errors] == ["ConnectionError"] * 3


@pytest.mark.django_db(transaction=True)
def test_eager_records_a_permanent_failure_after_one_attempt(settings: Any) -> None:
    settings.DBQUEUE = EAGER
    job = permanent.enqueue()

    dead = Job.objects.get(pk=job.pk)
    assert (dead.state, dead.attempts, dead.last_error_code) == (
        JobState.DEAD,
        1,
        "PERMANENT_ERROR",
    )


@pytest.mark.django_db(transaction=True)
def test_eager_ignores_delay_and_validates_as_usual(settings: Any) -> None:
    settings.DBQUEUE = EAGER
    job = noop.using(delay=3600).enqueue()

    assert states(job) == [JobState.SUCCEEDED]
    with pytest.raises(ValueError, match="not JSON-serializable"):
        send_invoice.enqueue(object())  # type: ignore[arg-type]  # the point of the test
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_without_eager_committed_jobs_wait_for_a_worker() -> None:
    job = noop.enqueue()

    assert states(job) == [JobState.READY]
    assert tasks.CALLS == []
