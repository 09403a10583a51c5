"""Tasks of the fault, fairness and shutdown e2e tests (``test_runtime.py``).

Each records its attempt as an ``Execution`` row, so the tests can tell which
jobs ran, how often, when, and on which worker.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from django.db import connection
from django.dispatch import receiver

from django_dbqueue import JobContext, Retry, signals, task
from django_dbqueue.leases import Lease
from django_dbqueue.retry import Backoff
from tests.jobs.crash_tasks import QUICK_RETRY
from tests.jobs.e2e_tasks import finish, record, wait_for_gate
from tests.testapp.models import Execution


@task(takes_context=True)
def paced(context: JobContext, label: str = "", milliseconds: int = 20) -> None:
    """Record the attempt, spend ``milliseconds`` working, then record the end."""
    execution = record(context, label)
    time.sleep(milliseconds / 1000)
    finish(execution)


@task(takes_context=True, lease=5, retry=Backoff(base=0.2, factor=2, cap=1))
def paced_short_lease(context: JobContext, milliseconds: int = 8) -> None:
    """``paced`` with a 5 s lease and sub-second retries, so lost outcomes recover fast."""
    execution = record(context)
    time.sleep(milliseconds / 1000)
    finish(execution)


@task(takes_context=True, lease=10)
def outlasts_its_lease(context: JobContext, seconds: float) -> dict[str, int]:
    """Record the attempt, then work ``seconds`` (longer than the lease) without the database.

    Only the heartbeat keeps the job this worker's meanwhile. The finish is
    written on a fresh connection: a fault may have broken the first one.
    """
    execution = record(context)
    time.sleep(seconds)
    connection.close()
    finish(execution)
    return {"attempt": context.attempt}


@task(max_attempts=2, retry=QUICK_RETRY)
def exits(status: int) -> None:
    """``sys.exit(status)`` from task code."""
    sys.exit(status)


@task(max_attempts=2, retry=QUICK_RETRY)
def cancelled() -> None:
    raise asyncio.CancelledError("cancelled inside the task")


@task(max_attempts=2, retry=QUICK_RETRY)
async def cancelled_async() -> None:
    raise asyncio.CancelledError("cancelled inside the coroutine")


@task(max_attempts=2, retry=QUICK_RETRY)
def asks_retry(seconds: str) -> None:
    """``raise Retry(delay=float(seconds))``: text, so ``nan`` travels as JSON."""
    raise Retry(delay=float(seconds))


@task(takes_context=True, lease=3, timeout=1)
def hangs(context: JobContext, seconds: float = 60) -> None:
    """Record the attempt, then ignore ``lease_lost`` and the timeout for ``seconds``."""
    record(context)
    time.sleep(seconds)


@task(takes_context=True, lease=30)
def announced_after_gate(context: JobContext, gate: str) -> dict[str, int]:
    """Record the attempt, wait for ``gate``, succeed; ``job_finished`` is recorded too."""
    execution = record(context, gate)
    wait_for_gate(gate)
    finish(execution)
    return {"attempt": context.attempt}


@receiver(signals.job_finished, dispatch_uid="tests.jobs.faults_tasks.record_job_finished")
def record_job_finished(lease: Lease, outcome: str, **_: Any) -> None:
    """Each ``job_finished`` of ``announced_after_gate`` as an ``Execution`` labelled with it."""
    if lease.task == f"{__name__}.announced_after_gate":
        Execution.objects.create(
            job_id=lease.job_id,
            attempt=lease.attempt,
            worker_id=lease.worker_id,
            idempotency_key=lease.idempotency_key,
            label=f"job_finished {outcome}",
        )


@task(lease=2)
def quick() -> None:
    """Nothing, under a two-second lease: renewed every 0.7 s while it waits for a slot."""
