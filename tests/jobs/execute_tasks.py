"""Tasks for ``tests/integration/test_execute.py``.

``HOOKS`` run inside ``heartbeat_after_hooks`` before its heartbeat, so a test
can change the job's lease while the task is running; ``SEEN`` records what
the task observed. The test module clears both around every test.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django_dbqueue import JobContext, LeaseLost, PermanentError, Retry, task
from django_dbqueue.models import Job
from django_dbqueue.retry import Backoff

HOOKS: list[Callable[[JobContext], None]] = []
SEEN: list[dict[str, Any]] = []


@task(takes_context=True, max_attempts=3, lease=30)
def heartbeat_after_hooks(context: JobContext) -> str:
    for hook in HOOKS:
        hook(context)
    try:
        context.heartbeat()
    except LeaseLost as exc:
        SEEN.append({"raised": type(exc).__name__, "lease_lost": context.lease_lost.is_set()})
        raise
    lease_until: datetime | None = Job.objects.values_list("lease_until", flat=True).get(
        pk=context.job_id
    )
    SEEN.append({"lease_until": lease_until, "lease_lost": context.lease_lost.is_set()})
    return "renewed"


@task(takes_context=True, max_attempts=3, lease=30)
def whoami(context: JobContext) -> dict[str, Any]:
    return {
        "worker_id": context.worker_id,
        "attempt": context.attempt,
        "idempotency_key": context.idempotency_key,
    }


@task(max_attempts=12, retry=Backoff(base=1, factor=1, cap=1))
def always_fails(label: str) -> None:
    raise RuntimeError(f"{label} failed again")


def _down_a(depth: int, message: str) -> None:
    if depth == 0:
        raise ValueError(message)
    _down_b(depth - 1, message)


def _down_b(depth: int, message: str) -> None:
    # Two functions take turns so the traceback is not collapsed into "[Previous line repeated]".
    _down_a(depth - 1, message)


@task(max_attempts=2)
def overflowing_error(depth: int, message: str) -> None:
    _down_a(depth, message)


@task(max_attempts=3)
def raises_type_error() -> None:
    raise TypeError("a bug inside the task body, not in its arguments")


@task
def returns_nan() -> float:
    return float("nan")


@task
def returns_nul() -> str:
    """A string PostgreSQL's jsonb cannot hold."""
    return "before\x00after"


@task(max_attempts=3)
def raises_with_nul() -> None:
    raise ValueError("before\x00after")


@task
def returns_surrogate() -> str:
    """A lone surrogate: no database stores it, PostgreSQL refuses the whole write."""
    return "a\ud800b"


@task
def returns_surrogate_key() -> dict[str, int]:
    return {"k\udc00": 1}


@task(max_attempts=3)
def raises_with_surrogate() -> None:
    raise ValueError("before\ud800after")


class Unprintable(PermanentError):
    """A permanent failure whose ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of the task's own exception failed")


@task
def raises_unprintable() -> None:
    raise Unprintable()


@task
def returns_text(length: int) -> str:
    """A result ``length + 2`` bytes long as JSON."""
    return "x" * length


@task(takes_context=True, max_attempts=3, lease=30)
def stops_when_cancelled(context: JobContext) -> str:
    """Run the hooks (a test requests the cancel there), heartbeat, then honour the request."""
    for hook in HOOKS:
        hook(context)
    context.heartbeat()
    SEEN.append({"cancel_requested": context.cancel_requested.is_set()})
    context.raise_if_cancelled()
    return "not cancelled"


@task(max_attempts=2, retry=Backoff(base=1, factor=1, cap=1))
def exits(status: int) -> None:
    sys.exit(status)


@task(max_attempts=2, retry=Backoff(base=1, factor=1, cap=1))
def cancelled() -> None:
    raise asyncio.CancelledError("cancelled from inside the task")


@task(max_attempts=2, retry=Backoff(base=1, factor=1, cap=1))
async def cancelled_async() -> None:
    raise asyncio.CancelledError("cancelled from inside the coroutine")


@task(max_attempts=2, retry=Backoff(base=1, factor=1, cap=1))
def interrupted() -> None:
    raise KeyboardInterrupt


@task(max_attempts=3, retry=Backoff(base=1, factor=1, cap=1))
def retry_after(seconds: str) -> None:
    """Ask for a retry after ``float(seconds)``: text, so ``nan`` and ``inf`` travel as JSON."""
    raise Retry(delay=float(seconds))
