"""Reporting how an attempt ended (``outcome.Outcome``): its log line and ``signals.job_finished``.

Every attempt logs one line with its outcome, its job's fields as the record's
``extra`` (``logfields.outcome_fields``) and, for a failed attempt, the
failure's traceback (the one line that logs it). At thousands of jobs a second
those lines would drown INFO, so once more than ``CALM_RATE`` successes are
logged within one second, success lines go to DEBUG until a whole second
passes below that rate, and INFO gets one summary line every
``SUMMARY_EVERY`` seconds instead (``OutcomeLog``). Retries, dead jobs, lost
leases and unwritten outcomes always log at INFO or above.

``report`` is called by the job's thread for what it wrote itself (inside the
handler of a failure's exception, so receivers find it in ``sys.exc_info()``).
The completer's successes are reported by an ``OutcomeReporter`` thread, in
order, so neither a slow receiver (it may query the database) nor logging
delays the next batch write. Waking workers after a commit is ``wakeups``'s
business, not this module's.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from django.db import connections

from django_dbqueue import runnable, signals
from django_dbqueue.leases import Lease
from django_dbqueue.logfields import job_fields, outcome_fields
from django_dbqueue.models import Job
from django_dbqueue.worker.connections import close_old_connections
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.live import LiveJobs
from django_dbqueue.worker.outcome import COUNTER_OF, RECORDED, Ended, Outcome

log = logging.getLogger(__name__)

#: Successes per second above which their lines go to DEBUG.
CALM_RATE = 20
#: Seconds between the INFO summaries of successes logged at DEBUG.
SUMMARY_EVERY = 10.0


class Line(NamedTuple):
    """One line to log: its message and arguments, whether it is quiet (a success), its
    structured fields (``logfields``) and the failure whose traceback it carries."""

    message: str
    args: tuple[object, ...]
    quiet: bool
    extra: Mapping[str, object] | None = None
    failure: BaseException | None = None


class OutcomeLog:
    """Chooses each line's level from the recent rate of successes. Thread-safe."""

    def __init__(
        self,
        calm_rate: int = CALM_RATE,
        summary_every: float = SUMMARY_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.calm_rate = calm_rate
        self.summary_every = summary_every
        self._clock = clock
        self._lock = threading.Lock()
        self._second = -1
        self._this_second = 0
        self._busy_until = 0
        self._quieted = 0
        self._summary_due = 0.0

    def write(self, message: str, *args: object, quiet: bool) -> None:
        """Log ``message % args``; a ``quiet`` line (a success) may go to DEBUG under load."""
        self.write_all([Line(message, args, quiet)])

    def write_all(self, lines: Sequence[Line]) -> None:
        """Log each line in order; the level of the quiet ones is decided once for them all.

        A batch of successes costs one look at the rate, and nothing per
        line when their level is not logged.
        """
        quiet = sum(1 for line in lines if line.quiet)
        level, summary = self._level(quiet) if quiet else (logging.INFO, 0)
        if summary:
            log.info(
                "%s job successes logged at DEBUG since the last summary (over %s a second)",
                summary,
                self.calm_rate,
            )
        quiet_logged = log.isEnabledFor(level)
        for line in lines:
            if not line.quiet:
                log.info(line.message, *line.args, extra=line.extra, exc_info=line.failure)
            elif quiet_logged:
                log.log(level, line.message, *line.args, extra=line.extra)

    def _level(self, quiet: int) -> tuple[int, int]:
        """The level of ``quiet`` lines, and how many quieted lines to summarise now (0: none)."""
        now = self._clock()
        with self._lock:
            second = int(now)
            if second != self._second:
                self._second, self._this_second = second, 0
            self._this_second += quiet
            if self._this_second > self.calm_rate:
                self._busy_until = second + 2  # calm again after a whole second below the rate
            if second >= self._busy_until:
                summary, self._quieted = self._quieted, 0
                return logging.INFO, summary
            if not self._quieted:
                self._summary_due = now + self.summary_every
            self._quieted += quiet
            if now < self._summary_due:
                return logging.DEBUG, 0
            summary, self._quieted = self._quieted, 0
            return logging.DEBUG, summary


#: The worker process's outcome log.
outcome_log = OutcomeLog()


class Finished(NamedTuple):
    """An attempt to report: its lease, how it ended, how long it took (seconds), and the
    error code written with it (``""`` for a success, a lost lease or an unwritten outcome)."""

    lease: Lease
    outcome: Outcome
    duration: float
    code: str = ""


LINE = "job id=%s task=%s attempt=%s/%s duration=%.3fs outcome=%s code=%s"


def report(
    lease: Lease,
    outcome: Outcome,
    code: str,
    duration: float,
    failure: BaseException | None = None,
) -> None:
    """Log the attempt's line and, for a written outcome, send ``signals.job_finished``.

    A success is logged at INFO while the worker is calm and at DEBUG while
    successes come quickly (``OutcomeLog``), so INFO stays readable. The line
    carries every field of ``logfields.FIELDS`` as ``extra``; ``failure``, the
    exception that failed the attempt, is logged with it: the one place its
    traceback is logged. Never raises for a failing receiver (``send_robust``).
    """
    log_lines([Finished(lease, outcome, duration, code)], failure)
    signal_finished(lease, outcome, code)


def log_lines(finished: Sequence[Finished], failure: BaseException | None = None) -> None:
    """Each attempt's line, in order, with its own error code and one ``failure``; the success
    lines' level decided once."""
    outcome_log.write_all(
        [
            Line(
                LINE,
                (
                    lease.job_id,
                    lease.task,
                    lease.attempt,
                    lease.max_attempts,
                    duration,
                    outcome.value,
                    code or "-",
                ),
                outcome is Outcome.SUCCEEDED,
                outcome_fields(lease, outcome.value, duration, code),
                failure,
            )
            for lease, outcome, duration, code in finished
        ]
    )


def signal_finished(lease: Lease, outcome: Outcome, error_code: str = "") -> None:
    """Send ``signals.job_finished`` for an outcome written to the job (``RECORDED``), with the
    error code written with it (``""`` for a success, or where the caller does not know it).

    For a job of a ``django.tasks`` backend the framework's ``task_finished``
    follows (``runnable.send_task_finished``). Called here rather than
    connected as a receiver, so that while nobody listens to ``job_finished``
    the signal costs nothing. A failure of either is logged; the worker goes on.
    """
    if outcome not in RECORDED:
        return
    # send_robust: Django logs a failing receiver ("django.dispatch"); the worker goes on.
    signals.job_finished.send_robust(
        sender=Job, lease=lease, outcome=outcome.value, error_code=error_code
    )
    if lease.backend is None:
        return
    try:
        runnable.send_task_finished(lease, outcome.value)
    except Exception:  # What send_robust did for it: log it, go on.
        log.exception(
            "task_finished for job %s could not be sent", lease.job_id, extra=job_fields(lease)
        )


class OutcomeReporter(threading.Thread):
    """A worker's outcomes: counted (``finished``), then reported (``report``), in order.

    ``finished`` is the one place a worker counts its attempts' outcomes, for
    those its job threads wrote and those the completer wrote (``written``).
    The completer's successes are reported on this thread, until ``close()``
    and the queue is empty; ``wake`` is called after each batch (the claimer's
    wake-up: a backlog here holds claims back). The thread's connections are
    ordinary ones, as in a job thread: opened only by receivers that query
    (the ``django.tasks`` backend's does), and closed as ``CONN_MAX_AGE``
    says (``close_old_connections``) whenever nothing is left to report, so a
    burst of reports shares one connection and an idle reporter holds none.
    """

    def __init__(self, counters: WorkerCounters, live: LiveJobs, wake: Callable[[], None]) -> None:
        super().__init__(name="dbqueue-reporter", daemon=True)
        self.counters = counters
        self.live = live
        self.wake = wake
        self._inbox: queue.SimpleQueue[list[Finished] | None] = queue.SimpleQueue()
        self._backlog = 0
        self._lock = threading.Lock()

    @property
    def backlog(self) -> int:
        """Outcomes queued and not reported yet."""
        with self._lock:
            return self._backlog

    def finished(self, ended: Sequence[Ended]) -> list[float]:
        """Count attempts that ended and take their jobs out of ``live``; their durations.

        Each attempt's duration (to now) goes to ``run_duration`` and
        ``run_duration_by_task``, and its outcome to its counter
        (``outcome.COUNTER_OF``), under one lock per batch. Reporting is the
        caller's: a job thread reports what it wrote itself, inside the
        handler of a failure's exception (``report``).
        """
        now = time.monotonic()
        durations = [now - attempt.started for attempt in ended]
        self.counters.run_duration.observe_all(durations)
        self.counters.run_duration_by_task.observe_all(
            (attempt.context.lease.task, duration)
            for attempt, duration in zip(ended, durations, strict=True)
        )
        self.counters.add_all(collections.Counter(COUNTER_OF[attempt.outcome] for attempt in ended))
        self.live.remove(attempt.context.lease for attempt in ended)
        return durations

    def written(self, batch: list[Ended]) -> None:
        """The completer wrote (or gave up on) a batch of successes: counted, the claimer
        woken for the slots they held back, then reported on this thread (``put``)."""
        durations = self.finished(batch)
        self.wake()
        self.put(
            [
                Finished(attempt.context.lease, attempt.outcome, duration, attempt.code)
                for attempt, duration in zip(batch, durations, strict=True)
            ]
        )

    def put(self, batch: list[Finished]) -> None:
        """Queue a batch of outcomes, reported in this order after those queued before."""
        with self._lock:
            self._backlog += len(batch)
        self._inbox.put(batch)

    def close(self, timeout: float) -> None:
        """Report what is queued, then stop; wait up to ``timeout`` seconds."""
        self._inbox.put(None)
        self.join(timeout)

    def run(self) -> None:
        try:
            while (batch := self._inbox.get()) is not None:
                log_lines(batch)
                for lease, outcome, _, code in batch:
                    try:
                        signal_finished(lease, outcome, code)
                    # Receivers are the project's code: whatever they raise, the next is reported.
                    except BaseException:
                        log.exception(
                            "job id=%s outcome=%s not reported",
                            lease.job_id,
                            outcome.value,
                            extra={**job_fields(lease), "outcome": outcome.value},
                        )
                with self._lock:
                    self._backlog -= len(batch)
                if self._inbox.empty():
                    close_old_connections()
                self.wake()
        finally:
            connections.close_all()
