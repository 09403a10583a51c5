"""The heartbeat: renews every live lease of the process in one statement.

It runs every third of the shortest lease among the running jobs, so a lease
survives two missed beats; a job with a shorter lease than the others shortens
the wait as soon as it starts. A job past its task's ``timeout`` is no longer
renewed: its ``lease_lost`` event is set and the reaper recovers it once the
lease lapses. A lease the database no longer grants is reported the same way,
but a job that its own success or failure settled while the renewal was on its
way is not a lost lease: it is neither logged nor counted. Whatever a beat
raises is survived: logged once, retried within half a beat.
"""

from __future__ import annotations

import logging
import threading
import time

from django_dbqueue import conf, leases
from django_dbqueue.worker.connections import Survival
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.live import LiveJobs
from django_dbqueue.worker.session import worker_session

log = logging.getLogger(__name__)


class Heartbeat(threading.Thread):
    """Background thread renewing the leases in ``live`` until ``stop`` is set."""

    def __init__(self, live: LiveJobs, counters: WorkerCounters, stop: threading.Event) -> None:
        super().__init__(name="dbqueue-heartbeat", daemon=True)
        self.live = live
        self.counters = counters
        self.stop = stop

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
                interval = self.interval()
                due = last_beat + interval
                if time.monotonic() < due:
                    # A newly added job with a shorter lease wakes it: recompute the wait then.
                    self.live.wait_for_shorter_lease(interval * 3, due - time.monotonic())
                    continue
                try:
                    self.beat()
                except Exception as exc:  # noqa: BLE001 - the loop's survival guard: logged, backed off.
                    # Try again well within the lease: half a beat at most.
                    last_beat = time.monotonic() - interval + survival.failed(exc, interval / 2)
                    continue
                survival.succeeded()
                last_beat = time.monotonic()

    def close(self) -> None:
        """Stop beating (after ``stop`` is set) and wait for the thread."""
        self.live.added.set()
        self.join(5)

    def beat(self) -> None:
        """Renew what may still run; flag what may not or is no longer ours."""
        now = time.monotonic()
        renewing = []
        for job in self.live.all():
            if job.deadline is not None and now > job.deadline:
                if not job.context.lease_lost.is_set():
                    log.warning(
                        "job id=%s passed its timeout; no longer renewing its lease",
                        job.lease.job_id,
                    )
                    job.context.lease_lost.set()
            elif not job.context.lease_lost.is_set():
                renewing.append(job)
        if not renewing:
            return
        renewal = leases.renew_all(job.lease for job in renewing)
        for job in renewing:
            job.context.learn(renewal)
            if job.lease.job_id in renewal.lost:
                job.context.lease_lost.set()
                self.counters.add("renew_failures")
