"""How an attempt ended (``Outcome``), and reporting it: its log line and ``signals.job_finished``.

``report`` is called by the job's thread for what it wrote itself (inside the
handler of a failure's exception, so receivers find it in ``sys.exc_info()``).
The completer's successes are reported by an ``OutcomeReporter`` thread, in
order, so neither a slow receiver (it may query the database) nor logging
delays the next batch write. Waking workers after a commit is ``wakeups``'s
business, not this module's.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from collections.abc import Callable, Sequence

from django.db import connections

from django_dbqueue import runnable, signals
from django_dbqueue.leases import Lease
from django_dbqueue.models import Job
from django_dbqueue.worker.connections import close_old_connections
from django_dbqueue.worker.outcome_log import outcome_log

log = logging.getLogger(__name__)


class Outcome(str, enum.Enum):
    """How an attempt ended, as logged and counted."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    DEAD = "dead"
    #: The database refused the write: the lease had been lost.
    LEASE_LOST = "lease_lost"
    #: The database stayed unreachable for a whole lease: the reaper recovers the job.
    UNRECORDED = "unrecorded"
    #: A success handed to the worker's completer, which writes it and reports the outcome.
    HANDED_OVER = "handed_over"
    #: The task stopped on an operator's cancel request (``JobCancelled``).
    CANCELLED = "cancelled"


#: Outcomes written to the job; ``signals.job_finished`` is sent for them.
RECORDED = (Outcome.SUCCEEDED, Outcome.RETRIED, Outcome.DEAD, Outcome.CANCELLED)


#: An attempt to report: its lease, how it ended, how long it took (seconds).
Finished = tuple[Lease, Outcome, float]

LINE = "job id=%s task=%s attempt=%s/%s duration=%.3fs outcome=%s code=%s"


def report(lease: Lease, outcome: Outcome, code: str, duration: float) -> None:
    """Log the attempt's line and, for a written outcome, send ``signals.job_finished``.

    A success is logged at INFO while the worker is calm and at DEBUG while
    successes come quickly (``outcome_log``), so INFO stays readable. Never
    raises for a failing receiver (``send_robust``).
    """
    log_lines([(lease, outcome, duration)], code)
    signal_finished(lease, outcome)


def log_lines(finished: Sequence[Finished], code: str = "") -> None:
    """Each attempt's line, in order, with one ``code``; the success lines' level decided once."""
    outcome_log.write_all(
        [
            (
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
            )
            for lease, outcome, duration in finished
        ]
    )


def signal_finished(lease: Lease, outcome: Outcome) -> None:
    """Send ``signals.job_finished`` for an outcome written to the job (``RECORDED``).

    For a job of a ``django.tasks`` backend the framework's ``task_finished``
    follows (``runnable.send_task_finished``). Called here rather than
    connected as a receiver, so that while nobody listens to ``job_finished``
    the signal costs nothing. A failure of either is logged; the worker goes on.
    """
    if outcome not in RECORDED:
        return
    # send_robust: Django logs a failing receiver ("django.dispatch"); the worker goes on.
    signals.job_finished.send_robust(sender=Job, lease=lease, outcome=outcome.value)
    if lease.backend is None:
        return
    try:
        runnable.send_task_finished(lease, outcome.value)
    except Exception:  # What send_robust did for it: log it, go on.
        log.exception("task_finished for job %s could not be sent", lease.job_id)


class OutcomeReporter(threading.Thread):
    """Reports queued outcomes (``report``), in order, until ``close()`` and the queue is empty.

    Outcomes come in batches (a completer write's); ``reported`` is called
    after each batch (the worker's wake-up: a backlog here holds claims
    back). The thread's connections are ordinary ones, as in a job thread:
    opened only by receivers that query (the ``django.tasks`` backend's
    does), and closed as ``CONN_MAX_AGE`` says (``close_old_connections``)
    whenever nothing is left to report, so a burst of reports shares one
    connection and an idle reporter holds none.
    """

    def __init__(self, reported: Callable[[], None]) -> None:
        super().__init__(name="dbqueue-reporter", daemon=True)
        self.reported = reported
        self._inbox: queue.SimpleQueue[list[Finished] | None] = queue.SimpleQueue()
        self._backlog = 0
        self._lock = threading.Lock()

    @property
    def backlog(self) -> int:
        """Outcomes queued and not reported yet."""
        with self._lock:
            return self._backlog

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
                for lease, outcome, _ in batch:
                    try:
                        signal_finished(lease, outcome)
                    # Receivers are the project's code: whatever they raise, the next is reported.
                    except BaseException:
                        log.exception(
                            "job id=%s outcome=%s not reported", lease.job_id, outcome.value
                        )
                with self._lock:
                    self._backlog -= len(batch)
                if self._inbox.empty():
                    close_old_connections()
                self.reported()
        finally:
            connections.close_all()
