"""``JobContext``: what a ``takes_context=True`` task learns about its own job."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django_dbqueue import dependencies, leases, progress
from django_dbqueue.exceptions import JobCancelled, LeaseLost
from django_dbqueue.logfields import job_fields

log = logging.getLogger(__name__)

#: Renews one lease now and reports what it found (``leases.renew_all`` of that lease,
#: wherever the caller chooses to run it: in a worker, on its heartbeat's connection).
Renewer = Callable[[leases.Lease], leases.Renewal]

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

    ``renewer`` renews the lease for ``heartbeat()``; by default on the
    calling thread's connection. A worker passes its heartbeat's
    (``Heartbeat.renew_now``), so a task's renewal never runs on the task's
    connection inside the task's transaction. ``post_progress`` takes ``set_progress``'s
    reports the same way (``progress.Poster``): a worker passes its heartbeat's board; by
    default they are written on the calling thread's connection (``progress.Inline``).
    """

    __slots__ = ("_events", "_progress", "_progress_posted", "_renewer", "attempt_call", "lease")

    def __init__(
        self,
        lease: leases.Lease,
        renewer: Renewer | None = None,
        post_progress: progress.Poster | None = None,
    ) -> None:
        self.lease = lease
        self._renewer = renewer or _renew_here
        self._progress = post_progress
        #: Whether ``set_progress`` posted a report: if not, the attempt's end asks the poster
        #: nothing (the heartbeat's board takes a lock and waits for its write in flight).
        self._progress_posted = False
        self._events: tuple[threading.Event, threading.Event] | None = None
        #: The task's call while middleware runs around it (``middleware.run``); else ``None``.
        self.attempt_call: object = None

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

    @property
    def task(self) -> str:
        """The task's import path (``Job.task``)."""
        return self.lease.task

    @property
    def queue(self) -> str:
        """The queue the job was claimed from."""
        return self.lease.queue

    @property
    def dependency_results(self) -> list[Any]:
        """The results of the jobs this one waited for (``after=``), in that order.

        Read from the database each time (keep it in a variable); ``None`` for a
        dependency that did not succeed (``on_dependency_failure="run"``) or
        returned nothing. Empty for a job enqueued without ``after``.
        """
        return dependencies.results(self.job_id)

    @property
    def meta(self) -> Mapping[str, Any]:
        """What the enqueue hooks recorded on the job (``Job.meta``): empty when nothing."""
        return self.lease.meta or {}

    @property
    def run_at(self) -> datetime | None:
        """When the job was due, by the database clock (``None`` for a lease built by hand)."""
        return self.lease.run_at

    @property
    def leased_at(self) -> datetime:
        """When this attempt's claim took the job, by the database clock."""
        return self.lease.leased_at

    def heartbeat(self) -> None:
        """Renew the lease now. Raises ``LeaseLost`` (and sets ``lease_lost``) if it is gone.

        Also sets ``cancel_requested`` when an operator has asked the job to
        stop. Safe inside the task's own ``transaction.atomic()``: in a worker
        the renewal runs on the worker's heartbeat connection, not in the
        task's transaction, so it neither holds the job's row locked until the
        task commits (which would stall every other renewal of the worker) nor
        is undone by the task's rollback. While another transaction holds the
        job's row locked the lease cannot be renewed: this returns, and the
        worker's heartbeat tries again; once the lease's deadline has passed
        it is lost.
        """
        if not self.lease_lost.is_set():
            renewal = self._renewer(self.lease)
            self.learn(renewal)
            if self.job_id in renewal.owned:
                return
            if self.job_id in renewal.skipped and not self.lease_lost.is_set():
                return
        raise self._lost()

    def set_progress(
        self, done: int | float, total: int | float | None = None, message: str = ""
    ) -> None:
        """Report how far the attempt got: ``done`` of ``total`` (``None``: not known yet).

        Stored on the job (``Job.progress``) with the attempt's number and the
        database clock's time, fenced by the lease like ``heartbeat()``: after
        the lease is lost nothing is written, and this raises ``LeaseLost`` (and
        sets ``lease_lost``) as soon as the worker knows. Cheap to call in a
        tight loop: at most one write a second per job (``progress.INTERVAL``);
        reports in between replace each other and only the newest is written,
        in a worker by its heartbeat thread about a second after the last
        write at the latest. The attempt's last report is written before its
        outcome, so a finished job shows where its task stopped. The write
        never runs in the task's own transaction in a worker, and never waits
        for a row lock held elsewhere. A value no database stores (a negative
        or non-finite number, ``done > total``, a message with NUL) raises
        ``InvalidProgress`` here, writing nothing; a message past
        ``progress.MAX_MESSAGE_CHARS`` characters is cut.
        """
        report = progress.Progress.checked(done, total, message)
        if not self.lease_lost.is_set():
            if self._progress is None:
                self._progress = progress.Inline()
            self._progress_posted = True
            if self._progress.post(self.lease, report):
                return
        raise self._lost()

    def unwritten_progress(self) -> progress.Progress | None:
        """The worker's, at the attempt's end: the newest ``set_progress`` report not known to be
        written, taken (a second call returns ``None``), for ``execute`` to write before the
        outcome. ``None`` when the task reported nothing, or its newest report is stored."""
        if self._progress is None or not self._progress_posted:
            return None
        return self._progress.unwritten(self.lease)

    def _lost(self) -> LeaseLost:
        """Set ``lease_lost``; the ``LeaseLost`` to raise to the task."""
        self.lease_lost.set()
        return LeaseLost(f"job {self.job_id}: the lease of attempt {self.attempt} is lost.")

    def learn(self, renewal: leases.Renewal) -> None:
        """Set ``cancel_requested`` if ``renewal`` reports this job marked for cancellation."""
        if self.job_id in renewal.cancel_requested and not self.cancel_requested.is_set():
            log.info(
                "job id=%s cancel requested; telling its task",
                self.job_id,
                extra=job_fields(self.lease),
            )
            self.cancel_requested.set()

    def raise_if_cancelled(self) -> None:
        """Raise ``JobCancelled`` if an operator asked this job to stop; else return.

        Let the exception propagate: the job ends ``cancelled``, not retried.
        """
        if self.cancel_requested.is_set():
            raise JobCancelled(f"job {self.job_id}: cancel requested by an operator.")


def _renew_here(lease: leases.Lease) -> leases.Renewal:
    """Renew ``lease`` on the calling thread's connection (outside a worker: ``run_jobs``)."""
    return leases.renew_all([lease])
