"""The heartbeat: renews every live lease of the process in one statement.

It runs every third of the shortest lease among the running jobs, so a lease
survives two missed beats; a job with a shorter lease than the others shortens
the wait as soon as it starts. A job past its task's ``timeout`` is no longer
renewed: its ``lease_lost`` event is set and the reaper recovers it once the
lease lapses. A lease the database no longer grants is reported the same way,
but a job that its own success or failure settled while the renewal was on its
way is not a lost lease: it is neither logged nor counted. Whatever a beat
raises is survived: logged once, retried within half a beat.

A job row another transaction holds locked (an operator's ``SELECT ... FOR
UPDATE``, say) is skipped, never awaited: the other leases are renewed on
time, and that one is tried again at the next beat. Once its lease has run out
by this process's clock (one lease length after its last renewal was sent, or
after it was claimed) its ``lease_lost`` is set, as for any lost lease.

A task's ``context.heartbeat()`` is served here too (``renew_now``): its
lease is renewed on this thread's connection, never on the task's own, so a
heartbeat called inside the task's ``transaction.atomic()`` takes no row lock
in the task's transaction for the next beat to wait on. So is its
``context.set_progress()``: reports wait on this thread's ``progress`` board,
which it writes between beats, a job's newest report at most once a second.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as NotYet

from django_dbqueue import conf, leases
from django_dbqueue.logfields import job_fields
from django_dbqueue.worker.connections import Survival
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.live import AttemptKey, LiveJob, LiveJobs, attempt_key
from django_dbqueue.worker.progress import ProgressBoard
from django_dbqueue.worker.session import worker_session

log = logging.getLogger(__name__)

#: How often a task waiting in ``renew_now`` checks that the heartbeat still runs.
ASK_TICK = 0.5
#: What a renewal of no lease found.
NOTHING_RENEWED = leases.Renewal(owned=set(), settled={}, lost=set())

#: A task's ask for its lease's renewal, answered by the heartbeat thread.
_Ask = tuple[leases.Lease, "Future[leases.Renewal]"]


class Heartbeat(threading.Thread):
    """Background thread renewing the leases in ``live`` until ``stop`` is set."""

    def __init__(self, live: LiveJobs, counters: WorkerCounters, stop: threading.Event) -> None:
        super().__init__(name="dbqueue-heartbeat", daemon=True)
        self.live = live
        self.counters = counters
        self.stop = stop
        self._asks: list[_Ask] = []
        self._asks_lock = threading.Lock()
        #: By attempt, when (``time.monotonic``) each lease this thread renewed runs out at the
        #: earliest: its lease length after the renewal statement was sent.
        self._lease_ends: dict[AttemptKey, float] = {}
        #: Tasks' progress reports, written by this thread (``post`` is the jobs' poster).
        self.progress = ProgressBoard(live, counters, live.added.set)

    def interval(self) -> float:
        """A third of the shortest running lease (of the default lease when idle)."""
        shortest = min(
            (job.lease.lease_seconds for job in self.live.all()),
            default=conf.get().lease_seconds,
        )
        return shortest / 3

    def run(self) -> None:
        survival = Survival("lease renewal")
        last_beat = time.monotonic()
        with worker_session():
            while not self.stop.is_set():
                asks = self._taken_asks()
                interval = self.interval()
                due = last_beat + interval
                now = time.monotonic()
                wake_at = min(due, self.progress.next_turn())
                if not asks and now < wake_at:
                    # A newly added job with a shorter lease, a task's ask or its first
                    # progress report since the last write wakes it.
                    self.live.wait_for_shorter_lease(interval * 3, wake_at - now)
                    continue
                try:
                    if asks:
                        self._answer(asks)
                        continue
                    if now < due:
                        self.progress.write_due()
                        continue
                    self.beat()
                except Exception as exc:  # noqa: BLE001 - the loop's survival guard: logged, backed off.
                    for _, asked in asks:
                        asked.set_exception(exc)
                    # Try again well within the lease: half a beat at most.
                    last_beat = time.monotonic() - interval + survival.failed(exc, interval / 2)
                    continue
                survival.succeeded()
                last_beat = time.monotonic()

    def close(self) -> None:
        """Stop beating (after ``stop`` is set) and wait for the thread."""
        self.live.added.set()
        self.join(5)

    def renew_now(self, lease: leases.Lease) -> leases.Renewal:
        """Renew ``lease`` now on the heartbeat's connection: ``context.heartbeat()`` in a worker.

        The calling job thread waits for the answer and takes no row lock
        itself, so a task may call it inside its own ``transaction.atomic()``.
        Asks that arrive together share one statement. A lease past its task's
        ``timeout``, lost, or whose row stayed locked past its deadline is not
        renewed and its ``lease_lost`` is set, as by a beat. No answer within
        the lease's length (the database unreachable) renews nothing; before
        the heartbeat starts or once it has stopped, the lease is renewed on
        the calling thread's connection.
        """
        asked: Future[leases.Renewal] = Future()
        with self._asks_lock:
            self._asks.append((lease, asked))
        self.live.added.set()
        give_up_at = time.monotonic() + lease.lease_seconds
        while True:
            try:
                return asked.result(timeout=ASK_TICK)
            except NotYet:
                pass
            if not self.is_alive() and asked.cancel():
                return leases.renew_all([lease])
            if time.monotonic() >= give_up_at and asked.cancel():
                log.warning(
                    "job id=%s heartbeat not answered within its lease",
                    lease.job_id,
                    extra=job_fields(lease),
                )
                return NOTHING_RENEWED

    def _taken_asks(self) -> list[_Ask]:
        """The asks waiting for an answer, taken out (those their task gave up on are dropped)."""
        with self._asks_lock:
            asks, self._asks = self._asks, []
        return [(lease, asked) for lease, asked in asks if asked.set_running_or_notify_cancel()]

    def _answer(self, asks: list[_Ask]) -> None:
        """Renew the asked leases in one statement and hand each ask the renewal."""
        jobs = [job for lease, _ in asks if (job := self.live.get(lease)) is not None]
        renewal = self._renew(jobs)
        for _, asked in asks:
            asked.set_result(renewal)

    def beat(self) -> None:
        """Renew what may still run; flag what may not or is no longer ours."""
        jobs = self.live.all()
        self._renew(jobs)
        live = {attempt_key(job.lease) for job in jobs}
        for attempt in self._lease_ends.keys() - live:
            del self._lease_ends[attempt]

    def _renew(self, jobs: list[LiveJob]) -> leases.Renewal:
        """Renew ``jobs`` in one statement but those past their timeout; what it found."""
        now = time.monotonic()
        renewing = []
        for job in jobs:
            if job.deadline is not None and now > job.deadline:
                if not job.context.lease_lost.is_set():
                    log.warning(
                        "job id=%s passed its timeout; no longer renewing its lease",
                        job.lease.job_id,
                        extra=job_fields(job.lease),
                    )
                    job.context.lease_lost.set()
            elif not job.context.lease_lost.is_set():
                renewing.append(job)
        if not renewing:
            return NOTHING_RENEWED
        sent = time.monotonic()
        renewal = leases.renew_all(job.lease for job in renewing)
        for job in renewing:
            job_id = job.lease.job_id
            job.context.learn(renewal)
            if job_id in renewal.owned:
                self._lease_ends[attempt_key(job.lease)] = sent + job.lease.lease_seconds
            elif job_id in renewal.lost or (job_id in renewal.skipped and self._ran_out(job)):
                job.context.lease_lost.set()
                self.counters.add("leases_lost")
        return renewal

    def _ran_out(self, job: LiveJob) -> bool:
        """Whether the lease of ``job``, whose row was locked elsewhere, has run out by now."""
        ends = self._lease_ends.get(attempt_key(job.lease), job.added + job.lease.lease_seconds)
        if time.monotonic() < ends:
            log.info(
                "job id=%s row locked by another transaction; renewing its lease next beat",
                job.lease.job_id,
                extra=job_fields(job.lease),
            )
            return False
        log.warning(
            "job id=%s lease ran out while its row was locked by another transaction; "
            "telling its task the lease is lost",
            job.lease.job_id,
            extra=job_fields(job.lease),
        )
        return True
