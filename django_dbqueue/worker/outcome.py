"""How an attempt ended (``Outcome``; ``Ended``: an attempt with its outcome and error code),
the counter each outcome adds to (``COUNTER_OF``), the outcome writers' interface
(``OutcomeWriter``: ``execute.InlineWriter`` and ``completer.Completer``), and the
write-retry policy: how long an outcome's write is retried while the database is
unreachable, and what is written instead of one it refuses for good (``write_retried``,
``WRITE_RETRY``, ``worth_retrying``).

``execute``, ``completer`` and ``reporter`` take their outcome vocabulary from here; this
module imports none of them (of ``connections`` it uses only the quiet reconnect).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from django_dbqueue.context import JobContext
from django_dbqueue.logfields import job_fields
from django_dbqueue.retry import Backoff
from django_dbqueue.worker.connections import reconnect_quietly
from django_dbqueue.worker.faults import Fault, classify

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


class Ended(NamedTuple):
    """An attempt that ended on a worker: its job, how it ended, when it started
    (``time.monotonic``), and the error code written with it (``""`` for a success, a lost
    lease or an unwritten outcome), for its log line and ``signals.job_finished``."""

    context: JobContext
    outcome: Outcome
    started: float
    code: str = ""


#: Outcomes written to the job; ``signals.job_finished`` is sent for them.
RECORDED = (Outcome.SUCCEEDED, Outcome.RETRIED, Outcome.DEAD, Outcome.CANCELLED)

#: The worker counter (``counters.COUNTERS``) each finished attempt's outcome adds one to.
COUNTER_OF = {
    Outcome.SUCCEEDED: "succeeded",
    Outcome.RETRIED: "retried",
    Outcome.DEAD: "dead",
    Outcome.CANCELLED: "cancelled",
    Outcome.LEASE_LOST: "lease_lost",
    Outcome.UNRECORDED: "unrecorded",
}

#: Pauses between tries to write an outcome while the database is unreachable.
WRITE_RETRY = Backoff(base=0.2, factor=2, cap=5)


class OutcomeWriter(Protocol):
    """Where ``execute`` writes an attempt's outcome.

    ``execute.InlineWriter`` writes every outcome on the calling thread
    (``testing.run_jobs``, eager mode, tests); the worker's
    ``completer.Completer`` batches successes and writes the rest on its own
    connection, so job threads need none for the protocol.
    """

    def succeeded(self, context: JobContext, result: object, started: float) -> Outcome:
        """Write, or take over writing, the success of ``context``'s attempt.

        Returns the outcome written and reported, or ``HANDED_OVER`` when the
        writer writes and reports it later. Raises ``UnstorableResult`` at
        once, writing nothing, when the result cannot be stored.
        """
        ...

    def write(self, transition: Callable[[], bool], give_up_at: float) -> bool:
        """Apply ``transition`` (one outcome's write) once, by ``give_up_at`` at the latest.

        ``give_up_at`` is ``time.monotonic`` time. Returns what the
        transition returned (False: the lease was lost); raises what it
        raised, the fault's remedy applied to the connection it ran on.
        """
        ...


def worth_retrying(context: JobContext, give_up_at: float, pause: float) -> bool:
    """Whether a failed outcome write should be tried again after ``pause`` seconds.

    Writes are retried until ``give_up_at`` (monotonic; one lease length after
    the first try), and not once the lease is known to be lost.
    """
    return not context.lease_lost.is_set() and time.monotonic() + pause <= give_up_at


def log_unrecorded(context: JobContext, outcome: Outcome, exc: Exception) -> None:
    """Log, with its traceback, an outcome given up on: the reaper recovers the job."""
    log.error(
        "job id=%s outcome=%s could not be written (%s), leaving it to the reaper: %s",
        context.job_id,
        outcome.value,
        classify(exc).label,
        exc,
        exc_info=exc,
        extra={**job_fields(context.lease), "outcome": outcome.value},
    )


@dataclass(frozen=True)
class Verdict:
    """What an attempt's end calls for: the write, the outcome it records, the error code.

    ``instead`` gives the verdict to write when the database refuses this one
    for good (``Fault.REFUSED``), from the error it refused it with: the
    failure with its error reduced to code and class (``ErrorInfo.minimal``),
    or for a success the failure that its result could not be stored.
    """

    transition: Callable[[], bool]
    outcome: Outcome
    code: str = ""
    instead: Callable[[Exception], Verdict] | None = None


def write_retried(
    context: JobContext, writer: OutcomeWriter, verdict: Verdict
) -> tuple[Outcome, Verdict]:
    """Apply the verdict's write through ``writer``; the outcome and the verdict written.

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
    lost) reports the outcome, not a lost lease (``leases``). A connection the
    server closed for sitting idle is reconnected and the write tried again
    at once, quietly (``connections.reconnect_quietly``). The pauses are
    ``WRITE_RETRY``'s; whether one more try is worth it, ``worth_retrying``'s.
    """
    give_up_at = time.monotonic() + context.lease.lease_seconds
    failures = 0
    reconnected = False
    while True:
        try:
            written = writer.write(verdict.transition, give_up_at)
            return (verdict.outcome if written else Outcome.LEASE_LOST), verdict
        except Exception as exc:  # noqa: BLE001 - classified: retried while it may help.
            fault = classify(exc)
            if fault is Fault.IDLE_CLOSED and not reconnected:
                # The write never reached the server: try it again at once, on a fresh connection.
                reconnected = True
                reconnect_quietly(f"job id={context.job_id} outcome write", exc)
                continue
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
                    extra=job_fields(context.lease),
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
                extra=job_fields(context.lease),
            )
            context.lease_lost.wait(pause)
