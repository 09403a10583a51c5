"""The jobs this process is running, shared by the pool, heartbeat and shutdown."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable
from typing import NamedTuple

from django_dbqueue.context import JobContext
from django_dbqueue.leases import Lease
from django_dbqueue.logfields import job_fields

log = logging.getLogger(__name__)

#: One attempt of a job: its id and lease token. A job claimed again here while an
#: earlier attempt of it still runs (its lease lapsed and the reaper returned it) has two.
AttemptKey = tuple[int, int]


def attempt_key(lease: Lease) -> AttemptKey:
    """The attempt ``lease`` was claimed for."""
    return (lease.job_id, lease.lease_token)


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
    """Thread-safe registry of running attempts, by attempt (``attempt_key``).

    Jobs come and go in batches (a claim's, a completer write's): one lock per batch.
    A job's slot ``start``s it before any of its code (task or ``job_started``
    receiver) runs; shutdown ``withdraw``s every job at once, learning which
    ones started, and a job withdrawn before it started never starts.

    A job claimed again while an earlier attempt of it still runs here (past
    its timeout, or its lease lapsed while the database was out of reach) is
    live twice, and each attempt keeps its own entry: the earlier one's end
    takes out only its own, so the new attempt stays renewed. The earlier
    lease is lost (a newer token exists), so ``add`` sets its ``lease_lost``
    at once: it is renewed no more, and its task learns it at its next check.
    """

    def __init__(self) -> None:
        self._jobs: dict[AttemptKey, LiveJob] = {}
        #: The newest lease token live here of each job.
        self._newest: dict[int, int] = {}
        self._started: set[AttemptKey] = set()
        self._lock = threading.Lock()
        #: Set when a job is added whose lease is shorter than the heartbeat plans
        #: for (``wait_for_shorter_lease``), so the heartbeat can shorten its wait.
        self.added = threading.Event()
        self._planned_lease = math.inf

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def add(self, jobs: Iterable[tuple[JobContext, float | None]]) -> None:
        """Register running attempts, each with its task's ``timeout`` (seconds, or ``None``).

        An earlier attempt of the same job still live here has lost its lease:
        its ``lease_lost`` is set.
        """
        now = time.monotonic()
        added = {
            attempt_key(context.lease): LiveJob(
                context, None if timeout is None else now + timeout, now
            )
            for context, timeout in jobs
        }
        shortest = min((job.lease.lease_seconds for job in added.values()), default=math.inf)
        superseded = []
        with self._lock:
            for job_id, lease_token in added:
                earlier = self._newest.get(job_id)
                if earlier is not None and earlier != lease_token:
                    lost = self._jobs[(job_id, earlier)]
                    # Set before the new attempt is seen: no beat renews both together.
                    lost.context.lease_lost.set()
                    superseded.append(lost)
                self._newest[job_id] = lease_token
            self._jobs.update(added)
            shorter = shortest < self._planned_lease
        for job in superseded:
            log.warning(
                "job id=%s claimed again while its attempt with lease token %s still runs "
                "here: that lease is lost",
                job.lease.job_id,
                job.lease.lease_token,
                extra=job_fields(job.lease),
            )
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

    def start(self, lease: Lease) -> bool:
        """Mark the attempt's code as started; ``False`` (nothing marked) once it was withdrawn."""
        key = attempt_key(lease)
        with self._lock:
            if key not in self._jobs:
                return False
            self._started.add(key)
            return True

    def withdraw(self) -> list[tuple[LiveJob, bool]]:
        """Remove every job; each with whether its code had started.

        Atomic with ``start``: a job reported not started here never starts.
        """
        with self._lock:
            withdrawn = [(job, key in self._started) for key, job in self._jobs.items()]
            self._jobs.clear()
            self._newest.clear()
            self._started.clear()
        return withdrawn

    def remove(self, leases: Iterable[Lease]) -> None:
        """Take out the attempts of ``leases`` (and only theirs: a later attempt stays)."""
        with self._lock:
            for lease in leases:
                key = attempt_key(lease)
                self._jobs.pop(key, None)
                self._started.discard(key)
                if self._newest.get(lease.job_id) == lease.lease_token:
                    del self._newest[lease.job_id]

    def all(self) -> list[LiveJob]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, lease: Lease) -> LiveJob | None:
        """The live attempt of ``lease``; ``None`` once it ended (or for another attempt's)."""
        with self._lock:
            return self._jobs.get(attempt_key(lease))
