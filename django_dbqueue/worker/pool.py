"""A fixed pool of threads running claimed jobs; a thread holds a connection only while its job's
task code uses the database (``CONN_MAX_AGE`` permitting)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from django.db import connections

from django_dbqueue.context import JobContext
from django_dbqueue.logfields import job_fields
from django_dbqueue.worker import leftovers
from django_dbqueue.worker.connections import close_old_connections
from django_dbqueue.worker.execute import Resolved

log = logging.getLogger(__name__)


class JobPool:
    """``size`` slots (threads) taking jobs from a queue and calling ``run`` on each.

    Each job comes with its task as the claimer resolved it, so it is
    resolved once. Once a slot is done with a job (free for the next),
    ``freed`` hears how many slots are free now.

    A slot never dies of a job: whatever escapes ``run``, ``BaseException``
    included, is logged and the slot takes the next job. ``running()`` tells
    which job each busy slot is on. Task code left nothing behind by then
    (``execute`` runs it in ``leftovers.guarded``: no open transaction, a kept
    connection's session reset); any transaction still open after the job
    (a signal receiver's) is rolled back (``_tidy``). Then the slot closes what
    ``CONN_MAX_AGE`` calls old (``close_old_connections``: with the default 0,
    whatever the job opened); in the worker, whose completer writes the
    outcomes, a slot so holds a connection only while task code (or a signal
    receiver) uses the database. Each thread closes its database connections
    when the pool stops. Threads are daemons, so a job still
    running when the process exits does not hold it.
    """

    def __init__(
        self,
        size: int,
        run: Callable[[JobContext, Resolved], None],
        freed: Callable[[int], None],
    ) -> None:
        self.size = size
        self.run = run
        self._freed = freed
        self._inbox: queue.SimpleQueue[tuple[JobContext, Resolved] | None] = queue.SimpleQueue()
        self._busy = 0
        self._running: dict[int, JobContext] = {}
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._serve, args=(n,), name=f"dbqueue-slot-{n}", daemon=True)
            for n in range(size)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    @property
    def busy(self) -> int:
        """Jobs submitted and not yet finished."""
        with self._lock:
            return self._busy

    @property
    def free(self) -> int:
        return self.size - self.busy

    def running(self) -> list[JobContext]:
        """The jobs the slots are running now (a job handed to the completer is not)."""
        with self._lock:
            return list(self._running.values())

    def submit(self, jobs: Sequence[tuple[JobContext, Resolved]]) -> None:
        """Queue a claim's jobs, each with its resolved task; the next free slot takes each."""
        with self._lock:
            self._busy += len(jobs)
        for job in jobs:
            self._inbox.put(job)

    def stop(self, wait: float) -> None:
        """Let idle threads exit (closing their connections); wait up to ``wait`` seconds in all."""
        for _ in self.threads:
            self._inbox.put(None)
        deadline = time.monotonic() + wait
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @staticmethod
    def _tidy(context: JobContext) -> None:
        """The slot's own last word on the job's connections, before its next job.

        Task code's leftovers are undone already (``leftovers.guarded``); a
        transaction still open now was left by a signal receiver or by the
        outcome's write itself: it is rolled back all the same, so no slot is
        ever left on a broken or half-done connection.
        """
        wrappers = connections.all(initialized_only=True)
        if left_open := leftovers.tidy({}, set(), wrappers):
            log.warning(
                "job id=%s: a transaction was left open outside task code on %s; rolled back",
                context.job_id,
                ", ".join(left_open),
                extra=job_fields(context.lease),
            )
        close_old_connections(wrappers)

    def _serve(self, slot: int) -> None:
        try:
            while (item := self._inbox.get()) is not None:
                context, task = item
                with self._lock:
                    self._running[slot] = context
                try:
                    self.run(context, task)
                # The slot's survival guard: nothing a job does may end the slot.
                except BaseException:
                    log.exception(
                        "job slot %s: unexpected error on job id=%s",
                        slot,
                        context.job_id,
                        extra=job_fields(context.lease),
                    )
                finally:
                    with self._lock:
                        self._running.pop(slot, None)
                        self._busy -= 1
                        free = self.size - self._busy
                    self._tidy(context)
                    self._freed(free)
        finally:
            connections.close_all()
