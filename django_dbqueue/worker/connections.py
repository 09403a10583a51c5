"""Database connection hygiene for the worker's threads, how their loops survive
(``Survival``, ``repeat``), and one outcome write on a thread's own connection (``applied``).

How long an outcome's write is retried is ``outcome``'s policy (``WRITE_RETRY``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue import conf
from django_dbqueue.retry import Backoff
from django_dbqueue.worker import session
from django_dbqueue.worker.faults import Fault, classify

log = logging.getLogger(__name__)


def close_queue_connection() -> None:
    """Drop this thread's connection to the queue's database; the next query reconnects.

    Never raises: a connection too broken to close cleanly is dropped all the same.
    """
    try:
        connections[conf.get().database].close()
    except DatabaseError as exc:
        log.debug("closing a broken connection failed (it is dropped anyway): %s", exc)


def close_old_connections(wrappers: Sequence[BaseDatabaseWrapper] | None = None) -> None:
    """At the end of each job (and report), do what Django does at the end of each request.

    Each of this thread's connections that broke, or that ``CONN_MAX_AGE``
    says is too old, is closed: with Django's default ``CONN_MAX_AGE = 0``,
    every connection task code (or a signal receiver) opened is given back
    when the job returns, so a thread that runs jobs holds a connection only
    while its task code uses the database. ``CONN_MAX_AGE > 0`` (or ``None``)
    keeps healthy ones open from job to job, as it does from request to
    request, at the price of up to one connection per thread. ``wrappers``: this
    thread's initialised connection wrappers, when the caller has them. Never raises.
    """
    for connection in connections.all(initialized_only=True) if wrappers is None else wrappers:
        try:
            connection.close_if_unusable_or_obsolete()
        except DatabaseError as exc:
            log.debug("closing a broken connection failed (it is dropped anyway): %s", exc)


#: Whether this process said (at INFO) that the database closes its idle connections.
_idle_closing_said = False
_idle_closing_lock = threading.Lock()


def reconnect_quietly(what: str, exc: BaseException) -> None:
    """Drop this thread's connection the server closed for sitting idle (``Fault.IDLE_CLOSED``).

    Nothing is wrong: the next statement reconnects. The first time in a
    process this is said once at INFO, every later time at DEBUG, so a
    database with ``idle_session_timeout`` (or MySQL's ``wait_timeout``) set
    below the worker's pauses gives one line, not a warning per pause.
    """
    global _idle_closing_said
    with _idle_closing_lock:
        first, _idle_closing_said = not _idle_closing_said, True
    log.log(
        logging.INFO if first else logging.DEBUG,
        "%s: the database closed an idle connection (%s); reconnecting%s",
        what,
        exc,
        ", quietly from now on" if first else "",
    )
    recover(Fault.IDLE_CLOSED)


class Survival:
    """How one worker loop lives through any failure: log it once, drop what broke, pause.

    Consecutive failures of the loop form a streak. Its first failure, and
    each change of fault within it, is logged once with its traceback (a bug
    at ERROR, a database fault at WARNING); repeats go to DEBUG, and the end
    of the streak is logged at INFO. What the fault calls for is done before
    the pause (``recover``). Pauses grow from half a second to five
    (jittered), so an outage costs neither a busy loop nor a long wait once
    it is over. A connection the server closed for sitting idle is no failure:
    it is reconnected at once, quietly (``reconnect_quietly``), unless the
    very next try meets the same, which then counts as one.
    """

    policy = Backoff(base=0.5, factor=2, cap=5)

    def __init__(self, loop: str) -> None:
        self.loop = loop
        self.failures = 0
        self.fault: Fault | None = None
        self.reconnected = False

    def failed(self, exc: BaseException, cap: float | None = None) -> float:
        """Note the failure and return the pause (at most ``cap`` seconds) before trying again."""
        fault = classify(exc)
        if fault is Fault.IDLE_CLOSED and not self.reconnected:
            self.reconnected = True
            reconnect_quietly(self.loop, exc)
            return 0.0
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
        self.reconnected = False
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
