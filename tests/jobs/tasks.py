"""Tasks the tests enqueue and run. Each records what happened in ``CALLS``."""

from __future__ import annotations

import math
import threading
from typing import Any

from django_dbqueue import JobContext, PermanentError, Retry, task
from django_dbqueue.models import Job
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


@task
def reads_the_database() -> int:
    """Use the database from task code, as a view would: one query on this thread's connection."""
    return Job.objects.count()


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


@task(takes_context=True, max_attempts=1)
def reports_a_burst(context: JobContext, count: int, then_fail: bool = False) -> int:
    """Report progress ``count`` times as fast as it goes (well within one pacing interval),
    then return ``count``, or with ``then_fail`` raise ``PermanentError``."""
    for done in range(1, count + 1):
        context.set_progress(done, count, f"row {done}")
    if then_fail:
        raise PermanentError(f"failed after {count} rows")
    return count


class Held:
    """Jobs of ``held`` wait here until the test lets them go (in-process workers only)."""

    def __init__(self) -> None:
        self.permits = threading.Semaphore(0)
        self.lock = threading.Lock()
        self.running = 0
        self.most_running = 0

    def run(self) -> None:
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if not self.permits.acquire(timeout=60):
                raise TimeoutError("no test let this held job go within 60 s")
        finally:
            with self.lock:
                self.running -= 1

    def let_go(self, jobs: int) -> None:
        for _ in range(jobs):
            self.permits.release()


#: The test using ``held`` replaces it with a fresh one first.
HELD = Held()


@task(max_attempts=1)
def held(*, fail: bool = False) -> None:
    """Wait until the test lets one held job go (``HELD.let_go``), then succeed or fail (dead)."""
    HELD.run()
    if fail:
        raise PermanentError("held, then failed")


def plain_function() -> None:
    """Not a task: a job naming it dies with TASK_NOT_FOUND."""


@task
def echo(value: Any) -> Any:
    """Return ``value``: a step whose result the next step reads."""
    CALLS.append(("echo", value))
    return value


@task(takes_context=True)
def collect(context: JobContext) -> list[Any]:
    """Return the results of the jobs this one waited for (``context.dependency_results``)."""
    results = context.dependency_results
    CALLS.append(("collect", len(results)))
    return results
