"""Database connection hygiene for the worker's threads, how their loops survive, and how
a job's outcome is written and how long that is retried while the database is unreachable."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from django_dbqueue import conf
from django_dbqueue.context import JobContext
from django_dbqueue.retry import Backoff
from django_dbqueue.worker import session
from django_dbqueue.worker.faults import Fault, classify

if TYPE_CHECKING:
    # For annotations only: the reporter closes its connections with this module's help.
    from django_dbqueue.worker.reporter import Outcome

log = logging.getLogger(__name__)

#: Pauses between tries to write an outcome while the database is unreachable.
WRITE_RETRY = Backoff(base=0.2, factor=2, cap=5)


def close_queue_connection() -> None:
    """Drop this thread's connection to the queue's database; the next query reconnects.

    Never raises: a connection too broken to close cleanly is dropped all the same.
    """
    try:
        connections[conf.get().database].close()
    except DatabaseError as exc:
        log.debug("closing a broken connection failed (it is dropped anyway): %s", exc)


def close_old_connections() -> None:
    """At the end of each job (and report), do what Django does at the end of each request.

    Each of this thread's connections that broke, or that ``CONN_MAX_AGE``
    says is too old, is closed: with Django's default ``CONN_MAX_AGE = 0``,
    every connection task code (or a signal receiver) opened is given back
    when the job returns, so a thread that runs jobs holds a connection only
    while its task code uses the database. ``CONN_MAX_AGE > 0`` (or ``None``)
    keeps healthy ones open from job to job, as it does from request to
    request, at the price of up to one connection per thread. Never raises.
    """
    for connection in connections.all(initialized_only=True):
        try:
            connection.close_if_unusable_or_obsolete()
        except DatabaseError as exc:
            log.debug("closing a broken connection failed (it is dropped anyway): %s", exc)


class Survival:
    """How one worker loop lives through any failure: log it once, drop what broke, pause.

    Consecutive failures of the loop form a streak. Its first failure, and
    each change of fault within it, is logged once with its traceback (a bug
    at ERROR, a database fault at WARNING); repeats go to DEBUG, and the end
    of the streak is logged at INFO. What the fault calls for is done before
    the pause (``recover``). Pauses grow from half a second to five
    (jittered), so an outage costs neither a busy loop nor a long wait once
    it is over.
    """

    policy = Backoff(base=0.5, factor=2, cap=5)

    def __init__(self, loop: str) -> None:
        self.loop = loop
        self.failures = 0
        self.fault: Fault | None = None

    def failed(self, exc: BaseException, cap: float | None = None) -> float:
        """Note the failure and return the pause (at most ``cap`` seconds) before trying again."""
        fault = classify(exc)
        self.failures += 1
        if fault is not self.fault:
            log.log(
                logging.ERROR if fault is Fault.BUG else logging.WARNING,
                "%s failed (%s), retrying until it recovers: %s: %s",
                self.loop,
                fault.label,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
        else:
            log.debug(
                "%s failed again (%s, failure %s): %s", self.loop, fault.label, self.failures, exc
            )
        self.fault = fault
        recover(fault)
        pause = self.policy.delay(self.failures)
        return pause if cap is None else min(pause, cap)

    def succeeded(self) -> None:
        if self.failures:
            log.info(
                "%s recovered after %s failures (%s)",
                self.loop,
                self.failures,
                self.fault.label if self.fault else "",
            )
        self.failures = 0
        self.fault = None


def recover(fault: Fault) -> None:
    """Do what ``fault`` calls for on this thread: stop preparing, drop the connection."""
    if fault.unprepare:
        session.stop_preparing()
    if fault.reconnect:
        close_queue_connection()


def repeat(
    what: str,
    action: Callable[[], object],
    stop: threading.Event,
    interval: float,
    first_pause: float = 0.0,
) -> None:
    """Call ``action`` every ``interval`` seconds until ``stop`` is set.

    Whatever it raises is survived (``Survival``): logged once a streak,
    followed by a growing pause instead. The thread's connections are closed
    at the end.
    """
    survival = Survival(what)
    pause = first_pause
    try:
        while not stop.wait(pause):
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - the loop's survival guard: logged, backed off.
                pause = survival.failed(exc)
                continue
            survival.succeeded()
            pause = interval
    finally:
        connections.close_all()


def applied(transition: Callable[[], bool]) -> bool:
    """``transition()`` (an outcome's write) on this thread's connection, and what it returned.

    What it raises is raised again once the fault's remedy (``recover``) was
    applied to this thread's connection.
    """
    try:
        return transition()
    except Exception as exc:
        recover(classify(exc))
        raise


def write_here(transition: Callable[[], bool], give_up_at: float) -> bool:
    """Write an outcome on the calling thread's own connection, in one try (``applied``).

    The try takes as long as the database takes, whatever ``give_up_at`` says.
    """
    return applied(transition)


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
    )
