"""Batched completions: job successes written many to a statement, off the job threads.

A job thread hands its success over (``succeeded``) and is free for the next
job at once. The completer writes everything that queued up while it wrote
the previous batch (up to ``MAX_BATCH`` results, ``MAX_BATCH_BYTES`` of
them, each job once) with one ``complete`` statement, in which every row keeps its own
fencing check, then reports the batch's outcomes
to ``written`` in one call: ``SUCCEEDED``, ``LEASE_LOST`` when the database
refused the row, or ``UNRECORDED`` when the database stayed unreachable for the
lease's length (the reaper recovers those). A failure the database may get over (a lost
connection, a read-only or restarting server, a vanished prepared statement:
``faults``) is retried; a row the database refuses is written alone, so it
cannot hold back the rest of its batch, and one it refuses again for good
is written as the job's failure (``RESULT_NOT_SERIALIZABLE``), never left
to the reaper to run again. Under load this turns a commit per job
into a commit per batch; a lone job is written at once (group commit: nobody
waits for a window). Until its outcome is reported a job stays the worker's:
its lease is renewed and shutdown waits for it.

The completer also writes the job threads' other outcomes (retries, dead
jobs, cancels: ``write``), one at a time and ahead of the successes, while the
job thread waits for the result; so job threads need no connection of their
own for the protocol, and a worker's own connections do not grow with
``--concurrency``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as NotYet
from dataclasses import dataclass
from typing import NamedTuple

from django_dbqueue import leases
from django_dbqueue.context import JobContext
from django_dbqueue.errors import refused_result
from django_dbqueue.logfields import job_fields, jobs_fields
from django_dbqueue.worker.connections import Survival, applied, recover
from django_dbqueue.worker.faults import Fault, classify
from django_dbqueue.worker.outcome import (
    WRITE_RETRY,
    Ended,
    Outcome,
    log_unrecorded,
    worth_retrying,
)
from django_dbqueue.worker.session import worker_session

log = logging.getLogger(__name__)

#: The most results written in one statement.
MAX_BATCH = 200
#: The most bytes of results (as JSON) written in one statement, but for a larger result
#: written alone: a few big results do not make one slow statement that holds back the rest.
MAX_BATCH_BYTES = 4 * 1024 * 1024
#: How often a job thread waiting for its write (``Completer.write``) checks on the completer.
WRITE_TICK = 0.5

#: Told the outcomes of handed-over jobs once written, a batch at a time.
Written = Callable[[list[Ended]], None]


class _Pending(NamedTuple):
    context: JobContext
    encoded: str | None
    #: When the attempt started (``time.monotonic``), for its duration.
    started: float
    #: Past this (``time.monotonic``) the lease may have run out: stop retrying the write.
    give_up_at: float

    def ended(self, outcome: Outcome, code: str = "") -> Ended:
        """This success's attempt, ended with ``outcome`` (and the error code written with it)."""
        return Ended(self.context, outcome, self.started, code)


@dataclass(frozen=True)
class _Write:
    """A job thread's outcome write, applied by the completer; ``done`` gets its result."""

    transition: Callable[[], bool]
    done: Future[bool]


def first_batch(pending: list[_Pending]) -> tuple[list[_Pending], list[_Pending]]:
    """``pending`` cut in two: the first batch and the rest, in order.

    The batch ends before the result that would take it past
    ``MAX_BATCH_BYTES`` (a larger result is written alone), and before a
    second success of a job already in it: a stale attempt's success and the
    current attempt's, of one job claimed again while the first still ran,
    go in separate statements, so each is told its own outcome
    (``leases.Completion`` reports by job).
    """
    total = 0
    jobs: set[int] = set()
    for end, item in enumerate(pending):
        total += len(item.encoded or "")
        if end and (total > MAX_BATCH_BYTES or item.context.job_id in jobs):
            return pending[:end], pending[end:]
        jobs.add(item.context.job_id)
    return pending, []


def _failed_instead(pending: _Pending, refusal: Exception) -> Ended:
    """Write a success the database refused for good as the job's failure (``refused_result``).

    The job is ``dead`` with its attempt counted, not left to the reaper to
    run again, and reported with the error code written; the outcome is
    ``UNRECORDED`` if that write fails too.
    """
    context = pending.context
    info = refused_result(refusal)
    log.warning(
        "job id=%s outcome=succeeded refused by the database, writing outcome=dead code=%s "
        "instead: %s",
        context.job_id,
        info.code,
        refusal,
        extra=job_fields(context.lease),
    )
    try:
        applied = leases.fail(context.lease, info, None)
    except Exception as exc:  # noqa: BLE001 - the reaper recovers the job, as for any unwritten outcome.
        recover(classify(exc))
        log_unrecorded(context, Outcome.DEAD, exc)
        return pending.ended(Outcome.UNRECORDED)
    return pending.ended(Outcome.DEAD, info.code) if applied else pending.ended(Outcome.LEASE_LOST)


class _LockedRows:
    """Successes whose row another transaction held locked: tried again, never awaited.

    Each is tried again every ``leases.LOCKED_RETRY`` seconds with the next
    batch, so a row locked for long holds back neither the batch it was in
    nor the ones after it. One still locked once its lease may have run out
    (``give_up_at``) is reported ``UNRECORDED``: the lease is lost by then,
    and the reaper recovers the job once the lock is gone.
    """

    def __init__(self) -> None:
        self._rows: list[_Pending] = []
        self._next_try = 0.0

    def __bool__(self) -> bool:
        return bool(self._rows)

    def due(self) -> list[_Pending]:
        """The rows to try again now (taken out), or none before their pause is over."""
        if not self._rows or time.monotonic() < self._next_try:
            return []
        rows, self._rows = self._rows, []
        return rows

    def retry_later(self, pending: _Pending) -> list[Ended]:
        """Keep ``pending`` for a later try; or, past its ``give_up_at``, its outcome to report."""
        now = time.monotonic()
        if now >= pending.give_up_at:
            log.warning(
                "job id=%s outcome=succeeded not recorded: its row stayed locked by another "
                "transaction for the lease's length",
                pending.context.job_id,
                extra={**job_fields(pending.context.lease), "outcome": Outcome.UNRECORDED.value},
            )
            return [pending.ended(Outcome.UNRECORDED)]
        log.debug(
            "job id=%s row locked by another transaction; writing its success later",
            pending.context.job_id,
            extra=job_fields(pending.context.lease),
        )
        self._rows.append(pending)
        self._next_try = now + leases.LOCKED_RETRY
        return []


class WriteNotTaken(TimeoutError):
    """The completer did not take a write in time: the outcome is not written."""


class Completer(threading.Thread):
    """The worker's ``outcome.OutcomeWriter``: background writer of job successes, in
    batches, and of the job threads' other outcomes, until ``stop`` is set and nothing is
    pending. ``written`` hears each batch of successes' outcomes (``OutcomeReporter.written``).
    """

    def __init__(self, stop: threading.Event, written: Written) -> None:
        super().__init__(name="dbqueue-completer", daemon=True)
        self.stop = stop
        self.written = written
        self._inbox: queue.SimpleQueue[_Pending | _Write] = queue.SimpleQueue()
        self._backlog = 0
        self._lock = threading.Lock()

    @property
    def backlog(self) -> int:
        """Successes handed over whose outcome is not reported yet."""
        with self._lock:
            return self._backlog

    def succeeded(self, context: JobContext, result: object, started: float) -> Outcome:
        """Queue a success for writing: ``HANDED_OVER``; ``written`` hears its outcome later.

        Raises ``UnstorableResult`` at once, queueing nothing, when the
        result cannot be stored (``leases.encode_result``).
        """
        encoded = leases.encode_result(context.lease, result)
        give_up_at = time.monotonic() + context.lease.lease_seconds
        with self._lock:
            self._backlog += 1
        self._inbox.put(_Pending(context, encoded, started, give_up_at))
        return Outcome.HANDED_OVER

    def write(self, transition: Callable[[], bool], give_up_at: float) -> bool:
        """Apply ``transition`` (one outcome's write) on the completer's connection; its result.

        For job threads (``OutcomeWriter.write``, from ``execute``): the write is queued with the
        successes, taken before them, and this thread waits for it. It raises
        what the write raised, once the completer's connection recovered from
        it (``applied``), or ``WriteNotTaken`` when the completer had not
        taken it by ``give_up_at`` (``time.monotonic``); nothing is written
        then. Once the completer has stopped (shutdown), or before it started,
        the write is made on this thread's own connection instead.
        """
        pending = _Write(transition, Future())
        self._inbox.put(pending)
        while True:
            try:
                return pending.done.result(timeout=WRITE_TICK)
            except NotYet:
                pass
            if not self.is_alive() and pending.done.cancel():
                return applied(transition)
            if time.monotonic() >= give_up_at and pending.done.cancel():
                raise WriteNotTaken(
                    "the completer did not take this outcome's write within the lease"
                )

    def run(self) -> None:
        survival = Survival("job success writing")
        with worker_session():
            # Successes taken from the inbox and not written yet, in order: a batch's
            # retries after a transient failure, then what its byte cap left over.
            waiting: list[_Pending] = []
            locked = _LockedRows()
            failures = 0
            while not (self.stop.is_set() and self._inbox.empty() and not waiting and not locked):
                due = locked.due()
                room = MAX_BATCH - len(waiting) - len(due)
                gathered = self._gather(room, wait=not (waiting or due))
                batch, waiting = first_batch([*due, *waiting, *self._written_first(gathered)])
                if not batch:
                    continue
                outcomes: list[Ended] = []
                try:
                    completion = leases.complete_many([(p.context.lease, p.encoded) for p in batch])
                except Exception as exc:  # noqa: BLE001 - classified: retried, or written row by row.
                    fault = classify(exc)
                    if fault.transient:
                        failures += 1
                        kept = self._still_worth_writing(batch, survival, failures, exc)
                        waiting = kept + waiting
                        continue
                    recover(fault)
                    batch, completion = self._write_one_by_one(batch, exc, outcomes)
                if failures:
                    survival.succeeded()
                failures = 0
                for pending in batch:
                    if pending.context.job_id in completion.skipped:
                        outcomes.extend(locked.retry_later(pending))
                    elif pending.context.job_id in completion.completed:
                        outcomes.append(pending.ended(Outcome.SUCCEEDED))
                    else:
                        outcomes.append(pending.ended(Outcome.LEASE_LOST))
                self._report(outcomes)

    def _gather(self, room: int, *, wait: bool) -> list[_Pending | _Write]:
        """What queued up, at most ``room``; with ``wait``, wait briefly for the first."""
        batch: list[_Pending | _Write] = []
        if wait:
            try:
                batch.append(self._inbox.get(timeout=0.1))
            except queue.Empty:
                return batch
        # Group commit: take what queued up while the last batch was written, never wait.
        while len(batch) < room:
            try:
                batch.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        return batch

    @staticmethod
    def _written_first(gathered: list[_Pending | _Write]) -> list[_Pending]:
        """Apply the job threads' writes among ``gathered`` (they wait); return the successes."""
        successes: list[_Pending] = []
        for item in gathered:
            if isinstance(item, _Pending):
                successes.append(item)
            elif item.done.set_running_or_notify_cancel():
                try:
                    item.done.set_result(applied(item.transition))
                except Exception as exc:  # noqa: BLE001 - handed to the job thread, which classifies it.
                    item.done.set_exception(exc)
        return successes

    def _still_worth_writing(
        self, batch: list[_Pending], survival: Survival, failures: int, exc: Exception
    ) -> list[_Pending]:
        """After a failed write: report the jobs to give up on, pause, return the rest."""
        pause = survival.failed(exc, cap=WRITE_RETRY.delay(failures))
        kept: list[_Pending] = []
        given_up: list[Ended] = []
        for pending in batch:
            if worth_retrying(pending.context, pending.give_up_at, pause):
                kept.append(pending)
            else:
                log_unrecorded(pending.context, Outcome.SUCCEEDED, exc)
                given_up.append(pending.ended(Outcome.UNRECORDED))
        self._report(given_up)
        if kept:
            log.debug("%s job successes not written yet, retrying in %.1fs", len(kept), pause)
            time.sleep(pause)
        return kept

    def _write_one_by_one(
        self, batch: list[_Pending], exc: Exception, outcomes: list[Ended]
    ) -> tuple[list[_Pending], leases.Completion]:
        """After the database refused a batch: write each row alone, so one bad row fails alone.

        A row refused again for good (``Fault.REFUSED``) is written as a
        failure instead (``_failed_instead``); one that fails otherwise is
        ``UNRECORDED`` (its lease runs out and the reaper recovers the job).
        Both go to ``outcomes``; returns the rest and what their writes did.
        """
        log.warning(
            "a batch of %s job successes was refused, writing each alone: %s", len(batch), exc
        )
        written: list[_Pending] = []
        completed: set[int] = set()
        skipped: set[int] = set()
        for pending in batch:
            try:
                completion = leases.complete_many([(pending.context.lease, pending.encoded)])
            except Exception as row_exc:  # noqa: BLE001 - this row alone fails; it is settled below.
                fault = classify(row_exc)
                recover(fault)
                if fault is Fault.REFUSED:
                    outcomes.append(_failed_instead(pending, row_exc))
                else:
                    log_unrecorded(pending.context, Outcome.SUCCEEDED, row_exc)
                    outcomes.append(pending.ended(Outcome.UNRECORDED))
            else:
                written.append(pending)
                completed |= completion.completed
                skipped |= completion.skipped
        return written, leases.Completion(completed=completed, skipped=skipped)

    def _report(self, outcomes: list[Ended]) -> None:
        """Tell ``written`` these outcomes in one call; whatever it raises is logged."""
        if not outcomes:
            return
        with self._lock:
            self._backlog -= len(outcomes)
        try:
            self.written(outcomes)
        except Exception:
            log.exception(
                "%s job outcomes not reported, job ids %s",
                len(outcomes),
                ",".join(str(attempt.context.job_id) for attempt in outcomes),
                extra=jobs_fields(attempt.context.job_id for attempt in outcomes),
            )
