"""``JobContext``: what a ``takes_context=True`` task learns about its own job."""

from __future__ import annotations

import logging
import threading

from django_dbqueue import leases
from django_dbqueue.exceptions import JobCancelled, LeaseLost

log = logging.getLogger(__name__)

#: Guards the first look at a context's events, so two threads never make two of one.
_events_made = threading.Lock()


class JobContext:
    """The running attempt's identity and its lease.

    ``idempotency_key`` is the same for every attempt and requeue of the job:
    give it to remote systems so they can drop duplicates. ``lease_lost`` is
    set as soon as the worker learns the lease is gone; a long task should
    check it (or call ``heartbeat()``) and stop. ``cancel_requested`` is set
    within one renew interval of an operator's ``request_cancel``; a task that
    honours it calls ``raise_if_cancelled()`` and ends ``cancelled``.

    Both events are made the first time anyone looks at them: most jobs end
    before anything (the heartbeat, a task, shutdown) does, and a worker makes
    one context per job.
    """

    __slots__ = ("_events", "lease")

    def __init__(self, lease: leases.Lease) -> None:
        self.lease = lease
        self._events: tuple[threading.Event, threading.Event] | None = None

    @property
    def lease_lost(self) -> threading.Event:
        """Set once the worker learns the lease is gone (renewal refused, timeout passed)."""
        return self._made_events()[0]

    @property
    def cancel_requested(self) -> threading.Event:
        """Set once an operator asked this job to stop (``request_cancel``)."""
        return self._made_events()[1]

    def _made_events(self) -> tuple[threading.Event, threading.Event]:
        events = self._events
        if events is None:
            with _events_made:
                if self._events is None:
                    self._events = (threading.Event(), threading.Event())
                events = self._events
        return events

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
        """Renew the lease now. Raises ``LeaseLost`` (and sets ``lease_lost``) if it is gone.

        Also sets ``cancel_requested`` when an operator has asked the job to stop.
        """
        if not self.lease_lost.is_set():
            renewal = leases.renew_all([self.lease])
            self.learn(renewal)
            if self.job_id in renewal.owned:
                return
        self.lease_lost.set()
        raise LeaseLost(f"job {self.job_id}: the lease of attempt {self.attempt} is lost.")

    def learn(self, renewal: leases.Renewal) -> None:
        """Set ``cancel_requested`` if ``renewal`` reports this job marked for cancellation."""
        if self.job_id in renewal.cancel_requested and not self.cancel_requested.is_set():
            log.info("job id=%s cancel requested; telling its task", self.job_id)
            self.cancel_requested.set()

    def raise_if_cancelled(self) -> None:
        """Raise ``JobCancelled`` if an operator asked this job to stop; else return.

        Let the exception propagate: the job ends ``cancelled``, not retried.
        """
        if self.cancel_requested.is_set():
            raise JobCancelled(f"job {self.job_id}: cancel requested by an operator.")
