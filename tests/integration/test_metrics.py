"""Prometheus metrics: the queue gauges view, worker collectors and ``--metrics-port``."""

from __future__ import annotations

import logging
import socket
import sys
import threading
import urllib.request
from datetime import timedelta

import prometheus_client
import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection
from django.test import Client
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pytest_django import DjangoAssertNumQueries
from pytest_django.fixtures import Settings

import django_dbqueue
from django_dbqueue import metrics
from django_dbqueue.metrics import WorkerCollector, prometheus_buckets, serve, worker_registry
from django_dbqueue.models import Dependency, EdgeState, JobState
from django_dbqueue.stats import QueueStats
from django_dbqueue.worker.counters import Histogram, WorkerCounters
from django_dbqueue.worker.worker import Worker, WorkerOptions
from tests.factories import JobFactory
from tests.jobs import tasks
from tests.stats_sections import gauge_read_queries, measures_table
from tests.waiting import wait_until

QUEUE_GAUGES = [
    "dbqueue_queue_waiting_jobs",
    "dbqueue_queue_ready_jobs",
    "dbqueue_queue_scheduled_jobs",
    "dbqueue_queue_running_jobs",
    "dbqueue_queue_expiring_leases",
    "dbqueue_queue_dead_jobs",
    "dbqueue_jobs_blocked",
    "dbqueue_queue_succeeded_last_hour",
    "dbqueue_queue_oldest_ready_age_seconds",
    "dbqueue_queue_paused",
]
WORKER_COUNTERS = [
    "dbqueue_worker_jobs_claimed_total",
    "dbqueue_worker_jobs_succeeded_total",
    "dbqueue_worker_jobs_retried_total",
    "dbqueue_worker_jobs_dead_total",
    "dbqueue_worker_jobs_cancelled_total",
    "dbqueue_worker_lease_lost_total",
    "dbqueue_worker_leases_lost_total",
    "dbqueue_worker_unrecorded_total",
]
WORKER_HISTOGRAMS = [
    "dbqueue_worker_claim_duration_seconds",
    "dbqueue_worker_run_duration_seconds",
]
#: Labelled worker_id and task.
TASK_HISTOGRAMS = ["dbqueue_job_queue_wait_seconds", "dbqueue_job_run_duration_seconds"]
WORKER_GAUGES = ["dbqueue_worker_thread_alive", "dbqueue_worker_hung_slots"]
#: The job table's and its history tables' gauges, documented names, served where the table
#: is measured (PostgreSQL).
TABLE_GAUGES = [
    "dbqueue_table_live_rows",
    "dbqueue_table_dead_rows",
    "dbqueue_table_last_vacuum_age_seconds",
    "dbqueue_vacuum_horizon_age_transactions",
    "dbqueue_vacuum_horizon_age_seconds",
    "dbqueue_history_tables",
    "dbqueue_history_bytes",
]


def table_gauges() -> list[str]:
    """``TABLE_GAUGES`` where this database reports the table's health, else none."""
    return TABLE_GAUGES if measures_table() else []


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """Family name -> type, and every sample keyed by (name, sorted labels)."""
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fetch(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture(autouse=True)
def _fresh_view_cache(fresh_view_cache: None) -> None:
    """Each test reads the queue gauges afresh: the view's cache outlives a test."""


@pytest.mark.urls("tests.metrics_urls")
@pytest.mark.django_db
class TestQueueMetricsView:
    def test_every_documented_queue_gauge_carries_the_queue_stats_values(
        self, client: Client
    ) -> None:
        now = timezone.now()
        JobFactory(run_at=now - timedelta(minutes=10))
        JobFactory(run_at=now)
        JobFactory(run_at=now + timedelta(hours=1))
        JobFactory(running=True, lease_until=now + timedelta(seconds=5))
        JobFactory(running=True, lease_until=now + timedelta(minutes=5))
        dead = JobFactory(dead=True)
        JobFactory(succeeded=True, finished_at=now - timedelta(minutes=1))
        JobFactory.create_batch(2, queue="mail", dead=True)
        JobFactory.create_batch(3, state=JobState.WAITING, pending_dependencies=1)
        held = JobFactory(cancelled=True)
        Dependency.objects.create(
            job=held, depends_on=dead, position=0, on_failure="cancel", state=EdgeState.FAILED
        )

        response = client.get("/metrics")

        assert response.status_code == 200
        assert response["Content-Type"] == CONTENT_TYPE_LATEST
        types, samples = parse(response.content.decode())
        assert types == dict.fromkeys([*QUEUE_GAUGES, *table_gauges()], "gauge")
        default = {name: value(samples, name, queue="default") for name in QUEUE_GAUGES}
        assert default == {
            "dbqueue_queue_waiting_jobs": 3,
            "dbqueue_queue_ready_jobs": 2,
            "dbqueue_queue_scheduled_jobs": 1,
            "dbqueue_queue_running_jobs": 2,
            "dbqueue_queue_expiring_leases": 1,
            "dbqueue_queue_dead_jobs": 1,
            "dbqueue_jobs_blocked": 1,
            "dbqueue_queue_succeeded_last_hour": 1,
            "dbqueue_queue_oldest_ready_age_seconds": pytest.approx(600, abs=30),
            "dbqueue_queue_paused": 0,
        }
        assert value(samples, "dbqueue_queue_dead_jobs", queue="mail") == 2
        assert value(samples, "dbqueue_queue_oldest_ready_age_seconds", queue="mail") == 0

    def test_configured_queues_without_jobs_report_zeros(
        self, client: Client, settings: Settings
    ) -> None:
        settings.DBQUEUE = {"QUEUES": ["default", "mail"]}
        JobFactory(queue="mail", dead=True)
        _, samples = parse(client.get("/metrics").content.decode())
        assert {name: value(samples, name, queue="default") for name in QUEUE_GAUGES} == (
            dict.fromkeys(QUEUE_GAUGES, 0)
        )
        assert value(samples, "dbqueue_queue_dead_jobs", queue="mail") == 1

    def test_no_jobs_and_no_configured_queues_gives_no_samples(self, client: Client) -> None:
        _, samples = parse(client.get("/metrics").content.decode())
        assert {name for name, _ in samples} == set(table_gauges())

    def test_one_read_per_scrape_whatever_the_number_of_queues(
        self, client: Client, django_assert_num_queries: DjangoAssertNumQueries
    ) -> None:
        for index in range(5):
            JobFactory(queue=f"q{index}")
            JobFactory(queue=f"q{index}", dead=True)
        with django_assert_num_queries(gauge_read_queries()):
            response = client.get("/metrics")
        assert response.status_code == 200

    def test_a_flood_of_scrapes_within_the_interval_makes_one_read(
        self, client: Client, django_assert_num_queries: DjangoAssertNumQueries
    ) -> None:
        JobFactory(queue="mail", dead=True)
        with django_assert_num_queries(gauge_read_queries()):  # one read
            pages = [client.get("/metrics").content for _ in range(50)]
        assert len(set(pages)) == 1
        assert value(parse(pages[0].decode())[1], "dbqueue_queue_dead_jobs", queue="mail") == 1

    def test_only_get_is_allowed(self, client: Client) -> None:
        assert client.post("/metrics").status_code == 405

    def test_nothing_is_registered_in_the_global_registry(self, client: Client) -> None:
        JobFactory(dead=True)
        client.get("/metrics")
        assert b"dbqueue_" not in generate_latest(prometheus_client.REGISTRY)


def test_buckets_are_cumulative_and_end_with_inf() -> None:
    histogram = Histogram((0.5, 1.0))
    for seconds in (0.1, 0.7, 0.9, 4.0):
        histogram.observe(seconds)
    assert prometheus_buckets(histogram.snapshot()) == [("0.5", 1), ("1.0", 3), ("+Inf", 4)]


@pytest.mark.django_db(transaction=True)
def test_worker_counters_and_histograms_after_a_burst() -> None:
    tasks.noop.enqueue_many([((), {})] * 2)
    tasks.permanent.enqueue()
    tasks.flaky.enqueue("smtp down")
    worker = Worker(WorkerOptions(burst=True, worker_id="w-metrics"))
    worker.run()
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker.worker_id, worker.counters))

    types, samples = parse(generate_latest(registry).decode())

    assert types == {
        **{name.removesuffix("_total"): "counter" for name in WORKER_COUNTERS},
        **dict.fromkeys(WORKER_HISTOGRAMS, "histogram"),
        **dict.fromkeys(TASK_HISTOGRAMS, "histogram"),
        **dict.fromkeys(WORKER_GAUGES, "gauge"),
    }
    for thread in ("dbqueue-heartbeat", "dbqueue-completer", "dbqueue-slot-0"):
        assert value(samples, "dbqueue_worker_thread_alive", worker_id="w-metrics", thread=thread)
    assert value(samples, "dbqueue_worker_hung_slots", worker_id="w-metrics") == 0
    counters = {name: value(samples, name, worker_id="w-metrics") for name in WORKER_COUNTERS}
    assert counters == {
        "dbqueue_worker_jobs_claimed_total": 4,
        "dbqueue_worker_jobs_succeeded_total": 2,
        "dbqueue_worker_jobs_retried_total": 1,
        "dbqueue_worker_jobs_dead_total": 1,
        "dbqueue_worker_jobs_cancelled_total": 0,
        "dbqueue_worker_lease_lost_total": 0,
        "dbqueue_worker_leases_lost_total": 0,
        "dbqueue_worker_unrecorded_total": 0,
    }
    run = "dbqueue_worker_run_duration_seconds"
    assert value(samples, f"{run}_count", worker_id="w-metrics") == 4
    assert value(samples, f"{run}_bucket", worker_id="w-metrics", le="+Inf") == 4
    assert value(samples, f"{run}_sum", worker_id="w-metrics") > 0
    claims = value(samples, "dbqueue_worker_claim_duration_seconds_count", worker_id="w-metrics")
    assert claims >= 5  # one claim per job at concurrency 1, then the empty one ending the burst
    for name in TASK_HISTOGRAMS:
        per_task = {
            dict(labels)["task"]: count
            for (sample, labels), count in samples.items()
            if sample == f"{name}_count"
        }
        assert per_task == {tasks.noop.name: 2, tasks.permanent.name: 1, tasks.flaky.name: 1}


@pytest.mark.django_db(transaction=True)
class TestMetricsServer:
    def test_serves_worker_counters_and_queue_gauges_and_frees_the_port_on_close(self) -> None:
        JobFactory(queue="mail", dead=True)
        counters = WorkerCounters()
        counters.add("claimed", 3)
        counters.run_duration.observe(0.2)
        server = serve("w-http", counters, "127.0.0.1", 0)
        host, port = server.address
        try:
            types, samples = parse(fetch(port))
        finally:
            server.close()
        assert host == "127.0.0.1"
        assert set(types) == {
            *(name.removesuffix("_total") for name in WORKER_COUNTERS),
            *WORKER_HISTOGRAMS,
            *TASK_HISTOGRAMS,
            *WORKER_GAUGES,
            *QUEUE_GAUGES,
            *table_gauges(),
        }
        assert value(samples, "dbqueue_worker_jobs_claimed_total", worker_id="w-http") == 3
        run_count = "dbqueue_worker_run_duration_seconds_count"
        assert value(samples, run_count, worker_id="w-http") == 1
        assert value(samples, "dbqueue_queue_dead_jobs", queue="mail") == 1
        assert refused(port)

    @pytest.mark.postgresql
    def test_scrapes_leave_no_database_connection_open(self) -> None:
        def backends() -> int:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                )
                return int(cursor.fetchone()[0])

        before = backends()
        server = serve("w-conn", WorkerCounters(), "127.0.0.1", 0)
        try:
            for _ in range(5):
                fetch(server.address[1])
        finally:
            server.close()
        wait_until(lambda: backends() == before, 10, f"{before} backends again, not {backends()}")

    def test_database_error_leaves_out_the_queue_gauges_but_serves_the_counters(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        def unreachable() -> None:
            raise OperationalError("connection refused")

        monkeypatch.setattr(metrics, "queue_stats", unreachable)
        counters = WorkerCounters()
        counters.add("succeeded", 2)
        with caplog.at_level(logging.WARNING, logger="django_dbqueue.metrics"):
            text = generate_latest(worker_registry("w-down", counters)).decode()
        types, samples = parse(text)
        assert not set(types) & set(QUEUE_GAUGES)
        assert value(samples, "dbqueue_worker_jobs_succeeded_total", worker_id="w-down") == 2
        assert "left out queue gauges, database error: connection refused" in caplog.text

    def test_worker_serves_metrics_while_it_runs_and_stops_serving_after(self) -> None:
        port = free_port()
        worker = Worker(WorkerOptions(metrics_port=port, poll_interval=0.1, worker_id="w-live"))
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            tasks.noop.enqueue_many([((), {})] * 3)

            def scraped_after_three_jobs() -> Samples | None:
                try:
                    _, samples = parse(fetch(port))
                except OSError:
                    return None  # not listening yet
                done = samples.get(
                    ("dbqueue_worker_jobs_succeeded_total", (("worker_id", "w-live"),))
                )
                # The queue gauges are read at most every QUEUE_STATS_TTL: wait for that too.
                gauge = samples.get(("dbqueue_queue_succeeded_last_hour", (("queue", "default"),)))
                return samples if done == 3 and gauge == 3 else None

            samples = wait_until(scraped_after_three_jobs, 30, "three succeeded jobs in /metrics")
        finally:
            worker.stop()
            thread.join(30)
        assert not thread.is_alive()
        assert value(samples, "dbqueue_worker_jobs_claimed_total", worker_id="w-live") == 3
        assert value(samples, "dbqueue_queue_succeeded_last_hour", queue="default") == 3
        assert refused(port)


class TestRunworkersMetricsOptions:
    @pytest.mark.parametrize("port", ["0", "65536", "-1"])
    def test_port_outside_1_to_65535_is_a_command_error(self, port: str) -> None:
        with pytest.raises(
            CommandError, match="--metrics-port: must be a whole number from 1 to 65535"
        ):
            call_command("runworkers", "--metrics-port", port)

    def test_missing_prometheus_client_is_a_command_error_naming_the_extra(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now fails
        monkeypatch.delitem(sys.modules, "django_dbqueue.metrics")
        monkeypatch.delattr(django_dbqueue, "metrics", raising=False)
        with pytest.raises(CommandError, match=r"pip install \"django-dbqueue\[prometheus\]\""):
            call_command("runworkers", "--metrics-port", "9100")

    @pytest.mark.django_db
    def test_port_in_use_is_a_command_error(self) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(CommandError, match=f"Cannot serve metrics on 127.0.0.1:{port}"):
                call_command("runworkers", "--burst", "--metrics-port", str(port))


class TestCachedStats:
    def test_reads_once_per_interval_then_again(self) -> None:
        now = [100.0]
        reads: list[float] = []

        def read() -> dict[str, QueueStats]:
            reads.append(now[0])
            return {"q": QueueStats(len(reads), 0, 0, 0, 0, 0, None)}

        cached = metrics.CachedStats(read, ttl=5, clock=lambda: now[0])
        assert cached.get() == cached.get() == read_value(1)
        now[0] += 4.9
        assert cached.get() == read_value(1)
        now[0] += 0.1
        assert cached.get() == read_value(2)
        assert reads == [100.0, 105.0]

    def test_concurrent_callers_wait_for_the_one_read(self) -> None:
        started, release = threading.Event(), threading.Event()
        reads: list[int] = []

        def slow_read() -> dict[str, QueueStats]:
            reads.append(1)
            started.set()
            release.wait(30)
            return read_value(1)

        cached = metrics.CachedStats(slow_read, ttl=60)
        results: list[object] = []
        callers = [threading.Thread(target=lambda: results.append(cached.get())) for _ in range(20)]
        for caller in callers:
            caller.start()
        assert started.wait(30)
        release.set()
        for caller in callers:
            caller.join(30)
        assert reads == [1]
        assert results == [read_value(1)] * 20


def read_value(ready: int) -> dict[str, QueueStats]:
    return {"q": QueueStats(ready, 0, 0, 0, 0, 0, None)}


@pytest.mark.django_db(transaction=True)
def test_the_worker_metrics_port_serves_a_flood_from_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []
    real = metrics.queue_stats

    def counted() -> dict[str, QueueStats]:
        reads.append(1)
        return real()

    monkeypatch.setattr(metrics, "queue_stats", counted)
    JobFactory(queue="mail", dead=True)
    server = serve("w-flood", WorkerCounters(), "127.0.0.1", 0)
    try:
        bodies: list[str] = []
        scrapers = [
            threading.Thread(target=lambda: bodies.append(fetch(server.address[1])))
            for _ in range(10)
        ]
        for scraper in scrapers:
            scraper.start()
        for scraper in scrapers:
            scraper.join(30)
    finally:
        server.close()
    assert len(bodies) == 10
    assert reads == [1]
    assert all(
        value(parse(body)[1], "dbqueue_queue_dead_jobs", queue="mail") == 1 for body in bodies
    )
