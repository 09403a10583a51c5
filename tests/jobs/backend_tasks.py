"""Tasks declared with Django's task framework, run through ``DatabaseQueueBackend``.

``django.tasks`` on Django 6, the ``django-tasks`` backport on Django 5.2: the
same import order as ``django_dbqueue.backend``. The backend is the one
``TASKS["default"]`` names (``tests/settings.py``). Two native ``async def``
tasks sit here too, for the async tests.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timezone
from typing import Any

from django_dbqueue import PermanentError
from django_dbqueue import task as dbqueue_task
from tests.jobs.gates import gate_opens
from tests.testapp.models import Gate

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the django-tasks backport.
    from django_tasks import TaskContext, task  # type: ignore[no-redef]  # the same API

#: Longest an async task waits for the other's marker: a blocked slot fails, never hangs.
MEET_TIMEOUT = 30.0


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
def give_up() -> None:
    raise PermanentError("retrying cannot help")


@task(takes_context=True)
def fail_first_attempt(context: TaskContext, value: str) -> str:
    if context.attempt == 1:
        raise ConnectionError("first attempt fails")
    return value


@task(takes_context=True)
def describe_context(context: TaskContext) -> dict[str, Any]:
    result = context.task_result
    return {
        "id": result.id,
        "attempt": context.attempt,
        "status": str(result.status),
        "worker_ids": result.worker_ids,
        "started": result.started_at is not None,
    }


@task
def returns_tuple(a: int, b: int) -> tuple[int, int]:
    return (a, b)


@task
def returns_nothing() -> None:
    return None


@task
def returns_a_datetime() -> datetime:
    return datetime.now(tz=timezone.utc)


@task
def exits(code: int) -> None:
    sys.exit(code)


@task
def interrupts() -> None:
    raise KeyboardInterrupt


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


async def wait_for_marker(mine: str, theirs: str) -> str:
    """Open gate ``mine``, then wait for gate ``theirs``: both jobs must run at once."""
    # One INSERT, no read-then-write transaction: two of those deadlock on SQLite.
    await Gate.objects.acreate(name=mine, is_open=True)
    await gate_opens(theirs, MEET_TIMEOUT, every=0.02)
    return mine


@task
async def meet(mine: str, theirs: str) -> str:
    return await wait_for_marker(mine, theirs)


@dbqueue_task
async def native_meet(mine: str, theirs: str) -> str:
    return await wait_for_marker(mine, theirs)


@dbqueue_task
async def native_async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def shadowed() -> None:
    """Declared below under another name, so workers could not import it as a task."""


renamed = task(shadowed)
