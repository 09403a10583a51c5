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
    """A running attempt: its context, the monotonic time its ``timeout`` ends, and when
    it was added (``time.monotonic``, just after its claim)."""

    context: JobContext
    deadline: float | None
    added: float

    @property
    def lease(self) -> Lease:
        return self.context.lease


class LiveJobs:
    """Thread-safe registry of running attempts, by job id.

    Jobs come and go in batches (a claim's, a completer write's): one lock per batch.
    A job's slot ``start``s it before any of its code (task or ``job_started``
    receiver) runs; shutdown ``withdraw``s every job at once, learning which
    ones started, and a job withdrawn before it started never starts.
    """

    def __init__(self) -> None:
        self._jobs: dict[int, LiveJob] = {}
        self._started: set[int] = set()
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
            context.job_id: LiveJob(context, None if timeout is None else now + timeout, now)
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

    def start(self, job_id: int) -> bool:
        """Mark the job's code as started; ``False`` (and nothing marked) once it was withdrawn."""
        with self._lock:
            if job_id not in self._jobs:
                return False
            self._started.add(job_id)
            return True

    def withdraw(self) -> list[tuple[LiveJob, bool]]:
        """Remove every job; each with whether its code had started.

        Atomic with ``start``: a job reported not started here never starts.
        """
        with self._lock:
            withdrawn = [(job, job_id in self._started) for job_id, job in self._jobs.items()]
            self._jobs.clear()
            self._started.clear()
        return withdrawn

    def remove(self, job_ids: Iterable[int]) -> None:
        with self._lock:
            for job_id in job_ids:
                self._jobs.pop(job_id, None)
                self._started.discard(job_id)

    def all(self) -> list[LiveJob]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, job_id: int) -> LiveJob | None:
        with self._lock:
            return self._jobs.get(job_id)
