"""Run one claimed job and record its outcome through the lease protocol.

This is the only place with a broad ``except``: whatever task code raises is
recorded on the job, never allowed to crash the worker.
"""

from __future__ import annotations

import enum
import logging
import time
from datetime import timedelta
from typing import Any

from django.utils import timezone

from django_dbqueue import leases
from django_dbqueue.context import JobContext
from django_dbqueue.errors import (
    BAD_ARGUMENTS,
    RESULT_NOT_SERIALIZABLE,
    TASK_NOT_FOUND,
    ErrorInfo,
)
from django_dbqueue.exceptions import LeaseLost, PermanentError, Retry
from django_dbqueue.tasks import Task, TaskNotFound, load_task

log = logging.getLogger(__name__)


class Outcome(str, enum.Enum):
    """How an attempt ended, as logged and counted."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    DEAD = "dead"
    LEASE_LOST = "lease_lost"


def execute(lease: leases.Lease, context: JobContext | None = None) -> Outcome:
    """Import the task, bind the arguments, call it, and record what happened.

    Success stores the JSON result; ``Retry`` and ordinary exceptions retry
    with backoff while the budget lasts; ``PermanentError``, ``give_up_on``
    types, an unimportable task (``TASK_NOT_FOUND``), arguments that do not
    bind (``BAD_ARGUMENTS``) and a non-JSON result (``RESULT_NOT_SERIALIZABLE``)
    make the job dead. ``context`` lets the caller (the heartbeat) signal a
    lost lease; one is made when not given. Never raises for task failures.
    """
    context = context or JobContext(lease)
    started = time.monotonic()
    outcome, code = _attempt(lease, context)
    log.info(
        "job id=%s task=%s attempt=%s/%s duration=%.3fs outcome=%s code=%s",
        lease.job_id,
        lease.task,
        lease.attempt,
        lease.max_attempts,
        time.monotonic() - started,
        outcome.value,
        code or "-",
    )
    return outcome


def _attempt(lease: leases.Lease, context: JobContext) -> tuple[Outcome, str]:
    try:
        task = load_task(lease.task)
    except TaskNotFound as exc:
        return _give_up(lease, ErrorInfo.from_exception(exc, TASK_NOT_FOUND))
    try:
        bound = task.bind(lease.args, lease.kwargs, context)
    except TypeError as exc:
        return _give_up(lease, ErrorInfo.from_exception(exc, BAD_ARGUMENTS))
    try:
        result = task.func(*bound.args, **bound.kwargs)
    except LeaseLost:
        return Outcome.LEASE_LOST, ""
    except Retry as exc:
        delay = exc.delay if exc.delay is not None else task.backoff.delay(lease.attempt)
        return _retry(lease, ErrorInfo.from_exception(exc), delay)
    except Exception as exc:  # noqa: BLE001 - task code may raise anything; it is recorded on the job.
        return _failed(lease, task, exc)
    try:
        applied = leases.complete(lease, result)
    except leases.ResultNotSerializable as exc:
        return _give_up(lease, ErrorInfo.from_exception(exc, RESULT_NOT_SERIALIZABLE))
    return (Outcome.SUCCEEDED if applied else Outcome.LEASE_LOST), ""


def _failed(lease: leases.Lease, task: Task[..., Any], exc: Exception) -> tuple[Outcome, str]:
    info = ErrorInfo.from_exception(exc)
    if isinstance(exc, (PermanentError, *task.options.give_up_on)):
        return _give_up(lease, info)
    return _retry(lease, info, task.backoff.delay(lease.attempt))


def _retry(lease: leases.Lease, info: ErrorInfo, delay: float) -> tuple[Outcome, str]:
    if lease.attempt >= lease.max_attempts:
        return _give_up(lease, info)
    retry_at = timezone.now() + timedelta(seconds=delay)
    applied = leases.fail(lease, info, retry_at)
    return (Outcome.RETRIED if applied else Outcome.LEASE_LOST), info.code


def _give_up(lease: leases.Lease, info: ErrorInfo) -> tuple[Outcome, str]:
    applied = leases.fail(lease, info, None)
    return (Outcome.DEAD if applied else Outcome.LEASE_LOST), info.code
