"""``DatabaseQueueBackend`` against what Django documents of its task framework.

Written from Django's "Tasks framework" documentation and the framework's API
reference (``django.tasks`` on Django 6, the ``django-tasks`` backport on 5.2),
changing only the backend and how tasks run: the in-process ``Worker`` in burst
mode, on its own connections (so ``transaction=True``). The table of deliberate
differences (docs/howto/django-tasks.md) has its tests at the
end, so changing one of them is a decision, not an accident. The backend's own
rules (queues, OPTIONS, checks) are in ``test_backend.py``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from django_dbqueue import leases
from django_dbqueue.backend import (
    DatabaseQueueBackend,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
    task_finished,
    task_started,
)
from django_dbqueue.models import Job
from tests.integration.test_backend import make_due, run_worker
from tests.jobs import backend_tasks

try:
    from django.tasks import task
    from django.tasks.exceptions import TaskResultMismatch
except ImportError:  # Django 5.2: the django-tasks backport.
    from django_tasks import task  # type: ignore[no-redef]  # the same API
    from django_tasks.exceptions import TaskResultMismatch  # type: ignore[no-redef]

Configure = Callable[..., DatabaseQueueBackend]

#: The logger of the framework's own signal receivers.
FRAMEWORK_LOGGER = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"


def module_level(a: int) -> int:
    return a


def no_context(value: int) -> int:
    return value


class TestDefiningTasks:
    """``@task`` and ``Task.using()``: validated by the backend when the task is made."""

    def test_a_task_must_be_a_module_level_function(self, backend: DatabaseQueueBackend) -> None:
        def local(a: int) -> int:
            return a

        with pytest.raises(InvalidTask, match="module level"):
            task(local)
        assert task(module_level).func is module_level

    def test_takes_context_needs_context_as_the_first_argument(
        self, backend: DatabaseQueueBackend
    ) -> None:
        with pytest.raises(InvalidTask, match="context"):
            task(takes_context=True)(no_context)

    @pytest.mark.parametrize("priority", [-101, 101, 1.5])
    def test_priority_outside_minus_100_to_100_or_not_whole_is_invalid(
        self, backend: DatabaseQueueBackend, priority: float
    ) -> None:
        with pytest.raises(InvalidTask, match="priority"):
            backend_tasks.add.using(priority=priority)

    def test_using_returns_a_modified_copy_and_leaves_the_task_alone(
        self, backend: DatabaseQueueBackend
    ) -> None:
        later = timezone.now() + timedelta(hours=1)
        changed = backend_tasks.add.using(priority=-100, run_after=later)
        assert (changed.priority, changed.run_after, changed.func) == (
            -100,
            later,
            backend_tasks.add.func,
        )
        assert (backend_tasks.add.priority, backend_tasks.add.run_after) == (0, None)


@pytest.mark.django_db
class TestEnqueue:
    def test_enqueue_returns_a_ready_result_of_json_arguments(
        self, backend: DatabaseQueueBackend
    ) -> None:
        result = backend_tasks.add.enqueue(*(1,), b=2)
        assert (result.status, result.backend, result.task) == (
            TaskResultStatus.READY,
            "default",
            backend_tasks.add,
        )
        assert isinstance(result.id, str)
        assert (result.args, result.kwargs) == ([1], {"b": 2})
        assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
        assert not result.is_finished
        assert (result.started_at, result.finished_at, result.last_attempted_at) == (None,) * 3
        with pytest.raises(ValueError, match="not finished"):
            _ = result.return_value

    @pytest.mark.parametrize(
        "value",
        [timezone.now(), {1, 2}, Decimal("1.5"), object()],
        ids=["datetime", "set", "decimal", "object"],
    )
    @pytest.mark.parametrize("enqueue", ["enqueue", "aenqueue"])
    def test_an_argument_json_cannot_hold_is_a_type_error(
        self, backend: DatabaseQueueBackend, value: object, enqueue: str
    ) -> None:
        call = getattr(backend_tasks.add, enqueue)
        run = async_to_sync(call) if enqueue == "aenqueue" else call
        with pytest.raises(TypeError, match=f"argument 'b'.*{type(value).__name__}"):
            run(1, b=value)
        assert not Job.objects.exists()

    def test_aget_result_of_an_unknown_id_does_not_exist(
        self, backend: DatabaseQueueBackend
    ) -> None:
        with pytest.raises(TaskResultDoesNotExist):
            async_to_sync(backend.aget_result)("424242")

    def test_a_result_of_another_task_is_a_mismatch(self, backend: DatabaseQueueBackend) -> None:
        result = backend_tasks.add.enqueue(1, 2)
        with pytest.raises(TaskResultMismatch):
            backend_tasks.fail.get_result(result.id)
        with pytest.raises(TaskResultMismatch):
            async_to_sync(backend_tasks.fail.aget_result)(result.id)


@pytest.mark.django_db(transaction=True)
class TestResults:
    def test_refresh_follows_the_result_to_successful(self, backend: DatabaseQueueBackend) -> None:
        result = backend_tasks.add.enqueue(2, 3)
        run_worker("wa")
        assert result.status == TaskResultStatus.READY  # a result is a snapshot
        result.refresh()
        assert (result.status, result.return_value, result.is_finished) == (
            TaskResultStatus.SUCCESSFUL,
            5,
            True,
        )
        assert (result.worker_ids, result.attempts, result.errors) == (["wa"], 1, [])
        assert result.enqueued_at is not None
        assert result.started_at is not None
        assert result.finished_at is not None
        assert result.enqueued_at <= result.started_at <= result.finished_at
        assert result.last_attempted_at == result.started_at

    def test_arefresh_and_aget_result_read_the_same(self, backend: DatabaseQueueBackend) -> None:
        result = backend_tasks.add.enqueue(2, 3)
        run_worker()
        async_to_sync(result.arefresh)()
        fetched = async_to_sync(backend_tasks.add.aget_result)(result.id)
        assert result == fetched
        assert fetched.return_value == 5

    def test_a_failure_is_failed_with_the_exception_class_and_traceback(
        self, backend: DatabaseQueueBackend
    ) -> None:
        result = backend_tasks.fail.enqueue("card declined")
        run_worker()
        result.refresh()
        assert (result.status, result.is_finished) == (TaskResultStatus.FAILED, True)
        with pytest.raises(ValueError, match="Task failed"):
            _ = result.return_value
        (error,) = result.errors
        assert error.exception_class is ValueError
        assert error.traceback.startswith("Traceback (most recent call last)")
        assert error.traceback.rstrip().endswith("ValueError: card declined")

    @pytest.mark.parametrize(
        ("make", "returned"),
        [
            (lambda: backend_tasks.returns_tuple.enqueue(1, 2), [1, 2]),
            (lambda: backend_tasks.returns_nothing.enqueue(), None),
            (lambda: backend_tasks.describe_context.enqueue(), dict),
        ],
        ids=["tuple-becomes-list", "none", "dict"],
    )
    def test_the_return_value_comes_back_as_json(
        self, backend: DatabaseQueueBackend, make: Callable[[], Any], returned: Any
    ) -> None:
        result = make()
        run_worker()
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        if returned is dict:
            assert isinstance(result.return_value, dict)
        else:
            assert result.return_value == returned

    def test_a_return_value_json_cannot_hold_fails_with_the_type_error_serialising_raised(
        self, configure: Configure
    ) -> None:
        """Dead at once, budget or not: the same call would return the same kind of value."""
        configure(MAX_ATTEMPTS=3)
        result = backend_tasks.returns_a_datetime.enqueue()
        run_worker()
        result.refresh()
        assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
        (error,) = result.errors
        assert error.exception_class is TypeError
        assert error.traceback.startswith("Traceback (most recent call last)")
        assert error.traceback.rstrip().endswith(
            "TypeError: Object of type datetime is not JSON serializable"
        )

    def test_a_coroutine_task_runs_to_its_result(self, backend: DatabaseQueueBackend) -> None:
        result = async_to_sync(backend_tasks.async_add.aenqueue)(40, 2)
        run_worker()
        async_to_sync(result.arefresh)()
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


@pytest.mark.django_db(transaction=True)
class TestRunAfter:
    def test_a_task_does_not_run_before_run_after(self, backend: DatabaseQueueBackend) -> None:
        later = timezone.now() + timedelta(hours=1)
        result = backend_tasks.add.using(run_after=later).enqueue(1, 2)
        run_worker()
        result.refresh()
        assert (result.status, result.attempts) == (TaskResultStatus.READY, 0)
        make_due(result.id)
        run_worker()
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL

    def test_run_after_in_the_past_runs_at_once_and_stays_reported(
        self, backend: DatabaseQueueBackend
    ) -> None:
        earlier = timezone.now() - timedelta(minutes=1)
        enqueued = backend_tasks.add.using(run_after=earlier).enqueue(1, 2)
        run_worker()
        result = backend_tasks.add.get_result(enqueued.id)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.task.run_after == earlier

    def test_run_after_stays_none_when_not_given(self, backend: DatabaseQueueBackend) -> None:
        enqueued = backend_tasks.add.enqueue(1, 2)
        run_worker()
        result = backend_tasks.add.get_result(enqueued.id)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.task.run_after is None


@pytest.mark.django_db(transaction=True)
class TestSignals:
    def test_each_signal_names_the_backend_class_and_the_result(
        self, backend: DatabaseQueueBackend, framework_signals: list[tuple[str, str, str]]
    ) -> None:
        senders: list[type] = []

        def record_sender(sender: type, **_: Any) -> None:
            senders.append(sender)

        for signal in (task_enqueued, task_started, task_finished):
            signal.connect(record_sender, weak=False)
        try:
            result = backend_tasks.add.enqueue(1, 2)
            run_worker()
        finally:
            for signal in (task_enqueued, task_started, task_finished):
                signal.disconnect(record_sender)
        assert framework_signals == [
            ("enqueued", result.id, "READY"),
            ("started", result.id, "RUNNING"),
            ("finished", result.id, "SUCCESSFUL"),
        ]
        assert senders == [DatabaseQueueBackend] * 3

    def test_task_finished_receivers_see_the_exception_that_failed_the_task(
        self, backend: DatabaseQueueBackend
    ) -> None:
        """Django's receiver relies on it: the signal is sent inside the exception handler."""
        handled: dict[str, type[BaseException] | None] = {}

        def record(sender: type, task_result: Any, **_: Any) -> None:
            handled[str(task_result.status)] = sys.exc_info()[0]

        task_finished.connect(record, weak=False)
        try:
            backend_tasks.fail.enqueue("card declined")
            backend_tasks.add.enqueue(1, 2)
            run_worker()
        finally:
            task_finished.disconnect(record)
        assert handled == {"FAILED": ValueError, "SUCCESSFUL": None}

    def test_a_task_finished_receiver_that_raises_is_logged_and_the_worker_goes_on(
        self, backend: DatabaseQueueBackend, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken(**_: Any) -> None:
            raise RuntimeError("the APM agent is down")

        task_finished.connect(broken, weak=False, dispatch_uid="test-broken")
        try:
            first = backend_tasks.add.enqueue(1, 2)
            second = backend_tasks.add.enqueue(3, 4)
            with caplog.at_level(logging.ERROR, logger="django_dbqueue"):
                run_worker()
        finally:
            task_finished.disconnect(dispatch_uid="test-broken")
        statuses = [backend_tasks.add.get_result(r.id).status for r in (first, second)]
        assert statuses == [TaskResultStatus.SUCCESSFUL] * 2
        failures = [r for r in caplog.records if "task_finished for job" in r.getMessage()]
        assert len(failures) == 2
        assert all(r.exc_info and "APM agent" in str(r.exc_info[1]) for r in failures)

    def test_djangos_own_receiver_logs_the_failure_with_its_traceback(
        self, backend: DatabaseQueueBackend, caplog: pytest.LogCaptureFixture
    ) -> None:
        result = backend_tasks.fail.enqueue("card declined")
        with caplog.at_level(logging.INFO, logger=FRAMEWORK_LOGGER):
            run_worker()
        (record,) = [
            r
            for r in caplog.records
            if r.name == FRAMEWORK_LOGGER and "state=FAILED" in r.getMessage()
        ]
        assert f"id={result.id}" in record.getMessage()
        assert record.exc_info is not None
        assert record.exc_info[0] is ValueError
        assert "NoneType: None" not in caplog.text
        assert "ValueError: card declined" in caplog.text

    @pytest.mark.parametrize(
        ("make", "final"),
        [
            (lambda: backend_tasks.fail_first_attempt.enqueue("x"), "SUCCESSFUL"),
            (lambda: backend_tasks.fail.enqueue("down"), "FAILED"),
        ],
        ids=["retried-then-successful", "budget-spent"],
    )
    def test_task_finished_is_sent_once_per_task_when_its_result_is_final(
        self,
        configure: Configure,
        framework_signals: list[tuple[str, str, str]],
        make: Callable[[], Any],
        final: str,
    ) -> None:
        """Each attempt sends ``task_started``; only the final one ``task_finished``."""
        configure(MAX_ATTEMPTS=2, RETRY={"base": 600, "cap": 600})
        result = make()
        run_worker()
        make_due(result.id)
        run_worker()
        assert [(name, status) for name, _, status in framework_signals] == [
            ("enqueued", "READY"),
            ("started", "RUNNING"),
            ("started", "RUNNING"),
            ("finished", final),
        ]


@pytest.mark.django_db(transaction=True)
class TestBaseExceptions:
    """``sys.exit()`` and ``KeyboardInterrupt`` in a task: a failure like any other."""

    @pytest.mark.parametrize(
        ("make", "raised", "last_line"),
        [
            (lambda: backend_tasks.exits.enqueue(3), SystemExit, "SystemExit: 3"),
            (lambda: backend_tasks.interrupts.enqueue(), KeyboardInterrupt, "KeyboardInterrupt"),
        ],
        ids=["sys.exit", "KeyboardInterrupt"],
    )
    def test_the_task_fails_with_that_exception_and_its_traceback(
        self,
        backend: DatabaseQueueBackend,
        framework_signals: list[tuple[str, str, str]],
        make: Callable[[], Any],
        raised: type[BaseException],
        last_line: str,
    ) -> None:
        result = make()
        after = backend_tasks.add.enqueue(1, 2)
        run_worker()
        result.refresh()
        assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
        (error,) = result.errors
        assert error.exception_class is raised
        assert error.traceback.startswith("Traceback (most recent call last)")
        assert error.traceback.rstrip().endswith(last_line)
        assert ("finished", result.id, "FAILED") in framework_signals
        assert backend.get_result(after.id).return_value == 3  # the worker went on


@pytest.mark.django_db(transaction=True)
class TestFeatureFlags:
    """Each ``supports_*`` flag the backend sets, and the behaviour it promises."""

    def test_supports_defer_accepts_run_after(self, backend: DatabaseQueueBackend) -> None:
        assert backend.supports_defer
        later = timezone.now() + timedelta(hours=1)
        result = backend_tasks.add.using(run_after=later).enqueue(1, 2)
        assert Job.objects.get(pk=int(result.id)).run_at == later

    def test_supports_priority_runs_higher_priority_first(
        self, backend: DatabaseQueueBackend
    ) -> None:
        assert backend.supports_priority
        low = backend_tasks.add.using(priority=-5).enqueue(0, 1)
        high = backend_tasks.add.using(priority=5).enqueue(0, 2)
        run_worker()
        low_result, high_result = (backend.get_result(r.id) for r in (low, high))
        assert high_result.started_at is not None
        assert low_result.started_at is not None
        assert high_result.started_at < low_result.started_at

    def test_supports_async_task_accepts_coroutine_functions(
        self, backend: DatabaseQueueBackend
    ) -> None:
        assert backend.supports_async_task
        assert backend_tasks.async_add.enqueue(1, 2).status == TaskResultStatus.READY

    def test_supports_get_result_reads_results_from_another_thread(
        self, backend: DatabaseQueueBackend
    ) -> None:
        assert backend.supports_get_result
        result = backend_tasks.add.enqueue(1, 2)
        run_worker()  # the job ran on the worker's thread and connection
        assert backend.get_result(result.id).return_value == 3


@pytest.mark.django_db(transaction=True)
class TestDeliberateDifferences:
    """The docs' table: where this backend does more than, or other than, Django documents."""

    def test_a_failed_attempt_with_budget_left_is_ready_again_with_its_error(
        self, configure: Configure
    ) -> None:
        configure(MAX_ATTEMPTS=2, RETRY={"base": 600, "cap": 600})
        result = backend_tasks.fail_first_attempt.enqueue("x")
        run_worker("wa")
        result.refresh()
        assert (result.status, result.is_finished, result.attempts) == (
            TaskResultStatus.READY,
            False,
            1,
        )
        assert [e.exception_class for e in result.errors] == [ConnectionError]

    def test_started_at_is_the_latest_attempts_start(self, configure: Configure) -> None:
        configure(MAX_ATTEMPTS=2, RETRY={"base": 600, "cap": 600})
        result = backend_tasks.fail_first_attempt.enqueue("x")
        run_worker("wa")
        result.refresh()
        first_start = result.started_at
        make_due(result.id)
        run_worker("wb")
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert first_start is not None
        assert result.started_at is not None
        assert result.started_at > first_start
        assert result.last_attempted_at == result.started_at

    def test_a_retried_tasks_run_after_is_when_it_is_due_again(self, configure: Configure) -> None:
        configure(MAX_ATTEMPTS=2, RETRY={"base": 600, "cap": 600})
        result = backend_tasks.fail_first_attempt.enqueue("x")
        run_worker()
        retried = backend_tasks.fail_first_attempt.get_result(result.id)
        assert retried.task.run_after == Job.objects.get(pk=int(result.id)).run_at
        assert retried.task.run_after is not None
        assert retried.task.run_after > timezone.now()

    def test_an_operator_requeue_makes_a_failed_result_ready_keeping_its_history(
        self, backend: DatabaseQueueBackend
    ) -> None:
        result = backend_tasks.fail.enqueue("down")
        run_worker("wa")
        assert leases.requeue([int(result.id)], 1, "tests") == [int(result.id)]
        result.refresh()
        assert (result.status, result.worker_ids, result.is_finished) == (
            TaskResultStatus.READY,
            ["wa"],
            False,
        )
        assert [e.exception_class for e in result.errors] == [ValueError]
        run_worker("wb")
        result.refresh()
        assert (result.status, result.worker_ids) == (TaskResultStatus.FAILED, ["wa", "wb"])
        assert len(result.errors) == 2
