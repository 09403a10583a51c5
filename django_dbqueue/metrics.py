"""Prometheus exposition of queue health and worker counters (the ``prometheus`` extra).

Import this module only where metrics are wanted: it needs ``prometheus-client``
(``pip install "django-dbqueue[prometheus]"``). Worker samples are read at scrape
time from its ``WorkerCounters``; the queue gauges from ``queue_stats()``, the limit
gauges from ``limit_stats()`` and the job table's (PostgreSQL) from ``table_health()`` at
most once per ``QUEUE_STATS_TTL`` seconds, however many scrapes come in. Nothing is
registered in prometheus_client's global registry, so a project's own metrics
never clash.

- ``queue_metrics_view``: the queue and limit gauges, for a project's URLconf.
- ``serve(...)``: what ``runworkers --metrics-port`` starts: the worker's
  counters and histograms plus the queue and limit gauges on a small HTTP server thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar
from wsgiref.simple_server import WSGIServer

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from django_dbqueue import conf
from django_dbqueue.stats import LimitStats, QueueStats, limit_stats, queue_stats
from django_dbqueue.table_health import TableHealth, table_health
from django_dbqueue.worker.counters import HistogramSnapshot, WorkerCounters

INSTALL_HINT = (
    'django_dbqueue.metrics needs prometheus-client: pip install "django-dbqueue[prometheus]".'
)

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        generate_latest,
        start_http_server,
    )
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImproperlyConfigured(INSTALL_HINT) from exc

log = logging.getLogger(__name__)

#: Seconds the queue, limit and table gauges are served from one read of ``queue_stats()``,
#: ``limit_stats()`` and ``table_health()``: an unauthenticated scrape flood costs the
#: database one read (three queries, four on PostgreSQL) per interval.
QUEUE_STATS_TTL = 5.0
#: ``QueueStats`` field -> (gauge name, help), labelled ``queue``.
QUEUE_GAUGES = {
    "waiting": (
        "dbqueue_queue_waiting_jobs",
        "Jobs waiting for the jobs they depend on; never claimed until then.",
    ),
    "ready": ("dbqueue_queue_ready_jobs", "Ready jobs that are due now."),
    "scheduled": ("dbqueue_queue_scheduled_jobs", "Ready jobs whose run_at is still ahead."),
    "running": ("dbqueue_queue_running_jobs", "Jobs held under a lease."),
    "expiring": (
        "dbqueue_queue_expiring_leases",
        "Running jobs whose lease ends within 30 seconds.",
    ),
    "dead": ("dbqueue_queue_dead_jobs", "Dead jobs waiting for an operator."),
    "blocked": (
        "dbqueue_jobs_blocked",
        "Jobs cancelled by a failed dependency; requeueing the dead dependency "
        "returns them to waiting.",
    ),
    "succeeded_last_hour": (
        "dbqueue_queue_succeeded_last_hour",
        "Jobs that succeeded in the last hour.",
    ),
    "oldest_ready_age_seconds": (
        "dbqueue_queue_oldest_ready_age_seconds",
        "Seconds the oldest due ready job has waited; 0 when none waits.",
    ),
    "paused": (
        "dbqueue_queue_paused",
        "1 while the queue is paused (no worker claims its jobs), 0 otherwise.",
    ),
}
#: ``LimitStats`` field -> (gauge name, help), labelled ``limit`` (its ``limit_key``).
LIMIT_GAUGES = {
    "running": (
        "dbqueue_limit_running",
        "Running jobs of the limit: the slots taken.",
    ),
    "waiting": (
        "dbqueue_limit_waiting",
        "Ready jobs of the limit; none is claimed while running equals size.",
    ),
    "size": (
        "dbqueue_limit_size",
        "Most jobs of the limit that run at once (0: it has a rate only).",
    ),
    "rate": (
        "dbqueue_limit_rate",
        "Most jobs of the limit that start a second (0: it has a size only).",
    ),
}
#: ``TableHealth`` field -> (gauge name, help), labelled ``table`` (PostgreSQL only).
TABLE_GAUGES = {
    "live_rows": (
        "dbqueue_table_live_rows",
        "Live rows of the table, as PostgreSQL's statistics estimate them.",
    ),
    "dead_rows": (
        "dbqueue_table_dead_rows",
        "Dead row versions of the table that vacuum has not removed yet.",
    ),
    "last_vacuum_age_seconds": (
        "dbqueue_table_last_vacuum_age_seconds",
        "Seconds since the table was last vacuumed; 0 when never.",
    ),
}
#: ``VacuumHorizon`` field -> (gauge name, help), unlabelled: one per database (PostgreSQL).
HORIZON_GAUGES = {
    "transactions": (
        "dbqueue_vacuum_horizon_age_transactions",
        "Transactions since the oldest snapshot that holds back vacuum was taken; 0 when none.",
    ),
    "seconds": (
        "dbqueue_vacuum_horizon_age_seconds",
        "Seconds the transaction holding back vacuum has been open; 0 when none or not visible.",
    ),
}
#: ``HistoryTables`` field -> (gauge name, help), unlabelled (PostgreSQL only).
HISTORY_GAUGES = {
    "tables": (
        "dbqueue_history_tables",
        "History tables finished jobs moved to (succeeded ones by period, dead and cancelled).",
    ),
    "bytes": (
        "dbqueue_history_bytes",
        "Size on disk of the history tables, indexes and TOAST included.",
    ),
}
#: ``WorkerCounters`` counter -> (counter name, help), labelled ``worker_id``.
WORKER_COUNTERS = {
    "claimed": ("dbqueue_worker_jobs_claimed_total", "Jobs this worker claimed."),
    "succeeded": ("dbqueue_worker_jobs_succeeded_total", "Attempts that succeeded."),
    "retried": ("dbqueue_worker_jobs_retried_total", "Attempts that failed and were retried."),
    "dead": ("dbqueue_worker_jobs_dead_total", "Attempts that left their job dead."),
    "cancelled": (
        "dbqueue_worker_jobs_cancelled_total",
        "Attempts that stopped on a cancel request.",
    ),
    "lease_lost": (
        "dbqueue_worker_lease_lost_total",
        "Outcomes refused because the lease was lost.",
    ),
    "leases_lost": (
        "dbqueue_worker_leases_lost_total",
        "Leases the heartbeat found taken (by another worker or the reaper).",
    ),
    "unrecorded": (
        "dbqueue_worker_unrecorded_total",
        "Outcomes never written (database unreachable); the reaper recovers those jobs.",
    ),
}
#: ``WorkerCounters`` histogram -> (histogram name, help), labelled ``worker_id``.
WORKER_HISTOGRAMS = {
    "claim_duration": (
        "dbqueue_worker_claim_duration_seconds",
        "Seconds per batched claim statement.",
    ),
    "run_duration": (
        "dbqueue_worker_run_duration_seconds",
        "Seconds per job attempt, task code and outcome write included.",
    ),
}

#: ``WorkerCounters`` per-task histogram -> (histogram name, help), labelled ``worker_id`` and
#: ``task``: at most ``counters.MAX_TASK_LABELS`` task names per worker, then ``other``.
TASK_HISTOGRAMS = {
    "queue_wait_by_task": (
        "dbqueue_job_queue_wait_seconds",
        "Seconds from a job's run_at to the claim that started its attempt (database clock).",
    ),
    "run_duration_by_task": (
        "dbqueue_job_run_duration_seconds",
        "Seconds per job attempt, task code and outcome write included.",
    ),
}


T = TypeVar("T")


@dataclass(frozen=True)
class Readings:
    """One read for the gauges: the queues (``queue_stats()`` plus the configured queues),
    the limits with ready or running jobs (``limit_stats()``) and the job table's bloat
    (``table_health()``, ``None`` but on PostgreSQL)."""

    queues: dict[str, QueueStats]
    limits: list[LimitStats]
    table: TableHealth | None


class CachedStats(Generic[T]):
    """What ``read`` returns, read at most once per ``ttl`` seconds and shared by every caller.

    Callers arriving while a read runs wait for it instead of reading too, so
    however many scrapes come in, the database sees one read per interval
    (and a request thread that is served from the cache opens no connection).
    A failed read (``None``) is kept for the interval as well.
    """

    def __init__(
        self,
        read: Callable[[], T | None],
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._read_at = -math.inf

    def get(self) -> T | None:
        with self._lock:
            if self.clock() - self._read_at >= self.ttl:
                self._value = self.read()
                self._read_at = self.clock()
            return self._value

    def clear(self) -> None:
        """Forget the value: the next ``get`` reads."""
        with self._lock:
            self._read_at = -math.inf


class QueueCollector:
    """Queue gauges from ``queue_stats()`` and limit gauges from ``limit_stats()``, read
    together at most once per ``QUEUE_STATS_TTL``.

    Every queue ``queue_stats()`` lists (jobs, or a pause) has a sample in each
    gauge, and queues named in ``DBQUEUE['QUEUES']`` always appear (zeros when
    idle, ``dbqueue_queue_paused`` 0 unless paused) so alerts see a series.
    Only limits with ready or running jobs have samples, so a limit's series end
    once its jobs all finished; with no such limit the limit gauges are left out.
    With ``own_connection`` (a scrape thread outside Django's request cycle)
    the thread's connection is closed after each read, and a database error
    leaves the gauges out instead of failing the whole scrape.
    """

    def __init__(self, *, own_connection: bool = False) -> None:
        self.own_connection = own_connection
        self.stats = CachedStats(self._read, QUEUE_STATS_TTL)

    def collect(self) -> Iterator[Metric]:
        readings = self.stats.get()
        if readings is None:
            return
        yield from gauges(QUEUE_GAUGES, "queue", sorted(readings.queues.items()))
        if readings.limits:
            limits = [(limit.limit, limit) for limit in readings.limits]
            yield from gauges(LIMIT_GAUGES, "limit", limits)
        if readings.table is not None:
            yield from gauges(TABLE_GAUGES, "table", [(readings.table.table, readings.table)])
            yield from horizon_gauges(readings.table)
            for field, (name, help_text) in HISTORY_GAUGES.items():
                value = getattr(readings.table.history, field)
                yield GaugeMetricFamily(name, help_text, value=value)

    def _read(self) -> Readings | None:
        if not self.own_connection:
            return read_gauges()
        try:
            return read_gauges()
        except DatabaseError as exc:
            log.warning("metrics scrape left out queue gauges, database error: %s", exc)
            return None
        finally:
            settings = conf.get()
            for alias in {settings.reads_from, settings.database}:
                connections[alias].close()


def gauges(
    fields: dict[str, tuple[str, str]], label: str, rows: Iterable[tuple[str, object]]
) -> list[GaugeMetricFamily]:
    """One gauge per ``fields`` entry (field -> name, help), with a sample per row of ``rows``
    (label value, object read): its field's value, ``None`` as 0."""
    families = {
        field: GaugeMetricFamily(name, help_text, labels=[label])
        for field, (name, help_text) in fields.items()
    }
    for value, values in rows:
        for field, family in families.items():
            family.add_metric([value], getattr(values, field) or 0)
    return list(families.values())


def horizon_gauges(table: TableHealth) -> list[GaugeMetricFamily]:
    """``HORIZON_GAUGES``, each with one unlabelled sample: the horizon's field, 0 for none."""
    return [
        GaugeMetricFamily(name, help_text, value=getattr(table.horizon, field, None) or 0)
        for field, (name, help_text) in HORIZON_GAUGES.items()
    ]


def read_gauges() -> Readings:
    """The queues (with the configured ones), the limits and the job table, as the gauges
    show them."""
    return Readings(with_configured_queues(queue_stats()), limit_stats(), table_health())


def with_configured_queues(stats: dict[str, QueueStats]) -> dict[str, QueueStats]:
    """``stats`` plus an all-zero entry for each configured queue that has no jobs."""
    idle = QueueStats(0, 0, 0, 0, 0, 0, None)
    return {**dict.fromkeys(conf.get().queues or (), idle), **stats}


class WorkerCollector:
    """One worker's counters and duration histograms, labelled with its ``worker_id``
    (and the per-task histograms with their ``task``)."""

    def __init__(self, worker_id: str, counters: WorkerCounters) -> None:
        self.worker_id = worker_id
        self.counters = counters

    def collect(self) -> Iterator[Metric]:
        counts = self.counters.snapshot()
        for counter, (name, help_text) in WORKER_COUNTERS.items():
            family = CounterMetricFamily(name, help_text, labels=["worker_id"])
            family.add_metric([self.worker_id], counts[counter])
            yield family
        for attribute, (name, help_text) in WORKER_HISTOGRAMS.items():
            histogram = getattr(self.counters, attribute).snapshot()
            durations = HistogramMetricFamily(name, help_text, labels=["worker_id"])
            durations.add_metric([self.worker_id], prometheus_buckets(histogram), histogram.sum)
            yield durations
        for attribute, (name, help_text) in TASK_HISTOGRAMS.items():
            by_task = getattr(self.counters, attribute).snapshot()
            per_task = HistogramMetricFamily(name, help_text, labels=["worker_id", "task"])
            for task, histogram in by_task.items():
                per_task.add_metric(
                    [self.worker_id, task], prometheus_buckets(histogram), histogram.sum
                )
            yield per_task
        yield from self._health()

    def _health(self) -> Iterator[Metric]:
        threads_alive, hung_slots = self.counters.health()
        alive = GaugeMetricFamily(
            "dbqueue_worker_thread_alive",
            "1 while the worker thread runs, 0 once it is gone (the worker then exits).",
            labels=["worker_id", "thread"],
        )
        for thread, is_alive in sorted(threads_alive.items()):
            alive.add_metric([self.worker_id, thread], 1 if is_alive else 0)
        yield alive
        hung = GaugeMetricFamily(
            "dbqueue_worker_hung_slots",
            "Job slots stuck in a job past its timeout by more than its lease.",
            labels=["worker_id"],
        )
        hung.add_metric([self.worker_id], hung_slots)
        yield hung


def prometheus_buckets(histogram: HistogramSnapshot) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs ending with ``+Inf``, as exposition expects."""
    pairs = [
        (repr(float(bound)), count)
        for bound, count in zip(histogram.buckets, histogram.cumulative, strict=True)
    ]
    return [*pairs, ("+Inf", histogram.count)]


def queue_registry(*, own_connection: bool = False) -> CollectorRegistry:
    """A private registry holding only the queue and limit gauges."""
    registry = CollectorRegistry()
    registry.register(QueueCollector(own_connection=own_connection))
    return registry


def worker_registry(worker_id: str, counters: WorkerCounters) -> CollectorRegistry:
    """A private registry with a worker's counters and histograms plus the queue and limit
    gauges."""
    registry = queue_registry(own_connection=True)
    registry.register(WorkerCollector(worker_id, counters))
    return registry


#: The collector behind ``queue_metrics_view`` (its cache is ``VIEW_COLLECTOR.stats``).
VIEW_COLLECTOR = QueueCollector()
_VIEW_REGISTRY = CollectorRegistry()
_VIEW_REGISTRY.register(VIEW_COLLECTOR)


@require_GET
def queue_metrics_view(request: HttpRequest) -> HttpResponse:
    """The queue and limit gauges in Prometheus' text format, read at most once per
    ``QUEUE_STATS_TTL``.

    Not protected by itself: wrap it (``staff_member_required``, a token
    check) or expose it only to the scraper's network.
    """
    return HttpResponse(generate_latest(_VIEW_REGISTRY), content_type=CONTENT_TYPE_LATEST)


@dataclass
class MetricsServer:
    """The HTTP server thread ``serve`` started; ``close()`` stops it."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        """Stop serving and free the port; returns once the serving thread ended."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve(worker_id: str, counters: WorkerCounters, host: str, port: int) -> MetricsServer:
    """Serve a worker's metrics and the queue and limit gauges at ``http://host:port/metrics``.

    Port 0 picks a free port (read it from ``.address``). A port in use or an
    unknown host raises ``ImproperlyConfigured`` saying so.
    """
    registry = worker_registry(worker_id, counters)
    try:
        server, thread = start_http_server(port, host, registry=registry)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"Cannot serve metrics on {host}:{port}: {exc}. "
            "Pick a free --metrics-port (or another --metrics-host)."
        ) from exc
    return MetricsServer(server, thread)
