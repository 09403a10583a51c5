"""The jobs this process is running, shared by the pool, heartbeat and shutdown."""

from __future__ import annotations

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
        #: Set whenever a job is added, so the heartbeat can shorten its wait.
        self.added = threading.Event()

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def add(self, context: JobContext, timeout: float | None) -> None:
        deadline = time.monotonic() + timeout if timeout is not None else None
        with self._lock:
            self._jobs[context.job_id] = LiveJob(context, deadline)
        self.added.set()

    def remove(self, job_id: int) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def all(self) -> list[LiveJob]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, job_id: int) -> LiveJob | None:
        with self._lock:
            return self._jobs.get(job_id)
