"""The ``Worker``: one ``runworkers`` process. ``run()`` starts its threads (job pool,
completer, reporter, heartbeat, listener, reaper, periodic), runs the claim loop on the
calling thread, and shuts down.

The claim loop fills free slots with one batched claim (``claimer``), then
waits for a wake-up (a commit on a served queue, a finished job) or the poll
interval, so an idle worker costs one claim per interval. SIGTERM, SIGINT,
SIGHUP or SIGQUIT (``os_signals``) stops claiming, lets running jobs finish
for ``shutdown_timeout`` seconds and releases the rest (an attempt whose code
started counts, with a ``SHUTDOWN`` history entry; one that never started is
refunded); a second SIGINT releases at once; SIGUSR1 logs a status line.
With ``metrics_port`` set, ``/metrics`` is served for as long as ``run()`` lasts.
Unless bursting, a worker enqueues the due slots of the periodic schedules
declared in its apps' ``tasks`` modules (imported at start) until it drains.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connections

from django_dbqueue import conf, leases, middleware, periodic, reaper
from django_dbqueue.logfields import job_fields
from django_dbqueue.worker import os_signals
from django_dbqueue.worker.budget import ConnectionBudget, connection_budget
from django_dbqueue.worker.claimer import Claimer
from django_dbqueue.worker.completer import Completer
from django_dbqueue.worker.connections import Survival, repeat
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.execute import AttemptRunner
from django_dbqueue.worker.heartbeat import Heartbeat
from django_dbqueue.worker.listener import Listener, listen_alias
from django_dbqueue.worker.live import LiveJobs
from django_dbqueue.worker.pool import JobPool
from django_dbqueue.worker.reporter import OutcomeReporter
from django_dbqueue.worker.session import switched_off_for_pooler, worker_session
from django_dbqueue.worker.watchdog import TICK, Watchdog, WorkerBroken

log = logging.getLogger(__name__)


def default_worker_id() -> str:
    """``host:pid:random``: unique per process, readable in the admin and logs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerOptions:
    """How a worker process runs; ``None`` values come from the settings."""

    queues: list[str] | None = None
    concurrency: int = 1
    burst: bool = False
    max_jobs: int | None = None
    worker_id: str | None = None
    poll_interval: float | None = None
    shutdown_timeout: float = 30.0
    reaper: bool = True
    metrics_port: int | None = None  # serve Prometheus metrics there (the prometheus extra)
    metrics_host: str = "127.0.0.1"


class Worker:
    """A worker process's machinery. ``run()`` blocks until it is told to stop.

    ``counters`` holds the process's counters and its claim and run duration
    histograms while it runs and after. Once claimed, a job never calls back
    into the ``Worker``: its slot runs it (``execute.AttemptRunner``), the
    completer writes it, the reporter counts and reports it, and the claim
    loop hears of freed slots through ``wake``.
    """

    def __init__(self, options: WorkerOptions) -> None:
        cfg = conf.get()
        # The middleware is built here: a factory that raises stops the worker before it
        # claims anything, instead of failing every attempt.
        middleware.stack()
        self.options = options
        self.queues = options.queues if options.queues is not None else cfg.queues
        self.worker_id = options.worker_id or default_worker_id()
        self.poll_interval = options.poll_interval or cfg.poll_interval
        self.counters = WorkerCounters()
        self.live = LiveJobs()
        self.stopping = threading.Event()  # stop claiming, drain
        self.stop_now = threading.Event()  # release whatever still runs
        self.wake = threading.Event()
        self._threads_stop = threading.Event()
        self.heartbeat = Heartbeat(self.live, self.counters, self._threads_stop)
        self.reporter = OutcomeReporter(self.counters, self.live, self.wake.set)
        self.completer = Completer(self._threads_stop, self.reporter.written)
        self.claimer = Claimer(
            options.concurrency,
            options.max_jobs,
            self.counters,
            self.live,
            self.heartbeat.renew_now,
            self.heartbeat.progress,
            self.wake,
        )
        self.pool = JobPool(
            options.concurrency,
            AttemptRunner(self.live, self.completer, self.reporter.finished),
            self.claimer.slot_freed,
        )
        self.listener = Listener(self.queues, self.wake, self._threads_stop)
        self.reaper = threading.Thread(
            target=self._reap_forever, name="dbqueue-reaper", daemon=True
        )
        self.scheduler = periodic.Scheduler(() if options.burst else periodic.discover())
        self.periodic = threading.Thread(
            target=self._schedule_until_stopping, name="dbqueue-periodic", daemon=True
        )
        self.watchdog = Watchdog(self._started_threads, self.pool, self.live, self.counters)
        self._next_health_check = 0.0

    def run(self) -> None:
        """Claim and run jobs until stopped, the burst is drained or ``max_jobs`` are done."""
        with os_signals.handled(self._on_drain_signal, self._log_status), self._metrics_served():
            log.info(
                "worker started id=%s queues=%s concurrency=%s burst=%s",
                self.worker_id,
                ",".join(self.queues) if self.queues else "*",
                self.options.concurrency,
                self.options.burst,
            )
            log.info("worker id=%s %s", self.worker_id, self.connection_budget().line())
            if pooled := switched_off_for_pooler():
                log.info("worker id=%s %s", self.worker_id, pooled)
            self.pool.start()
            self.heartbeat.start()
            self.completer.start()
            self.reporter.start()
            self.listener.start()
            if self.options.reaper:
                self.reaper.start()
            if self.scheduler.schedules:
                self.periodic.start()
            try:
                with worker_session():
                    self._claim_until_done()
            except WorkerBroken as exc:
                log.critical("worker id=%s cannot go on, exiting: %s", self.worker_id, exc)
                self.stop_now.set()
                raise
            finally:
                self._shut_down()

    def connection_budget(self) -> ConnectionBudget:
        """The connections to the queue's database this process holds (``budget``)."""
        cfg = conf.get()
        return connection_budget(
            self.options.concurrency,
            reaper=self.options.reaper,
            periodic=bool(self.scheduler.schedules),
            listen=listen_alias(),
            listen_database=cfg.listen_database,
            conn_max_age=connections[cfg.database].settings_dict["CONN_MAX_AGE"],
            metrics=self.options.metrics_port is not None,
        )

    def stop(self) -> None:
        """Stop claiming and drain (what SIGTERM does)."""
        self.stopping.set()
        self.wake.set()

    def _claim_until_done(self) -> None:
        """Claim into free slots until stopping; raises ``WorkerBroken`` on the watchdog's word.

        Whatever a claim raises is survived (logged once, backed off).
        """
        survival = Survival("claim")
        while not self.stopping.is_set():
            self._check_health()
            self.wake.clear()
            behind = self.completer.backlog + self.reporter.backlog
            wanted = self.claimer.wanted(self.pool.free, self.pool.busy, behind)
            if wanted == 0:
                if self._done_with_max_jobs():
                    return
                self._wait(self.wake, self.claimer.wait(self.poll_interval))
                continue
            # Counted before the claim: a job still running then may, once it ends, make
            # another one due (its serial key's next job, its own retry) after the claim
            # looked, so only a claim made with none running may end a burst.
            had_jobs = len(self.live) > 0
            try:
                claimed = self.claimer.claim(self.queues, self.worker_id, wanted)
            except Exception as exc:  # noqa: BLE001 - the loop's survival guard: logged, backed off.
                self._wait(self.stopping, survival.failed(exc))
                continue
            survival.succeeded()
            if claimed:
                self.pool.submit(claimed)
            if not claimed and self.options.burst and not had_jobs:
                log.info("worker id=%s burst drained", self.worker_id)
                return
            if len(claimed) < wanted:
                self._wait(self.wake, self._idle_wait(survival))

    def _wait(self, event: threading.Event, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for ``event``, asking the watchdog every ``TICK``."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            if event.wait(min(remaining, TICK)):
                return
            self._check_health()

    def _idle_wait(self, survival: Survival) -> float:
        """How long to wait after a short claim: until the next job is due, at most a poll.

        A job scheduled 1 s ahead (``delay``, ``run_at``, a retry's backoff) so
        starts about 1 s later, not at the next poll. A look-up that fails is
        the claim loop's failure (``survival``): logged, and waited out for at
        most a poll interval.
        """
        try:
            due = leases.next_due(self.queues)
        except Exception as exc:  # noqa: BLE001 - the claim loop's survival guard, as for claims.
            return survival.failed(exc, cap=self.poll_interval)
        return self.poll_interval if due is None else min(self.poll_interval, due)

    def _check_health(self) -> None:
        """Ask the watchdog, once a ``TICK`` at most; raises ``WorkerBroken`` on its word."""
        now = time.monotonic()
        if self.stopping.is_set() or now < self._next_health_check:
            return  # Draining (threads may end on purpose now), or asked just now.
        self._next_health_check = now + TICK
        reason = self.watchdog.verdict()
        if reason is not None:
            raise WorkerBroken(reason)

    def _started_threads(self) -> list[threading.Thread]:
        """The threads the watchdog watches: every one this worker started."""
        optional = (self.listener, self.reaper, self.periodic)
        return [
            self.heartbeat,
            self.completer,
            self.reporter,
            *(thread for thread in optional if thread.ident is not None),
            *self.pool.threads,
        ]

    def _done_with_max_jobs(self) -> bool:
        limit = self.options.max_jobs
        return limit is not None and self.counters.claimed >= limit and not self.live

    def _reap_forever(self) -> None:
        interval = conf.get().reaper_interval
        with worker_session():
            repeat("reap", reaper.sweep, self._threads_stop, interval, first_pause=interval)

    def _schedule_until_stopping(self) -> None:
        names = ",".join(schedule.name for schedule in self.scheduler.schedules)
        log.info("worker id=%s periodic schedules=%s", self.worker_id, names)
        interval = min(self.poll_interval, periodic.TICK)
        repeat("periodic scheduling", self.scheduler.enqueue_due, self.stopping, interval)

    def _shut_down(self) -> None:
        self.stopping.set()
        deadline = time.monotonic() + self.options.shutdown_timeout
        while not self.stop_now.is_set():
            self.wake.clear()  # before looking: the last job's wake-up may come at any moment
            remaining = deadline - time.monotonic()
            if not self.live or remaining <= 0:
                break
            self.wake.wait(remaining)  # the last finished job or a second SIGINT sets it
        self._release_unfinished()
        self._threads_stop.set()
        self.listener.close()
        self.heartbeat.close()
        self.completer.join(5)
        self.reporter.close(5)
        if self.reaper.is_alive():
            self.reaper.join(5)
        if self.periodic.is_alive():
            self.periodic.join(5)
        self.pool.stop(wait=1)
        connections.close_all()
        log.info(
            "worker stopped id=%s %s",
            self.worker_id,
            " ".join(f"{name}={count}" for name, count in self.counters.snapshot().items()),
        )

    def _release_unfinished(self) -> None:
        """Hand back every job still live: refunded if its code never started, else counted."""
        for job, started in self.live.withdraw():
            job.context.lease_lost.set()
            try:
                released = leases.release(job.lease, started=started)
            except Exception as exc:  # noqa: BLE001 - an unreleased lease expires; the reaper takes it.
                log.warning(
                    "job id=%s not released, the reaper will recover it: %s",
                    job.lease.job_id,
                    exc,
                    extra=job_fields(job.lease),
                )
                continue
            if released:
                how = "attempt counted, code=SHUTDOWN" if started else "attempt refunded, unstarted"
                log.info(
                    "job id=%s released at shutdown (%s)",
                    job.lease.job_id,
                    how,
                    extra=job_fields(job.lease),
                )

    @contextmanager
    def _metrics_served(self) -> Iterator[None]:
        """Serve ``/metrics`` while the worker runs, when ``metrics_port`` is set."""
        port = self.options.metrics_port
        if port is None:
            yield
            return
        # Imported here: only a worker serving metrics needs prometheus-client.
        from django_dbqueue import metrics

        server = metrics.serve(self.worker_id, self.counters, self.options.metrics_host, port)
        log.info("worker id=%s metrics at http://%s:%s/metrics", self.worker_id, *server.address)
        try:
            yield
        finally:
            server.close()

    def _on_drain_signal(self, sig: signal.Signals) -> None:
        """A ``DRAIN`` signal (``os_signals``): stop claiming; a second SIGINT releases at once."""
        if sig == signal.SIGINT and self.stopping.is_set():
            log.warning("worker id=%s second SIGINT: releasing running jobs now", self.worker_id)
            self.stop_now.set()
        else:
            log.info("worker id=%s got %s: draining", self.worker_id, sig.name)
        self.stop()

    def _log_status(self) -> None:
        """The ``STATUS`` signal (SIGUSR1): one line on what this worker is doing now."""
        log.info(
            "worker status id=%s state=%s live_jobs=%s busy_slots=%s free_slots=%s %s",
            self.worker_id,
            "draining" if self.stopping.is_set() else "claiming",
            len(self.live),
            self.pool.busy,
            self.pool.free,
            " ".join(f"{name}={count}" for name, count in self.counters.snapshot().items()),
        )
