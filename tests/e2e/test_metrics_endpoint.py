"""``runworkers --metrics-port``: a real worker process serves Prometheus metrics."""

from __future__ import annotations

import signal
import socket
import urllib.request
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs import tasks
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> Samples | None:
    """Every sample at ``/metrics`` by (name, sorted labels); None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.django_db(transaction=True)
def test_worker_metrics_port_serves_its_counters_and_the_queue_gauges(
    start_worker: StartWorker,
) -> None:
    port = free_port()
    tasks.noop.enqueue_many([((), {})] * 2)
    tasks.permanent.enqueue()
    worker = start_worker("--worker-id", "w-prom", "--metrics-port", str(port))
    worker.wait_for_log(f"worker id=w-prom metrics at http://127.0.0.1:{port}/metrics")
    wait_until(
        lambda: Job.objects.filter(state__in=[JobState.SUCCEEDED, JobState.DEAD]).count() == 3,
        what="three jobs finished",
    )
    me = (("worker_id", "w-prom"),)

    def settled() -> Samples | None:
        samples = scrape(port) or {}
        outcomes = ("dbqueue_worker_jobs_succeeded_total", "dbqueue_worker_jobs_dead_total")
        finished = sum(samples.get((name, me), 0) for name in outcomes)
        return samples if finished == 3 else None  # counters follow the outcome writes

    samples = wait_until(settled, what="three outcomes counted in /metrics")

    assert samples[("dbqueue_worker_jobs_claimed_total", me)] == 3
    assert samples[("dbqueue_worker_jobs_succeeded_total", me)] == 2
    assert samples[("dbqueue_worker_jobs_dead_total", me)] == 1
    assert samples[("dbqueue_worker_jobs_retried_total", me)] == 0
    assert samples[("dbqueue_worker_lease_lost_total", me)] == 0
    assert samples[("dbqueue_worker_leases_lost_total", me)] == 0
    assert samples[("dbqueue_worker_unrecorded_total", me)] == 0
    assert samples[("dbqueue_worker_run_duration_seconds_count", me)] == 3
    assert samples[("dbqueue_worker_claim_duration_seconds_count", me)] >= 1
    default = (("queue", "default"),)
    assert samples[("dbqueue_queue_succeeded_last_hour", default)] == 2
    assert samples[("dbqueue_queue_dead_jobs", default)] == 1
    assert samples[("dbqueue_queue_ready_jobs", default)] == 0

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    assert scrape(port) is None  # the port closed with the process


@pytest.mark.django_db(transaction=True)
def test_worker_refuses_a_metrics_port_already_in_use(start_worker: StartWorker) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = start_worker("--metrics-port", str(port))
        assert worker.wait() == 1
    assert f"CommandError: Cannot serve metrics on 127.0.0.1:{port}" in worker.log()


def task_series(samples: Samples, name: str) -> dict[str, float]:
    """``{task: value}`` of the samples named ``name``, each labelled worker_id and task only."""
    series = {}
    for (sample, labels), value in samples.items():
        if sample == name:
            assert dict(labels).keys() == {"worker_id", "task"}, labels
            series[dict(labels)["task"]] = value
    return series


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_worker_serves_queue_wait_and_run_time_per_task(start_worker: StartWorker) -> None:
    port = free_port()
    now = timezone.now()
    # Due now though created two hours ago: it waits from run_at, not from created_at.
    fresh = tasks.noop.enqueue()
    Job.objects.filter(pk=fresh.pk).update(created_at=now - timedelta(hours=2))
    # Due ten minutes ago: it has waited that long already.
    late = tasks.noop.using(run_at=now - timedelta(minutes=10)).enqueue()
    tasks.permanent.enqueue()
    worker = start_worker("--worker-id", "w-tasks", "--metrics-port", str(port))
    worker.wait_for_log(f"worker id=w-tasks metrics at http://127.0.0.1:{port}/metrics")
    noop, permanent = tasks.noop.name, tasks.permanent.name

    def settled() -> Samples | None:
        samples = scrape(port) or {}
        runs = task_series(samples, "dbqueue_job_run_duration_seconds_count")
        return samples if runs == {noop: 2, permanent: 1} else None

    samples = wait_until(settled, what="three attempts timed per task in /metrics")

    waits = task_series(samples, "dbqueue_job_queue_wait_seconds_count")
    assert waits == {noop: 2, permanent: 1}
    wait_buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in samples.items()
        if name == "dbqueue_job_queue_wait_seconds_bucket" and ("task", noop) in labels
    }
    assert wait_buckets["60.0"] == 1  # fresh: due moments before the claim
    assert wait_buckets["300.0"] == 1  # late: ten minutes and more
    assert wait_buckets["900.0"] == 2
    assert task_series(samples, "dbqueue_job_queue_wait_seconds_sum")[noop] >= 600
    run_sums = task_series(samples, "dbqueue_job_run_duration_seconds_sum")
    assert set(run_sums) == {noop, permanent}
    assert all(seconds >= 0 for seconds in run_sums.values())
    assert Job.objects.get(pk=late.pk).state == JobState.SUCCEEDED

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
