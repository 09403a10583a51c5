"""Tasks declared with Django's task framework, run by ``runworkers --burst`` subprocesses.

The worker's ``TASKS`` come from ``tests/settings.py`` (``default``: this
backend, any queue); the test process sets the same backend with one attempt
per job, so failures are final at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from django_dbqueue.backend import TaskResultStatus
from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs import backend_tasks

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture(autouse=True)
def _one_attempt(settings: Any) -> None:
    settings.TASKS = {
        "default": {
            "BACKEND": "django_dbqueue.backend.DatabaseQueueBackend",
            "QUEUES": [],
            "OPTIONS": {"MAX_ATTEMPTS": 1},
        }
    }


def enqueue_then_roll_back() -> None:
    with transaction.atomic():
        backend_tasks.add.enqueue(100, 100)
        raise RuntimeError("roll back")


@pytest.mark.django_db(transaction=True)
def test_runworkers_runs_framework_tasks_to_their_results(start_worker: StartWorker) -> None:
    with pytest.raises(RuntimeError, match="roll back"):
        enqueue_then_roll_back()
    with transaction.atomic():
        added = backend_tasks.add.enqueue(2, 3)
        failed = backend_tasks.fail.enqueue("card declined")
        described = backend_tasks.describe_context.enqueue()
        awaited = backend_tasks.async_add.enqueue(20, 22)
    assert Job.objects.count() == 4

    worker = start_worker("--burst", "--worker-id", "e2e-backend")
    assert worker.wait() == 0, worker.log()

    result = backend_tasks.add.get_result(added.id)
    assert (result.status, result.return_value, result.worker_ids) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        ["e2e-backend"],
    )
    failure = backend_tasks.fail.get_result(failed.id)
    assert failure.status == TaskResultStatus.FAILED
    (error,) = failure.errors
    assert error.exception_class is ValueError
    assert error.traceback.rstrip().endswith("ValueError: card declined")
    context = backend_tasks.describe_context.get_result(described.id).return_value
    assert context["id"] == described.id
    assert (context["attempt"], context["status"]) == (1, "RUNNING")
    assert backend_tasks.async_add.get_result(awaited.id).return_value == 42


@pytest.mark.django_db(transaction=True)
def test_async_jobs_waiting_for_each_other_finish_with_two_slots(
    start_worker: StartWorker,
) -> None:
    framework = [
        backend_tasks.meet.enqueue("framework-a", "framework-b"),
        backend_tasks.meet.enqueue("framework-b", "framework-a"),
    ]
    native = [
        backend_tasks.native_meet.enqueue("native-a", "native-b"),
        backend_tasks.native_meet.enqueue("native-b", "native-a"),
    ]

    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.wait() == 0, worker.log()

    results = [backend_tasks.meet.get_result(r.id) for r in framework]
    assert [(r.status, r.return_value) for r in results] == [
        (TaskResultStatus.SUCCESSFUL, "framework-a"),
        (TaskResultStatus.SUCCESSFUL, "framework-b"),
    ]
    jobs = Job.objects.filter(pk__in=[job.pk for job in native]).order_by("pk")
    assert [(job.state, job.result) for job in jobs] == [
        (JobState.SUCCEEDED, "native-a"),
        (JobState.SUCCEEDED, "native-b"),
    ]


@pytest.mark.django_db(transaction=True)
def test_sys_exit_in_a_task_fails_it_and_the_worker_logs_its_traceback(
    start_worker: StartWorker,
) -> None:
    exited = backend_tasks.exits.enqueue(3)
    added = backend_tasks.add.enqueue(1, 2)

    worker = start_worker("--burst", "--concurrency", "1")
    assert worker.wait() == 0, worker.log()

    result = backend_tasks.exits.get_result(exited.id)
    assert result.status == TaskResultStatus.FAILED, worker.log()
    (error,) = result.errors
    assert error.exception_class is SystemExit
    assert error.traceback.rstrip().endswith("SystemExit: 3")
    assert backend_tasks.add.get_result(added.id).return_value == 3
    # The framework's own task_finished receiver logs the failure with its traceback.
    log = worker.log()
    assert f"Task id={exited.id} path=tests.jobs.backend_tasks.exits state=FAILED" in log
    assert "NoneType: None" not in log
    assert "SystemExit: 3" in log
