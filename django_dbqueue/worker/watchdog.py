"""The watchdog: whether a worker process is still whole enough to claim jobs.

A worker whose heartbeat, completer, reporter, reaper, listener, periodic
scheduler or any job slot thread is gone, or whose every slot is stuck in a
job that passed its ``timeout`` by more than a lease length, would look alive
and do nothing useful (or worse: claim jobs it never runs). The claimer asks
``verdict()`` between claims and while it waits; a verdict makes the worker
log why, stop claiming, release what it can and exit non-zero, so a process
supervisor (systemd, Kubernetes) starts a whole one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.live import LiveJobs
from django_dbqueue.worker.pool import JobPool

#: How often (seconds) an idle claimer asks the watchdog.
TICK = 1.0


class WorkerBroken(RuntimeError):
    """The worker cannot go on; the message says why. ``runworkers`` exits non-zero."""


class Watchdog:
    """Judges the threads ``threads()`` names (the ones started) and the pool's slots."""

    def __init__(
        self,
        threads: Callable[[], list[threading.Thread]],
        pool: JobPool,
        live: LiveJobs,
        counters: WorkerCounters,
    ) -> None:
        self.threads = threads
        self.pool = pool
        self.live = live
        self.counters = counters

    def verdict(self) -> str | None:
        """Why the worker cannot go on, or ``None``; updates the health gauges in ``counters``."""
        alive = {thread.name: thread.is_alive() for thread in self.threads()}
        hung = self.hung_slots()
        self.counters.set_health(alive, len(hung))
        dead = sorted(name for name, is_alive in alive.items() if not is_alive)
        if dead:
            return f"thread {', '.join(dead)} is gone"
        if self.pool.size and len(hung) == self.pool.size:
            return (
                f"every job slot ({self.pool.size}) is stuck in a job past its timeout by more "
                f"than its lease (job ids {', '.join(map(str, sorted(hung)))})"
            )
        return None

    def hung_slots(self) -> list[int]:
        """Jobs a slot still runs though they passed their timeout by more than their lease."""
        now = time.monotonic()
        hung = []
        for context in self.pool.running():
            job = self.live.get(context.lease)
            deadline = job.deadline if job is not None else None
            if deadline is not None and now > deadline + context.lease.lease_seconds:
                hung.append(context.job_id)
        return hung
