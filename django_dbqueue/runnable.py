"""What the worker needs from a task, whichever API declared it.

Jobs of ``@task`` functions resolve to their ``Task``; jobs enqueued through a
``django.tasks`` backend (``lease.backend`` set) resolve through that backend.
Both run sync and ``async def`` functions: a coroutine runs to completion on
the job's own thread, so it never blocks the other slots.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from asgiref.sync import async_to_sync

from django_dbqueue.retry import Backoff

if TYPE_CHECKING:
    from django_dbqueue.context import JobContext
    from django_dbqueue.leases import Lease


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
        from django_dbqueue.backend import runnable_for

        return runnable_for(task, backend)
    from django_dbqueue.tasks import load_task

    return load_task(task)


def call(function: Callable[..., Any], bound: inspect.BoundArguments) -> Any:
    """Call ``function`` with ``bound``; a coroutine function runs to completion here."""
    if inspect.iscoroutinefunction(function):
        return async_to_sync(function)(*bound.args, **bound.kwargs)
    return function(*bound.args, **bound.kwargs)
