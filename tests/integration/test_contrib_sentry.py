"""``django_dbqueue.contrib.sentry``: each attempt in its own Sentry scope, a job's failure
reported once when it goes dead (or every failed attempt, when asked), with its tags.

The real ``sentry-sdk`` with its default integrations (logging, Django, threading), as
a project's settings would initialise it, and a transport that keeps the events here
(``tests.sentry_events``). Jobs run in this process (``run_jobs``); a worker process is
``tests/e2e/test_contrib_sentry_worker.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sentry_sdk
from pytest_django import Settings

from django_dbqueue import leases, middleware, testing
from django_dbqueue.contrib import sentry
from django_dbqueue.errors import MIDDLEWARE_FAILED, TASK_NOT_FOUND
from django_dbqueue.models import Job, JobState
from django_dbqueue.testing import run_jobs
from tests.factories import JobFactory
from tests.jobs import backend_tasks, sentry_tasks, tasks
from tests.sentry_events import DSN, Event, EventSink

SENTRY = "django_dbqueue.contrib.sentry.SentryMiddleware"
EVERY_ATTEMPT = "django_dbqueue.contrib.sentry.SentryEveryAttemptMiddleware"


@pytest.fixture
def events() -> Iterator[list[Event]]:
    """The events Sentry sends while the test runs."""
    sent: list[Event] = []
    sentry_sdk.init(dsn=DSN, transport=EventSink(sent.append))
    yield sent
    sentry_sdk.get_client().close()
    sentry_sdk.get_global_scope().set_client(None)


@pytest.fixture(autouse=True)
def _fresh_middleware() -> Iterator[None]:
    yield
    middleware.stack.cache_clear()


def configure(settings: Settings, *paths: str) -> None:
    settings.DBQUEUE = {**getattr(settings, "DBQUEUE", {}), "MIDDLEWARE": list(paths)}


def run_every_attempt(job: Job) -> Job:
    """Run ``job`` until its attempts are spent, each retry made due at once."""
    for _ in range(job.max_attempts):
        run_jobs()
        leases.run_now([job.pk])
    return Job.objects.get(pk=job.pk)


def job_tags(job: Job, attempt: int) -> dict[str, str]:
    return {
        sentry.TASK: job.task,
        sentry.QUEUE: job.queue,
        sentry.JOB_ID: str(job.pk),
        sentry.ATTEMPT: str(attempt),
    }


def admin_path(job: Job) -> str:
    return f"/admin/django_dbqueue/job/{job.pk}/change/"


def exception_of(event: Event) -> tuple[str, str]:
    last = event["exception"]["values"][-1]
    return last["type"], last["value"]


@pytest.mark.django_db
class TestDeadJobsAreReportedOnce:
    def test_a_job_retried_twice_then_dead_sends_exactly_one_event(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY)
        job = run_every_attempt(tasks.flaky.enqueue("down"))
        assert (job.state, job.attempts) == (JobState.DEAD, 3)
        assert len(events) == 1
        (event,) = events
        assert event["tags"] == {
            **job_tags(job, attempt=3),
            sentry.ERROR_CODE: "ConnectionError",
            sentry.OUTCOME: "dead",
        }
        assert exception_of(event) == ("ConnectionError", "down")
        assert event["transaction"] == "tests.jobs.tasks.flaky"
        assert event["contexts"][sentry.CONTEXT] == {
            "job_id": job.pk,
            "task": "tests.jobs.tasks.flaky",
            "queue": "default",
            "attempt": 3,
            "max_attempts": 3,
            "worker_id": testing.WORKER_ID,
            "admin_url": admin_path(job),
        }

    def test_every_attempt_mode_sends_one_event_per_failed_attempt(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, EVERY_ATTEMPT)
        job = run_every_attempt(tasks.flaky.enqueue("down"))
        assert job.state == JobState.DEAD
        assert [event["tags"] for event in events] == [
            {**job_tags(job, 1), sentry.ERROR_CODE: "ConnectionError", sentry.OUTCOME: "retried"},
            {**job_tags(job, 2), sentry.ERROR_CODE: "ConnectionError", sentry.OUTCOME: "retried"},
            {**job_tags(job, 3), sentry.ERROR_CODE: "ConnectionError", sentry.OUTCOME: "dead"},
        ]

    def test_a_retry_the_task_asks_for_is_no_error_until_the_job_is_dead(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, EVERY_ATTEMPT)
        job = run_every_attempt(tasks.asks_retry.enqueue(0))
        assert (job.state, job.attempts) == (JobState.DEAD, 3)
        assert [event["tags"][sentry.OUTCOME] for event in events] == ["dead"]
        assert events[0]["tags"][sentry.ERROR_CODE] == "RETRY"

    def test_a_permanent_error_is_reported_at_its_first_attempt(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY)
        job = run_every_attempt(tasks.permanent.enqueue())
        assert (job.state, job.attempts) == (JobState.DEAD, 1)
        assert [event["tags"][sentry.ERROR_CODE] for event in events] == ["PERMANENT_ERROR"]

    def test_a_job_whose_task_does_not_import_is_reported_with_the_jobs_tags(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY)
        job = JobFactory(task="tests.jobs.tasks.no_such_task", max_attempts=1)
        run_jobs()
        job.refresh_from_db()
        assert (job.state, job.last_error_code) == (JobState.DEAD, TASK_NOT_FOUND)
        (event,) = events
        assert event["tags"] == {
            **job_tags(job, 1),
            sentry.ERROR_CODE: TASK_NOT_FOUND,
            sentry.OUTCOME: "dead",
        }
        assert event["contexts"][sentry.CONTEXT]["admin_url"] == admin_path(job)

    def test_what_another_middleware_raises_is_reported_as_middleware_failed(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY, "tests.jobs.middleware.exits")
        job = tasks.noop.enqueue()
        Job.objects.filter(pk=job.pk).update(max_attempts=1)
        run_jobs()
        assert Job.objects.get(pk=job.pk).state == JobState.DEAD
        (event,) = events
        assert event["tags"][sentry.ERROR_CODE] == MIDDLEWARE_FAILED
        assert exception_of(event)[0] == "MiddlewareFailed"

    def test_a_django_tasks_job_is_reported_once_though_the_framework_logs_its_failure(
        self, settings: Settings, events: list[Event]
    ) -> None:
        # The framework logs a failed task with logger.exception, after job_finished: Sentry's
        # logging integration sees the exception just reported, which its dedupe drops.
        configure(settings, SENTRY)
        enqueued = backend_tasks.fail.enqueue("card declined")
        Job.objects.filter(pk=int(enqueued.id)).update(max_attempts=1)
        run_jobs()
        assert backend_tasks.fail.get_result(enqueued.id).status == "FAILED"
        (event,) = events
        assert event["tags"][sentry.TASK] == "tests.jobs.backend_tasks.fail"
        assert exception_of(event) == ("ValueError", "card declined")

    def test_successes_and_cancelled_jobs_send_nothing(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, EVERY_ATTEMPT)
        succeeded, cancelled = tasks.noop.enqueue(), sentry_tasks.stops_on_cancel.enqueue()
        run_jobs()
        assert Job.objects.get(pk=succeeded.pk).state == JobState.SUCCEEDED
        assert Job.objects.get(pk=cancelled.pk).state == JobState.CANCELLED
        assert events == []

    def test_the_admin_url_takes_the_configured_base(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, "tests.jobs.sentry_tasks.OpsSentry")
        job = run_every_attempt(sentry_tasks.always_fails.enqueue("no"))
        (event,) = events
        admin_url = event["contexts"][sentry.CONTEXT]["admin_url"]
        assert admin_url == "https://ops.example.com" + admin_path(job)

    def test_without_the_admin_in_the_urlconf_the_admin_url_is_left_out(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY)
        settings.ROOT_URLCONF = "tests.metrics_urls"
        run_every_attempt(sentry_tasks.always_fails.enqueue("no"))
        (event,) = events
        assert event["contexts"][sentry.CONTEXT]["admin_url"] is None


@pytest.mark.django_db
class TestEachAttemptHasItsOwnScope:
    def test_what_the_task_captures_carries_the_jobs_tags(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY)
        job = sentry_tasks.captures_a_message.enqueue("hello")
        run_jobs()
        (event,) = events
        assert event["message"] == "hello"
        assert event["tags"] == {**job_tags(job, 1), "set_by_the_task": "hello"}
        assert event["transaction"] == job.task
        assert event["contexts"][sentry.CONTEXT]["admin_url"] == admin_path(job)

    def test_a_report_has_its_attempts_breadcrumbs_and_no_other_jobs(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY)
        first = sentry_tasks.fails_after_a_breadcrumb.enqueue("first")
        second = sentry_tasks.fails_after_a_breadcrumb.enqueue("second")
        run_jobs()
        crumbs = {
            event["tags"][sentry.JOB_ID]: [
                crumb.get("message") for crumb in event["breadcrumbs"]["values"]
            ]
            for event in events
        }
        assert crumbs[str(first.pk)].count("first") == 1
        assert "second" not in crumbs[str(first.pk)]
        assert crumbs[str(second.pk)].count("second") == 1
        assert "first" not in crumbs[str(second.pk)]

    def test_nothing_of_the_job_stays_on_the_thread_after_it(
        self, settings: Settings, events: list[Event]
    ) -> None:
        configure(settings, SENTRY)
        sentry_tasks.captures_a_message.enqueue("inside")
        run_jobs()
        sentry_sdk.capture_message("outside")
        assert [event["message"] for event in events] == ["inside", "outside"]
        assert events[1].get("tags", {}) == {}
