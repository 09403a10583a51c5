"""Tasks the tests enqueue and run. Each records what happened in ``CALLS``."""

from __future__ import annotations

import math
from typing import Any

from django_dbqueue import JobContext, PermanentError, Retry, task
from django_dbqueue.retry import Backoff

CALLS: list[tuple[str, Any]] = []


@task
def noop() -> None:
    CALLS.append(("noop", None))


@task(queue="mail", priority=3, max_attempts=3, lease=20)
def send_invoice(order_id: int, *, copy: bool = False) -> dict[str, Any]:
    CALLS.append(("send_invoice", order_id))
    return {"order": order_id, "copy": copy}


@task(max_attempts=3, retry=Backoff(base=10, factor=2, cap=60))
def flaky(message: str) -> None:
    raise ConnectionError(message)


@task(max_attempts=3)
def asks_retry(delay: float) -> None:
    raise Retry(delay=delay)


@task(max_attempts=5)
def permanent() -> None:
    raise PermanentError("the card was declined")


@task(max_attempts=5, give_up_on=(KeyError,))
def missing_key() -> None:
    raise KeyError("sku")


@task
def returns_unserializable() -> object:
    return {"when": math}


@task(takes_context=True)
def with_context(context: JobContext, label: str) -> dict[str, Any]:
    context.heartbeat()
    return {
        "label": label,
        "job_id": context.job_id,
        "attempt": context.attempt,
        "max_attempts": context.max_attempts,
        "worker_id": context.worker_id,
        "idempotency_key": context.idempotency_key,
    }


def plain_function() -> None:
    """Not a task: a job naming it dies with TASK_NOT_FOUND."""
