"""Tasks the e2e tests run in real worker processes. Each records its attempts.

Most record them as ``Execution`` rows; ``appended`` records them in a file, so a
drain of many jobs is not slowed by a write per job.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_dbqueue import JobContext, Retry, task
from django_dbqueue.retry import Backoff
from tests.testapp.models import Execution, Gate

#: Longest a task waits on a gate before failing: keeps every wait bounded.
GATE_TIMEOUT = 60.0


def record(context: JobContext, label: str = "") -> Execution:
    """Commit a row saying this attempt started (visible to the test at once)."""
    return Execution.objects.create(
        job_id=context.job_id,
        attempt=context.attempt,
        worker_id=context.worker_id,
        idempotency_key=context.idempotency_key,
        label=label,
    )


def finish(execution: Execution) -> None:
    execution.finished_at = timezone.now()
    execution.save(update_fields=["finished_at"])


def wait_for_gate(name: str, context: JobContext | None = None) -> None:
    """Block until the test opens gate ``name`` (heartbeating when given a context)."""
    deadline = time.monotonic() + GATE_TIMEOUT
    while not Gate.objects.filter(name=name, is_open=True).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {name!r} stayed closed for {GATE_TIMEOUT}s")
        if context is not None:
            context.heartbeat()
        time.sleep(0.05)


def started_then_wait(context: JobContext, folder: str) -> None:
    """Touch ``folder/started-<job id>``, then block until the test creates ``folder/go``.

    Uses files, not the database, so a job waiting here holds no connection.
    """
    (Path(folder) / f"started-{context.job_id}").touch()
    deadline = time.monotonic() + GATE_TIMEOUT
    while not (Path(folder) / "go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{folder}/go did not appear within {GATE_TIMEOUT}s")
        time.sleep(0.02)


@task(takes_context=True, lease=3)
def waits_without_the_database(context: JobContext, folder: str) -> None:
    started_then_wait(context, folder)


@task(takes_context=True, lease=3)
def waits_holding_a_connection(context: JobContext, folder: str) -> None:
    Execution.objects.filter(job_id=context.job_id).exists()  # opens this thread's connection
    started_then_wait(context, folder)


@task(takes_context=True)
def recorded(context: JobContext, label: str = "") -> dict[str, Any]:
    """Record the attempt and succeed at once."""
    finish(record(context, label))
    return {"job_id": context.job_id}


@task(takes_context=True, lease=2)
def gated(context: JobContext, gate: str) -> None:
    """Record the attempt, then wait for the gate without heartbeating."""
    execution = record(context, gate)
    wait_for_gate(gate)
    finish(execution)


@task(takes_context=True, lease=2)
def gated_with_heartbeat(context: JobContext, gate: str) -> None:
    """Record the attempt, then wait for the gate, renewing the lease meanwhile."""
    execution = record(context, gate)
    wait_for_gate(gate, context)
    finish(execution)


@task(takes_context=True, lease=2)
def heartbeats_in_a_transaction(context: JobContext, gate: str) -> None:
    """Record the attempt, then, in a transaction that wrote first, wait for the gate
    renewing the lease meanwhile."""
    execution = record(context, gate)
    with transaction.atomic():
        Execution.objects.filter(pk=execution.pk).update(label=f"{gate} in a transaction")
        wait_for_gate(gate, context)
    finish(execution)


@task(takes_context=True, lease=2)
def reports_progress_in_a_transaction(context: JobContext, gate: str) -> None:
    """Record the attempt, then, in a transaction that wrote first, report progress in a
    tight loop (a thousand reports between looks at the gate) until the gate opens."""
    execution = record(context, gate)
    done = 0
    with transaction.atomic():
        Execution.objects.filter(pk=execution.pk).update(label=f"{gate} in a transaction")
        deadline = time.monotonic() + GATE_TIMEOUT
        while not Gate.objects.filter(name=gate, is_open=True).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {gate!r} stayed closed for {GATE_TIMEOUT}s")
            for _ in range(1000):
                done += 1
                context.set_progress(done, message=f"attempt {context.attempt}")
            time.sleep(0.01)
    context.set_progress(done, done, f"attempt {context.attempt} finished")
    finish(execution)


@task(takes_context=True, lease=3)
def stops_when_cancelled(context: JobContext) -> None:
    """Record the attempt, wait (bounded) for a cancel request, and honour it."""
    record(context)
    if not context.cancel_requested.wait(GATE_TIMEOUT):
        raise TimeoutError(f"no cancel request within {GATE_TIMEOUT}s")
    context.raise_if_cancelled()


@task(takes_context=True, lease=3)
def ignores_cancel(context: JobContext, gate: str) -> str:
    """Record the attempt, note whether a cancel was requested, and finish at the gate anyway."""
    execution = record(context, gate)
    wait_for_gate(gate)
    execution.label = f"cancel_requested={context.cancel_requested.is_set()}"
    execution.save(update_fields=["label"])
    finish(execution)
    return "finished anyway"


@task(takes_context=True, max_attempts=3)
def retried_once(context: JobContext, delay: float) -> None:
    """Record the attempt; the first one asks for a retry after ``delay`` seconds."""
    finish(record(context))
    if context.attempt == 1:
        raise Retry(delay=delay)


@task(takes_context=True, max_attempts=3, retry=Backoff(base=2, factor=1, cap=2))
def fails_with_backoff(context: JobContext) -> None:
    """Record the attempt, then fail: retried after 1-2 s of backoff, dead after 3 attempts."""
    finish(record(context))
    raise RuntimeError(f"attempt {context.attempt} fails")


@task(takes_context=True)
def appended(context: JobContext, directory: str) -> None:
    """Append ``<job id> <attempt>`` to ``<directory>/<worker id>.ran``; no database.

    One ``O_APPEND`` write per attempt, so concurrent threads never interleave lines.
    """
    line = f"{context.job_id} {context.attempt}\n".encode()
    path = Path(directory) / f"{context.worker_id}.ran"
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
