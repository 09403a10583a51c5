"""Limits as enqueue fixes them, and rates as the claim paces them.

A job counts against one limit: its task's (``@task(concurrency=..., rate=...)``),
its key's (``using(concurrency_key=...)``, sized by the task or the ``KEY_*``
settings) or its queue's (``QUEUE_CONCURRENCY``, ``QUEUE_RATE``). A job that
would count against two, or against one and a serial key, and a limit that is
no limit, are refused with ``InvalidJob`` before anything is written; bad
settings are system check ``dbqueue.E021``. A rate admits its burst at once,
then one start per ``1 / rate`` seconds, and an idle claimer is told when the
next start is due.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from pytest_django import Settings

from django_dbqueue import Job, checks, clock, leases, limits, task
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.models import JobState, RateBucket
from tests.jobs.limit_tasks import (
    RATE,
    TASK_LIMIT,
    TENANT_LIMIT,
    limited,
    paced,
    per_tenant,
    trickle,
)
from tests.jobs.tasks import noop
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db

LIMITED = "task:tests.jobs.limit_tasks.limited"
PACED = "task:tests.jobs.limit_tasks.paced"


def limit_of(job: Job) -> tuple[str | None, int | None, float | None]:
    """The job's limit columns as the database holds them."""
    job.refresh_from_db()
    return job.limit_key, job.limit_size, job.limit_rate


def refused(call: Any, says: str) -> None:
    """``call()`` raises ``InvalidJob`` saying ``says``, and writes no job."""
    with pytest.raises(InvalidJob, match=says):
        call()
    assert not Job.objects.exists()


class TestWhichLimit:
    def test_a_task_with_a_concurrency_counts_against_its_own(self) -> None:
        assert limit_of(limited.enqueue()) == (LIMITED, TASK_LIMIT, None)

    def test_a_task_with_a_rate_is_paced_in_starts_a_second(self) -> None:
        assert limit_of(paced.enqueue()) == (PACED, None, float(RATE))

    def test_a_key_takes_its_tasks_size(self) -> None:
        job = per_tenant.using(concurrency_key="tenant:7").enqueue("7")
        assert limit_of(job) == ("key:tenant:7", TENANT_LIMIT, None)

    def test_every_job_of_a_batch_has_the_key(self) -> None:
        jobs = per_tenant.using(concurrency_key="t").enqueue_many([(("1",), {}), (("2",), {})])
        assert [limit_of(job)[0] for job in jobs] == ["key:t", "key:t"]

    def test_a_key_of_a_task_with_no_limit_takes_the_key_settings(self, settings: Settings) -> None:
        settings.DBQUEUE = {**settings.DBQUEUE, "KEY_CONCURRENCY": 4, "KEY_RATE": "30/m"}
        job = noop.using(concurrency_key="acme").enqueue()
        assert limit_of(job) == ("key:acme", 4, 0.5)

    def test_a_queue_with_a_limit_sizes_and_paces_its_jobs(self, settings: Settings) -> None:
        settings.DBQUEUE = {
            **settings.DBQUEUE,
            "QUEUE_CONCURRENCY": {"mail": 5},
            "QUEUE_RATE": {"mail": "100/m"},
        }
        assert limit_of(noop.using(queue="mail").enqueue()) == ("queue:mail", 5, 100 / 60)
        assert limit_of(noop.enqueue()) == (None, None, None)

    def test_a_changed_setting_applies_to_the_next_enqueue(self, settings: Settings) -> None:
        settings.DBQUEUE = {**settings.DBQUEUE, "QUEUE_CONCURRENCY": {"mail": 5}}
        first = noop.using(queue="mail").enqueue()
        settings.DBQUEUE = {**settings.DBQUEUE, "QUEUE_CONCURRENCY": {"mail": 2}}
        second = noop.using(queue="mail").enqueue()
        assert (limit_of(first)[1], limit_of(second)[1]) == (5, 2)

    def test_a_job_under_no_limit_has_none(self) -> None:
        assert limit_of(noop.enqueue()) == (None, None, None)


class TestRefused:
    def test_a_key_with_no_limit_anywhere(self) -> None:
        refused(lambda: noop.using(concurrency_key="acme").enqueue(), "needs a limit")

    def test_a_task_limit_in_a_queue_with_a_limit(self, settings: Settings) -> None:
        settings.DBQUEUE = {**settings.DBQUEUE, "QUEUE_RATE": {"mail": "1/s"}}
        refused(lambda: limited.using(queue="mail").enqueue(), "counts against one limit")

    def test_a_key_in_a_queue_with_a_limit(self, settings: Settings) -> None:
        settings.DBQUEUE = {**settings.DBQUEUE, "QUEUE_CONCURRENCY": {"mail": 3}}
        call = per_tenant.using(queue="mail", concurrency_key="t").enqueue
        refused(lambda: call("1"), "counts against one limit")

    def test_a_serial_key_with_a_limit(self, settings: Settings) -> None:
        refused(lambda: limited.using(serial_key="s").enqueue(), "serial_key 's'")
        settings.DBQUEUE = {**settings.DBQUEUE, "QUEUE_CONCURRENCY": {"mail": 3}}
        refused(lambda: noop.using(queue="mail", serial_key="s").enqueue(), "serial_key 's'")

    @pytest.mark.parametrize("key", ["", "k" * 256, 7])
    def test_a_key_that_is_no_key(self, key: object) -> None:
        call = per_tenant.using(concurrency_key=key).enqueue  # type: ignore[arg-type]
        refused(lambda: call("1"), "concurrency_key must be a string")

    @pytest.mark.parametrize(
        ("options", "says"),
        [
            ({"concurrency": 0}, "concurrency must be a whole number from 1"),
            ({"concurrency": 2.5}, "concurrency must be a whole number from 1"),
            ({"concurrency": True}, "concurrency must be a whole number from 1"),
            ({"rate": "fast"}, "rate must be a rate, not 'fast'"),
            ({"rate": "0/s"}, "rate must be a rate"),
            ({"rate": "5/0s"}, "rate must be a rate"),
            ({"rate": 5}, "rate must be a rate"),
            ({"rate": "9" * 400 + "/s"}, "rate must be a rate"),
            ({"rate": "1/" + "9" * 400 + "s"}, "rate must be a rate"),
        ],
    )
    def test_a_task_limit_that_is_no_limit_at_declaration(
        self, options: dict[str, Any], says: str
    ) -> None:
        with pytest.raises(InvalidJob, match=says):
            task(**options)(lambda: None)


class TestRates:
    @pytest.mark.parametrize(
        ("text", "per_second"),
        [("20/s", 20.0), ("100/m", 100 / 60), ("5 / h", 5 / 3600), ("2/d", 2 / 86400)],
    )
    def test_a_rate_is_starts_per_unit(self, text: str, per_second: float) -> None:
        assert limits.parse_rate("rate", text) == pytest.approx(per_second)

    def test_a_rate_may_count_its_period_in_units(self) -> None:
        assert limits.parse_rate("rate", "20/10s") == 2.0

    @pytest.mark.parametrize(("rate", "burst"), [(0.01, 1), (5, 1), (20, 2), (1000, 100)])
    def test_the_burst_is_a_tenth_of_a_second_of_starts_at_least_one(
        self, rate: float, burst: int
    ) -> None:
        assert limits.burst(rate) == burst


class TestSettingsCheck:
    @pytest.mark.parametrize(
        ("setting", "value", "says"),
        [
            ("QUEUE_CONCURRENCY", {"mail": 0}, "QUEUE_CONCURRENCY'] has 'mail': 0"),
            ("QUEUE_CONCURRENCY", {"no spaces": 1}, "has 'no spaces': 1"),
            ("QUEUE_CONCURRENCY", 5, "QUEUE_CONCURRENCY'] is 5; it must be a dict"),
            ("QUEUE_RATE", {"mail": "fast"}, "QUEUE_RATE'] has 'mail': 'fast'"),
            ("KEY_CONCURRENCY", 0, "KEY_CONCURRENCY'] is 0"),
            ("KEY_RATE", "1/fortnight", "KEY_RATE'] is '1/fortnight'"),
        ],
    )
    def test_a_bad_limit_setting_is_e021(
        self, settings: Settings, setting: str, value: object, says: str
    ) -> None:
        settings.DBQUEUE = {**settings.DBQUEUE, setting: value}
        with pytest.raises(SystemCheckError, match=r"dbqueue\.E021") as raised:
            call_command("check")
        assert says in str(raised.value)


@pytest.mark.django_db(transaction=True)
class TestPacedClaims:
    def test_a_rate_admits_its_burst_at_once(self) -> None:
        paced.enqueue_many([((), {})] * 10)
        assert len(leases.claim(None, "w1", 10)) == limits.burst(RATE)

    def test_a_spent_rate_admits_nothing_until_its_next_start_is_due(self) -> None:
        trickle.enqueue_many([((), {})] * 3)
        assert len(leases.claim(None, "w1", 10)) == 1
        assert leases.claim(None, "w1", 10) == []
        # The next start is due a second after the first, and the idle claimer hears so.
        due = leases.next_due(None)
        assert due is not None
        assert 0 < due <= 1
        assert wait_until(lambda: leases.claim(None, "w1", 10), timeout=2 + due)

    def test_the_starts_move_the_pace_on_by_one_period_each(self) -> None:
        paced.enqueue_many([((), {})] * 10)
        before = clock.database_now(connection)
        claimed = leases.claim(None, "w1", 10)
        bucket = RateBucket.objects.get(limit_key=PACED)
        # SQLite's clock reads to the millisecond, cut: the moment after is up to 1 ms later.
        after = clock.database_now(connection) + timedelta(milliseconds=1)
        spent = timedelta(seconds=len(claimed) / RATE)
        assert before + spent <= bucket.due_at <= after + spent
        assert bucket.rate == RATE

    def test_a_full_pace_holds_every_job_of_the_limit_and_no_other(self) -> None:
        paced.enqueue_many([((), {})] * 5)
        noop.enqueue()
        leases.claim(None, "w1", 10)
        assert Job.objects.filter(state=JobState.RUNNING, limit_key=PACED).count() == 2
        assert Job.objects.filter(state=JobState.RUNNING, limit_key=None).count() == 1

    def test_the_reaper_forgets_paces_an_hour_past_due(self) -> None:
        now = clock.database_now(connection)
        RateBucket.objects.create(limit_key="old", due_at=now - timedelta(hours=2), rate=1)
        RateBucket.objects.create(limit_key="recent", due_at=now - timedelta(minutes=5), rate=1)
        assert limits.sweep() == 1
        assert list(RateBucket.objects.values_list("limit_key", flat=True)) == ["recent"]


class TestMySQLIsolationCheck:
    """``dbqueue.E022``: limits are exact on MySQL/MariaDB only at READ COMMITTED."""

    @pytest.fixture
    def mysql_alias(self, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
        """A MySQL alias holding the queue (never connected to: the check reads settings)."""
        database: dict[str, Any] = {"ENGINE": "django.db.backends.mysql", "OPTIONS": {}}
        monkeypatch.setitem(django_settings.DATABASES, "queue_mysql", database)
        settings.DBQUEUE = {**settings.DBQUEUE, "DATABASE": "queue_mysql"}
        return database

    @pytest.mark.parametrize("level", [None, "read committed"])
    def test_django_s_default_or_read_committed_pass(
        self, mysql_alias: dict[str, Any], level: str | None
    ) -> None:
        if level is not None:
            mysql_alias["OPTIONS"]["isolation_level"] = level
        assert checks.check_mysql_isolation() == []

    def test_repeatable_read_is_e022(self, mysql_alias: dict[str, Any]) -> None:
        mysql_alias["OPTIONS"]["isolation_level"] = "repeatable read"
        (error,) = checks.check_mysql_isolation()
        assert error.id == "dbqueue.E022"
        assert "'repeatable read'" in error.msg

    def test_other_vendors_are_not_asked(self) -> None:
        assert checks.check_mysql_isolation() == []
