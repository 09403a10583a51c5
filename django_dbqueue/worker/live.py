"""The jobs this process is running, shared by the pool, heartbeat and shutdown."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from django_dbqueue.context import JobContext
from django_dbqueue.leases import Lease


@dataclass(frozen=True)
class LiveJob:
    """A running attempt: its context and the monotonic time its ``timeout`` ends."""

    context: JobContext
    deadline: float | None

    @property
    def lease(self) -> Lease:
        return self.context.lease


class LiveJobs:
    """Thread-safe registry of running attempts, by job id."""

    def __init__(self) -> None:
        self._jobs: dict[int, LiveJob] = {}
        self._lock = threading.Lock()
        #: Set when a job is added whose lease is shorter than the heartbeat plans
        #: for (``wait_for_shorter_lease``), so the heartbeat can shorten its wait.
        self.added = threading.Event()
        self._planned_lease = math.inf

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def add(self, context: JobContext, timeout: float | None) -> None:
        deadline = time.monotonic() + timeout if timeout is not None else None
        with self._lock:
            self._jobs[context.job_id] = LiveJob(context, deadline)
            shorter = context.lease.lease_seconds < self._planned_lease
        if shorter:
            self.added.set()

    def wait_for_shorter_lease(self, lease_seconds: float, timeout: float) -> None:
        """Wait ``timeout`` seconds, or until a job with a lease under ``lease_seconds`` is added.

        Jobs with leases at least that long need no earlier beat, so adding
        them (once per claimed job) wakes nobody.
        """
        with self._lock:
            self._planned_lease = lease_seconds
        self.added.wait(timeout)
        self.added.clear()

    def remove(self, job_id: int) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def all(self) -> list[LiveJob]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, job_id: int) -> LiveJob | None:
        with self._lock:
            return self._jobs.get(job_id)
