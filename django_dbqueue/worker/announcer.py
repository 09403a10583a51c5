"""Announcing the successes the completer wrote, away from its write loop.

Each written success gets its log line and its ``signals.job_finished``
(whose receivers may query the database) here, in order, so neither a slow
receiver nor logging delays the next batch write. The thread's connections
are ordinary ones, as in a job thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from django.db import connections

from django_dbqueue.leases import Lease
from django_dbqueue.worker.execute import Outcome, announce

log = logging.getLogger(__name__)


class Announcer(threading.Thread):
    """Announces queued outcomes until ``close()`` and the queue is empty.

    ``announced`` is called after each one (the worker's wake-up: a backlog
    here holds claims back).
    """

    def __init__(self, announced: Callable[[], None]) -> None:
        super().__init__(name="dbqueue-announcer", daemon=True)
        self.announced = announced
        self._inbox: queue.SimpleQueue[tuple[Lease, Outcome, float] | None] = queue.SimpleQueue()

    @property
    def backlog(self) -> int:
        """Outcomes queued and not announced yet."""
        return self._inbox.qsize()

    def put(self, lease: Lease, outcome: Outcome, duration: float) -> None:
        self._inbox.put((lease, outcome, duration))

    def close(self, timeout: float) -> None:
        """Announce what is queued, then stop; wait up to ``timeout`` seconds."""
        self._inbox.put(None)
        self.join(timeout)

    def run(self) -> None:
        try:
            while (item := self._inbox.get()) is not None:
                lease, outcome, duration = item
                try:
                    announce(lease, outcome, "", duration)
                # Receivers are the project's code: whatever they raise, the next one is announced.
                except BaseException:
                    log.exception("job id=%s outcome=%s not announced", lease.job_id, outcome.value)
                self.announced()
        finally:
            connections.close_all()
