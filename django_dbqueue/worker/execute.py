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

from django_dbqueue import durations, leases, middleware, progress, runnable, signals
from django_dbqueue.context import JobContext
from django_dbqueue.errors import (
    BAD_ARGUMENTS,
    CANCELLED,
    MIDDLEWARE_FAILED,
    TASK_NOT_FOUND,
    ErrorInfo,
    code_of,
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
from django_dbqueue.logfields import job_fields
from django_dbqueue.models import Job
from django_dbqueue.runnable import Runnable
from django_dbqueue.worker import leftovers
from django_dbqueue.worker.connections import applied
from django_dbqueue.worker.live import LiveJobs
from django_dbqueue.worker.outcome import Ended, Outcome, OutcomeWriter, Verdict, write_retried
from django_dbqueue.worker.reporter import report

log = logging.getLogger(__name__)

#: A job's task resolved once, at claim (``resolve``): its runnable, or what resolving raised.
Resolved = Runnable | Exception


class InlineWriter:
    """The ``OutcomeWriter`` that writes every outcome on the calling thread's own
    connection, each try as long as the database takes (``run_jobs``, eager mode)."""

    def succeeded(self, context: JobContext, result: object, started: float) -> Outcome:
        """Write the success here (``leases.complete_json``) and report it; its outcome.

        Raises ``UnstorableResult`` at once, writing nothing, when the result
        cannot be stored. A result the database refuses for good is written
        as the job's failure (``refused_result``).
        """
        encoded = leases.encode_result(context.lease, result)
        return _Recording(context, self, started).settle(
            Verdict(
                lambda: leases.complete_json(context.lease, encoded),
                Outcome.SUCCEEDED,
                instead=lambda refusal: _give_up(context, refused_result(refusal)),
            )
        )

    def write(self, transition: Callable[[], bool], give_up_at: float) -> bool:
        """Apply ``transition`` here, in one try (``connections.applied``), whatever
        ``give_up_at`` says."""
        return applied(transition)


#: Writes outcomes on the calling thread: ``execute``'s default writer.
INLINE = InlineWriter()


def execute(
    lease: leases.Lease,
    context: JobContext | None = None,
    task: Resolved | None = None,
    writer: OutcomeWriter = INLINE,
) -> Outcome:
    """Import the task, bind the arguments, call it, and record what happened.

    Success stores the JSON result; ``Retry`` and ordinary exceptions retry
    with backoff while the budget lasts; ``PermanentError``, ``give_up_on``
    types, an unimportable task (``TASK_NOT_FOUND``), arguments that do not
    bind (``BAD_ARGUMENTS``), a result that is not JSON every database stores
    (``RESULT_NOT_SERIALIZABLE``, recorded as the error serialising raised)
    and one past ``MAX_RESULT_BYTES`` (``RESULT_TOO_LARGE``) make the job
    dead. Task code runs inside the configured middleware (``middleware.run``;
    what a middleware raises fails the attempt with ``MIDDLEWARE_FAILED``), both in
    ``leftovers.guarded``: a transaction it leaves
    open is rolled back and fails the attempt (``TRANSACTION_LEFT_OPEN``),
    never recorded as a success; a connection kept for the next job gets its
    session reset; a child it forks never comes back here. An outcome the
    database cannot take for now (connection lost) is retried while the lease
    may live, then left to the reaper; one it refuses
    for good is written in its minimal form instead (``outcome.write_retried``), so the
    attempt is never run again for want of a record. ``context`` lets the
    caller (the heartbeat) signal a lost lease; one is made when not given.
    ``task`` is the job's ``resolve`` result when the caller resolved it
    already (the worker does, at claim); it is resolved here when not given.
    Once an outcome is written, it is reported (``reporter.report``); a
    failure is reported inside the handler of its exception, so
    ``signals.job_finished`` receivers (the ``django.tasks`` backend's
    ``task_finished``) find it in ``sys.exc_info()``, and its outcome line
    carries its traceback (the one time it is logged).

    Outcomes are written through ``writer`` (``outcome.OutcomeWriter``): by
    default here, on this thread's connection (``InlineWriter``); in a worker
    through its batching completer, which takes a success over
    (``HANDED_OVER`` is returned: it writes and reports it) and writes every
    other outcome on its own connection while this thread waits for the
    result, so job threads need no connection of their own for the protocol.
    Never raises for task failures, nor for a failing signal receiver.
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
    job = _Recording(context or JobContext(lease), writer, time.monotonic())
    return _attempt(job, resolved)


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
    """One attempt being recorded: its job, the writer of its outcome, when it started."""

    context: JobContext
    writer: OutcomeWriter
    #: When the attempt started (``time.monotonic``), for its duration.
    started: float

    def settle(self, verdict: Verdict, failure: BaseException | None = None) -> Outcome:
        """Write the last progress report, then ``verdict`` (``outcome.write_retried``), then
        report the outcome written, logging ``failure`` (what failed the attempt) with its
        traceback."""
        self.write_last_progress()
        outcome, written = write_retried(self.context, self.writer, verdict)
        return self.reported(outcome, written.code, failure)

    def write_last_progress(self) -> None:
        """Write the task's newest progress report not known to be stored
        (``JobContext.unwritten_progress``) through the outcome's writer, before the outcome:
        the pacing never loses the attempt's last report. One fenced statement, only when
        there is such a report. Best effort: a write that fails is logged at WARNING and the
        outcome is written all the same."""
        last = self.context.unwritten_progress()
        if last is None:
            return
        lease = self.context.lease
        try:
            self.writer.write(
                lambda: lease.job_id in progress.write([(lease, last)]).written,
                time.monotonic() + lease.lease_seconds,
            )
        except Exception as exc:  # noqa: BLE001 - progress is best effort; the outcome follows.
            log.warning(
                "job id=%s last progress report not written: %s",
                lease.job_id,
                exc,
                extra=job_fields(lease),
            )

    def reported(
        self, outcome: Outcome, code: str, failure: BaseException | None = None
    ) -> Outcome:
        report(self.context.lease, outcome, code, time.monotonic() - self.started, failure)
        return outcome


def _attempt(job: _Recording, resolved: Resolved) -> Outcome:
    # Each failure is reported inside its except clause, while sys.exc_info() holds it, and
    # logged with its traceback; a Retry asked for, a lost lease or a cancel is no error to trace.
    context, lease = job.context, job.context.lease
    try:
        if isinstance(resolved, Exception):
            raise resolved
        task = resolved
    except TaskNotFound as exc:
        return job.settle(_give_up(context, ErrorInfo.from_exception(exc, TASK_NOT_FOUND)), exc)
    try:
        job_call = task.prepare(lease, context)
    except TypeError as exc:
        return job.settle(_give_up(context, ErrorInfo.from_exception(exc, BAD_ARGUMENTS)), exc)
    try:
        result = leftovers.guarded(lambda: middleware.run(context, job_call))
    except LeaseLost:
        return job.reported(Outcome.LEASE_LOST, "")
    except JobCancelled:
        return job.settle(
            Verdict(lambda: leases.cancel_running(lease), Outcome.CANCELLED, CANCELLED)
        )
    except Retry as exc:
        return job.settle(_retry_requested(context, task, exc))
    except middleware.MiddlewareFailed as exc:
        # Retried like a task failure, recorded as what the middleware raised.
        info = ErrorInfo.from_exception(exc.__cause__ or exc, MIDDLEWARE_FAILED)
        return job.settle(_retry(context, info, task.backoff.delay(context.attempt)), exc)
    # Task code may raise anything, SystemExit and CancelledError included: it is recorded on
    # the job as a failed attempt, and the slot goes on.
    except BaseException as exc:  # noqa: BLE001
        return job.settle(_failed(context, task, exc), exc)
    job.write_last_progress()
    try:
        return job.writer.succeeded(context, result, job.started)
    except UnstorableResult as exc:
        # Recorded as what serialising raised (TypeError, ValueError), as django.tasks does.
        info = ErrorInfo.from_exception(exc.__cause__ or exc, exc.code)
        return job.settle(_give_up(context, info), exc)


def _failed(context: JobContext, task: Runnable, exc: BaseException) -> Verdict:
    info = ErrorInfo.from_exception(exc, code_of(exc))
    if isinstance(exc, (PermanentError, *task.give_up_on)):
        return _give_up(context, info)
    return _retry(context, info, task.backoff.delay(context.attempt))


def _retry_requested(context: JobContext, task: Runnable, exc: Retry) -> Verdict:
    """``raise Retry(delay=...)``: the delay asked for (capped at ``MAX_DELAY``) or the backoff."""
    info = ErrorInfo.from_exception(exc)
    if exc.delay is None:
        return _retry(context, info, task.backoff.delay(context.attempt))
    delay = durations.capped(exc.delay)
    if delay < exc.delay:
        info = replace(info, message=f"{info.message} (delay {exc.delay:g}s capped at {delay:g}s)")
    return _retry(context, info, delay)


def _retry(context: JobContext, info: ErrorInfo, delay: float) -> Verdict:
    if context.attempt >= context.max_attempts:
        return _give_up(context, info)
    return _failure(context, info, delay)


def _give_up(context: JobContext, info: ErrorInfo) -> Verdict:
    return _failure(context, info, None)


def _failure(context: JobContext, info: ErrorInfo, delay: float | None) -> Verdict:
    """The failed attempt's write (``leases.fail``): retried ``delay`` seconds from now by the
    database clock, dead when ``None``; refused, the same with ``info.minimal()``."""
    outcome = Outcome.DEAD if delay is None else Outcome.RETRIED

    def write(error: ErrorInfo) -> Callable[[], bool]:
        return lambda: leases.fail(context.lease, error, delay=delay)

    minimal = Verdict(write(info.minimal()), outcome, info.code)
    return Verdict(write(info), outcome, info.code, instead=lambda _: minimal)


class AttemptRunner:
    """What a worker's job slot runs for each job: its attempt, then its outcome counted.

    A job withdrawn at shutdown before its slot took it never starts
    (``LiveJobs.start``). An outcome written through ``writer`` and reported
    here is counted at once (``finished``, ``OutcomeReporter.finished``); a
    success handed over is counted once the completer wrote it.
    """

    def __init__(
        self,
        live: LiveJobs,
        writer: OutcomeWriter,
        finished: Callable[[Sequence[Ended]], object],
    ) -> None:
        self.live = live
        self.writer = writer
        self.finished = finished

    def __call__(self, context: JobContext, task: Resolved) -> None:
        if not self.live.start(context.lease):
            return  # Released at shutdown before it started (``Worker._release_unfinished``).
        started = time.monotonic()
        try:
            outcome = execute(context.lease, context, task, self.writer)
        except BaseException:
            self.live.remove([context.lease])  # execute raises for no job; it is over all the same
            raise
        if outcome is not Outcome.HANDED_OVER:
            self.finished([Ended(context, outcome, started)])
