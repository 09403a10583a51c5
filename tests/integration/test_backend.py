"""``DatabaseQueueBackend`` against the real task framework, on PostgreSQL and SQLite.

Tasks are declared with the framework's ``@task`` (``tests/backend_tasks.py``);
workers run in-process (``Worker(...).run()``). ``runworkers`` subprocesses are
in ``tests/e2e/test_backend_worker.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from django_dbqueue import backend as dbqueue_backend
from django_dbqueue import leases, reaper, signals
from django_dbqueue.backend import (
    LEASE_LOST_PATH,
    DatabaseQueueBackend,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_finished,
    task_status,
)
from django_dbqueue.errors import BAD_ARGUMENTS, LEASE_EXPIRED, TASK_NOT_FOUND
from django_dbqueue.exceptions import InvalidJob, LeaseLost, PermanentError
from django_dbqueue.models import Job, JobState
from django_dbqueue.retry import Backoff
from django_dbqueue.worker.execute import execute
from django_dbqueue.worker.outcome import Outcome
from django_dbqueue.worker.worker import Worker, WorkerOptions
from tests.factories import JobFactory
from tests.jobs import backend_tasks, tasks
from tests.testapp.models import Order

Configure = Callable[..., DatabaseQueueBackend]


def run_worker(worker_id: str = "wa", concurrency: int = 1) -> Worker:
    worker = Worker(WorkerOptions(burst=True, worker_id=worker_id, concurrency=concurrency))
    worker.run()
    return worker


def enqueue_then_roll_back() -> None:
    with transaction.atomic():
        backend_tasks.add.enqueue(1, 2)
        raise RuntimeError("roll back")


def make_due(result_id: str) -> None:
    Job.objects.filter(pk=int(result_id)).update(run_at=timezone.now())


def test_the_shim_uses_django_tasks_when_django_has_it() -> None:
    package = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    assert dbqueue_backend.TaskResult.__module__ == f"{package}.base"
    assert backend_tasks.add.__class__.__module__ == f"{package}.base"


#: Run in a fresh interpreter: the backport as its next release names it (``InvalidTask``,
#: as Django 6 does; ``InvalidTaskError`` gone), then the backend's import shim.
RENAMED_BACKPORT = """
import django
django.setup()
import django_tasks.backends.base, django_tasks.exceptions as exceptions
exceptions.InvalidTask = exceptions.InvalidTaskError
del exceptions.InvalidTaskError
from django_dbqueue import backend
assert backend.InvalidTask is exceptions.InvalidTask
print("imported")
"""


@pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django 6 has django.tasks: no backport")
def test_the_shim_imports_the_backports_invalid_task_by_either_name() -> None:
    from django_tasks import exceptions

    assert dbqueue_backend.InvalidTask is (
        getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError
    )
    renamed = subprocess.run(
        [sys.executable, "-c", RENAMED_BACKPORT],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert renamed.stdout.strip() == "imported", renamed.stderr


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (JobState.READY, "READY"),
        (JobState.RUNNING, "RUNNING"),
        (JobState.SUCCEEDED, "SUCCESSFUL"),
        (JobState.DEAD, "FAILED"),
        (JobState.CANCELLED, "FAILED"),
    ],
)
def test_job_states_map_to_task_statuses(state: str, status: str) -> None:
    assert task_status(state) == TaskResultStatus(status)


def test_backend_supports_defer_priority_results_and_async(backend: DatabaseQueueBackend) -> None:
    assert backend.supports_defer
    assert backend.supports_priority
    assert backend.supports_get_result
    assert backend.supports_async_task


@pytest.mark.django_db
class TestEnqueue:
    def test_writes_a_ready_job_in_the_callers_transaction(
        self, backend: DatabaseQueueBackend
    ) -> None:
        with transaction.atomic():
            result = backend_tasks.add.enqueue(2, b=3)
            job = Job.objects.get(pk=int(result.id))
        assert job.task == "tests.jobs.backend_tasks.add"
        assert (job.backend, job.queue, job.priority) == ("default", "default", 0)
        assert (job.args, job.kwargs, job.state) == ([2], {"b": 3}, JobState.READY)
        assert result.status == TaskResultStatus.READY
        assert (result.args, result.kwargs, result.backend) == ([2], {"b": 3}, "default")
        assert result.enqueued_at == job.created_at
        assert (result.errors, result.worker_ids) == ([], [])

    def test_rollback_leaves_no_job_and_sends_no_signal(
        self,
        backend: DatabaseQueueBackend,
        framework_signals: list[tuple[str, str, str]],
        django_capture_on_commit_callbacks: Any,
    ) -> None:
        with (
            django_capture_on_commit_callbacks(execute=True) as callbacks,
            pytest.raises(RuntimeError, match="roll back"),
        ):
            enqueue_then_roll_back()
        assert not Job.objects.exists()
        assert callbacks == []
        assert framework_signals == []

    def test_task_enqueued_is_sent_when_the_transaction_commits(
        self,
        backend: DatabaseQueueBackend,
        framework_signals: list[tuple[str, str, str]],
        django_capture_on_commit_callbacks: Any,
    ) -> None:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            result = backend_tasks.add.enqueue(1, 2)
            assert framework_signals == []
        assert framework_signals == [("enqueued", result.id, "READY")]

    @pytest.mark.parametrize("priority", [-100, 0, 100])
    def test_priority_is_stored_unchanged(
        self, backend: DatabaseQueueBackend, priority: int
    ) -> None:
        result = backend_tasks.add.using(priority=priority).enqueue(1, 2)
        assert Job.objects.get(pk=int(result.id)).priority == priority

    def test_priority_outside_the_frameworks_range_is_invalid(
        self, backend: DatabaseQueueBackend
    ) -> None:
        with pytest.raises(InvalidTask, match="priority"):
            backend_tasks.add.using(priority=101)

    def test_run_after_becomes_run_at(self, backend: DatabaseQueueBackend) -> None:
        later = timezone.now() + timedelta(hours=1)
        result = backend_tasks.add.using(run_after=later).enqueue(1, 2)
        assert Job.objects.get(pk=int(result.id)).run_at == later
        assert not Job.objects.due().exists()

    def test_naive_run_after_is_invalid(self, backend: DatabaseQueueBackend) -> None:
        with pytest.raises(InvalidTask, match="aware"):
            backend_tasks.add.using(run_after=timezone.now().replace(tzinfo=None))

    def test_queue_outside_the_backends_queues_is_invalid(self, configure: Configure) -> None:
        configure(queues=["default", "mail"])
        backend_tasks.add.using(queue_name="mail").enqueue(1, 2)
        with pytest.raises(InvalidTask, match="other"):
            backend_tasks.add.using(queue_name="other")

    def test_queue_outside_dbqueue_queues_is_invalid(
        self, configure: Configure, settings: Any
    ) -> None:
        settings.DBQUEUE = {"QUEUES": ["default"]}
        configure()
        with pytest.raises(InvalidTask, match=r"DBQUEUE\['QUEUES'\]"):
            backend_tasks.add.using(queue_name="mail")

    def test_queue_name_must_follow_the_queue_rules(self, backend: DatabaseQueueBackend) -> None:
        with pytest.raises(InvalidTask, match="invalid"):
            backend_tasks.add.using(queue_name="no spaces")

    def test_options_set_attempts_and_lease(self, configure: Configure) -> None:
        configure(MAX_ATTEMPTS=3, LEASE_SECONDS=7.5)
        job = Job.objects.get(pk=int(backend_tasks.add.enqueue(1, 2).id))
        assert (job.max_attempts, job.lease_seconds) == (3, 8)

    def test_options_default_to_dbqueue_settings(self, configure: Configure) -> None:
        backend = configure()
        job = Job.objects.get(pk=int(backend_tasks.add.enqueue(1, 2).id))
        assert (job.max_attempts, job.lease_seconds) == (5, 30)
        assert backend.backoff == Backoff(base=2, factor=2, cap=3600)

    def test_retry_option_overrides_the_settings_policy_key_by_key(
        self, configure: Configure
    ) -> None:
        backend = configure(RETRY={"base": 0.5, "cap": 10})
        assert backend.backoff == Backoff(base=0.5, factor=2, cap=10)

    def test_arguments_must_be_json(self, backend: DatabaseQueueBackend) -> None:
        with pytest.raises(InvalidJob, match="argument 1 is not JSON"):
            backend_tasks.add.enqueue(1, object())
        assert not Job.objects.exists()

    def test_arguments_of_a_type_json_cannot_hold_raise_type_error_naming_them(
        self, backend: DatabaseQueueBackend
    ) -> None:
        """As the framework documents (and its backends do): ``TypeError``, nothing written."""
        when = timezone.now()
        with pytest.raises(TypeError, match=r"argument 'b' is not JSON.*datetime"):
            backend_tasks.add.enqueue(1, b=when)
        with pytest.raises(TypeError, match=r"argument 0 is not JSON.*datetime"):
            async_to_sync(backend_tasks.add.aenqueue)(when, 2)
        assert not Job.objects.exists()

    @pytest.mark.parametrize(
        "argument", ["k\ud800", {"k\udc00": 1}, "nul \x00"], ids=["surrogate", "key", "nul"]
    )
    def test_an_argument_no_database_stores_is_refused_and_the_transaction_stays_usable(
        self, backend: DatabaseQueueBackend, argument: object
    ) -> None:
        """``InvalidJob``, a ``ValueError`` as the framework's ``normalize_json`` raises for a
        value it cannot convert; nothing reaches the database, so the caller goes on."""
        with transaction.atomic():
            order = Order.objects.create(state="paid")
            with pytest.raises(InvalidJob, match=r"argument 0 is not JSON.*(surrogate|NUL)"):
                backend_tasks.fail.enqueue(argument)
            good = backend_tasks.fail.enqueue("k")
            assert Order.objects.filter(pk=order.pk).exists()
        assert list(Job.objects.values_list("pk", flat=True)) == [int(good.id)]

    def test_arguments_longer_than_max_args_bytes_are_refused(
        self, backend: DatabaseQueueBackend, settings: Any
    ) -> None:
        settings.DBQUEUE = {"MAX_ARGS_BYTES": 100}
        with pytest.raises(InvalidJob, match=r"take 1\d\d bytes as JSON, more than .*\(100\)"):
            backend_tasks.fail.enqueue("x" * 80)
        with pytest.raises(InvalidJob, match=r"MAX_ARGS_BYTES"):
            async_to_sync(backend_tasks.fail.aenqueue)("x" * 80)
        assert not Job.objects.exists()
        backend_tasks.fail.enqueue("x" * 40)
        assert Job.objects.count() == 1

    def test_arguments_must_fit_the_function(self, backend: DatabaseQueueBackend) -> None:
        with pytest.raises(InvalidJob, match="do not fit"):
            backend_tasks.add.enqueue(1, 2, 3)
        with pytest.raises(InvalidJob, match="do not fit"):
            backend_tasks.describe_context.enqueue("extra")
        assert not Job.objects.exists()

    def test_a_task_workers_cannot_import_by_name_is_refused(
        self, backend: DatabaseQueueBackend
    ) -> None:
        with pytest.raises(InvalidTask, match="cannot be imported by that name"):
            backend_tasks.renamed.enqueue()
        assert not Job.objects.exists()

    def test_aenqueue_and_aget_result(self, backend: DatabaseQueueBackend) -> None:
        result = async_to_sync(backend_tasks.add.aenqueue)(4, 5)
        fetched = async_to_sync(backend_tasks.add.aget_result)(result.id)
        assert Job.objects.get(pk=int(result.id)).args == [4, 5]
        assert (fetched.id, fetched.status) == (result.id, TaskResultStatus.READY)


@pytest.mark.django_db
class TestGetResult:
    @pytest.mark.parametrize("result_id", ["999999", "abc", "", "007", "1.0", " 1", "-1"])
    def test_unknown_or_malformed_ids_do_not_exist(
        self, backend: DatabaseQueueBackend, result_id: str
    ) -> None:
        backend_tasks.add.enqueue(1, 2)
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)

    def test_jobs_of_other_backends_and_native_jobs_do_not_exist(
        self, backend: DatabaseQueueBackend
    ) -> None:
        other = JobFactory(task="tests.jobs.backend_tasks.add", backend="other")
        native = JobFactory()
        for job in (other, native):
            with pytest.raises(TaskResultDoesNotExist):
                backend.get_result(str(job.pk))

    def test_a_job_whose_task_no_longer_imports_does_not_exist(
        self, backend: DatabaseQueueBackend
    ) -> None:
        job = JobFactory(task="tests.jobs.backend_tasks.gone", backend="default")
        with pytest.raises(TaskResultDoesNotExist, match="cannot be imported"):
            backend.get_result(str(job.pk))

    def test_result_carries_the_jobs_task_options(self, backend: DatabaseQueueBackend) -> None:
        later = timezone.now() + timedelta(minutes=5)
        enqueued = backend_tasks.add.using(priority=7, run_after=later).enqueue(1, 2)
        result = backend_tasks.add.get_result(enqueued.id)
        assert result.task.func is backend_tasks.add.func
        assert (result.task.priority, result.task.queue_name) == (7, "default")
        assert result.task.run_after == later

    def test_run_after_is_none_when_the_task_was_enqueued_without_it(
        self, backend: DatabaseQueueBackend
    ) -> None:
        """``None`` means "not constrained", as the framework documents."""
        enqueued = backend_tasks.add.enqueue(1, 2)
        assert enqueued.task.run_after is None
        assert backend.get_result(enqueued.id).task.run_after is None

    @pytest.mark.parametrize(
        "run_after",
        [None, timedelta(minutes=5), -timedelta(minutes=5)],
        ids=["not-deferred", "deferred", "run_after-in-the-past"],
    )
    def test_enqueue_returns_the_result_get_result_reads(
        self, backend: DatabaseQueueBackend, run_after: timedelta | None
    ) -> None:
        task = backend_tasks.add.using(priority=3)
        if run_after is not None:
            task = task.using(run_after=timezone.now() + run_after)
        enqueued = task.enqueue(1, b=2)
        assert backend.get_result(enqueued.id) == enqueued
        assert backend.get_result(enqueued.id).task == task

    def test_result_of_a_running_job(self, backend: DatabaseQueueBackend) -> None:
        result_id = backend_tasks.add.enqueue(1, 2).id
        (lease,) = leases.claim(None, "wa", 1)
        result = backend.get_result(result_id)
        assert result.status == TaskResultStatus.RUNNING
        assert result.worker_ids == ["wa"]
        assert result.started_at is not None
        assert result.last_attempted_at == result.started_at
        assert result.finished_at is None
        with pytest.raises(ValueError, match="not finished"):
            _ = result.return_value
        assert lease.backend == "default"

    def test_cancelled_job_is_failed(self, backend: DatabaseQueueBackend) -> None:
        result_id = backend_tasks.add.enqueue(1, 2).id
        leases.cancel([int(result_id)])
        assert backend.get_result(result_id).status == TaskResultStatus.FAILED

    def test_expired_lease_is_reported_as_lease_lost(self, backend: DatabaseQueueBackend) -> None:
        result_id = backend_tasks.add.enqueue(1, 2).id
        leases.claim(None, "wa", 1)
        Job.objects.filter(pk=int(result_id)).update(
            lease_until=timezone.now() - timedelta(seconds=1)
        )
        reaper.reap()
        result = backend.get_result(result_id)
        assert result.status == TaskResultStatus.FAILED
        (error,) = result.errors
        assert error.exception_class_path == LEASE_LOST_PATH
        assert error.exception_class is LeaseLost
        assert "lease of worker wa expired" in error.traceback
        assert result.worker_ids == ["wa"]
        assert Job.objects.get(pk=int(result_id)).last_error_code == LEASE_EXPIRED

    def test_the_reaper_retries_with_the_backends_retry_policy(self, configure: Configure) -> None:
        configure(MAX_ATTEMPTS=3, RETRY={"base": 600, "factor": 2, "cap": 3600})
        result_id = backend_tasks.add.enqueue(1, 2).id
        leases.claim(None, "wa", 1)
        Job.objects.filter(pk=int(result_id)).update(
            lease_until=timezone.now() - timedelta(seconds=1)
        )
        before = timezone.now()
        assert reaper.reap().retried == [int(result_id)]
        # The backend's base of 600 s, jittered to [300, 600]; the settings' would be 1-2 s.
        run_at = Job.objects.get(pk=int(result_id)).run_at
        assert before + timedelta(seconds=300) <= run_at <= timezone.now() + timedelta(seconds=600)

    def test_an_attempt_missing_from_the_bounded_history_keeps_its_place(
        self, backend: DatabaseQueueBackend
    ) -> None:
        entry = {"attempt": 2, "worker": "wb", "code": "X", "exception": "builtins.KeyError"}
        job = JobFactory(
            task="tests.jobs.backend_tasks.add",
            backend="default",
            running=True,
            attempts=3,
            max_attempts=5,
            worker_id="wc",
            last_worker_id="wc",
            errors=[entry],
        )
        assert backend.get_result(str(job.pk)).worker_ids == ["", "wb", "wc"]


@pytest.mark.django_db(transaction=True)
class TestWorkerRunsFrameworkTasks:
    def test_success_stores_the_return_value(self, backend: DatabaseQueueBackend) -> None:
        with transaction.atomic():
            enqueued = backend_tasks.add.enqueue(2, 3)
        run_worker("wa")
        result = backend_tasks.add.get_result(enqueued.id)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == 5
        assert (result.worker_ids, result.attempts, result.errors) == (["wa"], 1, [])
        assert result.enqueued_at is not None
        assert result.started_at is not None
        assert result.finished_at is not None
        assert result.finished_at >= result.started_at
        enqueued.refresh()
        assert enqueued.status == TaskResultStatus.SUCCESSFUL
        assert enqueued.return_value == 5

    def test_failure_is_failed_with_the_exception_and_traceback(
        self, backend: DatabaseQueueBackend
    ) -> None:
        enqueued = backend_tasks.fail.enqueue("card declined")
        run_worker()
        result = backend_tasks.fail.get_result(enqueued.id)
        assert result.status == TaskResultStatus.FAILED
        (error,) = result.errors
        assert error.exception_class_path == "builtins.ValueError"
        assert error.exception_class is ValueError
        assert "Traceback (most recent call last)" in error.traceback
        assert error.traceback.rstrip().endswith("ValueError: card declined")
        with pytest.raises(ValueError, match="Task failed"):
            _ = result.return_value

    def test_retries_follow_the_backend_options(self, configure: Configure) -> None:
        configure(MAX_ATTEMPTS=2, RETRY={"base": 600, "cap": 600})
        enqueued = backend_tasks.fail_first_attempt.enqueue("second time lucky")
        before = timezone.now()
        run_worker("wa")
        retried = backend_tasks.fail_first_attempt.get_result(enqueued.id)
        job = Job.objects.get(pk=int(enqueued.id))
        assert retried.status == TaskResultStatus.READY
        assert (
            before + timedelta(seconds=300) <= job.run_at <= timezone.now() + timedelta(seconds=600)
        )
        make_due(enqueued.id)
        run_worker("wb")
        result = backend_tasks.fail_first_attempt.get_result(enqueued.id)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == "second time lucky"
        assert (result.worker_ids, result.attempts) == (["wa", "wb"], 2)
        assert [e.exception_class_path for e in result.errors] == ["builtins.ConnectionError"]

    def test_budget_spent_is_failed_with_every_error(self, configure: Configure) -> None:
        configure(MAX_ATTEMPTS=2, RETRY={"base": 600, "cap": 600})
        enqueued = backend_tasks.fail.enqueue("down")
        run_worker("wa")
        make_due(enqueued.id)
        run_worker("wb")
        result = backend_tasks.fail.get_result(enqueued.id)
        assert result.status == TaskResultStatus.FAILED
        assert result.worker_ids == ["wa", "wb"]
        assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2

    def test_permanent_error_fails_without_retrying(self, configure: Configure) -> None:
        configure(MAX_ATTEMPTS=3)
        enqueued = backend_tasks.give_up.enqueue()
        run_worker()
        result = backend_tasks.give_up.get_result(enqueued.id)
        assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
        assert result.errors[0].exception_class is PermanentError

    def test_takes_context_gets_the_running_attempts_result(
        self, backend: DatabaseQueueBackend
    ) -> None:
        enqueued = backend_tasks.describe_context.enqueue()
        run_worker("wa")
        result = backend_tasks.describe_context.get_result(enqueued.id)
        assert result.return_value == {
            "id": enqueued.id,
            "attempt": 1,
            "status": "RUNNING",
            "worker_ids": ["wa"],
            "started": True,
        }

    def test_async_framework_task_runs(self, backend: DatabaseQueueBackend) -> None:
        enqueued = backend_tasks.async_add.enqueue(20, 22)
        run_worker()
        result = backend_tasks.async_add.get_result(enqueued.id)
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)

    def test_async_native_task_runs(self, backend: DatabaseQueueBackend) -> None:
        job = backend_tasks.native_async_add.enqueue(20, 22)
        run_worker()
        job.refresh_from_db()
        assert (job.state, job.result) == (JobState.SUCCEEDED, 42)

    def test_async_framework_jobs_do_not_block_each_others_slots(
        self, backend: DatabaseQueueBackend
    ) -> None:
        first = backend_tasks.meet.enqueue("framework-a", "framework-b")
        second = backend_tasks.meet.enqueue("framework-b", "framework-a")
        run_worker(concurrency=2)
        results = [backend.get_result(r.id) for r in (first, second)]
        assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * 2, [
            e.traceback for r in results for e in r.errors
        ]
        assert [r.return_value for r in results] == ["framework-a", "framework-b"]

    def test_async_native_jobs_do_not_block_each_others_slots(self) -> None:
        first = backend_tasks.native_meet.enqueue("native-a", "native-b")
        second = backend_tasks.native_meet.enqueue("native-b", "native-a")
        run_worker(concurrency=2)
        jobs = Job.objects.filter(pk__in=[first.pk, second.pk]).order_by("pk")
        assert [(j.state, j.result) for j in jobs] == [
            (JobState.SUCCEEDED, "native-a"),
            (JobState.SUCCEEDED, "native-b"),
        ], [j.last_error for j in jobs]

    def test_signals_arrive_enqueued_started_finished(
        self, backend: DatabaseQueueBackend, framework_signals: list[tuple[str, str, str]]
    ) -> None:
        with transaction.atomic():
            ok = backend_tasks.add.enqueue(1, 2)
            assert framework_signals == []
        bad = backend_tasks.fail.enqueue("no")
        run_worker()
        assert [s for s in framework_signals if s[1] == ok.id] == [
            ("enqueued", ok.id, "READY"),
            ("started", ok.id, "RUNNING"),
            ("finished", ok.id, "SUCCESSFUL"),
        ]
        assert [s for s in framework_signals if s[1] == bad.id] == [
            ("enqueued", bad.id, "READY"),
            ("started", bad.id, "RUNNING"),
            ("finished", bad.id, "FAILED"),
        ]

    def test_a_failing_task_finished_receiver_does_not_disturb_the_worker(
        self, backend: DatabaseQueueBackend, caplog: pytest.LogCaptureFixture
    ) -> None:
        def explode(**_: Any) -> None:
            raise RuntimeError("receiver bug")

        task_finished.connect(explode, weak=False)
        try:
            enqueued = backend_tasks.add.enqueue(1, 1)
            worker = run_worker()
        finally:
            task_finished.disconnect(explode)
        assert backend.get_result(enqueued.id).return_value == 2
        assert worker.counters.snapshot()["succeeded"] == 1
        assert "receiver bug" in caplog.text

    def test_a_job_whose_task_is_not_a_framework_task_dies_task_not_found(
        self, backend: DatabaseQueueBackend, framework_signals: list[tuple[str, str, str]]
    ) -> None:
        job = JobFactory(task="tests.jobs.backend_tasks.shadowed", backend="default")
        run_worker()
        job.refresh_from_db()
        assert (job.state, job.last_error_code) == (JobState.DEAD, TASK_NOT_FOUND)
        assert "not a django.tasks Task" in job.last_error
        assert framework_signals == []

    def test_a_job_of_an_unconfigured_backend_dies_task_not_found(
        self, backend: DatabaseQueueBackend
    ) -> None:
        job = JobFactory(task="tests.jobs.backend_tasks.add", backend="removed", args=[1, 2])
        run_worker()
        job.refresh_from_db()
        assert (job.state, job.last_error_code) == (JobState.DEAD, TASK_NOT_FOUND)
        assert "'removed'" in job.last_error

    def test_a_job_on_a_queue_since_removed_from_queues_still_runs(
        self, configure: Configure
    ) -> None:
        configure(queues=["default", "legacy"])
        enqueued = backend_tasks.add.using(queue_name="legacy").enqueue(1, 2)
        backend = configure(queues=["default"])
        run_worker()
        result = backend.get_result(enqueued.id)
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 3)
        assert result.task.queue_name == "default"

    def test_arguments_that_no_longer_bind_die_bad_arguments(
        self, backend: DatabaseQueueBackend
    ) -> None:
        enqueued = backend_tasks.add.enqueue(1, 2)
        Job.objects.filter(pk=int(enqueued.id)).update(args=[1, 2, 3])
        run_worker()
        result = backend.get_result(enqueued.id)
        assert result.status == TaskResultStatus.FAILED
        assert result.errors[0].exception_class_path == "builtins.TypeError"
        assert Job.objects.get(pk=int(enqueued.id)).last_error_code == BAD_ARGUMENTS


@pytest.mark.django_db
class TestJobFinishedSignal:
    """``signals.job_finished``, the worker hook the backend turns into ``task_finished``."""

    @pytest.fixture
    def finished(self) -> Iterator[list[tuple[int, str]]]:
        seen: list[tuple[int, str]] = []

        def record(lease: leases.Lease, outcome: str, **_: Any) -> None:
            seen.append((lease.job_id, outcome))

        signals.job_finished.connect(record, weak=False)
        yield seen
        signals.job_finished.disconnect(record)

    def test_sent_with_the_written_outcome(self, finished: list[tuple[int, str]]) -> None:
        job = tasks.noop.enqueue()
        (lease,) = leases.claim(None, "wa", 1)
        assert execute(lease) is Outcome.SUCCEEDED
        assert finished == [(job.pk, "succeeded")]

    @pytest.mark.parametrize(
        ("enqueue", "outcome", "raised"),
        [
            (lambda: tasks.flaky.enqueue("down"), "retried", ConnectionError),
            (lambda: tasks.permanent.enqueue(), "dead", PermanentError),
            (lambda: tasks.noop.enqueue(), "succeeded", None),
        ],
        ids=["retried", "dead", "succeeded"],
    )
    def test_a_failed_attempt_is_announced_inside_the_handler_of_its_exception(
        self, enqueue: Callable[[], Job], outcome: str, raised: type[BaseException] | None
    ) -> None:
        handled: list[tuple[str, type[BaseException] | None]] = []

        def record(outcome: str, **_: Any) -> None:
            handled.append((outcome, sys.exc_info()[0]))

        signals.job_finished.connect(record, weak=False)
        try:
            enqueue()
            (lease,) = leases.claim(None, "wa", 1)
            execute(lease)
        finally:
            signals.job_finished.disconnect(record)
        assert handled == [(outcome, raised)]

    def test_not_sent_when_the_lease_was_lost(self, finished: list[tuple[int, str]]) -> None:
        tasks.noop.enqueue()
        (lease,) = leases.claim(None, "wa", 1)
        Job.objects.filter(pk=lease.job_id).update(lease_token=lease.lease_token + 1)
        assert execute(lease) is Outcome.LEASE_LOST
        assert finished == []


class TestChecks:
    def test_valid_configuration_passes(self, configure: Configure) -> None:
        backend = configure(
            queues=["default", "mail"], MAX_ATTEMPTS=3, LEASE_SECONDS=10, RETRY={"base": 1}
        )
        assert backend.check() == []

    def test_app_not_installed_is_e101(self, configure: Configure, settings: Any) -> None:
        backend = configure()
        settings.INSTALLED_APPS = [
            app for app in settings.INSTALLED_APPS if app not in ("django_dbqueue", "tests.testapp")
        ]
        assert [m.id for m in backend.check()] == ["dbqueue.E101"]

    @pytest.mark.parametrize(
        "options",
        [
            {"MAX_ATTEMPTS": 0},
            {"MAX_ATTEMPTS": True},
            {"LEASE_SECONDS": -1},
            {"LEASE_SECONDS": "60"},
        ],
    )
    def test_bad_attempts_or_lease_is_e102(self, configure: Configure, options: Any) -> None:
        messages = configure(**options).check()
        assert [m.id for m in messages] == ["dbqueue.E102"]
        assert next(iter(options)) in messages[0].msg

    @pytest.mark.parametrize(
        "retry", [{"base": 0}, {"factor": 0.5}, {"delay": 3}, [2, 2, 60], {"cap": "1h"}]
    )
    def test_bad_retry_is_e103(self, configure: Configure, retry: Any) -> None:
        assert [m.id for m in configure(RETRY=retry).check()] == ["dbqueue.E103"]

    def test_queue_with_a_bad_name_is_e104(self, configure: Configure) -> None:
        messages = configure(queues=["default", "no spaces"]).check()
        assert [m.id for m in messages] == ["dbqueue.E104"]
        assert "not a valid queue name" in messages[0].msg

    def test_queue_dbqueue_does_not_serve_is_e104(
        self, configure: Configure, settings: Any
    ) -> None:
        settings.DBQUEUE = {"QUEUES": ["default"]}
        messages = configure(queues=["default", "mail"]).check()
        assert [m.id for m in messages] == ["dbqueue.E104"]
        assert "'mail'" in messages[0].msg

    def test_unknown_option_is_w101(self, configure: Configure) -> None:
        assert [m.id for m in configure(ATTEMPTS=3).check()] == ["dbqueue.W101"]
