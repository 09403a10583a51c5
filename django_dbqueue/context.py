"""``JobContext``: what a ``takes_context=True`` task learns about its own job."""

from __future__ import annotations

import threading

from django_dbqueue import leases
from django_dbqueue.exceptions import LeaseLost


class JobContext:
    """The running attempt's identity and its lease.

    ``idempotency_key`` is the same for every attempt and requeue of the job:
    give it to remote systems so they can drop duplicates. ``lease_lost`` is
    set as soon as the worker learns the lease is gone; a long task should
    check it (or call ``heartbeat()``) and stop.
    """

    def __init__(self, lease: leases.Lease) -> None:
        self.lease = lease
        self.lease_lost = threading.Event()

    def __repr__(self) -> str:
        return f"<JobContext job={self.job_id} attempt={self.attempt}/{self.max_attempts}>"

    @property
    def job_id(self) -> int:
        return self.lease.job_id

    @property
    def attempt(self) -> int:
        return self.lease.attempt

    @property
    def max_attempts(self) -> int:
        return self.lease.max_attempts

    @property
    def worker_id(self) -> str:
        return self.lease.worker_id

    @property
    def idempotency_key(self) -> str:
        return self.lease.idempotency_key

    def heartbeat(self) -> None:
        """Renew the lease now. Raises ``LeaseLost`` (and sets ``lease_lost``) if it is gone."""
        if not self.lease_lost.is_set() and self.job_id in leases.renew([self.lease]):
            return
        self.lease_lost.set()
        raise LeaseLost(f"job {self.job_id}: the lease of attempt {self.attempt} is lost.")
