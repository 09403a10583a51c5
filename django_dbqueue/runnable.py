"""What the worker needs from a task, whichever API declared it.

Jobs of ``@task`` functions resolve to their ``Task``; jobs enqueued through a
``django.tasks`` backend (``lease.backend`` set) resolve through that backend.
Both run sync and ``async def`` functions: a coroutine runs to completion on
the job's own thread, so it never blocks the other slots.

On Django 5.2 without the ``django-tasks`` backport there is no task framework:
only ``@task`` jobs exist, and a job naming a backend resolves to nothing
(``TaskNotFound``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured

from django_dbqueue import conf
from django_dbqueue.exceptions import TaskNotFound
from django_dbqueue.retry import Backoff
from django_dbqueue.tasks import Task, load_task

if TYPE_CHECKING:
    from django_dbqueue import backend as framework
    from django_dbqueue.context import JobContext
    from django_dbqueue.leases import Lease
else:
    try:
        from django_dbqueue import backend as framework
    except ModuleNotFoundError as exc:
        # Django 5.2 without the django-tasks backport: the task framework is optional.
        if exc.name != "django_tasks":
            raise
        framework = None


class Runnable(Protocol):
    """A task as the worker sees it."""

    @property
    def backoff(self) -> Backoff: ...

    @property
    def give_up_on(self) -> tuple[type[BaseException], ...]: ...

    @property
    def timeout(self) -> float | None: ...

    def prepare(self, lease: Lease, context: JobContext) -> Callable[[], Any]:
        """Bind the job's arguments; raises ``TypeError`` when they do not fit."""
        ...


def resolve(task: str, backend: str | None) -> Runnable:
    """The runnable behind a job's ``task`` and ``backend`` columns.

    Raises ``TaskNotFound`` when there is none.
    """
    if backend is not None:
        return runnable_for(task, backend)
    return NativeRunnable(load_task(task))


def backoff_for(task: str, backend: str | None) -> Backoff:
    """The retry policy of a job's task; the settings' policy when the task does not resolve.

    What the reaper passes to ``leases.reap``.
    """
    try:
        return resolve(task, backend).backoff
    except TaskNotFound:
        return conf.get().backoff


def call(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    coroutine: bool | None = None,
) -> Any:
    """Call ``function`` with ``args`` and ``kwargs``; a coroutine function runs to the end here.

    ``coroutine`` says whether ``function`` is one, when the caller knows.
    """
    if inspect.iscoroutinefunction(function) if coroutine is None else coroutine:
        return async_to_sync(function)(*args, **kwargs)
    return function(*args, **kwargs)


@dataclass(frozen=True)
class NativeRunnable:
    """A ``@task`` as the worker runs it: the task's own policy, timeout and binding."""

    task: Task[..., Any]

    @property
    def backoff(self) -> Backoff:
        return self.task.backoff

    @property
    def give_up_on(self) -> tuple[type[BaseException], ...]:
        return self.task.options.give_up_on

    @property
    def timeout(self) -> float | None:
        return self.task.options.timeout

    def prepare(self, lease: Lease, context: JobContext) -> Callable[[], Any]:
        """The job's call, ready to run; raises ``TypeError`` when the arguments do not fit."""
        args, kwargs = self.task.arguments(lease.args, lease.kwargs, context)
        return functools.partial(call, self.task.func, args, kwargs, self.task.is_coroutine)


@dataclass(frozen=True)
class FrameworkRunnable:
    """A framework ``Task`` as the worker runs it.

    Retries follow the backend's policy; there are no ``give_up_on`` types and
    no timeout (the framework has neither).
    """

    task: framework.Task[Any, Any]
    backend: framework.DatabaseQueueBackend
    give_up_on: tuple[type[BaseException], ...] = ()
    timeout: float | None = None

    @property
    def backoff(self) -> Backoff:
        return self.backend.backoff

    def prepare(self, lease: Lease, context: JobContext) -> Callable[[], Any]:
        """The attempt's call; raises ``TypeError`` when the arguments do not bind.

        A ``takes_context`` task gets a ``TaskContext`` whose result is this
        running attempt. The call sends ``task_started`` before the function runs.
        """
        result = self.backend.get_result(str(lease.job_id))
        leading: tuple[framework.TaskContext[Any, Any], ...] = ()
        if self.task.takes_context:
            leading = (framework.TaskContext(task_result=result),)
        bound = inspect.signature(self.task.func).bind(*leading, *lease.args, **lease.kwargs)
        return functools.partial(self._run, result, bound)

    def _run(self, result: framework.TaskResult[Any, Any], bound: inspect.BoundArguments) -> Any:
        framework.task_started.send(type(self.backend), task_result=result)
        return call(self.task.func, bound.args, bound.kwargs)


def runnable_for(task: str, alias: str) -> FrameworkRunnable:
    """What the worker runs for a job enqueued through ``django.tasks`` backend ``alias``.

    Raises ``TaskNotFound`` when the job's task is not a framework ``Task``
    or its backend alias is no longer a ``DatabaseQueueBackend`` in ``TASKS``.
    """
    backend = backend_named(alias)
    return FrameworkRunnable(framework.load_framework_task(task), backend)


def backend_named(alias: str | None) -> framework.DatabaseQueueBackend:
    """The ``DatabaseQueueBackend`` configured as ``TASKS[alias]``, else ``TaskNotFound``."""
    if framework is None:
        raise TaskNotFound(
            f"Task backend {alias!r}: no task framework is installed (django.tasks, or the "
            "django-tasks backport on Django 5.2)."
        )
    try:
        backend = framework.task_backends[alias] if alias is not None else None
    except ImproperlyConfigured as exc:
        raise TaskNotFound(f"Task backend {alias!r} is not configured in TASKS: {exc}") from exc
    if not isinstance(backend, framework.DatabaseQueueBackend):
        raise TaskNotFound(f"TASKS[{alias!r}] is not a DatabaseQueueBackend.")
    return backend


def send_task_finished(lease: Lease, outcome: str) -> None:
    """Follow ``job_finished`` with the framework's ``task_finished``, with the stored result.

    Sent once per job, when its result is final (``SUCCESSFUL`` or ``FAILED``):
    an attempt that will be retried (``outcome="retried"``) sends nothing. The
    worker announces a failure inside the handler of its exception, so
    ``task_finished`` receivers find it in ``sys.exc_info()``, as Django's own
    receiver expects. The worker's reporter calls it after ``job_finished``.
    """
    if lease.backend is None or outcome == "retried":
        return
    # No framework Task to report on: the job is dead with TASK_NOT_FOUND.
    try:
        backend = backend_named(lease.backend)
    except TaskNotFound:
        return
    try:
        result = backend.get_result(str(lease.job_id))
    except framework.TaskResultDoesNotExist:
        return
    framework.task_finished.send(type(backend), task_result=result)
