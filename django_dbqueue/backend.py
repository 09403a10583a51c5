"""The ``django.tasks`` backend: Django's task API on the database queue.

``TASKS = {"default": {"BACKEND": "django_dbqueue.backend.DatabaseQueueBackend"}}``
turns ``@task`` functions of ``django.tasks`` (Django 6) or of the
``django-tasks`` backport (Django 5.2) into jobs: ``enqueue()`` writes the job in
the caller's transaction and ``runworkers`` runs it with the same leases,
retries and admin as native jobs. One implementation serves both frameworks;
the import shim below picks ``django.tasks`` when Django has it.

Its system checks (``dbqueue.E101``-``E104``, ``dbqueue.W101``) are in ``checks``;
the worker runs its jobs through ``runnable``.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.checks import CheckMessage
from django.db import transaction

from django_dbqueue import conf, limits, registry
from django_dbqueue.arguments import Callee, encode_calls
from django_dbqueue.checks import task_backend_checks
from django_dbqueue.enqueue import EnqueueOptions, JobSpec, insert, schedule
from django_dbqueue.errors import LEASE_EXPIRED
from django_dbqueue.exceptions import InvalidJob, LeaseLost, TaskNotFound
from django_dbqueue.models import Job, JobState
from django_dbqueue.retry import Backoff
from django_dbqueue.validation import check_importable, check_queue, import_task

if TYPE_CHECKING:
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        from django.tasks import task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:  # Django 5.2: the django-tasks backport has the same API.
        from django_tasks import exceptions as backport_exceptions
        from django_tasks import task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

        # Releases up to 0.12 call it InvalidTaskError; later ones InvalidTask, as Django 6.
        InvalidTask = getattr(backport_exceptions, "InvalidTask", None) or (
            backport_exceptions.InvalidTaskError
        )

#: The backend, and the task framework's names as the installed framework (Django 6's
#: ``django.tasks`` or the backport) defines them, for the runtime and for tests.
__all__ = [
    "DatabaseQueueBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "load_framework_task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
    "task_status",
]

#: A result id is a job id as ``str(job.pk)`` writes it.
RESULT_ID = re.compile(r"0|[1-9][0-9]{0,17}")
#: The exception class path reported for a history entry without one (an expired lease).
LEASE_LOST_PATH = f"{LeaseLost.__module__}.{LeaseLost.__qualname__}"

# Looked up by value: django-stubs types the members of TaskResultStatus as "...".
STATUS_OF_STATE = {
    JobState.WAITING: TaskResultStatus("READY"),
    JobState.READY: TaskResultStatus("READY"),
    JobState.RUNNING: TaskResultStatus("RUNNING"),
    JobState.SUCCEEDED: TaskResultStatus("SUCCESSFUL"),
    JobState.DEAD: TaskResultStatus("FAILED"),
    JobState.CANCELLED: TaskResultStatus("FAILED"),
}


def task_status(state: str) -> TaskResultStatus:
    """The ``TaskResult`` status of a job state: ready, running, successful or failed.

    ``waiting`` (for a job's dependencies) is ``READY``: enqueued, not started.
    ``dead`` and ``cancelled`` are both ``FAILED``: the task will not run
    (again) unless an operator requeues a dead job.
    """
    return STATUS_OF_STATE[JobState(state)]


class DatabaseQueueBackend(BaseTaskBackend):
    """A ``django.tasks`` backend whose tasks are jobs in ``DBQUEUE['DATABASE']``.

    ``enqueue()`` writes the job in the caller's transaction: rollback leaves
    no job, and ``task_enqueued`` is sent when the transaction commits. A
    result's id is the job's id. ``OPTIONS`` may set ``MAX_ATTEMPTS``,
    ``LEASE_SECONDS`` and ``RETRY`` (a dict of ``base``, ``factor``, ``cap``);
    what is not set comes from ``DBQUEUE`` when a job is enqueued or retried.
    """

    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    @property
    def max_attempts(self) -> int:
        value: int = self.options.get("MAX_ATTEMPTS", conf.get().max_attempts)
        return value

    @property
    def lease_seconds(self) -> int:
        """Whole seconds: a lease is never shorter than asked for."""
        seconds: float = self.options.get("LEASE_SECONDS", conf.get().lease_seconds)
        return math.ceil(seconds)

    @property
    def backoff(self) -> Backoff:
        """The retry policy; ``RETRY`` keys override the settings' policy one by one."""
        return replace(conf.get().backoff, **self.options.get("RETRY", {}))

    def validate_task(self, task: Task[..., Any]) -> None:
        """The framework's rules, then ours: a valid queue name that ``DBQUEUE['QUEUES']`` allows.

        Raises the framework's ``InvalidTask`` (``InvalidTaskError`` in the backport).
        """
        super().validate_task(task)
        try:
            check_queue(task.queue_name, conf.get().queues)
        except InvalidJob as exc:
            raise InvalidTask(str(exc)) from exc
        registry.register(task.module_path, task.queue_name)

    def enqueue(
        self, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[Any, Any]:
        """Write the job in the current transaction of the queue's database; a READY result.

        The arguments go through the checks ``enqueue()`` makes for native
        tasks (``arguments.encode_calls``). Raises ``InvalidTask`` for a task
        this backend cannot run, ``TypeError`` (``ArgumentNotJSON``, as the
        framework documents) for an argument of a type JSON cannot hold, and
        ``InvalidJob`` (a ``ValueError``, as the framework's ``normalize_json``
        raises for a value it cannot convert) for arguments that do not fit
        the function, hold NaN, a NUL character or a surrogate code point, or
        take more than ``MAX_ARGS_BYTES`` as JSON; each names the argument (or
        the task) before anything is sent to the database, so the caller's
        transaction stays usable. ``task_enqueued`` is sent once the
        transaction commits (at once outside a transaction).
        """
        self.validate_task(task)
        try:
            check_importable(task.module_path, Task, lambda found: found.func is task.func)
        except InvalidJob as exc:
            raise InvalidTask(str(exc)) from exc
        run_at, _ = schedule(EnqueueOptions(run_at=task.run_after))
        limit = limits.of_task(task.module_path, None, None, task.queue_name, conf.get())
        spec = JobSpec(
            task=task.module_path,
            queue=task.queue_name,
            priority=int(task.priority),
            max_attempts=self.max_attempts,
            lease_seconds=self.lease_seconds,
            run_at=run_at,
            backend=self.alias,
            limit_key=limit.key,
            limit_size=limit.size,
            limit_rate=limit.rate,
        )
        call = (list(args), dict(kwargs))
        rows = encode_calls(callee_of(task.module_path, task.func, task.takes_context), [call])
        (job,) = insert(spec, [call], rows)
        result = self.result_of(job, task)
        transaction.on_commit(
            functools.partial(task_enqueued.send, type(self), task_result=result),
            using=conf.get().database,
        )
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The result of job ``result_id`` as stored now.

        Raises ``TaskResultDoesNotExist`` for an id that is not a job of this
        backend, or whose task can no longer be imported.
        """
        job = None
        if isinstance(result_id, str) and RESULT_ID.fullmatch(result_id):
            database = conf.get().database
            job = Job.objects.using(database).filter(pk=int(result_id), backend=self.alias).first()
        if job is None:
            raise TaskResultDoesNotExist(
                f"No job {result_id!r} was enqueued through task backend {self.alias!r}."
            )
        return self.result_of(job)

    def result_of(self, job: Job, task: Task[Any, Any] | None = None) -> TaskResult[Any, Any]:
        """``job`` as a ``TaskResult``: status, errors, one worker id per attempt, return value.

        ``task`` is the job's task when the caller has it; else it is imported
        and given the job's priority, queue and ``run_at``.
        """
        result: TaskResult[Any, Any] = TaskResult(
            task=task or self.task_of(job),
            id=str(job.pk),
            status=task_status(job.state),
            enqueued_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            last_attempted_at=job.started_at,
            args=job.args,
            kwargs=job.kwargs,
            backend=self.alias,
            errors=[task_error(entry) for entry in job.errors],
            worker_ids=attempt_workers(job),
        )
        # The framework keeps the return value in a private field its backends fill in.
        object.__setattr__(result, "_return_value", job.result)
        return result

    def task_of(self, job: Job) -> Task[Any, Any]:
        """The framework ``Task`` of ``job``; ``TaskResultDoesNotExist`` when it does not import.

        It carries the job's priority, queue and ``run_after`` (``run_after_of``),
        unless those no longer pass validation (``QUEUES`` changed since the
        enqueue): then it is the task as declared, so the job still runs and reports.
        """
        try:
            found = load_framework_task(job.task)
        except TaskNotFound as exc:
            raise TaskResultDoesNotExist(f"Job {job.pk}: {exc}") from exc
        try:
            return found.using(
                priority=job.priority,
                queue_name=job.queue,
                run_after=run_after_of(job),
                backend=self.alias,
            )
        except InvalidTask:
            return found

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The framework's checks, then ours (``checks.task_backend_checks``)."""
        return [
            *super().check(**kwargs),
            *task_backend_checks(self.alias, self.options, self.queues),
        ]


@functools.lru_cache(maxsize=1024)
def callee_of(path: str, func: Callable[..., Any], takes_context: bool) -> Callee:
    """What a framework task's arguments are checked against, once per function.

    The tasks ``Task.using()`` derives share it, and with it the call shapes seen to bind.
    """
    return Callee(path, inspect.signature(func), 1 if takes_context else 0)


def load_framework_task(path: str) -> Task[Any, Any]:
    """The framework ``Task`` at ``path``; ``TaskNotFound`` when there is none."""
    return import_task(path, Task, "a django.tasks Task")


def run_after_of(job: Job) -> datetime | None:
    """The ``run_after`` of ``job``'s task: ``None`` ("not constrained") when enqueued without one.

    The row keeps no copy of the ``run_after`` asked for (that needs a column),
    so it is read from ``run_at``: one statement sets ``run_at`` and
    ``created_at`` from the same clock reading when no time is asked for, and
    to the time asked for otherwise. That is exact until the job is made due
    again (a retry, a release at shutdown, an operator's requeue or "run now"):
    from then on the new ``run_at``, the earliest the job runs, is reported.
    """
    return None if job.run_at == job.created_at else job.run_at


def task_error(entry: dict[str, Any]) -> TaskError:
    """A history entry as a ``TaskError``; an expired lease reports ``LeaseLost``."""
    path = entry.get("exception") or (
        LEASE_LOST_PATH if entry.get("code") == LEASE_EXPIRED else "builtins.Exception"
    )
    return TaskError(
        exception_class_path=path, traceback=entry.get("traceback") or entry.get("message", "")
    )


def attempt_workers(job: Job) -> list[str]:
    """One worker id per attempt consumed, oldest first.

    Failed attempts name their worker from the history; the latest attempt,
    if it has not failed, names ``last_worker_id``. An attempt whose entry
    fell out of the bounded history shows as ``""``, so ``attempts`` stays exact.
    """
    failed = {entry["attempt"]: entry.get("worker") or "" for entry in job.errors}
    latest = job.attempts
    return [
        failed.get(attempt, job.last_worker_id if attempt == latest else "")
        for attempt in range(1, latest + 1)
    ]
