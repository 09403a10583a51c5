"""Database connection hygiene for the worker's long-lived threads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connections

from django_dbqueue import conf
from django_dbqueue.retry import Backoff

log = logging.getLogger(__name__)

#: What a lost or unusable connection raises; everything else is a bug to surface.
DATABASE_ERRORS = (OperationalError, InterfaceError)


def close_queue_connection() -> None:
    """Drop this thread's connection to the queue's database; the next query reconnects."""
    connections[conf.get().database].close()


def close_broken_connections() -> None:
    """Close this thread's connections that errored and no longer answer.

    Healthy connections stay open whatever ``CONN_MAX_AGE`` says: the worker
    owns its connections and reuses them from job to job.
    """
    for connection in connections.all(initialized_only=True):
        if connection.errors_occurred and not connection.is_usable():
            connection.close()


class Reconnect:
    """Consecutive database failures of one loop, and how long to pause after each.

    Pauses grow from half a second to ten (jittered), so a database outage
    costs neither a busy loop nor a long wait once it is back.
    """

    policy = Backoff(base=0.5, factor=2, cap=10)

    def __init__(self, what: str) -> None:
        self.what = what
        self.failures = 0

    def failed(self, exc: Exception) -> float:
        """Log the failure, drop the connection, and return the pause before retrying."""
        self.failures += 1
        pause = self.policy.delay(self.failures)
        log.warning(
            "database unavailable during %s (failure %s), retrying in %.1fs: %s",
            self.what,
            self.failures,
            pause,
            exc,
        )
        close_queue_connection()
        return pause

    def succeeded(self) -> None:
        if self.failures:
            log.info("database reachable again for %s", self.what)
        self.failures = 0


def repeat(
    what: str,
    action: Callable[[], object],
    stop: threading.Event,
    interval: float,
    first_pause: float = 0.0,
) -> None:
    """Call ``action`` every ``interval`` seconds until ``stop`` is set.

    A lost connection is logged and retried after a growing pause instead;
    other errors propagate. The thread's connections are closed at the end.
    """
    reconnect = Reconnect(what)
    pause = first_pause
    while not stop.wait(pause):
        try:
            action()
        except DATABASE_ERRORS as exc:
            pause = reconnect.failed(exc)
            continue
        reconnect.succeeded()
        pause = interval
    connections.close_all()
