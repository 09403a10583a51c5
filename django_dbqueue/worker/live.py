"""The jobs this process is running, shared by the pool, heartbeat and shutdown."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import NamedTuple

from django_dbqueue.context import JobContext
from django_dbqueue.leases import Lease


class LiveJob(NamedTuple):
    """A running attempt: its context and the monotonic time its ``timeout`` ends."""

    context: JobContext
    deadline: float | None

    @property
    def lease(self) -> Lease:
        return self.context.lease


class LiveJobs:
    """Thread-safe registry of running attempts, by job id.

    Jobs come and go in batches (a claim's, a completer write's): one lock per batch.
    """

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

    def add(self, jobs: Iterable[tuple[JobContext, float | None]]) -> None:
        """Register running attempts, each with its task's ``timeout`` (seconds, or ``None``)."""
        now = time.monotonic()
        added = {
            context.job_id: LiveJob(context, None if timeout is None else now + timeout)
            for context, timeout in jobs
        }
        shortest = min((job.lease.lease_seconds for job in added.values()), default=math.inf)
        with self._lock:
            self._jobs.update(added)
            shorter = shortest < self._planned_lease
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

    def remove(self, job_ids: Iterable[int]) -> None:
        with self._lock:
            for job_id in job_ids:
                self._jobs.pop(job_id, None)

    def all(self) -> list[LiveJob]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, job_id: int) -> LiveJob | None:
        with self._lock:
            return self._jobs.get(job_id)
