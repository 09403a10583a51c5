"""A fixed pool of threads running claimed jobs, each with its own connections."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from django.db import connections

from django_dbqueue.context import JobContext
from django_dbqueue.worker.connections import close_broken_connections

log = logging.getLogger(__name__)


class JobPool:
    """``size`` threads taking jobs from a queue and calling ``run`` on each.

    A thread never dies of a job: whatever escapes ``run`` is logged. Each
    thread closes its database connections when the pool stops. Threads are
    daemons, so a job still running when the process exits does not hold it.
    """

    def __init__(self, size: int, run: Callable[[JobContext], None]) -> None:
        self.size = size
        self._run = run
        self._inbox: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()
        self._busy = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._serve, name=f"dbqueue-job-{n}", daemon=True)
            for n in range(size)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def busy(self) -> int:
        """Jobs submitted and not yet finished."""
        with self._lock:
            return self._busy

    @property
    def free(self) -> int:
        return self.size - self.busy

    def submit(self, context: JobContext) -> None:
        with self._lock:
            self._busy += 1
        self._inbox.put(context)

    def stop(self, wait: float) -> None:
        """Let idle threads exit (closing their connections); wait up to ``wait`` seconds."""
        for _ in self._threads:
            self._inbox.put(None)
        for thread in self._threads:
            thread.join(wait)

    def _serve(self) -> None:
        try:
            while (context := self._inbox.get()) is not None:
                try:
                    self._run(context)
                except Exception:
                    log.exception("worker thread error on job id=%s", context.job_id)
                finally:
                    close_broken_connections()
                    with self._lock:
                        self._busy -= 1
        finally:
            connections.close_all()
