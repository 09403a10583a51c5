"""Run one claimed job and record its outcome through the lease protocol.

Whatever task code raises, ``BaseException`` included (``SystemExit``,
``CancelledError``), is recorded on the job as a failed attempt, never allowed
to end the worker's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_dbqueue import durations, leases, runnable, signals
from django_dbqueue.context import JobContext
from django_dbqueue.errors import (
    BAD_ARGUMENTS,
    CANCELLED,
    TASK_ABORTED,
    TASK_NOT_FOUND,
    ErrorInfo,
    refused_result,
)
from django_dbqueue.exceptions import (
    JobCancelled,
    LeaseLost,
    PermanentError,
    Retry,
    TaskNotFound,
    UnstorableResult,
)
from django_dbqueue.models import Job
from django_dbqueue.runnable import Runnable
from django_dbqueue.worker.connections import (
    WRITE_RETRY,
    log_unrecorded,
    worth_retrying,
    write_here,
)
from django_dbqueue.worker.faults import Fault, classify
from django_dbqueue.worker.reporter import Outcome, report

log = logging.getLogger(__name__)

#: A job's task resolved once, at claim (``resolve``): its runnable, or what resolving raised.
Resolved = Runnable | Exception

#: Takes over writing a success: ``(context, result, started)``; raises
#: ``UnstorableResult`` at once when the result cannot be stored.
HandOver = Callable[[JobContext, Any, float], None]

#: Writes an outcome: applies ``transition`` once, by ``give_up_at`` (``time.monotonic``) at
#: the latest, and returns what it returned; raises what it raised, the fault's remedy
#: (``recover``) applied to the connection it ran on.
Write = Callable[[Callable[[], bool], float], bool]


def execute(
    lease: leases.Lease,
    context: JobContext | None = None,
    hand_over: HandOver | None = None,
    task: Resolved | None = None,
    write: Write | None = None,
) -> Outcome:
    """Import the task, bind the arguments, call it, and record what happened.

    Success stores the JSON result; ``Retry`` and ordinary exceptions retry
    with backoff while the budget lasts; ``PermanentError``, ``give_up_on``
    types, an unimportable task (``TASK_NOT_FOUND``), arguments that do not
    bind (``BAD_ARGUMENTS``), a result that is not JSON every database stores
    (``RESULT_NOT_SERIALIZABLE``, recorded as the error serialising raised)
    and one past ``MAX_RESULT_BYTES`` (``RESULT_TOO_LARGE``) make the job
    dead. An outcome the database cannot take for now (connection lost) is
    retried while the lease may live, then left to the reaper; one it refuses
    for good is written in its minimal form instead (``_write``), so the
    attempt is never run again for want of a record. ``context`` lets the
    caller (the heartbeat) signal a lost lease; one is made when not given.
    ``task`` is the job's ``resolve`` result when the caller resolved it
    already (the worker does, at claim); it is resolved here when not given.
    Once an outcome is written, it is reported (``reporter.report``); a
    failure is reported inside the handler of its exception, so
    ``signals.job_finished`` receivers (the ``django.tasks`` backend's
    ``task_finished``) find it in ``sys.exc_info()``.

    With ``hand_over`` (the worker's batching completer) a success is handed
    over instead of written here, and ``HANDED_OVER`` returned: whoever took
    it writes and reports it. With ``write`` (the worker's completer again)
    every other outcome is written through it, on a connection the worker
    owns, while this thread waits for the result, so the calling thread needs
    no connection of its own for the protocol; without it (``run_jobs``,
    eager mode) outcomes are written here (``write_here``). Never raises for
    task failures, nor for a failing signal receiver.
    """
    if signals.job_started.receivers:  # what send_robust checks first; skips leased_at too
        signals.job_started.send_robust(
            sender=Job,
            lease=lease,
            job_id=lease.job_id,
            attempt=lease.attempt,
            leased_at=lease.leased_at,
        )
    resolved = resolve(lease) if task is None else task
    job = _Recording(context or JobContext(lease), write or write_here, time.monotonic())
    return _attempt(job, hand_over, resolved)


def resolve(lease: leases.Lease) -> Resolved:
    """The runnable behind the job, or the exception resolving it raised (returned, not raised).

    The worker resolves each job once, when it claims it (the timeout is the
    task's), and hands the result to ``execute``, which records a
    ``TaskNotFound`` as the attempt's outcome inside its handler.
    """
    try:
        return runnable.resolve(lease.task, lease.backend)
    except Exception as exc:  # noqa: BLE001 - execute() raises it again and records why it failed.
        return exc


def resolve_all(claimed: Sequence[leases.Lease]) -> list[Resolved]:
    """``resolve`` for each of a claim's jobs, in order, each task and backend looked up once.

    A runnable holds nothing of one job, so the jobs of a task share it. A
    failure is resolved again for each job: no two jobs share an exception (a
    raised exception collects its traceback), so each records its own.
    """
    found: dict[tuple[str, str | None], Resolved] = {}
    resolved = []
    for lease in claimed:
        key = (lease.task, lease.backend)
        task = found.get(key)
        if task is None:
            task = resolve(lease)
            if not isinstance(task, Exception):
                found[key] = task
        resolved.append(task)
    return resolved


@dataclass(frozen=True)
class _Recording:
    """One attempt being recorded: its job, the way its outcome is written, when it started."""

    context: JobContext
    write: Write
    #: When the attempt started (``time.monotonic``), for its duration.
    started: float

    def settle(self, verdict: _Verdict) -> Outcome:
        """Write ``verdict`` (``_write``), then report the outcome the database gave."""
        outcome, written = _write(self.context, self.write, verdict)
        return self.reported(outcome, written.code)

    def reported(self, outcome: Outcome, code: str) -> Outcome:
        report(self.context.lease, outcome, code, time.monotonic() - self.started)
        return outcome


@dataclass(frozen=True)
class _Verdict:
    """What an attempt's end calls for: the write, the outcome it records, the error code.

    ``instead`` gives the verdict to write when the database refuses this one
    for good (``Fault.REFUSED``), from the error it refused it with: the
    failure with its error reduced to code and class (``ErrorInfo.minimal``),
    or for a success the failure that its result could not be stored.
    """

    transition: Callable[[], bool]
    outcome: Outcome
    code: str = ""
    instead: Callable[[Exception], _Verdict] | None = None


def _attempt(job: _Recording, hand_over: HandOver | None, resolved: Resolved) -> Outcome:
    # Each failure is reported inside its except clause, while sys.exc_info() holds it.
    context, lease = job.context, job.context.lease
    try:
        if isinstance(resolved, Exception):
            raise resolved
        task = resolved
    except TaskNotFound as exc:
        return job.settle(_give_up(context, ErrorInfo.from_exception(exc, TASK_NOT_FOUND)))
    try:
        job_call = task.prepare(lease, context)
    except TypeError as exc:
        return job.settle(_give_up(context, ErrorInfo.from_exception(exc, BAD_ARGUMENTS)))
    try:
        result = job_call()
    except LeaseLost:
        return job.reported(Outcome.LEASE_LOST, "")
    except JobCancelled:
        return job.settle(
            _Verdict(lambda: leases.cancel_running(lease), Outcome.CANCELLED, CANCELLED)
        )
    except Retry as exc:
        return job.settle(_retry_requested(context, task, exc))
    # Task code may raise anything, SystemExit and CancelledError included: it is recorded on
    # the job as a failed attempt, and the slot goes on.
    except BaseException as exc:  # noqa: BLE001
        return job.settle(_failed(context, task, exc))
    try:
        if hand_over is not None:
            hand_over(context, result, job.started)
            return Outcome.HANDED_OVER
        encoded = leases.encode_result(lease, result)
    except UnstorableResult as exc:
        # Recorded as what serialising raised (TypeError, ValueError), as django.tasks does.
        info = ErrorInfo.from_exception(exc.__cause__ or exc, exc.code)
        return job.settle(_give_up(context, info))
    return job.settle(
        _Verdict(
            lambda: lease.job_id in leases.complete_many([(lease, encoded)]),
            Outcome.SUCCEEDED,
            instead=lambda refusal: _give_up(context, refused_result(refusal)),
        )
    )


def _failed(context: JobContext, task: Runnable, exc: BaseException) -> _Verdict:
    # A BaseException's own ``code`` (SystemExit's exit status) names no error: ours does.
    info = ErrorInfo.from_exception(exc, None if isinstance(exc, Exception) else TASK_ABORTED)
    if isinstance(exc, (PermanentError, *task.give_up_on)):
        return _give_up(context, info)
    return _retry(context, info, task.backoff.delay(context.attempt))


def _retry_requested(context: JobContext, task: Runnable, exc: Retry) -> _Verdict:
    """``raise Retry(delay=...)``: the delay asked for (capped at ``MAX_DELAY``) or the backoff."""
    info = ErrorInfo.from_exception(exc)
    if exc.delay is None:
        return _retry(context, info, task.backoff.delay(context.attempt))
    delay = durations.capped(exc.delay)
    if delay < exc.delay:
        info = replace(info, message=f"{info.message} (delay {exc.delay:g}s capped at {delay:g}s)")
    return _retry(context, info, delay)


def _retry(context: JobContext, info: ErrorInfo, delay: float) -> _Verdict:
    if context.attempt >= context.max_attempts:
        return _give_up(context, info)
    retry_at = timezone.now() + timedelta(seconds=delay)
    return _failure(context, info, retry_at)


def _give_up(context: JobContext, info: ErrorInfo) -> _Verdict:
    return _failure(context, info, None)


def _failure(context: JobContext, info: ErrorInfo, retry_at: datetime | None) -> _Verdict:
    """The failed attempt's write (``leases.fail``); refused, the same with ``info.minimal()``."""
    outcome = Outcome.DEAD if retry_at is None else Outcome.RETRIED

    def write(error: ErrorInfo) -> Callable[[], bool]:
        return lambda: leases.fail(context.lease, error, retry_at)

    minimal = _Verdict(write(info.minimal()), outcome, info.code)
    return _Verdict(write(info), outcome, info.code, instead=lambda _: minimal)


def _write(context: JobContext, write: Write, verdict: _Verdict) -> tuple[Outcome, _Verdict]:
    """Apply the verdict's write through ``write``; the outcome and the verdict written.

    The outcome is the verdict's if the write took, ``LEASE_LOST`` if not. A
    failure the database may get over (``faults``: a lost connection, a
    read-only or restarting server) is retried with growing pauses while
    ``worth_retrying``; after that the outcome is ``UNRECORDED`` and the
    expired lease is the reaper's to recover. A write the database refuses
    for good (``Fault.REFUSED``: data it will never take) is replaced by the
    verdict's ``instead`` (a refused success by its failure, a refused
    failure by its minimal form, which has none), so the attempt is not run
    again for want of a record; any other failure is ``UNRECORDED`` at once.
    A retry that finds this lease's own write already applied (its reply was
    lost) reports the outcome, not a lost lease (``leases``).
    """
    give_up_at = time.monotonic() + context.lease.lease_seconds
    failures = 0
    while True:
        try:
            written = write(verdict.transition, give_up_at)
            return (verdict.outcome if written else Outcome.LEASE_LOST), verdict
        except Exception as exc:  # noqa: BLE001 - classified: retried while it may help.
            fault = classify(exc)
            if fault is Fault.REFUSED and verdict.instead is not None:
                replacement = verdict.instead(exc)
                log.warning(
                    "job id=%s outcome=%s refused by the database, writing outcome=%s code=%s "
                    "in its minimal form instead: %s",
                    context.job_id,
                    verdict.outcome.value,
                    replacement.outcome.value,
                    replacement.code,
                    exc,
                )
                verdict = replacement
                continue
            failures += 1
            pause = WRITE_RETRY.delay(failures)
            if not (fault.transient and worth_retrying(context, give_up_at, pause)):
                log_unrecorded(context, verdict.outcome, exc)
                return Outcome.UNRECORDED, verdict
            log.warning(
                "job id=%s outcome=%s not written yet (%s), retrying in %.1fs: %s",
                context.job_id,
                verdict.outcome.value,
                fault.label,
                pause,
                exc,
            )
            context.lease_lost.wait(pause)
