"""Retry times, history stamps and purge cut-offs come from the database clock, not the worker's.

The worker's clock (``django.utils.timezone.now``) is moved 10 minutes either
way; this process's real clock is the database server's (same host), so every
time the queue stores is checked against it. SQLite is left out: it is
embedded, and the host's clock is its clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db import connection
from django.utils import timezone
from pytest_django import Settings

from django_dbqueue import clock, leases, reaper
from django_dbqueue.errors import ErrorInfo
from django_dbqueue.models import Job, JobState
from django_dbqueue.worker.execute import execute
from django_dbqueue.worker.outcome import Outcome
from tests.factories import JobFactory
from tests.jobs import tasks

SKEW = timedelta(minutes=10)
#: How far a stored time may be from the real clock's for the same instant (a slow CI box).
SLACK = timedelta(seconds=5)


def real_now() -> datetime:
    return datetime.now(dt_timezone.utc)


@pytest.fixture(params=[-1, 1], ids=["worker-behind", "worker-ahead"])
def skewed_worker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> timedelta:
    """The worker's clock, 10 minutes behind or ahead of the database's; returns the skew."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is embedded: this host's clock is the database's")
    skew: timedelta = SKEW * request.param
    real: Callable[[], datetime] = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + skew)
    return skew


def claim(job: Job) -> leases.Lease:
    (lease,) = leases.claim([job.queue], "worker-a", 1)
    assert lease.job_id == job.pk
    return lease


def due_in(job: Job) -> timedelta:
    """How long until the job is due, by the real (database) clock."""
    job.refresh_from_db()
    assert job.state == JobState.READY
    return job.run_at - real_now()


def assert_stamped_now(job: Job) -> None:
    job.refresh_from_db()
    stamped = datetime.fromisoformat(job.errors[-1]["at"])
    assert abs(stamped - real_now()) < SLACK


@pytest.mark.django_db
class TestRetriesUnderSkew:
    def test_a_retry_delay_counts_from_the_database_clock(self, skewed_worker: timedelta) -> None:
        job = tasks.asks_retry.enqueue(60)
        assert execute(claim(job)) is Outcome.RETRIED
        assert timedelta(seconds=60) - SLACK < due_in(job) <= timedelta(seconds=60)
        assert_stamped_now(job)

    def test_a_backoff_counts_from_the_database_clock(self, skewed_worker: timedelta) -> None:
        job = tasks.flaky.enqueue("boom")  # Backoff(base=10): attempt 1 waits 5-10 s
        assert execute(claim(job)) is Outcome.RETRIED
        assert timedelta(seconds=5) - SLACK < due_in(job) <= timedelta(seconds=10)
        assert_stamped_now(job)

    def test_fail_with_a_delay_counts_from_the_database_clock(
        self, skewed_worker: timedelta
    ) -> None:
        job = tasks.noop.enqueue()
        assert leases.fail(claim(job), ErrorInfo("BOOM", "boom"), delay=30)
        assert timedelta(seconds=30) - SLACK < due_in(job) <= timedelta(seconds=30)

    def test_a_dead_jobs_history_is_stamped_by_the_database_clock(
        self, skewed_worker: timedelta
    ) -> None:
        job = tasks.noop.enqueue()
        assert leases.fail(claim(job), ErrorInfo("BOOM", "boom"))
        job.refresh_from_db()
        assert job.state == JobState.DEAD
        assert_stamped_now(job)

    def test_the_reapers_backoff_counts_from_the_database_clock(
        self, skewed_worker: timedelta
    ) -> None:
        job = tasks.flaky.enqueue("boom")
        claim(job)
        Job.objects.filter(pk=job.pk).update(lease_until=real_now() - timedelta(seconds=1))
        assert reaper.reap().retried == [job.pk]
        assert timedelta(seconds=5) - SLACK < due_in(job) <= timedelta(seconds=10)
        assert_stamped_now(job)


def test_fail_takes_a_retry_time_or_a_delay_not_both() -> None:
    lease = leases.Lease(1, 1, "w", "t", [], {}, 1, 3, real_now(), 60, "default")
    with pytest.raises(ValueError, match="not both"):
        leases.fail(lease, ErrorInfo("X", "x"), real_now(), delay=1)


@pytest.mark.django_db
class TestPurgeUnderSkew:
    def test_retention_counts_back_from_the_database_clock(
        self, skewed_worker: timedelta, settings: Settings
    ) -> None:
        settings.DBQUEUE = {"SUCCEEDED_RETENTION": timedelta(days=1)}
        # Half the skew either side of the cut-off: a worker's clock would get both wrong.
        kept = JobFactory(succeeded=True, finished_at=real_now() - timedelta(days=1) + SKEW / 2)
        gone = JobFactory(succeeded=True, finished_at=real_now() - timedelta(days=1) - SKEW / 2)
        assert reaper.purge(dry_run=True) == 1
        assert reaper.purge() == 1
        assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
        assert not Job.objects.filter(pk=gone.pk).exists()


@pytest.mark.django_db
def test_history_is_stamped_in_utc_when_use_tz_is_off(settings: Settings) -> None:
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Paris"
    job = tasks.noop.enqueue()
    assert leases.fail(claim(job), ErrorInfo("BOOM", "boom"))
    (entry,) = Job.objects.get(pk=job.pk).errors
    stamped = datetime.fromisoformat(entry["at"])
    assert stamped.utcoffset() == timedelta(0)
    assert abs(stamped - real_now()) < SLACK


@pytest.mark.django_db
@pytest.mark.parametrize("use_tz", [False, True], ids=["use_tz_off", "use_tz_on"])
def test_database_now_is_the_utc_instant_whatever_use_tz_says(
    settings: Settings, use_tz: bool
) -> None:
    settings.USE_TZ = use_tz
    settings.TIME_ZONE = "Europe/Paris"
    now = clock.database_now(connection)
    assert now.utcoffset() == timedelta(0)
    assert abs(now - real_now()) < SLACK


@pytest.fixture
def sqlite_host_clock(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """SQLite's statements read the host clock: stop it at an instant half-way through a
    millisecond (``...264965``), where rounding to the millisecond would show."""
    if connection.vendor != "sqlite":
        pytest.skip("only SQLite's statements take the clock from the host")
    frozen = real_now().replace(microsecond=264965)
    monkeypatch.setattr(timezone, "now", lambda: frozen)
    return frozen


@pytest.mark.django_db
class TestTimesAreExactToTheMicrosecond:
    """A delay, a lease and a retry land exactly that far from the clock reading: SQLite's
    date functions round to the millisecond, the queue's arithmetic does not."""

    def test_a_delayed_job_is_due_exactly_its_delay_after_it_was_created(self) -> None:
        job = tasks.noop.using(delay=timedelta(seconds=30, microseconds=123)).enqueue()
        job.refresh_from_db()
        assert job.run_at - job.created_at == timedelta(seconds=30, microseconds=123)

    def test_on_sqlite_a_lease_runs_exactly_lease_seconds_from_the_claim(
        self, sqlite_host_clock: datetime
    ) -> None:
        job = tasks.noop.enqueue()
        lease = claim(job)
        assert lease.lease_until == sqlite_host_clock + timedelta(seconds=job.lease_seconds)

    def test_a_failure_right_after_the_claim_is_never_stamped_before_the_attempt_started(
        self,
    ) -> None:
        """SQLite's own clock cut a stamp to the millisecond, so a failure in the same
        millisecond as its claim could read up to 1 ms before the attempt's start."""
        jobs = tasks.noop.enqueue_many([((), {})] * 50)
        for job in jobs:
            assert leases.fail(claim(job), ErrorInfo("BOOM", "boom"))
        for started_at, errors in Job.objects.values_list("started_at", "errors"):
            assert started_at <= datetime.fromisoformat(errors[-1]["at"])

    def test_on_sqlite_a_retry_is_due_exactly_its_delay_after_the_failure(
        self, sqlite_host_clock: datetime
    ) -> None:
        lease = claim(tasks.noop.enqueue())
        assert leases.fail(lease, ErrorInfo("Declined", "card declined"), delay=30)
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.run_at) == (
            JobState.READY,
            sqlite_host_clock + timedelta(seconds=30),
        )
