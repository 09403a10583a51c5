"""``DBQUEUE["MIDDLEWARE"]``: what wraps every attempt, and the enqueue hooks that fill ``meta``.

Run in this process (``run_jobs``, the same ``execute`` a worker runs); the
worker-process side is ``tests/e2e/test_middleware_worker.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import transaction
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from django_dbqueue import middleware
from django_dbqueue.errors import MIDDLEWARE_FAILED, RETRY
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.models import Job, JobState
from django_dbqueue.testing import run_jobs
from tests.jobs import middleware as test_middleware
from tests.jobs import tasks
from tests.testapp.models import Order

M = "tests.jobs.middleware."


@pytest.fixture
def use_middleware(settings: Settings) -> Iterator[None]:
    test_middleware.TRACE.clear()
    test_middleware.ENQUEUEINGS.clear()
    yield
    middleware.stack.cache_clear()


def configure(settings: Settings, *names: str) -> None:
    settings.DBQUEUE = {**getattr(settings, "DBQUEUE", {}), "MIDDLEWARE": [M + n for n in names]}


def ran(job: Job) -> Job:
    run_jobs()
    return Job.objects.get(pk=job.pk)


@pytest.mark.django_db
@pytest.mark.usefixtures("use_middleware")
class TestAroundEveryAttempt:
    def test_the_first_listed_is_the_outermost(self, settings: Settings) -> None:
        configure(settings, "outer", "inner")
        job = ran(tasks.send_invoice.enqueue(7))
        assert job.state == JobState.SUCCEEDED
        assert test_middleware.TRACE == [
            "outer:before",
            "inner:before",
            "inner:after",
            "outer:after",
        ]

    def test_a_middleware_sees_the_job_and_may_change_the_result(self, settings: Settings) -> None:
        configure(settings, "labels")
        job = ran(tasks.send_invoice.enqueue(7))
        assert job.result == {
            "result": {"order": 7, "copy": False},
            "task": "tests.jobs.tasks.send_invoice",
            "queue": "mail",
            "meta": {},
        }

    def test_the_tasks_own_exception_passes_through_as_the_tasks(self, settings: Settings) -> None:
        configure(settings, "outer")
        job = ran(tasks.flaky.enqueue("down"))
        assert (job.state, job.last_error_code) == (JobState.READY, "ConnectionError")
        assert test_middleware.TRACE == ["outer:before", "outer:after"]

    def test_the_tasks_permanent_error_still_makes_the_job_dead(self, settings: Settings) -> None:
        configure(settings, "outer")
        job = ran(tasks.permanent.enqueue())
        assert (job.state, job.last_error_code) == (JobState.DEAD, "PERMANENT_ERROR")

    def test_what_a_middleware_raises_fails_the_attempt_with_its_own_code(
        self, settings: Settings
    ) -> None:
        configure(settings, "outer", "raises")
        job = ran(tasks.noop.enqueue())
        assert (job.state, job.attempts, job.last_error_code) == (
            JobState.READY,
            1,
            MIDDLEWARE_FAILED,
        )
        assert "ValueError: the tracer is misconfigured" in job.last_error
        assert "tests/jobs/middleware.py" in job.last_error  # the middleware's own traceback
        (entry,) = job.errors
        assert entry["code"] == MIDDLEWARE_FAILED
        assert test_middleware.TRACE == ["outer:before", "outer:after"]
        assert ("noop", None) not in tasks.CALLS

    def test_a_middleware_raising_systemexit_fails_the_attempt_and_nothing_else(
        self, settings: Settings
    ) -> None:
        configure(settings, "exits")
        job = ran(tasks.noop.enqueue())
        assert (job.state, job.last_error_code) == (JobState.READY, MIDDLEWARE_FAILED)
        assert job.errors[0]["message"].startswith("SystemExit")

    def test_a_middleware_failing_on_the_last_attempt_makes_the_job_dead(
        self, settings: Settings
    ) -> None:
        configure(settings, "raises")
        job = tasks.noop.enqueue()
        Job.objects.filter(pk=job.pk).update(max_attempts=1)
        assert (ran(job).state, ran(job).last_error_code) == (JobState.DEAD, MIDDLEWARE_FAILED)

    def test_retry_from_a_middleware_means_what_it_means_from_a_task(
        self, settings: Settings
    ) -> None:
        configure(settings, "asks_retry")
        job = ran(tasks.noop.enqueue())
        assert (job.state, job.last_error_code) == (JobState.READY, RETRY)
        assert job.run_at > job.started_at

    def test_a_middleware_that_recovers_makes_the_attempt_a_success(
        self, settings: Settings
    ) -> None:
        configure(settings, "swallows")
        job = ran(tasks.flaky.enqueue("down"))
        assert (job.state, job.result) == (JobState.SUCCEEDED, "recovered")

    def test_without_middleware_the_task_is_called_directly(self) -> None:
        assert middleware.stack().outermost is None
        job = ran(tasks.send_invoice.enqueue(1))
        assert job.result == {"order": 1, "copy": False}


@pytest.mark.django_db
@pytest.mark.usefixtures("use_middleware")
class TestEnqueueHooks:
    def test_a_hook_fills_meta_which_the_attempt_reads(self, settings: Settings) -> None:
        configure(settings, "stamps_request", "labels")
        job = tasks.send_invoice.enqueue(3)
        expected = {"request_id": "req-1", "hooked": ["tests.jobs.tasks.send_invoice", 1]}
        assert job.meta == expected
        assert Job.objects.get(pk=job.pk).meta == expected
        assert ran(job).result["meta"] == expected

    def test_a_bulk_enqueue_calls_the_hook_once_and_every_job_gets_its_meta(
        self, settings: Settings
    ) -> None:
        configure(settings, "stamps_request")
        jobs = tasks.send_invoice.enqueue_many([((n,), {}) for n in range(3)])
        assert [e.count for e in test_middleware.ENQUEUEINGS] == [3]
        metas = Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("meta", flat=True)
        expected = {"request_id": "req-1", "hooked": ["tests.jobs.tasks.send_invoice", 3]}
        assert list(metas) == [expected] * 3
        assert [job.meta for job in jobs] == [expected] * 3

    def test_hooks_merge_in_list_order(self, settings: Settings) -> None:
        configure(settings, "stamps_request", "adds_more", "adds_nothing")
        job = tasks.noop.enqueue()
        assert job.meta == {
            "request_id": "req-2",
            "hooked": ["tests.jobs.tasks.noop", 1],
            "tenant": 7,
        }

    def test_hooks_that_add_nothing_leave_meta_null(self, settings: Settings) -> None:
        configure(settings, "adds_nothing", "outer")
        job = tasks.noop.enqueue()
        assert Job.objects.get(pk=job.pk).meta is None

    @pytest.mark.parametrize(
        ("hook", "says"),
        [("oversized", "at most 4096"), ("unstorable", "NUL character")],
    )
    def test_meta_no_database_keeps_is_invalid_and_nothing_is_written(
        self, settings: Settings, hook: str, says: str
    ) -> None:
        configure(settings, hook)
        with transaction.atomic():
            order = Order.objects.create(total=5)
            with pytest.raises(InvalidJob, match=says):
                tasks.noop.enqueue()
            order.refresh_from_db()  # the caller's transaction is still usable
        assert Job.objects.count() == 0

    def test_a_hook_that_raises_fails_the_enqueue_before_anything_is_written(
        self, settings: Settings
    ) -> None:
        configure(settings, "hook_raises")
        with pytest.raises(RuntimeError, match="the hook failed"):
            tasks.noop.enqueue()
        assert Job.objects.count() == 0


@pytest.mark.usefixtures("use_middleware")
class TestConfiguration:
    @pytest.mark.parametrize(
        ("value", "says"),
        [
            ("tests.jobs.middleware.outer", "must be a list of dotted paths"),
            (["tests.jobs.middleware.missing"], "'tests.jobs.middleware.missing'"),
            (["tests.jobs.middleware.TRACE"], "is not callable"),
        ],
    )
    def test_the_system_check_names_a_bad_entry(
        self, settings: Settings, value: object, says: str
    ) -> None:
        settings.DBQUEUE = {"MIDDLEWARE": value}
        with pytest.raises(SystemCheckError, match=r"dbqueue\.E020") as raised:
            call_command("check")
        assert says in str(raised.value)

    def test_middleware_is_built_once_per_settings(self, settings: Settings) -> None:
        configure(settings, "outer")
        assert middleware.stack() is middleware.stack()
        first = middleware.stack()
        configure(settings, "inner")
        assert middleware.stack() is not first


@pytest.mark.django_db
@pytest.mark.usefixtures("use_middleware")
def test_the_admin_job_page_shows_what_the_hooks_recorded(
    settings: Settings, admin_client: Client
) -> None:
    configure(settings, "stamps_request")
    hooked = tasks.noop.enqueue()
    configure(settings)
    plain = tasks.noop.enqueue()
    page = admin_client.get(reverse("admin:django_dbqueue_job_change", args=[hooked.pk]))
    assert page.status_code == 200
    assert "req-1" in page.content.decode()
    page = admin_client.get(reverse("admin:django_dbqueue_job_change", args=[plain.pk]))
    assert "req-1" not in page.content.decode()
